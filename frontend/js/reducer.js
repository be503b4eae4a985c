// The loader-state model: events in, what the DataLoader looks like out.
// A line-by-line mirror of backend/loaderscope/state.py (same field names, same rules), so the
// page, the CLI and the API agree. Pure: no DOM, no I/O, no clock. Keep the two in step.

export const Where = Object.freeze({
  INDEX_QUEUE: 'index_queue', // dispatched, waiting in its worker's index queue
  FETCHING: 'fetching', // the worker is running __getitem__/collate for it
  RESULT_QUEUE: 'result_queue', // fetched, on the shared result queue (or pin thread)
  BUFFER: 'buffer', // arrived out of order, parked in _task_info
  YIELDED: 'yielded',
  SKIPPED: 'skipped',
  FAILED: 'failed',
});

export const WorkerStatus = Object.freeze({
  STARTING: 'starting',
  IDLE: 'idle',
  FETCHING: 'fetching',
  STUCK: 'stuck',
  EXITED: 'exited',
  DIED: 'died',
});

/**
 * @typedef {{idx:number, worker:number, indices:any[]|null, n:number, dispatched:number, where:string,
 *   fetch_start:number|null, fetch_end:number|null, arrived:number|null, nbytes:number|null, epoch:number}} Task
 * @typedef {{id:number, pid:number|null, status:string, current:number|null, queue:number[], fetch_times:number[],
 *   busy:number, nbytes:number, exitcode:number|null, signal:string|null, stuck:any|null}} Worker
 */

/** @returns {Task} */
function newTask(idx, worker, indices, n, dispatched, epoch) {
  return { idx, worker, indices, n, dispatched, where: Where.INDEX_QUEUE, fetch_start: null, fetch_end: null, arrived: null, nbytes: null, epoch };
}

/** @returns {Worker} */
function newWorker(id) {
  return { id, pid: null, status: WorkerStatus.STARTING, current: null, queue: [], fetch_times: [], busy: 0, nbytes: 0, exitcode: null, signal: null, stuck: null };
}

function remove(list, value) {
  const i = list.indexOf(value);
  if (i >= 0) list.splice(i, 1);
}

/** Cursors, queues, reorder buffer and workers of the current epoch, plus run-wide statistics. */
export class LoaderState {
  constructor() {
    this.run = '';
    this.mode = '';
    /** @type {Record<string, any>} */
    this.config = {};
    this.scenario = '';
    this.status = 'pending';
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
    this.head_of_line_wait = 0;
    this.skipped = 0;
    /** @type {number|null} */
    this.first_t = null;
    /** @type {number|null} */
    this.last_yield_t = null;
    /** @type {Array<[number, number]>} (epoch, idx) as released */
    this.yield_order = [];
    /** @type {any[]} */
    this.errors = [];
    /** @type {any[]} stuck, died, timeout, unknown kinds */
    this.notes = [];
    /** @type {string[]} protocol invariants broken by the stream */
    this.violations = [];
  }

  /** Most tasks torch keeps in flight: prefetch_factor × num_workers (1 in-process). */
  get window() {
    const workers = this.config.num_workers || 0;
    return workers ? (this.config.prefetch_factor || 2) * workers : 1;
  }

  /** Advance the state by one event (events must come in seq order). */
  apply(event) {
    this.seq = event.seq ?? this.seq + 1;
    this.t = event.t ?? this.t;
    if (this.first_t === null) this.first_t = this.t;
    const handler = HANDLERS[event.kind];
    if (handler === undefined) this.notes.push(event); // unknown kinds are shown, never dropped
    else handler(this, event);
  }

  /** @returns {Worker} */
  worker(wid) {
    let w = this.workers.get(wid);
    if (w === undefined) {
      w = newWorker(wid);
      this.workers.set(wid, w);
    }
    return w;
  }

  /** @returns {Task|undefined} */
  task(event) {
    const task = this.tasks.get(event.idx);
    if (task === undefined) this.violations.push(`seq ${this.seq}: ${event.kind} for unknown task ${event.idx}`);
    return task;
  }

  /** A task leaves the pipeline (yielded or skipped); rcvd_idx moves past released tasks. */
  release(idx) {
    this.tasks.delete(idx);
    remove(this.buffer, idx);
    while (this.rcvd_idx < this.send_idx && !this.tasks.has(this.rcvd_idx)) this.rcvd_idx += 1;
  }
}

// --- handlers: one per kind ------------------------------------------------------------------------

function runStart(s, e) {
  s.run = e.run ?? s.run;
  s.mode = e.mode;
  s.scenario = e.scenario ?? '';
  s.config = { ...e.config };
  s.status = 'running';
  const n = s.config.num_workers || 1;
  for (let wid = 0; wid < n; wid++) s.worker(wid);
}

function runEnd(s, e) {
  s.status = e.reason;
}

function epochStart(s, e) {
  s.epoch = e.epoch;
  s.send_idx = s.rcvd_idx = s.outstanding = 0;
  s.tasks.clear();
  s.result_queue.length = 0;
  s.buffer.length = 0;
  for (const w of s.workers.values()) {
    w.queue.length = 0;
    w.current = null;
    if (w.status === WorkerStatus.FETCHING || w.status === WorkerStatus.STUCK) w.status = WorkerStatus.IDLE;
  }
}

function epochEnd(s) {
  s.epochs_done += 1;
}

function workerStart(s, e) {
  const w = s.worker(e.worker);
  w.pid = e.pid;
  w.status = WorkerStatus.IDLE;
}

function workerExit(s, e) {
  const w = s.worker(e.worker);
  w.exitcode = e.exitcode ?? null;
  if (w.status !== WorkerStatus.DIED) w.status = WorkerStatus.EXITED;
}

function dispatch(s, e) {
  const { idx, worker: wid } = e;
  if (idx !== s.send_idx) s.violations.push(`seq ${s.seq}: dispatch of task ${idx} but send_idx is ${s.send_idx}`);
  const indices = e.indices ?? null;
  s.tasks.set(idx, newTask(idx, wid, indices, e.n ?? (indices ? indices.length : 0), s.t, s.epoch));
  s.worker(wid).queue.push(idx);
  s.send_idx = idx + 1;
  s.outstanding += 1;
  s.outstanding_high = Math.max(s.outstanding_high, s.outstanding);
  if (s.outstanding > s.window) s.violations.push(`seq ${s.seq}: ${s.outstanding} tasks outstanding, window is ${s.window}`);
}

function fetchStart(s, e) {
  const task = s.tasks.get(e.idx);
  const w = s.worker(e.worker);
  remove(w.queue, e.idx);
  w.current = e.idx;
  w.status = WorkerStatus.FETCHING;
  w.stuck = null;
  if (task !== undefined) {
    task.where = Where.FETCHING;
    task.fetch_start = s.t;
  }
}

function fetchEnd(s, e) {
  const task = s.tasks.get(e.idx);
  const w = s.worker(e.worker);
  let dt = e.dt ?? null;
  if (dt === null && task !== undefined && task.fetch_start !== null) dt = s.t - task.fetch_start;
  if (dt !== null) {
    w.fetch_times.push(dt);
    w.busy += dt;
  }
  w.nbytes += e.nbytes || 0;
  if (w.current === e.idx) {
    w.current = null;
    w.stuck = null;
    if (w.status === WorkerStatus.FETCHING || w.status === WorkerStatus.STUCK) w.status = WorkerStatus.IDLE;
  }
  if (task !== undefined && (task.where === Where.INDEX_QUEUE || task.where === Where.FETCHING)) {
    task.where = Where.RESULT_QUEUE;
    task.fetch_end = s.t;
    task.nbytes = e.nbytes ?? null;
    s.result_queue.push(task.idx);
  }
}

function leaveResultQueue(s, task) {
  remove(s.result_queue, task.idx);
  const w = s.workers.get(task.worker);
  if (w !== undefined) remove(w.queue, task.idx); // arrival seen before the worker's own events
}

function arrive(s, e) {
  const task = s.task(e);
  if (task === undefined) return;
  leaveResultQueue(s, task);
  task.arrived = s.t;
  s.outstanding -= 1;
}

function buffer(s, e) {
  const task = s.task(e);
  if (task === undefined) return;
  task.where = Where.BUFFER;
  s.buffer.push(task.idx);
  s.out_of_order += 1;
  s.buffer_high = Math.max(s.buffer_high, s.buffer.length);
}

function yield_(s, e) {
  const { idx, wait } = e;
  const task = s.tasks.get(idx);
  if (task === undefined || task.arrived === null) s.violations.push(`seq ${s.seq}: yield of task ${idx} that has not arrived`);
  const inOrder = s.config.in_order ?? true;
  if (inOrder && idx !== s.rcvd_idx) s.violations.push(`seq ${s.seq}: yield of task ${idx} while rcvd_idx is ${s.rcvd_idx}`);
  // Waiting for a late head-of-line task while later results sat ready is the reorder cost.
  if (wait > 0 && !e.from_buffer && s.buffer.length) s.head_of_line_wait += wait;
  s.consumer_wait += wait;
  s.batches += 1;
  s.last_yield_t = s.t;
  s.yield_order.push([s.epoch, idx]);
  s.release(idx);
}

function skip(s, e) {
  const task = s.tasks.get(e.idx);
  if (task !== undefined && task.arrived === null) {
    s.outstanding -= 1;
    leaveResultQueue(s, task);
  }
  s.skipped += 1;
  s.release(e.idx);
}

function workerStuck(s, e) {
  const w = s.worker(e.worker);
  w.status = WorkerStatus.STUCK;
  w.stuck = e; // the page shows the latest stack (issue 4); state.py keeps it in notes only
  s.notes.push(e);
}

function workerDied(s, e) {
  const w = s.worker(e.worker);
  w.status = WorkerStatus.DIED;
  w.exitcode = e.exitcode ?? null;
  w.signal = e.signal ?? null;
  s.notes.push(e);
}

function error(s, e) {
  s.errors.push(e);
  const task = s.tasks.get(e.idx ?? -1);
  if (task !== undefined) task.where = Where.FAILED;
}

function note(s, e) {
  s.notes.push(e);
}

/** Pin events are shown on the timeline; the task stays on the result queue until it arrives. */
function pin() {}

/** @type {Record<string, (s: LoaderState, e: any) => void>} */
const HANDLERS = {
  run_start: runStart,
  run_end: runEnd,
  epoch_start: epochStart,
  epoch_end: epochEnd,
  worker_start: workerStart,
  worker_exit: workerExit,
  dispatch,
  fetch_start: fetchStart,
  fetch_end: fetchEnd,
  arrive,
  buffer,
  yield: yield_,
  skip,
  worker_stuck: workerStuck,
  worker_died: workerDied,
  error,
  timeout: note,
  consumer_stuck: note,
  pin_start: pin,
  pin_end: pin,
};

/** The state after every event up to and including untilSeq (all of them by default). */
export function reduce(events, untilSeq = null) {
  const state = new LoaderState();
  for (const e of events) {
    if (untilSeq !== null && (e.seq ?? 0) > untilSeq) break;
    state.apply(e);
  }
  return state;
}

// --- statistics (state.py summary), for the counters -------------------------------------------

/** Consumer wall time, wait share and rate, as state.py's summary() computes them. */
export function summary(s) {
  const wall = (s.last_yield_t ?? s.t) - (s.first_t ?? 0);
  return {
    status: s.status,
    batches: s.batches,
    epochs: s.epochs_done,
    wall,
    batches_per_s: wall > 0 ? s.batches / wall : 0,
    consumer_wait: s.consumer_wait,
    input_bound: wall > 0 ? s.consumer_wait / wall : 0,
    out_of_order: s.out_of_order,
    buffer_high: s.buffer_high,
    outstanding_high: s.outstanding_high,
    window: s.window,
    head_of_line_wait: s.head_of_line_wait,
    skipped: s.skipped,
    errors: s.errors.length,
    violations: [...s.violations],
  };
}
