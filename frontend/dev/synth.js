// A tiny discrete-event model of _MultiProcessingDataLoaderIter, for developing and measuring the
// page without a server (`/?demo=synth`), and for the node tests. It emits schema-v1 events on a
// virtual clock. The real simulator lives in backend/loaderscope/sim/; this is only a fixture.

import { TORCH_PREFETCH_FACTOR } from '../js/model/contract.gen.js';

/** @typedef {import('../js/model/types.js').LoaderEvent} LoaderEvent */
/** @typedef {{idx: number, w: number}} Result a fetched batch: its task and worker */
/**
 * What happens next on the virtual clock (`n` orders equal times): a fetch is done, a batch is
 * pinned, or the consumer asks for its next batch.
 * @typedef {{t: number, n: number} & ({type: 'done', w: number, idx: number, start: number}
 *   | {type: 'pinned', r: Result, start: number} | {type: 'next'})} Happening
 */

class Heap {
  constructor() {
    /** @type {Happening[]} */
    this.a = [];
  }

  /** @param {Happening} x */
  push(x) {
    const a = this.a; a.push(x);
    let i = a.length - 1;
    while (i > 0) { const p = (i - 1) >> 1; if (less(a[p], a[i])) break; [a[p], a[i]] = [a[i], a[p]]; i = p; }
  }
  pop() {
    const a = this.a; const top = a[0]; const last = a.pop();
    if (a.length && last) {
      a[0] = last; let i = 0;
      for (;;) {
        const l = 2 * i + 1, r = l + 1; let m = i;
        if (l < a.length && less(a[l], a[m])) m = l;
        if (r < a.length && less(a[r], a[m])) m = r;
        if (m === i) break; [a[m], a[i]] = [a[i], a[m]]; i = m;
      }
    }
    return top;
  }
}
/** @param {Happening} x @param {Happening} y */
const less = (x, y) => x.t < y.t || (x.t === y.t && x.n < y.n);

/**
 * @param {object} o
 * @param {number} [o.num_workers] @param {number} [o.prefetch_factor] @param {number} [o.batch_size]
 * @param {number} [o.batches] tasks per epoch @param {number} [o.epochs]
 * @param {(idx:number, worker:number) => number} [o.cost] seconds to fetch task idx on worker
 * @param {number} [o.step] consumer seconds per batch @param {boolean} [o.in_order]
 * @param {number} [o.pin_ms] pin-memory thread seconds·1000 per batch (0: no pin stage)
 * @param {number} [o.rank] @param {string} [o.job] @param {number} [o.world_size] @param {number} [o.wall_start]
 * @param {string} [o.scenario] @param {string} [o.run]
 * @returns {LoaderEvent[]} events in seq order
 */
export function synthesize(o = {}) {
  const W = o.num_workers ?? 4, pf = o.prefetch_factor ?? TORCH_PREFETCH_FACTOR, bs = o.batch_size ?? 4;
  const batches = o.batches ?? 24, epochs = o.epochs ?? 1, step = o.step ?? 0.002;
  const inOrder = o.in_order ?? true, run = o.run ?? 'synth', rank = o.rank ?? 0;
  const pinS = (o.pin_ms ?? 0) / 1000;
  // out_of_order's cost: earlier tasks of each round are slower (DescendingRoundCost)
  const cost = o.cost ?? ((idx) => 0.01 * bs * (Math.max(W, 1) - (idx % Math.max(W, 1))) / 4);
  /** @type {LoaderEvent[]} */
  const out = [];
  let seq = 0, n = 0;
  /** @param {number} t @param {string} kind @param {Partial<LoaderEvent>} f */
  const emit = (t, kind, f) => out.push({ seq: seq++, t, run, rank, kind, ...f });
  const config = {
    num_workers: W,
    batch_size: bs,
    prefetch_factor: W ? pf : null,
    in_order: inOrder,
    persistent_workers: false,
    batches_per_epoch: batches,
    pin_memory: pinS > 0,
    pin_memory_active: pinS > 0,
  };
  const extra = o.job ? { job: o.job, world_size: o.world_size ?? 1, wall_start: o.wall_start ?? 0 } : {};
  emit(0, 'run_start', { mode: 'sim', scenario: o.scenario ?? 'out_of_order', config, ...extra });
  const lanes = Math.max(W, 1);
  let t = 0;
  for (let w = 0; w < W; w++) emit(0, 'worker_start', { worker: w, pid: 1000 + w });
  for (let epoch = 0; epoch < epochs; epoch++) {
    emit(t, 'epoch_start', { epoch });
    const heap = new Heap();
    const queues = Array.from({ length: lanes }, () => /** @type {number[]} */ ([]));
    const busy = new Array(lanes).fill(false);
    /** @type {Result[]} */
    const results = []; // arrival order
    const parked = new Set();
    let send = 0, rcvd = 0, rr = 0, outstanding = 0, yielded = 0;
    /** @type {number|null} */
    let waitingSince = null;
    /** @type {Result[]} */
    const pinQueue = [];
    let pinBusy = false;
    /** @param {number} now */
    const pinKick = (now) => {
      if (pinBusy || !pinQueue.length) return;
      const r = /** @type {Result} */ (pinQueue.shift()); pinBusy = true; // not empty: checked above
      emit(now, 'pin_start', { idx: r.idx });
      heap.push({ t: now + pinS, n: n++, type: 'pinned', r, start: now });
    };
    const window = W ? pf * W : 1;
    /** @param {number} now @param {number} w */
    const startFetch = (now, w) => {
      if (busy[w]) return;
      const idx = queues[w].shift();
      if (idx === undefined) return;
      busy[w] = true;
      emit(now, 'fetch_start', { worker: w, idx });
      heap.push({ t: now + cost(idx, w), n: n++, type: 'done', w, idx, start: now });
    };
    /** @param {number} now */
    const put = (now) => {
      if (send >= batches || outstanding >= window) return;
      const w = rr++ % lanes, idx = send++;
      const indices = Array.from({ length: bs }, (_, k) => idx * bs + k);
      emit(now, 'dispatch', { idx, worker: w, indices, n: bs, epoch });
      queues[w].push(idx); outstanding++;
      startFetch(now, w);
    };
    /** @param {number} now @param {number} idx @param {boolean} fromParked */
    const release = (now, idx, fromParked) => {
      const wait = waitingSince === null ? 0 : now - waitingSince;
      waitingSince = null;
      emit(now, 'yield', { idx, wait, from_parked: fromParked });
      yielded++;
      rcvd = idx + 1;
      put(now);
      if (yielded < batches) heap.push({ t: now + step, n: n++, type: 'next' });
    };
    /** @param {number} now */
    const consume = (now) => {
      if (inOrder && parked.has(rcvd)) { parked.delete(rcvd); release(now, rcvd, true); return; }
      for (let next = results.shift(); next !== undefined; next = results.shift()) {
        const { idx, w } = next;
        emit(now, 'arrive', { idx, worker: w }); outstanding--;
        if (!inOrder || idx === rcvd) { release(now, idx, false); return; }
        parked.add(idx);
        emit(now, 'parked', { idx, worker: w, waiting_for: rcvd });
      }
      if (waitingSince === null) waitingSince = now;
    };
    for (let k = 0; k < window; k++) put(t);
    heap.push({ t, n: n++, type: 'next' });
    for (let ev = heap.pop(); ev !== undefined; ev = heap.pop()) {
      t = ev.t;
      if (ev.type === 'done') {
        emit(t, 'fetch_end', { worker: ev.w, idx: ev.idx, dt: t - ev.start, nbytes: bs * 32 });
        busy[ev.w] = false;
        if (pinS > 0) {
          pinQueue.push({ idx: ev.idx, w: ev.w });
          pinKick(t);
        } else results.push({ idx: ev.idx, w: ev.w });
        startFetch(t, ev.w);
        if (waitingSince !== null) consume(t);
      } else if (ev.type === 'pinned') {
        emit(t, 'pin_end', { idx: ev.r.idx, dt: t - ev.start, nbytes: bs * 32, pinned: true });
        pinBusy = false; results.push(ev.r);
        pinKick(t);
        if (waitingSince !== null) consume(t);
      } else {
        consume(t);
      }
    }
    emit(t, 'epoch_end', { epoch, batches });
  }
  for (let w = 0; w < W; w++) emit(t, 'worker_exit', { worker: w, exitcode: 0 });
  emit(t, 'run_end', { reason: 'done', stats: {} });
  return out;
}
