// The loader-state model: events in, what the DataLoader looks like out.
// A line-by-line mirror of backend/loaderscope/model/state.py (same field names, same rules), so the
// page, the CLI and the API agree. Each kind's effect is a transition rule of the contract
// (RULES in contract.gen.js, from backend/loaderscope/contract/rules.py): its table-shaped part is
// interpreted below as in state.py, and the rest is the rule's own code, one function per rule. Pure: no DOM, no I/O,
// no clock. Keep the two in step (frontend/tests/reducer.test.js runs both on the same streams and compares). A big
// trace's packed rows take the fast path (fastpath.js); the summary statistics are stats.js; the diagnosis in words is
// diagnosis.js, as in Python.
//
// Extras the page needs and state.py does not keep (never used by the statistics):
// `scenario`, `meta` (run_start's rank/job/world_size/wall_start/name), `task.epoch`,
// `worker.stuck` / `worker.died` (the latest worker_stuck / worker_died event of that worker),
// `consumer_stuck` (the latest consumer_stuck, until the next yield), `timeout` (the latest one).

import { RULES, TORCH_PREFETCH_FACTOR, WHERE, WORKER_STATUS } from './contract.gen.js';
import { HOT_CODE, MAX_KEPT, newTask, remove } from './hot-code.js';
import { MemoryModel } from './memory.js';
import { RunStatus } from './schema.js';

/** @typedef {import('./types.js').LoaderEvent} LoaderEvent */
/** @template {import('./types.js').Kind} K @typedef {import('./types.js').EventOf<K>} EventOf */
/** @template {import('./types.js').Kind} K @typedef {import('./types.js').NoteOf<K>} NoteOf */
/** @typedef {import('./types.js').Indices} Indices */
/** @typedef {import('./hot-code.js').Read} Read */
/** @typedef {import('./hot-code.js').Fields} Fields */

/** Where a task is in the pipeline, and a worker's status: the contract's tables. */
export const Where = WHERE;
export const WorkerStatus = WORKER_STATUS;

export { MAX_KEPT, newTask };
export const MAX_BATCH_SAMPLES = 64;

/**
 * @typedef {{idx:number, worker:number, indices:Indices|null, n:number, dispatched:number, where:string,
 *   fetch_start:number|null, fetch_end:number|null, pin_start:number|null, pin_end:number|null,
 *   arrived:number|null, nbytes:number|null, epoch:number}} Task
 * @typedef {{id:number, pid:number|null, status:string, current:number|null, queue:number[], fetch_times:number[],
 *   busy:number, nbytes:number, exitcode:number|null, signal:string|null, samples:number,
 *   stuck:NoteOf<'worker_stuck'>|null, died:NoteOf<'worker_died'>|null}} Worker
 */

/** @param {number} id @returns {Worker} */
export function newWorker(id) {
  return {
    id,
    pid: null,
    status: WorkerStatus.STARTING,
    current: null,
    queue: [],
    fetch_times: [],
    busy: 0,
    nbytes: 0,
    exitcode: null,
    signal: null,
    samples: 0,
    stuck: null,
    died: null,
  };
}

/** Cursors, queues, reorder buffer and workers of the current epoch, plus run-wide statistics. */
export class LoaderState {
  constructor() {
    this.run = '';
    this.mode = '';
    /** @type {import('./types.js').LoaderConfig} */
    this.config = {};
    this.scenario = '';
    /** @type {{rank:number, job:string|null, world_size:number, wall_start:number|null, name:string|null}} */
    this.meta = { rank: 0, job: null, world_size: 1, wall_start: null, name: null };
    /** @type {string} a RunStatus */
    this.status = RunStatus.PENDING;
    this.seq = -1;
    this.t = 0;
    this.epoch = -1;
    this.send_idx = 0;
    this.rcvd_idx = 0;
    /** @type {Map<number, Task>} live tasks of this epoch (not yet released) */
    this.tasks = new Map();
    /** @type {Map<number, Worker>} */
    this.workers = new Map();
    /** @type {number[]} fetched, not yet taken by the main process */
    this.result_queue = [];
    /** @type {number[]} parked out of order, waiting for rcvd_idx */
    this.parked = [];
    this.outstanding = 0; // dispatched, not yet arrived (torch's _tasks_outstanding)
    // statistics, run-wide
    this.batches = 0;
    this.epochs_done = 0;
    this.out_of_order = 0;
    this.parked_high = 0;
    this.outstanding_high = 0;
    this.consumer_wait = 0;
    this.startup_wait = 0; // waits for each epoch's first batch: worker start-up, priming
    this.epoch_batches = 0;
    this.head_of_line_wait = 0;
    this.skipped = 0;
    this.worker_deaths = 0;
    this.timeouts = 0;
    this.pin_bytes = 0;
    this.pin_time = 0;
    this.pin_wait = 0; // consumer wait spent while the awaited batch was being pinned
    this.unpinned = 0; // batches that left the pin thread without pinned tensors
    this.fetched_bytes = 0;
    this.pickled_bytes = 0; // of which crossed the process boundary pickled, not in shared memory
    /**
     * @type {Array<EventOf<'batch_info'> & {epoch: number}>} structures for the inspector (at most MAX_BATCH_SAMPLES)
     */
    this.batch_samples = [];
    // consumer steps that reported their timings (step events) between two batches of an epoch (state.py)
    this.steps = 0;
    this.step_h2d = 0;
    this.step_compute = 0;
    this.step_h2d_pageable = 0;
    this.pending_steps = 0; // step events since the last batch
    this.pending_h2d = 0;
    this.pending_compute = 0;
    this.pending_h2d_pageable = 0;
    /** @type {string|null} */
    this.step_device = null;
    /** @type {number|null} */
    this.first_t = null;
    /** @type {number|null} */
    this.last_yield_t = null;
    /** @type {number|null} the current epoch's latest yield (null before its first) */
    this.epoch_yield_t = null;
    // the training loop's own time between two yields of one epoch, inside no loader's next(): its step.
    // Gaps between epochs are not steps.
    /** @type {number[]} */
    this.step_gaps = [];
    this.step_total = 0;
    // time the loop spent inside other loaders' next() (loop events), since this loader's last batch;
    // then added up within epochs and before each epoch's first batch
    this.pending_others = 0;
    this.other_wait = 0;
    this.between_others = 0;
    // iterators abandoned after a few batches (next(iter(loader)) before an epoch): not epochs
    this.peeks = 0;
    this.peek_batches = 0;
    this.peek_wait = 0;
    this.peek_starts = 0; // worker start-ups the peeks cost
    this.epoch_wait = 0; // consumer wait of the current epoch
    this.epoch_failed = false; // a worker died, an error or a timeout ended it: not a peek
    this.epoch_open = false; // an iterator began an epoch that has not ended yet
    /** @type {number|null} when the training loop first asked for a batch */
    this.first_next_t = null;
    this.starts = 0; // worker start-ups since the last epoch_end
    this.worker_starts = 0; // worker start-ups in the whole run
    /**
     * @type {Map<number, Array<Record<string, unknown>>>} the latest worker_stuck notes of each worker, until they
     *   recover
     */
    this.stuck_notes = new Map();
    /** @type {Record<string, unknown>|null} the consumer_stuck note, until a batch ends the wait */
    this.consumer_note = null;
    /** @type {Array<[number, number]>} (epoch, idx) as released */
    this.yield_order = [];
    /** @type {NoteOf<'error'>[]} */
    this.errors = [];
    /** @type {LoaderEvent[]} stuck, died, timeout, unknown kinds */
    this.notes = [];
    /** @type {string[]} protocol invariants broken by the stream */
    this.violations = [];
    this.memory = new MemoryModel(); // the memory samples, compactly (memory.js)
    // page extras (see the header comment)
    /** @type {EventOf<'consumer_stuck'>|null} */
    this.consumer_stuck = null;
    /** @type {EventOf<'timeout'>|null} */
    this.timeout = null;
  }

  /**
   * Most tasks torch keeps in flight: prefetch_factor × num_workers (1 in-process), torch's default when none is given.
   */
  get window() {
    const workers = this.config.num_workers || 0;
    return workers ? (this.config.prefetch_factor || TORCH_PREFETCH_FACTOR) * workers : 1;
  }

  /**
   * Append to a list the state keeps, up to MAX_KEPT: a broken producer must not grow memory
   * without bound (the trace still has everything).
   */
  /** @template T @param {T[]} into @param {T} item */
  keep(into, item) {
    if (into.length < MAX_KEPT) into.push(item);
  }

  /** Advance the state by one event (events must come in seq order). @param {LoaderEvent} event */
  apply(event) {
    this.seq = event.seq ?? this.seq + 1;
    this.t = event.t ?? this.t;
    if (this.first_t === null) this.first_t = this.t;
    // a known kind has its required fields: schema.js invalidReason checked them before any event is kept
    const steps = STEPS.get(event.kind);
    if (steps === undefined) {
      this.keep(this.notes, event); // unknown kinds are shown, never dropped
      return;
    }
    const [needsTask, effects] = steps;
    if (needsTask && this.task(event.kind, /** @type {{idx: number}} */ (event).idx) === undefined) return;
    for (const effect of effects) effect(this, event, 0);
  }

  /** @param {number} wid @returns {Worker} */
  worker(wid) {
    let w = this.workers.get(wid);
    if (w === undefined) {
      w = newWorker(wid);
      this.workers.set(wid, w);
    }
    return w;
  }

  /**
   * The live task an event of `kind` names (a violation if none).
   * @param {string} kind
   * @param {number} idx
   * @returns {Task|undefined}
   */
  task(kind, idx) {
    const task = this.tasks.get(idx);
    if (task === undefined) this.keep(this.violations, `seq ${this.seq}: ${kind} for unknown task ${idx}`);
    return task;
  }

  /** A task leaves the pipeline (yielded or skipped); rcvd_idx moves past released tasks. */
  /** @param {number} idx */
  release(idx) {
    this.tasks.delete(idx);
    remove(this.parked, idx);
    while (this.rcvd_idx < this.send_idx && !this.tasks.has(this.rcvd_idx)) this.rcvd_idx += 1;
  }
}

// --- each rule's own code: what its row in RULES does not say -----------------------------------

/** @param {LoaderState} s @param {EventOf<'run_start'>} e */
function runStart(s, e) {
  s.run = e.run ?? s.run;
  s.mode = e.mode;
  s.scenario = e.scenario ?? '';
  s.config = { ...e.config };
  s.meta = {
    rank: e.rank ?? 0,
    job: e.job ?? null,
    world_size: e.world_size ?? 1,
    wall_start: e.wall_start ?? null,
    name: e.name ?? null,
  };
  s.status = RunStatus.RUNNING;
  const n = s.config.num_workers || 1;
  for (let wid = 0; wid < n; wid++) s.worker(wid);
}

/** @param {LoaderState} s @param {EventOf<'run_end'>} e */
function runEnd(s, e) {
  s.status = e.reason;
  if (e.error) s.keep(s.notes, e); // the script died of an exception: the diagnosis says which
}

/** @param {LoaderState} s @param {EventOf<'epoch_start'>} e */
function epochStart(s, e) {
  s.epoch = e.epoch;
  s.send_idx = s.rcvd_idx = s.outstanding = s.epoch_batches = 0;
  s.epoch_wait = 0;
  s.epoch_yield_t = null;
  s.epoch_failed = false;
  s.epoch_open = true;
  s.stuck_notes.clear();
  s.tasks.clear();
  s.result_queue.length = 0;
  s.parked.length = 0;
  for (const w of s.workers.values()) {
    w.queue.length = 0;
    w.current = null;
    if (w.status === WorkerStatus.FETCHING || w.status === WorkerStatus.STUCK) w.status = WorkerStatus.IDLE;
    w.stuck = null;
  }
  s.consumer_stuck = null;
}

export const PEEK_BATCHES = 3; // an iterator abandoned with fewer batches than this (and than its epoch) was a peek

/** An epoch_end of an iterator left after a look at its first batches, not an epoch of training (state.py is_peek). */
/** @param {{batches?: number|null, abandoned?: boolean|null}} e @param {number|null} [batchesPerEpoch] */
export function isPeek(e, batchesPerEpoch) {
  const b = e.batches;
  return (
    Boolean(e.abandoned) &&
    typeof b === 'number' &&
    Number.isInteger(b) &&
    b < PEEK_BATCHES &&
    (batchesPerEpoch === undefined || batchesPerEpoch === null || b < batchesPerEpoch)
  );
}

/** @param {LoaderState} s @param {EventOf<'epoch_end'>} e */
function epochEnd(s, e) {
  if (!s.epoch_failed && isPeek(e, s.config.batches_per_epoch)) {
    s.peeks += 1;
    s.peek_batches = Math.max(s.peek_batches, e.batches ?? 0);
    s.peek_wait += s.epoch_wait;
    s.peek_starts += s.starts;
  } else {
    s.epochs_done += 1;
    s.memory.epochEnd(s.epochs_done);
  }
  s.starts = 0;
  s.epoch_open = false;
}

/** @param {LoaderState} s @param {EventOf<'worker_start'>} e */
function workerStart(s, e) {
  s.worker(e.worker).pid = e.pid;
}

/** @param {LoaderState} s @param {EventOf<'worker_exit'>} e */
function workerExit(s, e) {
  const w = s.worker(e.worker);
  // an older iterator's worker, shut down after the next epoch's workers started
  if (e.pid !== undefined && e.pid !== null && w.pid !== undefined && w.pid !== null && e.pid !== w.pid) return;
  w.exitcode = e.exitcode ?? null;
  if (w.status !== WorkerStatus.DIED) w.status = WorkerStatus.EXITED;
}

/**
 * The note the rule's `keeps` just made of `e`, as a copy of its own (state.py's note is a copy: a
 * recovery marks it, never the event), or null once MAX_KEPT notes are kept.
 * @param {LoaderState} s @param {LoaderEvent} e @returns {Record<string, unknown>|null}
 */
function lastNote(s, e) {
  const last = s.notes.length - 1;
  if (last < 0 || s.notes[last] !== e) return null;
  const note = { ...e };
  s.notes[last] = /** @type {LoaderEvent} */ (note);
  return note;
}

/** @param {LoaderState} s @param {EventOf<'worker_stuck'>} e */
function workerStuck(s, e) {
  // the page shows the latest stack on the stuck lane's card; state.py keeps it in notes only
  s.worker(e.worker).stuck = e;
  const note = lastNote(s, e);
  if (note === null) return;
  let episode = s.stuck_notes.get(e.worker);
  if (episode === undefined || episode[0].idx !== e.idx) {
    episode = [];
    s.stuck_notes.set(e.worker, episode);
  }
  episode.push(note);
}

/** @param {LoaderState} s @param {EventOf<'worker_died'>} e */
function workerDied(s, e) {
  const w = s.worker(e.worker);
  w.exitcode = e.exitcode ?? null;
  w.signal = e.signal ?? null;
  /** @type {NoteOf<'worker_died'>} */
  const note = { ...e };
  const task = s.tasks.get(e.idx ?? -1);
  if (task !== undefined && !('indices' in note)) note.indices = task.indices;
  const evidence = s.memory.evidence(e.worker, e.pid);
  if (evidence !== null && !('memory' in note)) note.memory = evidence; // what it held at its last sample
  w.died = note;
  s.keep(s.notes, note);
}

/** @param {LoaderState} s @param {EventOf<'error'>} e */
function error(s, e) {
  /** @type {NoteOf<'error'>} */
  const err = { ...e };
  const task = s.tasks.get(e.idx ?? -1);
  if (task !== undefined && !('indices' in err)) err.indices = task.indices;
  s.keep(s.errors, err);
}

/** @param {LoaderState} s @param {EventOf<'batch_info'>} e */
function batchInfo(s, e) {
  if (s.batch_samples.length < MAX_BATCH_SAMPLES) s.batch_samples.push({ ...e, epoch: s.epoch });
}

/** @param {LoaderState} s @param {EventOf<'step'>} e */
function step(s, e) {
  s.step_device = e.device ?? s.step_device;
}

/** @param {LoaderState} s @param {EventOf<'consumer_stuck'>} e */
function consumerStuck(s, e) {
  s.consumer_stuck = e; // the page's extra; the note is the table's
  s.consumer_note = lastNote(s, e) ?? s.consumer_note;
}

/** @param {LoaderState} s @param {EventOf<'timeout'>} e */
function timeout(s, e) {
  s.timeout = e; // the page's extra; the count, the failed epoch and the note are the table's
}

/** @type {string[]} */
const IN_FLIGHT = [Where.RESULT_QUEUE, Where.PINNING, Where.PARKED]; // fetched, not yet handed to the loop

/** @param {LoaderState} s @param {EventOf<'memory'>} e */
function memory(s, e) {
  let bytes = 0,
    batches = 0;
  for (const task of s.tasks.values()) {
    if (IN_FLIGHT.includes(task.where) && task.nbytes !== null) {
      bytes += task.nbytes;
      batches += 1;
    }
  }
  s.memory.apply(e, [bytes, batches], new Map([...s.workers.values()].map((w) => [w.id, w.samples])));
}

/**
 * The rare kinds' own code, over the event.
 * @type {{[K in import('./types.js').Kind]?: (s: LoaderState, e: EventOf<K>) => void}}
 */
const CODE = {
  run_start: runStart,
  run_end: runEnd,
  epoch_start: epochStart,
  epoch_end: epochEnd,
  worker_start: workerStart,
  worker_exit: workerExit,
  worker_stuck: workerStuck,
  consumer_stuck: consumerStuck,
  worker_died: workerDied,
  error,
  timeout,
  batch_info: batchInfo,
  step,
  memory,
};

// --- the rules' table-shaped effects, compiled once into steps (contract/rules.py gives the order) ---

/**
 * @typedef {(s: LoaderState, e: any, i: number) => void} Effect an effect on an event (`e`) or on row `i` of a table
 *   (`e`)
 * @typedef {{says: string, needs_task?: boolean, worker?: string, moves?: {from: string[], to: string},
 *   enters?: 'worker_queue'|'parked', leaves?: 'worker_queue'|'parked', counts?: Record<string, number|string>,
 *   fails?: boolean, keeps?: boolean}} Rule
 */

/** @param {LoaderState} s @param {number} worker @param {'worker_queue'|'parked'} name */
function queueOf(s, worker, name) {
  return name === 'worker_queue' ? s.worker(worker).queue : s.parked;
}

// The counters the frequent kinds' rules bump, each by its own store: one generic `s[name] += v`
// shared by every rule is a megamorphic store, a thirteenth of applying a big trace.
/** @type {Record<string, (s: LoaderState, v: number) => void>} */
const ADD = {
  outstanding: (s, v) => {
    s.outstanding += v;
  },
  fetched_bytes: (s, v) => {
    s.fetched_bytes += v;
  },
  pickled_bytes: (s, v) => {
    s.pickled_bytes += v;
  },
  pin_bytes: (s, v) => {
    s.pin_bytes += v;
  },
  pin_time: (s, v) => {
    s.pin_time += v;
  },
  out_of_order: (s, v) => {
    s.out_of_order += v;
  },
  batches: (s, v) => {
    s.batches += v;
  },
  consumer_wait: (s, v) => {
    s.consumer_wait += v;
  },
  epoch_wait: (s, v) => {
    s.epoch_wait += v;
  },
  skipped: (s, v) => {
    s.skipped += v;
  },
};

/** @param {string} name @returns {(s: LoaderState, v: number) => void} */
function adder(name) {
  return (
    ADD[name] ??
    ((s, v) => {
      /** @type {Record<string, number>} */ (/** @type {unknown} */ (s))[name] += v;
    })
  );
}

/** @param {Record<string, number|string>} counts @param {Fields} field @returns {Effect[]} */
function count(counts, field) {
  return Object.entries(counts).map(([name, by]) => {
    const add = adder(name);
    if (typeof by === 'number') return (s) => add(s, by);
    const read = field(by);
    return (s, e, i) => add(s, read(e, i) || 0);
  });
}

/**
 * A rule's effects in the contract's order, its own code last, reading the fields through `field`
 * and the whole event (for a note) through `whole`.
 * @param {string} kind @param {Rule} rule @param {Fields} field @param {Read} whole @returns {[boolean, Effect[]]}
 */
export function compile(kind, rule, field, whole) {
  const { worker, moves, enters, leaves, counts } = rule;
  const idxOf = field('idx'),
    workerOf = field('worker');
  const hot = HOT_CODE[kind];
  /** @type {(Effect|false|undefined)[]} */
  const effects = [
    worker !== undefined &&
      ((s, e, i) => {
        s.worker(workerOf(e, i)).status = worker;
      }),
    moves !== undefined &&
      ((s, e, i) => {
        const task = s.tasks.get(idxOf(e, i) ?? -1);
        if (task !== undefined && (!moves.from.length || moves.from.includes(task.where))) task.where = moves.to;
      }),
    enters !== undefined &&
      ((s, e, i) => {
        queueOf(s, workerOf(e, i), enters).push(idxOf(e, i));
      }),
    leaves !== undefined &&
      ((s, e, i) => {
        remove(queueOf(s, workerOf(e, i), leaves), idxOf(e, i));
      }),
    ...(counts !== undefined ? count(counts, field) : []),
    rule.fails &&
      ((s) => {
        s.epoch_failed = true;
      }),
    rule.keeps &&
      ((s, e, i) => {
        s.keep(s.notes, whole(e, i));
      }),
    hot ? hot(field) : /** @type {Effect|undefined} */ (CODE[/** @type {import('./types.js').Kind} */ (kind)]),
  ];
  return [Boolean(rule.needs_task), /** @type {Effect[]} */ (effects.filter(Boolean))];
}

export const ALL_RULES = /** @type {Record<string, Rule>} */ (RULES);

/** Each kind's steps over an event. @type {Map<string, [boolean, Effect[]]>} */
const STEPS = new Map(
  Object.entries(ALL_RULES).map(([kind, rule]) => [
    kind,
    compile(
      kind,
      rule,
      (name) => (e) => e[name],
      (e) => e,
    ),
  ]),
);

/** The state after every event up to and including untilSeq (all of them by default). */
/** @param {Iterable<LoaderEvent>} events @param {number|null} [untilSeq] */
export function reduce(events, untilSeq = null) {
  const state = new LoaderState();
  for (const e of events) {
    if (untilSeq !== null && (e.seq ?? 0) > untilSeq) break;
    state.apply(e);
  }
  return state;
}
