// Playback of one run: every loaded event, the state after all of them (`full`), and the state at
// any other point (`state`, at `cursor` = number of events applied). The state at event i is the
// reducer run from the start up to i; to keep that cheap for long traces, a snapshot of `full` is
// taken every `every` events as they are loaded, and a seek restores the nearest snapshot before i
// and re-applies at most `every` events. Pure: no DOM, no clock.

import { applyRow } from './fastpath.js';
import { LoaderState } from './reducer.js';
import { EventTable } from './event-table.js';

/** @typedef {import('./types.js').LoaderEvent} LoaderEvent */

// Lists that only ever grow during a run (never trimmed, some up to a cap): a snapshot keeps their length,
// a restore slices `full`'s. (yield_order is trimmed to its latest entries: it is copied instead, as
// two typed arrays, so that its pairs are not kept alive by a snapshot: on a 10M-event trace they were
// 1.4M objects for the collector to trace through a third of the page's heap.)
const GROWING = new Set(['errors', 'notes', 'violations', 'batch_samples', 'step_gaps']);
// Collections copied whole; every other field of LoaderState is a value (or an object the reducer
// replaces rather than mutates: config, meta, the latest stuck/timeout events) and is shared.
const COPIED = new Set(['tasks', 'workers', 'result_queue', 'parked', 'yield_order']);

/**
 * What a snapshot holds: the state's plain fields by name (`values`), the lengths of its growing
 * lists (`lens`), copies of its tasks and workers (a worker's fetch times as their count), queues
 * and yield order (its epochs and its tasks, side by side).
 * @typedef {{values: Record<string, unknown>, lens: Record<string, number>, tasks: import('./reducer.js').Task[],
 *   workers: Array<Omit<import('./reducer.js').Worker, 'fetch_times'> & {fetch_times: null, fetchN: number}>,
 *   result_queue: number[], parked: number[], yieldEpochs: Float64Array, yieldTasks: Float64Array}} Snapshot
 */

/**
 * The state's fields by name: snapshot() and restore() walk them all, so a field the reducer adds
 * is kept without a change here.
 * @param {LoaderState} s @returns {Record<string, unknown>}
 */
const fields = (s) => /** @type {Record<string, unknown>} */ (/** @type {unknown} */ (s));

/**
 * A copy of what `s` holds at this moment, sharing what never changes once written.
 * @param {LoaderState} s
 * @returns {Snapshot}
 */
export function snapshot(s) {
  const order = s.yield_order;
  /** @type {Snapshot} */
  const snap = {
    values: {},
    lens: {},
    workers: [],
    tasks: [],
    result_queue: [...s.result_queue],
    parked: [...s.parked],
    yieldEpochs: new Float64Array(order.length),
    yieldTasks: new Float64Array(order.length),
  };
  for (let k = 0; k < order.length; k++) [snap.yieldEpochs[k], snap.yieldTasks[k]] = order[k];
  const byName = fields(s);
  for (const [k, v] of Object.entries(byName)) {
    if (GROWING.has(k)) snap.lens[k] = /** @type {unknown[]} */ (v).length;
    else if (COPIED.has(k)) continue;
    else snap.values[k] = Array.isArray(v) ? [...v] : v; // an unknown list: copied, to be safe
  }
  for (const t of s.tasks.values()) snap.tasks.push({ ...t });
  for (const w of s.workers.values())
    snap.workers.push({ ...w, queue: [...w.queue], fetch_times: null, fetchN: w.fetch_times.length });
  return snap;
}

/**
 * A live LoaderState equal to the one `snap` was taken of; `full` is the same run further on.
 * @param {Snapshot} snap @param {LoaderState} full
 */
export function restore(snap, full) {
  const s = new LoaderState();
  const into = fields(s),
    from = fields(full);
  for (const [k, v] of Object.entries(snap.values)) into[k] = Array.isArray(v) ? [...v] : v;
  for (const [k, n] of Object.entries(snap.lens)) into[k] = /** @type {unknown[]} */ (from[k]).slice(0, n);
  for (const t of snap.tasks) s.tasks.set(t.idx, { ...t });
  for (const w of snap.workers) {
    const { fetchN, ...rest } = w;
    const later = full.workers.get(w.id);
    s.workers.set(w.id, { ...rest, queue: [...w.queue], fetch_times: later ? later.fetch_times.slice(0, fetchN) : [] });
  }
  s.result_queue = [...snap.result_queue];
  s.parked = [...snap.parked];
  s.yield_order = Array.from(
    snap.yieldEpochs,
    (epoch, k) => /** @type {[number, number]} */ ([epoch, snap.yieldTasks[k]]),
  );
  return s;
}

export class Player {
  /** @param {{every?:number}} [o] */
  constructor({ every = 4096 } = {}) {
    this.every = every;
    this.table = new EventTable();
    this.full = new LoaderState();
    /** @type {Snapshot[]} snapshots[k] = state before event k·every */
    this.snapshots = [];
    /** @type {LoaderState|null} the state at cursor when it is behind the end */
    this.view = null;
    this.cursor = 0;
    this.following = true; // the cursor stays at the end as events come
    this.seeks = 0;
    this.replayed = 0; // events re-applied by seeks (for the perf readout)
    // The run's clock never runs backwards: a worker's events reach the stream after the main process's
    // later ones, so a row's own t may be earlier than the row before. The clock at row i is the latest t
    // of rows 0..i: `peaks[k]` holds it before row k·every, `latest` after the last row applied.
    /** @type {number[]} */
    this.peaks = [];
    this.latest = -Infinity;
  }

  get length() {
    return this.table.length;
  }

  /** The state at the cursor. */
  get state() {
    return this.view ?? this.full;
  }

  /** Load one event (in seq order). @param {LoaderEvent} e */
  append(e) {
    this.table.push(e);
    this.applyRow(this.table.length - 1, e);
  }

  /**
   * Apply the event already stored at row n (rows are applied in order, each once: a batch can be
   * stored whole first, see EventTable.append). Returns the event.
   * @param {number} n @param {LoaderEvent} [e]
   */
  applyRow(n, e = this.table.get(n)) {
    this.before(n);
    this.full.apply(e);
    if (this.following) this.cursor = n + 1;
    return e;
  }

  /**
   * Apply the row already stored at n as applyRow does, reading a packed row from the table's
   * columns (fastpath.js applyRow): no event is built.
   * @param {number} n
   */
  applyStored(n) {
    this.before(n);
    applyRow(this.full, this.table, n);
    if (this.following) this.cursor = n + 1;
  }

  /** What comes before applying row n: the parked cursor's own state, the snapshot. @param {number} n */
  before(n) {
    // a cursor parked at the end (not following) must not move with `full`: give it its own state
    if (!this.following && this.view === null) this.view = restore(snapshot(this.full), this.full);
    if (n % this.every === 0) {
      this.snapshots[n / this.every] = snapshot(this.full);
      this.peaks[n / this.every] = this.latest;
    }
    const t = this.table.t[n];
    if (t > this.latest) this.latest = t;
  }

  /** The event at row i (an object). @param {number} i */
  event(i) {
    return this.table.get(i);
  }

  /**
   * Move the cursor so that events [0, i) are applied.
   * @param {number} i
   * @returns {number} the new cursor
   */
  seek(i) {
    const n = this.table.length;
    i = Math.max(0, Math.min(n, Math.round(i)));
    this.seeks += 1;
    if (i === n) {
      this.view = null;
      this.cursor = n;
      return n;
    }
    this.following = false;
    let state = this.view;
    let at = this.cursor;
    if (state === null) {
      at = n;
    }
    if (state === null || i < at || i - at > this.every) {
      const k = Math.floor(i / this.every);
      state = restore(this.snapshots[k], this.full);
      at = k * this.every;
    }
    this.replayed += i - at;
    for (; at < i; at++) applyRow(state, this.table, at);
    this.view = state;
    this.cursor = i;
    return i;
  }

  /** Follow the end again (live). */
  follow() {
    this.following = true;
    this.seek(this.table.length);
  }

  /**
   * Row of the next event at or after `from` whose kind is `kind` (-1 if none).
   * @param {number} from
   * @param {string} kind
   */
  findNext(from, kind) {
    const t = this.table;
    for (let i = Math.max(0, from); i < t.length; i++) if (t.kindOf(i) === kind) return i;
    return -1;
  }

  /**
   * Row of the last event before `from` whose kind is `kind` (-1 if none).
   * @param {number} from
   * @param {string} kind
   */
  findPrev(from, kind) {
    const t = this.table;
    for (let i = Math.min(from, t.length) - 1; i >= 0; i--) if (t.kindOf(i) === kind) return i;
    return -1;
  }

  /** One event forward (+1) or back (-1). @param {number} dir */
  stepEvent(dir) {
    return this.seek(this.cursor + (dir < 0 ? -1 : 1));
  }

  /**
   * One batch forward: up to and including the next yield. Back: to just after the yield before
   * the last one applied (so the batch before is the last one handed out).
   * @param {number} dir
   */
  stepBatch(dir) {
    if (dir >= 0) {
      const next = this.findNext(this.cursor, 'yield');
      return this.seek(next < 0 ? this.table.length : next + 1);
    }
    const last = this.findPrev(this.cursor, 'yield');
    const before = last < 0 ? -1 : this.findPrev(last, 'yield');
    return this.seek(before < 0 ? 0 : before + 1);
  }

  /** The run's clock after rows [0, n): the latest t among them (never earlier than after n - 1). @param {number} n */
  clockAt(n) {
    if (n <= 0) return this.table.length ? this.table.t[0] : 0;
    const k = Math.floor((n - 1) / this.every);
    let latest = this.peaks[k] ?? -Infinity;
    for (let i = k * this.every; i < n; i++) if (this.table.t[i] > latest) latest = this.table.t[i];
    return latest;
  }

  /** Run time of the cursor: the run's clock after the applied events. */
  get time() {
    return this.clockAt(this.cursor);
  }

  /** Cursor position after every event the run's clock reached by `time`. @param {number} time */
  rowAt(time) {
    let k = 0; // the last block whose clock at its start is at most `time`
    for (let lo = 0, hi = this.peaks.length - 1; lo <= hi; ) {
      const mid = (lo + hi) >> 1;
      if ((this.peaks[mid] ?? -Infinity) <= time) {
        k = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    let latest = this.peaks[k] ?? -Infinity;
    const n = this.table.length;
    for (let i = k * this.every; i < n; i++) {
      if (this.table.t[i] > latest) latest = this.table.t[i];
      if (latest > time) return i;
    }
    return n;
  }
}
