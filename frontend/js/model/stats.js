// The summary statistics of a LoaderState: per-worker fetch times, stragglers, where the training
// loop's time went, batches/s, summary(). Mirrors backend/loaderscope/model/stats.py; diagnosis.js
// puts them into words. Pure: no DOM, no I/O, no clock.

import { memorySummary } from './memory.js';

/** @typedef {import('./reducer.js').LoaderState} LoaderState */
/** @typedef {import('./reducer.js').Task} Task */

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
  if (
    cached &&
    cached.lists.every((l, i) => l === lists[i] && cached.lens[i] === lens[i]) &&
    cached.lists.length === lists.length
  ) {
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
  for (const times of done.values()) {
    all.set(times, at);
    at += times.length;
  }
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
  let j = 0,
    k = 0;
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
    device: s.step_device,
    wait: s.consumer_wait / Math.max(s.batches, 1),
    step: meanStep(s),
    h2d: s.step_h2d * per,
    compute: s.step_compute * per,
    h2d_pageable: s.step_h2d_pageable * per || null,
  };
}

/**
 * The loop's time inside this loader's epochs: its wait here, in other loaders' next(), and its step.
 * @param {LoaderState} s
 */
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

/**
 * The one throughput every view shows: batches over the time inside this loader's epochs (state.py summary).
 * @param {LoaderState} s
 */
export function batchesPerS(s) {
  const wall = epochWall(s);
  return wall > 0 ? s.batches / wall : 0;
}

/** The statistics the diagnosis (docs/DESIGN.md) speaks of, as plain numbers (state.py summary()). */
/** @param {LoaderState} s @param {{workers?: boolean}} [options] */
export function summary(s, { workers = true } = {}) {
  const wall = (s.last_yield_t || s.t) - (s.first_t || 0);
  const inEpochs = epochWall(s);
  const steadyWait = s.consumer_wait - s.startup_wait,
    steadyWall = inEpochs - s.startup_wait;
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
    parked_high: s.parked_high,
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
