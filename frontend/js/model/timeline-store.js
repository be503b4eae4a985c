// Spans for the timeline, per rank: each worker's fetches, the pin thread's, the training loop's
// waits, the fetches still open and the findings' marks, built from the events (or a table's packed
// rows) as they are applied. The spans' columns and queries are span-column.js; the window math
// time-window.js. Pure.

import { EventTable } from './event-table.js';
import { isPeek } from './reducer.js';
import { SpanColumn } from './span-column.js';

// the packed rows' fields the spans need (EventTable.field: what the event would carry)
const WORKER = EventTable.field('fetch_end', 'worker');
const FETCH_DT = EventTable.field('fetch_end', 'dt');
const PIN_DT = EventTable.field('pin_end', 'dt');

/**
 * A Map for integer keys that come and go in order (tasks in flight by index, workers fetching):
 * a slot per key modulo SLOTS, and a Map for a key whose slot another live key holds. A Map alone
 * gives its table back each time it empties and takes a new one as it fills: with a task or two in
 * flight that was a new table per task, a third of the garbage of applying a big trace.
 * @template V
 */
export class SlotMap {
  static SLOTS = 4096;

  constructor() {
    this.keys = new Float64Array(SlotMap.SLOTS).fill(NaN); // NaN: a free slot
    /** @type {Array<V|undefined>} */
    this.values = new Array(SlotMap.SLOTS).fill(undefined);
    /** @type {Map<number, V>} */
    this.more = new Map();
    this.slotted = 0;
  }

  get size() {
    return this.slotted + this.more.size;
  }

  /** @param {number} key */
  get(key) {
    const slot = key & (SlotMap.SLOTS - 1);
    if (this.keys[slot] === key) return this.values[slot];
    return this.more.size ? this.more.get(key) : undefined;
  }

  /** @param {number} key @param {V} value */
  set(key, value) {
    const slot = key & (SlotMap.SLOTS - 1);
    const held = this.keys[slot];
    if (held === key || Number.isNaN(held)) {
      if (held !== key) this.slotted += 1;
      this.keys[slot] = key;
      this.values[slot] = value;
      if (this.more.size) this.more.delete(key);
    } else this.more.set(key, value);
  }

  /** @param {number} key */
  delete(key) {
    const slot = key & (SlotMap.SLOTS - 1);
    if (this.keys[slot] === key) {
      this.keys[slot] = NaN;
      this.values[slot] = undefined;
      this.slotted -= 1;
    }
    if (this.more.size) this.more.delete(key);
  }

  clear() {
    this.keys.fill(NaN);
    this.values.fill(undefined);
    this.slotted = 0;
    this.more.clear();
  }
}

/**
 * A fetch a finding was about: stuck (its start, the first stuck note, its end once it ended), or
 * held by a worker that died (ended at the death).
 * @typedef {{kind: 'stuck'|'died', worker: number, idx: number, epoch: number, t: number, start: number,
 *   end: number|null}} Alarm
 */

/** Everything the timeline draws, fed by the same events as the reducer. */
export class TimelineStore {
  constructor() {
    /** @type {Map<number, SpanColumn>} fetch spans per worker */
    this.workers = new Map();
    /** consumer: one span per yield, from when it asked (t - wait) to when it got the batch */
    this.consumer = new SpanColumn();
    /** the pin-memory thread: one span per batch, pin_start → pin_end */
    this.pin = new SpanColumn();
    /** @type {SlotMap<number>} pin_start times of batches still being pinned (this epoch) */
    this.pinOpen = new SlotMap();
    /** @type {import('./types.js').LoaderConfig} run_start's config (whether pinning was asked for) */
    this.config = {};
    /** @type {{start:number, idx:number}|null} the training loop is stuck inside next() since start */
    this.consumerOpen = null;
    /**
     * @type {SlotMap<{start:number, idx:number, epoch:number, dref:number, stuck?:boolean}>} fetches still running, per
     *   worker
     */
    this.open = new SlotMap();
    /** @type {Array<{t:number, epoch:number, peek?:boolean}>} epoch starts; a peek's, once it ended as one */
    this.epochs = [];
    /** @type {Array<{t:number, kind:string, worker?:number, text:string}>} stuck / died / error / timeout markers */
    this.marks = [];
    /**
     * Fetches a finding was about (stuck, or held by a worker that died): kept after the fetch, the
     * epoch or the run ended, so that the timeline still marks them where they happened.
     * @type {Alarm[]}
     */
    this.alarms = [];
    this.epoch = 0;
    this.tmin = Infinity;
    this.tmax = 0;
    // the loader's first event after run_start: a recorded run's clock starts when the loader was
    // built, often seconds before its first iter() (a Trainer builds it, then sets up for 8.7 s)
    this.tfirst = Infinity;
    /** @type {SlotMap<number>} dispatch event row of each task of this epoch, until its fetch ends */
    this.dispatchRow = new SlotMap();
    /** @type {import('./event-table.js').EventTable|null} where span refs point (hover text) */
    this.table = null;
    this.version = 0; // bumps whenever something visible changes
  }

  /** @param {number} worker */
  row(worker) {
    let col = this.workers.get(worker);
    if (col === undefined) {
      col = new SpanColumn();
      this.workers.set(worker, col);
    }
    return col;
  }

  /** @param {import('./types.js').LoaderEvent} event an event @param {number} [row] its row in `table` */
  apply(event, row = -1) {
    // known kinds only reach the switch's cases: their required fields were checked (types.js KnownEvent)
    const e = /** @type {import('./types.js').KnownEvent} */ (event);
    const t = e.t;
    if (typeof t === 'number') {
      if (t < this.tmin) this.tmin = t;
      if (t > this.tmax) this.tmax = t;
      if (t < this.tfirst && e.kind !== 'run_start') this.tfirst = t;
    }
    switch (e.kind) {
      case 'run_start':
        this.config = e.config ?? {};
        for (let w = 0; w < (e.config?.num_workers || 1); w++) this.row(w);
        break;
      case 'epoch_start':
        this.epoch = e.epoch;
        this.epochs.push({ t, epoch: e.epoch });
        this.dispatchRow.clear();
        for (const a of this.alarms) if (a.end === null) a.end = t; // a stuck fetch the epoch left
        this.open.clear();
        this.consumerOpen = null;
        this.pinOpen.clear();
        break;
      case 'dispatch':
        this.dispatchRow.set(e.idx, row);
        return;
      case 'fetch_start':
        this.fetchStart(t, e.worker, e.idx);
        break;
      case 'fetch_end':
        this.fetchEnd(t, e.worker, e.idx, e.dt, row);
        break;
      case 'pin_start':
        this.pinOpen.set(e.idx, t);
        return;
      case 'pin_end':
        this.pinEnd(t, e.idx, e.dt, row);
        break;
      case 'yield':
        this.yielded(t, e.idx, e.wait, row);
        break;
      case 'epoch_end': {
        // an iterator left after a batch or two is a peek, not an epoch: its line says so (reducer isPeek)
        const last = this.epochs[this.epochs.length - 1];
        if (last?.epoch === e.epoch && isPeek(e, this.config.batches_per_epoch)) last.peek = true;
        break;
      }
      case 'worker_stuck':
        {
          const open = this.open.get(e.worker);
          if (open?.idx === e.idx) open.stuck = true;
          this.alarm('stuck', e.worker, e.idx, t, open?.idx === e.idx ? open.start : t - (+e.elapsed || 0));
        }
        this.marks.push({
          t,
          kind: e.kind,
          worker: e.worker,
          text: `worker ${e.worker} stuck on task ${e.idx} for ${(+e.elapsed).toFixed(1)} s`,
        });
        break;
      case 'worker_died':
        this.marks.push({
          t,
          kind: e.kind,
          worker: e.worker,
          text: `worker ${e.worker} died (${e.signal || `exit code ${e.exitcode}`})`,
        });
        {
          const open = this.open.get(e.worker);
          const idx = e.idx ?? open?.idx ?? null;
          if (idx !== null)
            this.alarm('died', e.worker, idx, t, open?.idx === idx ? open.start : t - (+(e.elapsed ?? 0) || 0), t);
        }
        this.open.delete(e.worker);
        break;
      case 'consumer_stuck':
        this.consumerOpen = { start: t - (+e.elapsed || 0), idx: e.waiting_for ?? -1 };
        this.marks.push({
          t,
          kind: e.kind,
          text: `the training loop waited ${(+e.elapsed).toFixed(1)} s for task ${e.waiting_for}`,
        });
        break;
      case 'error':
        this.marks.push({ t, kind: e.kind, worker: e.worker ?? undefined, text: `${e.type}: ${e.message}` });
        break;
      case 'timeout':
        this.marks.push({ t, kind: e.kind, text: `timeout after ${e.seconds} s` });
        break;
      default:
        return;
    }
    this.version += 1;
  }

  /**
   * Apply row `row` of `table` as apply(table.get(row), row) does, reading a packed row (a frequent
   * kind) straight from the columns: a big trace's spans with no event built.
   * @param {import('./event-table.js').EventTable} table @param {number} row
   */
  applyRow(table, row) {
    if (table.isObject(row)) return this.apply(table.get(row), row);
    const t = table.t[row];
    if (t < this.tmin) this.tmin = t;
    if (t > this.tmax) this.tmax = t;
    if (t < this.tfirst) this.tfirst = t; // a packed row is never run_start
    const idx = table.idx[row];
    switch (table.kindOf(row)) {
      case 'dispatch':
        this.dispatchRow.set(idx, row);
        return;
      case 'fetch_start':
        this.fetchStart(t, WORKER(table, row), idx);
        break;
      case 'fetch_end':
        this.fetchEnd(t, WORKER(table, row), idx, FETCH_DT(table, row), row);
        break;
      case 'pin_start':
        this.pinOpen.set(idx, t);
        return;
      case 'pin_end':
        this.pinEnd(t, idx, PIN_DT(table, row), row);
        break;
      case 'yield':
        this.yielded(t, idx, table.a[row], row);
        break;
      default:
        return;
    }
    this.version += 1;
  }

  /** @param {number} t @param {number} worker @param {number} idx */
  fetchStart(t, worker, idx) {
    this.row(worker);
    this.open.set(worker, { start: t, idx, epoch: this.epoch, dref: this.dispatchRow.get(idx) ?? -1 });
  }

  /**
   * A finding about a worker's fetch: a stuck fetch (noted again every few seconds: one alarm), or
   * the task a dead worker held.
   * @param {'stuck'|'died'} kind @param {number} worker @param {number} idx @param {number} t the finding's time
   * @param {number} start the fetch's start @param {number|null} [end] null while it runs
   */
  alarm(kind, worker, idx, t, start, end = null) {
    const last = this.alarms.findLast((a) => a.worker === worker && a.idx === idx && a.epoch === this.epoch);
    if (last && last.end === null) {
      if (kind === 'died') Object.assign(last, { kind, t, end });
      return;
    }
    this.alarms.push({ kind, worker, idx, epoch: this.epoch, t, start, end });
  }

  /**
   * @param {number} t
   * @param {number} worker
   * @param {number} idx
   * @param {number|null|undefined} dt
   * @param {number} row
   */
  fetchEnd(t, worker, idx, dt, row) {
    const o = this.open.get(worker);
    const mine = o !== undefined && o.idx === idx;
    if (o?.stuck && mine) {
      const a = this.alarms.findLast((x) => x.worker === worker && x.idx === idx && x.end === null);
      if (a) a.end = t;
    }
    const start = mine ? o.start : t - (dt ?? 0);
    this.row(worker).push(start, t, idx, this.epoch, row, this.dispatchRow.get(idx) ?? -1);
    this.dispatchRow.delete(idx);
    if (mine) this.open.delete(worker);
  }

  /** @param {number} t @param {number} idx @param {number|null|undefined} dt @param {number} row */
  pinEnd(t, idx, dt, row) {
    const start = this.pinOpen.get(idx) ?? t - (dt ?? 0);
    this.pinOpen.delete(idx);
    this.pin.push(start, t, idx, this.epoch, row);
  }

  /** @param {number} t @param {number} idx @param {number} wait @param {number} row */
  yielded(t, idx, wait, row) {
    this.consumer.push(t - (wait || 0), t, idx, this.epoch, row);
    this.consumerOpen = null;
  }

  /** The event behind a span's ref (null without a table). @param {number} row */
  eventAt(row) {
    return this.table && row >= 0 && row < this.table.length ? this.table.get(row) : null;
  }

  /** Sample indices and count of the task behind a dispatch row. @param {number} row */
  samplesAt(row) {
    const e = this.eventAt(row);
    return e ? { indices: e.indices ?? null, n: e.n ?? (e.indices ? e.indices.length : 0) } : null;
  }
}
