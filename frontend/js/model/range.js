// The figures of a selected time range, as DESIGN §21 defines them: the state before the range's
// first event and after its last (the reducer's, so the same rules as everywhere), and their
// difference. Fetches finished in the range per worker (count, p50, p95 as `summary`'s workers
// rows take them), batches handed to the training loop and its wait, results parked and the
// reorder cost, events. Pure: tests/browser/test_views.py computes the same from the events with
// loaderscope.model.state and compares.

import { restore } from './player.js';
import { applyRow } from './fastpath.js';
import { pyRound } from './stats.js';

/**
 * @typedef {{worker: number, fetches: number, p50: number|null, p95: number|null}} WorkerFigures
 * @typedef {{from: number, to: number, t0: number, t1: number, events: number, workers: WorkerFigures[],
 *   batches: number, wait: number, parked: number, parkedCost: number}} RangeFigures
 */

/**
 * Nearest rank on sorted values (halves to even), as state.py's `_percentile` and reducer.js's `percentile`.
 * @param {Float64Array} sorted
 * @param {number} q
 */
function percentile(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, pyRound(q * (sorted.length - 1)))] : null;
}

/**
 * The state after rows [0, i) without moving the player's cursor: `full` itself at the end, else
 * the nearest snapshot before i, restored, with the rows since applied.
 * @param {import('./player.js').Player} p @param {number} i
 */
export function stateAt(p, i) {
  if (i >= p.length) return p.full;
  const k = Math.floor(i / p.every);
  const s = restore(p.snapshots[k], p.full);
  for (let at = k * p.every; at < i; at++) applyRow(s, p.table, at);
  return s;
}

/**
 * The rows a time range holds: from the first event the run's clock (the latest t so far) reaches
 * past t0, up to the last it reaches by t1 — the playhead's own rule (Player.rowAt).
 * @param {import('./player.js').Player} p @param {number} t0 @param {number} t1
 */
export function rangeRows(p, t0, t1) {
  return { from: p.rowAt(t0), to: p.rowAt(t1) };
}

/**
 * @param {import('./player.js').Player} p @param {number} t0 @param {number} t1 the range (run time)
 * @returns {RangeFigures}
 */
export function rangeFigures(p, t0, t1) {
  const { from, to } = rangeRows(p, t0, t1);
  const a = stateAt(p, from),
    b = stateAt(p, to);
  /** @type {WorkerFigures[]} */
  const workers = [];
  for (const w of [...b.workers.values()].sort((x, y) => x.id - y.id)) {
    const before = a.workers.get(w.id)?.fetch_times.length ?? 0;
    const times = Float64Array.from(w.fetch_times.slice(before)).sort();
    workers.push({ worker: w.id, fetches: times.length, p50: percentile(times, 0.5), p95: percentile(times, 0.95) });
  }
  return {
    from,
    to,
    t0,
    t1,
    events: to - from,
    workers,
    batches: b.batches - a.batches,
    wait: b.consumer_wait - a.consumer_wait,
    parked: b.out_of_order - a.out_of_order,
    parkedCost: b.head_of_line_wait - a.head_of_line_wait,
  };
}
