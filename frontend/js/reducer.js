// The loader-state model: events in, what the DataLoader looks like out.
// A line-by-line mirror of backend/loaderscope/model/state.py (same field names, same rules), so the
// page, the CLI and the API agree. Each kind's effect is a transition rule of the contract
// (RULES in contract.gen.js, from backend/loaderscope/contract/rules.py): its table-shaped part is
// interpreted below as in state.py, and the rest is the rule's own code, one function per rule. Pure: no DOM, no I/O, no clock. Keep the two in step
// (frontend/tests/reducer.test.js runs both on the same streams and compares). The diagnosis in
// words is diagnosis.js, as in Python.
//
// Extras the page needs and state.py does not keep (never used by the statistics):
// `scenario`, `meta` (run_start's rank/job/world_size/wall_start/name), `task.epoch`,
// `worker.stuck` / `worker.died` (the latest worker_stuck / worker_died event of that worker),
// `consumer_stuck` (the latest consumer_stuck, until the next yield), `timeout` (the latest one).

import { FREQUENT, RULES, TORCH_PREFETCH_FACTOR, WHERE, WORKER_STATUS } from './contract.gen.js';
import { EventTable } from './event-table.js';
import { MemoryModel, memorySummary } from './memory.js';
import { RunStatus } from './schema.js';

/** @typedef {import('./types.js').LoaderEvent} LoaderEvent */
/** @template {import('./types.js').Kind} K @typedef {import('./types.js').EventOf<K>} EventOf */
/** @template {import('./types.js').Kind} K @typedef {import('./types.js').NoteOf<K>} NoteOf */
/** @typedef {import('./types.js').Indices} Indices */

/** Where a task is in the pipeline, and a worker's status: the contract's tables. */
export const Where = WHERE;
export const WorkerStatus = WORKER_STATUS;

export const MAX_BATCH_SAMPLES = 64;
export const MAX_KEPT = 1000; // notes, errors and violations kept per run (state.py MAX_KEPT)

/**
 * @typedef {{idx:number, worker:number, indices:Indices|null, n:number, dispatched:number, where:string,
 *   fetch_start:number|null, fetch_end:number|null, pin_start:number|null, pin_end:number|null,
 *   arrived:number|null, nbytes:number|null, epoch:number}} Task
 * @typedef {{id:number, pid:number|null, status:string, current:number|null, queue:number[], fetch_times:number[],
 *   busy:number, nbytes:number, exitcode:number|null, signal:string|null, samples:number,
 *   stuck:NoteOf<'worker_stuck'>|null, died:NoteOf<'worker_died'>|null}} Worker
 */

/**
 * @param {number} idx @param {number} worker @param {Indices|null} indices @param {number} n
 * @param {number} dispatched @param {number} epoch
 * @returns {Task}
 */
export function newTask(idx, worker, indices, n, dispatched, epoch) {
  return {
    idx, worker, indices, n, dispatched, where: Where.INDEX_QUEUE, fetch_start: null, fetch_end: null,
    pin_start: null, pin_end: null, arrived: null, nbytes: null, epoch,
  };
}

/** @param {number} id @returns {Worker} */
export function newWorker(id) {
  return {
    id, pid: null, status: WorkerStatus.STARTING, current: null, queue: [], fetch_times: [], busy: 0, nbytes: 0,
    exitcode: null, signal: null, samples: 0, stuck: null, died: null,
  };
}

/**
 * Take `value` out of `list` in place. Not splice (which makes an array of what it took) nor shift
 * (which hands the array's head room back, so the next push allocates): a queue that takes and
 * gives a task per event made a third of the garbage of applying a big trace.
 * @param {number[]} list @param {number} value
 */
function remove(list, value) {
  const i = list.indexOf(value);
  if (i < 0) return;
  const last = list.length - 1;
  for (let j = i; j < last; j++) list[j] = list[j + 1]; // a loop: these lists are short, and copyWithin is a call
  list.pop();
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
    this.buffer = [];
    this.outstanding = 0; // dispatched, not yet arrived (torch's _tasks_outstanding)
    // statistics, run-wide
    this.batches = 0;
    this.epochs_done = 0;
    this.out_of_order = 0;
    this.buffer_high = 0;
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
    /** @type {Array<EventOf<'batch_info'> & {epoch: number}>} structures for the inspector (at most MAX_BATCH_SAMPLES) */
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
    /** @type {Map<number, Array<Record<string, unknown>>>} the latest worker_stuck notes of each worker, until they recover */
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

  /** Most tasks torch keeps in flight: prefetch_factor × num_workers (1 in-process), torch's default when none is given. */
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

  /**
   * Advance the state by row i of `table`, exactly as apply(table.get(i)) would: a packed row is read
   * from the columns by the same rules, with no event built (a big trace has ten million of them).
   * @param {EventTable} table @param {number} i
   */
  applyRow(table, i) {
    if (table.isObject(i)) return this.apply(table.get(i));
    this.seq = table.seq[i];
    this.t = table.t[i];
    if (this.first_t === null) this.first_t = this.t;
    const code = table.kind[i];
    if (INLINED[code]) {
      applyInlined(this, table, i, code);
      return;
    }
    const [needsTask, effects] = COLUMN_STEPS[code];
    if (needsTask && this.task(table.kindOf(i), table.idx[i]) === undefined) return;
    for (const effect of effects) effect(this, table, i);
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

  /** The live task an event of `kind` names (a violation if none). @param {string} kind @param {number} idx @returns {Task|undefined} */
  task(kind, idx) {
    const task = this.tasks.get(idx);
    if (task === undefined) this.keep(this.violations, `seq ${this.seq}: ${kind} for unknown task ${idx}`);
    return task;
  }

  /** A task leaves the pipeline (yielded or skipped); rcvd_idx moves past released tasks. */
  /** @param {number} idx */
  release(idx) {
    this.tasks.delete(idx);
    remove(this.buffer, idx);
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
    rank: e.rank ?? 0, job: e.job ?? null, world_size: e.world_size ?? 1, wall_start: e.wall_start ?? null,
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
  s.buffer.length = 0;
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
  return Boolean(e.abandoned) && typeof b === 'number' && Number.isInteger(b) && b < PEEK_BATCHES &&
    (batchesPerEpoch === undefined || batchesPerEpoch === null || b < batchesPerEpoch);
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
  s.worker(e.worker).stuck = e; // the page shows the latest stack on the stuck lane's card; state.py keeps it in notes only
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
const IN_FLIGHT = [Where.RESULT_QUEUE, Where.PINNING, Where.BUFFER]; // fetched, not yet handed to the loop

/** @param {LoaderState} s @param {EventOf<'memory'>} e */
function memory(s, e) {
  let bytes = 0, batches = 0;
  for (const task of s.tasks.values()) {
    if (IN_FLIGHT.includes(task.where) && task.nbytes !== null) {
      bytes += task.nbytes;
      batches += 1;
    }
  }
  s.memory.apply(e, [bytes, batches], new Map([...s.workers.values()].map((w) => [w.id, w.samples])));
}

/** The rare kinds' own code, over the event. @type {{[K in import('./types.js').Kind]?: (s: LoaderState, e: EventOf<K>) => void}} */
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

// --- the frequent kinds' own code, written once over field readers: the same code applies an event
// (the live path, a field read from the object) and a packed row of an EventTable (a big trace's
// batch, read from the columns with no event built) -------------------------------------------------

/**
 * @typedef {(src: any, i: number) => any} Read a field of an event (`src`; `i` unused) or of row `i` of an EventTable (`src`)
 * @typedef {(name: string) => Read} Fields the reader of each field, resolved once per rule
 */

/** @type {Record<string, (field: Fields) => Effect>} */
const HOT_CODE = {
  dispatch(field) {
    const idxOf = field('idx'), workerOf = field('worker'), indicesOf = field('indices'), nOf = field('n');
    return (s, e, i) => {
      const idx = idxOf(e, i);
      if (idx !== s.send_idx) s.keep(s.violations, `seq ${s.seq}: dispatch of task ${idx} but send_idx is ${s.send_idx}`);
      const indices = indicesOf(e, i) ?? null;
      s.tasks.set(idx, newTask(idx, workerOf(e, i), indices, nOf(e, i) ?? (indices ? indices.length : 0), s.t, s.epoch));
      s.send_idx = idx + 1;
      s.outstanding_high = Math.max(s.outstanding_high, s.outstanding);
      if (s.outstanding > s.window) s.keep(s.violations, `seq ${s.seq}: ${s.outstanding} tasks outstanding, window is ${s.window}`);
    };
  },

  fetch_start(field) {
    const idxOf = field('idx'), workerOf = field('worker');
    return (s, e, i) => {
      const idx = idxOf(e, i);
      const w = s.worker(workerOf(e, i));
      w.current = idx;
      w.stuck = null;
      const task = s.tasks.get(idx);
      if (task !== undefined) task.fetch_start = s.t;
    };
  },

  fetch_end(field) {
    const idxOf = field('idx'), workerOf = field('worker'), dtOf = field('dt'), nbytesOf = field('nbytes');
    return (s, e, i) => {
      const idx = idxOf(e, i), nbytes = nbytesOf(e, i);
      const task = s.tasks.get(idx);
      const w = s.worker(workerOf(e, i));
      let dt = dtOf(e, i) ?? null;
      if (dt === null && task !== undefined && task.fetch_start !== null) dt = s.t - task.fetch_start;
      if (dt !== null) {
        w.fetch_times.push(dt);
        w.busy += dt;
      }
      w.nbytes += nbytes || 0;
      if (task !== undefined) w.samples += task.n;
      const episode = s.stuck_notes.get(w.id);
      if (episode !== undefined && episode[0].idx === idx) { // a stuck fetch that ended after all
        s.stuck_notes.delete(w.id);
        for (const note of episode) {
          note.recovered = dt ?? s.t - Number(note.t) + Number(note.elapsed);
        }
      }
      if (w.current === idx) {
        w.current = null;
        w.stuck = null;
        if (w.status === WorkerStatus.FETCHING || w.status === WorkerStatus.STUCK) w.status = WorkerStatus.IDLE;
      }
      // a worker's events may reach the stream after the pin thread's: never move a task back (hence not a table move)
      if (task !== undefined && (task.where === Where.INDEX_QUEUE || task.where === Where.FETCHING)) {
        task.where = Where.RESULT_QUEUE;
        task.fetch_end = s.t;
        task.nbytes = nbytes ?? null;
        s.result_queue.push(task.idx);
      }
    };
  },

  arrive(field) {
    const idxOf = field('idx');
    return (s, e, i) => {
      const task = /** @type {Task} */ (s.tasks.get(idxOf(e, i)));
      leaveResultQueue(s, task);
      task.arrived = s.t;
    };
  },

  buffer() {
    return (s) => {
      s.buffer_high = Math.max(s.buffer_high, s.buffer.length);
    };
  },

  yield(field) {
    const idxOf = field('idx'), waitOf = field('wait'), fromBufferOf = field('from_buffer');
    return (s, e, i) => {
      const idx = idxOf(e, i), wait = waitOf(e, i);
      const task = s.tasks.get(idx);
      if (task === undefined || task.arrived === null) s.keep(s.violations, `seq ${s.seq}: yield of task ${idx} that has not arrived`);
      const inOrder = s.config.in_order ?? true;
      if (inOrder && idx !== s.rcvd_idx) s.keep(s.violations, `seq ${s.seq}: yield of task ${idx} while rcvd_idx is ${s.rcvd_idx}`);
      if (wait > 0 && !fromBufferOf(e, i) && s.buffer.length) s.head_of_line_wait += parkedWait(s, wait);
      if (wait > 0 && task !== undefined && task.pin_start !== null) { // how much of the wait was pinning
        s.pin_wait += Math.max(0, Math.min(s.t, task.pin_end || s.t) - Math.max(s.t - wait, task.pin_start));
      }
      if (s.first_next_t === null) s.first_next_t = s.t - wait;
      if (s.epoch_batches === 0) s.startup_wait += wait;
      const others = s.pending_others;
      s.pending_others = 0;
      if (s.epoch_yield_t !== null) { // the step: the gap since the last batch, less other loaders' next()
        const gap = Math.max(0, s.t - wait - s.epoch_yield_t - others);
        s.step_gaps.push(gap);
        s.step_total += gap;
        s.other_wait += others;
        s.steps += s.pending_steps;
        s.step_h2d += s.pending_h2d;
        s.step_compute += s.pending_compute;
        s.step_h2d_pageable += s.pending_h2d_pageable;
      } else {
        s.between_others += others;
      }
      s.pending_steps = s.pending_h2d = s.pending_compute = s.pending_h2d_pageable = 0;
      if (s.consumer_note !== null) { // the loop was stuck in next(), and this batch ended the wait
        s.consumer_note.recovered = wait;
        s.consumer_note = null;
      }
      s.epoch_batches += 1;
      s.last_yield_t = s.epoch_yield_t = s.t;
      s.yield_order.push([s.epoch, idx]);
      if (s.yield_order.length > 2 * MAX_KEPT) s.yield_order.splice(0, MAX_KEPT); // keep the most recent
      s.release(idx);
      s.consumer_stuck = null;
    };
  },

  skip(field) {
    const idxOf = field('idx');
    return (s, e, i) => {
      const idx = idxOf(e, i);
      const task = s.tasks.get(idx);
      if (task !== undefined && task.arrived === null) {
        s.outstanding -= 1;
        leaveResultQueue(s, task);
      }
      s.release(idx);
    };
  },

  pin_start(field) {
    const idxOf = field('idx');
    return (s, e, i) => {
      const task = s.tasks.get(idxOf(e, i));
      if (task !== undefined && task.arrived === null) {
        remove(s.result_queue, task.idx);
        task.where = Where.PINNING;
        task.pin_start = s.t;
      }
    };
  },

  pin_end(field) {
    const idxOf = field('idx'), pinnedOf = field('pinned');
    return (s, e, i) => {
      if (pinnedOf(e, i) === false) s.unpinned += 1;
      const task = s.tasks.get(idxOf(e, i));
      if (task !== undefined && task.arrived === null) {
        task.where = Where.RESULT_QUEUE; // on the pinned-data queue, for the main process to take
        task.pin_end = s.t;
        s.result_queue.push(task.idx);
      }
    };
  },
};

/**
 * The reorder cost of one wait: the part of it after a later result had arrived and parked, which
 * in_order=False would have handed over at once (state.py _parked_wait).
 * @param {LoaderState} s @param {number} wait
 */
function parkedWait(s, wait) {
  let first = Infinity;
  for (const idx of s.buffer) {
    const arrived = s.tasks.get(idx)?.arrived;
    if (arrived !== undefined && arrived !== null && arrived < first) first = arrived;
  }
  return first === Infinity ? 0 : Math.max(0, Math.min(wait, s.t - first));
}

/** @param {LoaderState} s @param {Task} task */
function leaveResultQueue(s, task) {
  remove(s.result_queue, task.idx);
  const w = s.workers.get(task.worker);
  if (w !== undefined) remove(w.queue, task.idx); // arrival seen before the worker's own events
}

// --- the rules' table-shaped effects, compiled once into steps (contract/rules.py gives the order) ---

/**
 * @typedef {(s: LoaderState, e: any, i: number) => void} Effect an effect on an event (`e`) or on row `i` of a table (`e`)
 * @typedef {{says: string, needs_task?: boolean, worker?: string, moves?: {from: string[], to: string},
 *   enters?: 'worker_queue'|'buffer', leaves?: 'worker_queue'|'buffer', counts?: Record<string, number|string>,
 *   fails?: boolean, keeps?: boolean}} Rule
 */

/** @param {LoaderState} s @param {number} worker @param {'worker_queue'|'buffer'} name */
function queueOf(s, worker, name) {
  return name === 'worker_queue' ? s.worker(worker).queue : s.buffer;
}

// The counters the frequent kinds' rules bump, each by its own store: one generic `s[name] += v`
// shared by every rule is a megamorphic store, a thirteenth of applying a big trace.
/** @type {Record<string, (s: LoaderState, v: number) => void>} */
const ADD = {
  outstanding: (s, v) => { s.outstanding += v; },
  fetched_bytes: (s, v) => { s.fetched_bytes += v; },
  pickled_bytes: (s, v) => { s.pickled_bytes += v; },
  pin_bytes: (s, v) => { s.pin_bytes += v; },
  pin_time: (s, v) => { s.pin_time += v; },
  out_of_order: (s, v) => { s.out_of_order += v; },
  batches: (s, v) => { s.batches += v; },
  consumer_wait: (s, v) => { s.consumer_wait += v; },
  epoch_wait: (s, v) => { s.epoch_wait += v; },
  skipped: (s, v) => { s.skipped += v; },
};

/** @param {string} name @returns {(s: LoaderState, v: number) => void} */
function adder(name) {
  return ADD[name] ?? ((s, v) => { /** @type {Record<string, number>} */ (/** @type {unknown} */ (s))[name] += v; });
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
function compile(kind, rule, field, whole) {
  const { worker, moves, enters, leaves, counts } = rule;
  const idxOf = field('idx'), workerOf = field('worker');
  const hot = HOT_CODE[kind];
  /** @type {(Effect|false|undefined)[]} */
  const effects = [
    worker !== undefined && ((s, e, i) => { s.worker(workerOf(e, i)).status = worker; }),
    moves !== undefined && ((s, e, i) => {
      const task = s.tasks.get(idxOf(e, i) ?? -1);
      if (task !== undefined && (!moves.from.length || moves.from.includes(task.where))) task.where = moves.to;
    }),
    enters !== undefined && ((s, e, i) => { queueOf(s, workerOf(e, i), enters).push(idxOf(e, i)); }),
    leaves !== undefined && ((s, e, i) => { remove(queueOf(s, workerOf(e, i), leaves), idxOf(e, i)); }),
    ...(counts !== undefined ? count(counts, field) : []),
    rule.fails && ((s) => { s.epoch_failed = true; }),
    rule.keeps && ((s, e, i) => { s.keep(s.notes, whole(e, i)); }),
    hot ? hot(field) : /** @type {Effect|undefined} */ (CODE[/** @type {import('./types.js').Kind} */ (kind)]),
  ];
  return [Boolean(rule.needs_task), /** @type {Effect[]} */ (effects.filter(Boolean))];
}

const ALL_RULES = /** @type {Record<string, Rule>} */ (RULES);

/** Each kind's steps over an event. @type {Map<string, [boolean, Effect[]]>} */
const STEPS = new Map(Object.entries(ALL_RULES).map(([kind, rule]) =>
  [kind, compile(kind, rule, (name) => (e) => e[name], (e) => e)]));

/**
 * The frequent kinds' steps over a packed row, by the row's kind code (FREQUENT's order from 1;
 * code 0, a row kept whole, goes through STEPS). The same rules, read from the columns.
 * @type {Array<[boolean, Effect[]]>}
 */
const COLUMN_STEPS = [[false, []], ...FREQUENT.map((kind) => compile(kind, ALL_RULES[kind], (name) => EventTable.field(kind, name),
  (table, i) => table.get(i)))];

// --- the frequent kinds' rows, their effects written out in one switch --------------------------

// The rules applyInlined writes out, as they were when it was written (state.py's _INLINED_RULES):
// a kind whose rule in the contract changes goes through its compiled steps (COLUMN_STEPS) until
// applyInlined is changed with it. One call per effect through a list of them was a call site no
// engine can inline, a tenth of the page's thread on a big trace.
/** @type {Record<string, Omit<Rule, 'says'>>} */
const INLINED_RULES = {
  dispatch: { enters: 'worker_queue', counts: { outstanding: 1 } },
  fetch_start: { worker: WorkerStatus.FETCHING, moves: { from: [Where.INDEX_QUEUE], to: Where.FETCHING }, leaves: 'worker_queue' },
  fetch_end: { counts: { fetched_bytes: 'nbytes', pickled_bytes: 'pickled' } },
  arrive: { needs_task: true, counts: { outstanding: -1 } },
  buffer: { needs_task: true, moves: { from: [], to: Where.BUFFER }, enters: 'buffer', counts: { out_of_order: 1 } },
  yield: { counts: { batches: 1, consumer_wait: 'wait', epoch_wait: 'wait' } },
  skip: { counts: { skipped: 1 } },
  pin_start: {},
  pin_end: { counts: { pin_bytes: 'nbytes', pin_time: 'dt' } },
};

/** A rule as plain data with its keys in order, to compare two. @param {object} rule @returns {string} */
const ruleText = (rule) => JSON.stringify(rule, (key, value) => (value && typeof value === 'object' && !Array.isArray(value)
  ? Object.fromEntries(Object.entries(value).filter(([k]) => k !== 'says').sort(([a], [b]) => (a < b ? -1 : 1))) : value));

/** By kind code: whether applyInlined applies that kind's rows. */
export const INLINED = [false, ...FREQUENT.map((kind) => kind in INLINED_RULES && ruleText(ALL_RULES[kind]) === ruleText(INLINED_RULES[kind]))];

const CODE_OF = Object.fromEntries(FREQUENT.map((kind, k) => [kind, k + 1]));
/** @param {string} kind @returns {Effect} the kind's own code (HOT_CODE) over the columns */
const hotOverColumns = (kind) => HOT_CODE[kind]((name) => EventTable.field(kind, name));
const [DISPATCH, FETCH_START, FETCH_END, ARRIVE, BUFFER, YIELD, SKIP, PIN_START, PIN_END] = [
  hotOverColumns('dispatch'), hotOverColumns('fetch_start'), hotOverColumns('fetch_end'), hotOverColumns('arrive'),
  hotOverColumns('buffer'), hotOverColumns('yield'), hotOverColumns('skip'), hotOverColumns('pin_start'), hotOverColumns('pin_end')];
const WORKER_OF = EventTable.field('dispatch', 'worker');
const NBYTES_OF = EventTable.field('fetch_end', 'nbytes'), PICKLED_OF = EventTable.field('fetch_end', 'pickled');
const PIN_NBYTES_OF = EventTable.field('pin_end', 'nbytes'), PIN_DT_OF = EventTable.field('pin_end', 'dt');

/**
 * Row i of `table`, a packed row of kind `code`, applied as its compiled steps would: INLINED_RULES'
 * effects in compile()'s order (worker status, moves, enters, leaves, counts), then the kind's own code.
 * @param {LoaderState} s @param {EventTable} table @param {number} i @param {number} code
 */
function applyInlined(s, table, i, code) {
  const idx = table.idx[i];
  switch (code) {
    case CODE_OF.dispatch:
      s.worker(WORKER_OF(table, i)).queue.push(idx);
      s.outstanding += 1;
      DISPATCH(s, table, i);
      break;
    case CODE_OF.fetch_start: {
      const w = s.worker(WORKER_OF(table, i));
      w.status = WorkerStatus.FETCHING;
      const task = s.tasks.get(idx);
      if (task !== undefined && task.where === Where.INDEX_QUEUE) task.where = Where.FETCHING;
      remove(w.queue, idx);
      FETCH_START(s, table, i);
      break;
    }
    case CODE_OF.fetch_end:
      s.fetched_bytes += NBYTES_OF(table, i) || 0;
      s.pickled_bytes += PICKLED_OF(table, i) || 0;
      FETCH_END(s, table, i);
      break;
    case CODE_OF.arrive:
      if (s.task('arrive', idx) === undefined) return;
      s.outstanding -= 1;
      ARRIVE(s, table, i);
      break;
    case CODE_OF.buffer: {
      const task = s.task('buffer', idx);
      if (task === undefined) return;
      task.where = Where.BUFFER;
      s.buffer.push(idx);
      s.out_of_order += 1;
      BUFFER(s, table, i);
      break;
    }
    case CODE_OF.yield: {
      const wait = table.a[i] || 0;
      s.batches += 1;
      s.consumer_wait += wait;
      s.epoch_wait += wait;
      YIELD(s, table, i);
      break;
    }
    case CODE_OF.skip:
      s.skipped += 1;
      SKIP(s, table, i);
      break;
    case CODE_OF.pin_start:
      PIN_START(s, table, i);
      break;
    default: // pin_end
      s.pin_bytes += PIN_NBYTES_OF(table, i) || 0;
      s.pin_time += PIN_DT_OF(table, i) || 0;
      PIN_END(s, table, i);
  }
}

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

// --- statistics (state.py summary; diagnosis.js puts them into words) ---------------------------

/** Python's round(): halves go to the even neighbour. */
/** @param {number} x */
export function pyRound(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** @param {ArrayLike<number>} values @param {number} q */
function percentile(values, q) {
  if (!values.length) return 0;
  const ordered = Float64Array.from(values).sort();
  return ordered[Math.min(ordered.length - 1, pyRound(q * (ordered.length - 1)))];
}

/** statistics.median @param {ArrayLike<number>} values */
export function median(values) {
  if (!values.length) return 0;
  const s = Float64Array.from(values).sort();
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/** @param {number[]} values */
function mean(values) {
  let sum = 0;
  for (const v of values) sum += v;
  return values.length ? sum / values.length : 0;
}

/** @param {LoaderState} s */
const sortedWorkers = (s) => [...s.workers.values()].sort((a, b) => a.id - b.id);

/** @param {LoaderState} s */
export function workerStats(s) {
  const wall = Math.max(s.t - (s.first_t || 0), 1e-9);
  return sortedWorkers(s).map((w) => ({
    worker: w.id,
    pid: w.pid,
    status: w.status,
    tasks: w.fetch_times.length,
    fetch_p50: percentile(w.fetch_times, 0.5),
    fetch_p95: percentile(w.fetch_times, 0.95),
    fetch_max: fetchMax(w.fetch_times),
    bytes: w.nbytes,
    idle_share: Math.max(0, 1 - w.busy / wall),
  }));
}

/** @param {number[]} xs */
function fetchMax(xs) {
  let m = -Infinity;
  for (const x of xs) if (x > m) m = x;
  return xs.length ? m : 0;
}

export const STRAGGLER_FACTOR = 1.5; // a median fetch this many times the others' marks a straggler
export const STRAGGLER_MIN_GAP = 0.005; // …and at least this many seconds slower
export const STRAGGLER_MIN_TASKS = 5; // fetches a worker (and the others, pooled) needs before it can be named
export const STRAGGLER_QUARTILE = 0.75; // …and above this quantile of the others' fetches (rank-based, as in state.py)

/**
 * Workers whose median fetch is well beyond the other workers' pooled fetch times (state.py stragglers).
 * The page asks a few times a second, with millions of fetch times in a long trace: each list is
 * sorted once, each worker's pool is every time minus its own (a merge walk, no sort), and the
 * answer is kept until a worker's list changes.
 * @param {LoaderState} s
 * @returns {Straggler[]}
 */
export function stragglers(s) {
  const lists = [...s.workers.values()].map((w) => w.fetch_times);
  const lens = lists.map((l) => l.length);
  const cached = STRAGGLERS.get(s);
  if (cached && cached.lists.every((l, i) => l === lists[i] && cached.lens[i] === lens[i]) && cached.lists.length === lists.length) {
    return cached.found.map((f) => ({ ...f }));
  }
  const found = findStragglers(s);
  STRAGGLERS.set(s, { lists, lens, found });
  return found.map((f) => ({ ...f }));
}

/** @typedef {{worker: number, factor: number, median: number, others: number}} Straggler */
/** @type {WeakMap<LoaderState, {lists: number[][], lens: number[], found: Straggler[]}>} */
const STRAGGLERS = new WeakMap();

/** @param {LoaderState} s @returns {Straggler[]} */
function findStragglers(s) {
  const done = new Map();
  for (const w of s.workers.values()) {
    if (w.fetch_times.length >= STRAGGLER_MIN_TASKS) done.set(w.id, Float64Array.from(w.fetch_times).sort());
  }
  const all = new Float64Array([...done.values()].reduce((n, a) => n + a.length, 0));
  let at = 0;
  for (const times of done.values()) { all.set(times, at); at += times.length; }
  all.sort();
  const found = [];
  for (const [wid, times] of done) {
    const pooled = without(all, times);
    if (pooled.length < STRAGGLER_MIN_TASKS) continue;
    const m = sortedMedian(times);
    const baseline = sortedMedian(pooled);
    const upper = pooled[Math.min(pooled.length - 1, pyRound(STRAGGLER_QUARTILE * (pooled.length - 1)))];
    if (baseline > 0 && m > STRAGGLER_FACTOR * baseline && m - baseline >= STRAGGLER_MIN_GAP && m > upper) {
      found.push({ worker: wid, factor: m / baseline, median: m, others: baseline });
    }
  }
  return found;
}

/** Ascending `all` less the ascending `some` (a sub-multiset of it). */
/** @param {Float64Array} all @param {Float64Array} some */
function without(all, some) {
  const out = new Float64Array(all.length - some.length);
  let j = 0, k = 0;
  for (let i = 0; i < all.length; i++) {
    if (j < some.length && all[i] === some[j]) j += 1;
    else out[k++] = all[i];
  }
  return out;
}

/** statistics.median of an ascending array. @param {Float64Array} s */
function sortedMedian(s) {
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/** Per batch, where the training loop's time went: waiting for data, host-to-device, compute. */
/** @param {LoaderState} s */
function consumerSplit(s) {
  if (!s.steps) return null;
  const per = 1 / s.steps;
  return {
    device: s.step_device, wait: s.consumer_wait / Math.max(s.batches, 1), step: meanStep(s), h2d: s.step_h2d * per,
    compute: s.step_compute * per, h2d_pageable: s.step_h2d_pageable * per || null,
  };
}

/** The loop's time inside this loader's epochs: its wait here, in other loaders' next(), and its step. @param {LoaderState} s */
function epochWall(s) {
  return s.consumer_wait + s.other_wait + s.step_total;
}

/** The share of the epochs' time the training loop waited for data (summary().input_bound; the page's counter). */
/** @param {LoaderState} s */
export function inputBound(s) {
  const wall = epochWall(s);
  return wall > 0 ? s.consumer_wait / wall : 0;
}

/** The loop's own time per batch, inside no loader's next(): a mean (state.py _mean_step). @param {LoaderState} s */
function meanStep(s) {
  return s.step_gaps.length ? s.step_total / s.step_gaps.length : null;
}

/** The one throughput every view shows: batches over the time inside this loader's epochs (state.py summary). @param {LoaderState} s */
export function batchesPerS(s) {
  const wall = epochWall(s);
  return wall > 0 ? s.batches / wall : 0;
}

/** The statistics the diagnosis (docs/DESIGN.md) speaks of, as plain numbers (state.py summary()). */
/** @param {LoaderState} s @param {{workers?: boolean}} [options] */
export function summary(s, { workers = true } = {}) {
  const wall = (s.last_yield_t || s.t) - (s.first_t || 0);
  const inEpochs = epochWall(s);
  const steadyWait = s.consumer_wait - s.startup_wait, steadyWall = inEpochs - s.startup_wait;
  const fetches = [];
  for (const w of s.workers.values()) for (const dt of w.fetch_times) fetches.push(dt);
  const nw = s.config.num_workers || 0;
  const meanTask = fetches.length ? mean(fetches) : 0;
  return {
    status: s.status,
    batches: s.batches,
    epochs: s.epochs_done,
    wall, // from the loader's first event to its last batch: set-up and gaps included
    batches_per_s: batchesPerS(s),
    consumer_wait: s.consumer_wait,
    step_time: meanStep(s), // null before an epoch's 2nd batch
    step_total: s.step_total,
    other_wait: s.other_wait,
    epoch_wall: inEpochs,
    // from the first next() to the last yield, the time outside this loader's epochs, and how much of it
    // the loop spent inside other loaders' next()
    between_epochs: Math.max(0, (s.last_yield_t || s.t) - (s.first_next_t ?? s.t) - inEpochs),
    between_others: s.between_others,
    input_bound: inputBound(s),
    other_share: inEpochs > 0 ? s.other_wait / inEpochs : 0,
    // the same without each epoch's first wait (workers starting, the pipeline filling)
    input_bound_steady: steadyWall > 0 ? steadyWait / steadyWall : 0,
    startup_wait: s.startup_wait,
    startup_share: inEpochs > 0 ? s.startup_wait / inEpochs : 0,
    worker_starts: s.worker_starts,
    peeks: s.peeks,
    peek_batches: s.peek_batches,
    peek_wait: s.peek_wait,
    peek_worker_starts: s.peek_starts,
    out_of_order: s.out_of_order,
    buffer_high: s.buffer_high,
    outstanding_high: s.outstanding_high,
    window: s.window,
    head_of_line_wait: s.head_of_line_wait,
    skipped: s.skipped,
    errors: s.errors.length,
    fetched_bytes: s.fetched_bytes,
    pickled_bytes: s.pickled_bytes,
    pickle_s: s.batch_samples.length ? mean(s.batch_samples.map((b) => b.pickle_s ?? 0)) : 0,
    consumer_split: consumerSplit(s),
    pin_bytes: s.pin_bytes,
    pin_mb_per_s: s.pin_time > 0 ? s.pin_bytes / s.pin_time / 1e6 : null,
    pin_wait_share: s.consumer_wait > 0 ? s.pin_wait / s.consumer_wait : 0,
    mean_task: meanTask,
    median_task: fetches.length ? median(fetches) : 0,
    ideal_batches_per_s: meanTask > 0 ? Math.max(nw, 1) / meanTask : null,
    workers: workers ? workerStats(s) : [],
    stragglers: workers ? stragglers(s) : [],
    violations: [...s.violations],
    memory: memorySummary(s.memory),
  };
}

/** The innermost frame of the user's own code: where a stuck fetch really is. */
/** @template {{user?: boolean}} F @param {ReadonlyArray<F>|null|undefined} stack @returns {F|null} */
export function userFrame(stack) {
  const frames = stack || [];
  for (let i = frames.length - 1; i >= 0; i--) if (frames[i] && frames[i].user) return frames[i];
  return frames.length ? frames[frames.length - 1] : null;
}
