// Compare two runs: the settings that differ, throughput and the training loop's waiting share,
// per-worker fetch-time histograms over one set of bin edges, and how the diagnosis changed. A
// mirror of backend/loaderscope/model/compare.py (frontend/tests/compare.test.js runs both on the same
// events and checks they agree). Pure: no DOM.

import { binCounts, logEdges } from './bins.js';
import { reduce } from './reducer.js';
import { summary } from './stats.js';
import { diagnosis } from './diagnosis.js';

export const BINS = 24;

/** @typedef {'rate'|'share'|'seconds'|'count'} Unit */

/** @type {ReadonlyArray<[string, string, Unit]>} (summary key, label, how the value reads) */
export const METRICS = [
  ['batches_per_s', 'throughput', 'rate'],
  ['input_bound', 'training loop waiting', 'share'],
  ['input_bound_steady', 'waiting after start-up', 'share'],
  ['startup_wait', 'wait for the first batch', 'seconds'],
  ['median_task', 'fetch time per batch (median)', 'seconds'],
  ['batches', 'batches', 'count'],
  ['wall', 'wall time', 'seconds'],
];

// A number in a finding, unless it names a worker ("worker 1" is who, not how much): compare.py's NUMBER.
const NUMBER = /(?<![A-Za-z0-9_])(?<!worker )-?[0-9]+(?:[.,][0-9]+)*/g;
const TOPIC_WORDS = 3;

/**
 * @typedef {import('./reducer.js').LoaderState} LoaderState
 * @typedef {{label: string, state: LoaderState, start: Record<string, any>|null}} Side
 * @typedef {{key: string, label: string, unit: Unit, a: number, b: number, delta: number, ratio: number|null}} Metric
 * @typedef {{worker: number, in_process: boolean, tasks: number, p50: number, p95: number, counts: number[]}} HistRow
 * @typedef {{a: string, b: string, changed: boolean}} Pair
 * @typedef {{runs: Record<string, any>[], settings: {changed: {key: string, a: any, b: any}[], same: string[]},
 *   metrics: Metric[], histograms: {edges: number[], a: HistRow[], b: HistRow[]},
 *   diagnosis: {only_a: string[], only_b: string[], both: Pair[]}}} Comparison
 */

/**
 * A run from its events, or from a state and its run_start (a track already holds both).
 * @param {any[]|{state: LoaderState, start: Record<string, any>|null}} source @param {string} label
 * @returns {Side}
 */
export function sideOf(source, label) {
  if (!Array.isArray(source)) return { label, state: source.state, start: source.start };
  return { label, state: reduce(source), start: source.find((e) => e.kind === 'run_start') ?? null };
}

/**
 * The comparison of run a with run b (compare.py's compare()).
 * @param {Parameters<typeof sideOf>[0]} a @param {Parameters<typeof sideOf>[0]} b @param {[string, string]} labels
 * @returns {Comparison}
 */
export function compareRuns(a, b, labels = ['A', 'B']) {
  const sa = sideOf(a, labels[0]),
    sb = sideOf(b, labels[1]);
  const statsA = summary(sa.state),
    statsB = summary(sb.state);
  return {
    runs: [describe(sa, statsA), describe(sb, statsB)],
    settings: settingsDiff(sa, sb),
    metrics: metrics(statsA, statsB),
    histograms: histograms(sa.state, sb.state),
    diagnosis: diagnosisDiff(diagnosis(sa.state), diagnosis(sb.state)),
  };
}

/** @param {Side} run @param {Record<string, any>} stats */
function describe(run, stats) {
  const s = run.state;
  return {
    label: run.label,
    run: s.run,
    mode: s.mode,
    scenario: run.start?.scenario ?? null,
    name: s.meta.name,
    rank: s.meta.rank,
    job: s.meta.job,
    status: stats.status,
  };
}

/** The loader's config, plus scenario parameters it does not already hold (params.KEY). @param {Side} run */
function settingsOf(run) {
  const out = { ...run.state.config };
  const params = run.start?.params ?? {};
  for (const [k, v] of Object.entries(params)) if (!(k in run.state.config)) out[`params.${k}`] = v;
  return out;
}

/**
 * Python's == on JSON values: equal structure, key order ignored.
 * @param {unknown} x
 * @param {unknown} y
 * @returns {boolean}
 */
function same(x, y) {
  if (x === y) return true;
  if (typeof x !== 'object' || typeof y !== 'object' || x === null || y === null) return false;
  if (Array.isArray(x) !== Array.isArray(y)) return false;
  const ox = /** @type {Record<string, unknown>} */ (x),
    oy = /** @type {Record<string, unknown>} */ (y);
  const kx = Object.keys(ox),
    ky = Object.keys(oy);
  return kx.length === ky.length && kx.every((k) => k in oy && same(ox[k], oy[k]));
}

/** Python's sorted() of str: code-point order. @param {string[]} keys */
function sortedKeys(keys) {
  return [...keys].sort((p, q) => (p < q ? -1 : p > q ? 1 : 0));
}

/** @param {Side} a @param {Side} b */
export function settingsDiff(a, b) {
  const sa = settingsOf(a),
    sb = settingsOf(b);
  const keys = sortedKeys([...new Set([...Object.keys(sa), ...Object.keys(sb)])]);
  // a missing key reads as None
  const at = (/** @type {Record<string, unknown>} */ o, /** @type {string} */ k) => o[k] ?? null;
  return {
    changed: keys.filter((k) => !same(at(sa, k), at(sb, k))).map((k) => ({ key: k, a: at(sa, k), b: at(sb, k) })),
    same: keys.filter((k) => same(at(sa, k), at(sb, k))),
  };
}

/** @param {Record<string, any>} a @param {Record<string, any>} b @returns {Metric[]} */
export function metrics(a, b) {
  return METRICS.map(([key, label, unit]) => {
    const va = Number(a[key] || 0),
      vb = Number(b[key] || 0);
    return { key, label, unit, a: va, b: vb, delta: vb - va, ratio: va ? vb / va : null };
  });
}

/**
 * Per-worker fetch-time histograms of both runs over one set of edges.
 * @param {LoaderState} a
 * @param {LoaderState} b
 */
export function histograms(a, b) {
  let lo = Infinity,
    hi = -Infinity;
  for (const s of [a, b]) {
    for (const w of s.workers.values())
      for (const dt of w.fetch_times) {
        lo = Math.min(lo, dt);
        hi = Math.max(hi, dt);
      }
  }
  const edges = Number.isFinite(lo) ? logEdges(lo, hi, BINS) : [];
  /** @param {LoaderState} s @returns {HistRow[]} */
  const rows = (s) => {
    const stats = new Map(summary(s).workers.map((w) => [w.worker, w]));
    return [...s.workers.values()]
      .sort((x, y) => x.id - y.id)
      .map((w) => ({
        worker: w.id,
        in_process: !s.config.num_workers,
        tasks: w.fetch_times.length,
        p50: stats.get(w.id)?.fetch_p50 ?? 0,
        p95: stats.get(w.id)?.fetch_p95 ?? 0, // summary() has every worker
        counts: edges.length ? binCounts(w.fetch_times, edges) : [],
      }));
  };
  return { edges, a: rows(a), b: rows(b) };
}

/** A finding with its measurements blanked out. @param {string} finding */
export function normalise(finding) {
  return finding.replace(NUMBER, '#');
}

const topic = (/** @type {string} */ finding) =>
  normalise(finding).split(/\s+/).filter(Boolean).slice(0, TOPIC_WORDS).join(' ');

/**
 * Match findings with equal key, in order.
 * @param {string[]} left @param {string[]} right @param {(s: string) => string} key
 * @returns {[{a: string, b: string}[], string[], string[]]} the pairs, then what is left of each side
 */
function pair(left, right, key) {
  const pairs = [],
    unmatched = [],
    rest = [...right];
  for (const text of left) {
    const k = rest.findIndex((other) => key(other) === key(text));
    if (k < 0) unmatched.push(text);
    else pairs.push({ a: text, b: rest.splice(k, 1)[0] });
  }
  return [pairs, unmatched, rest];
}

/**
 * Findings only in A, only in B, and in both: first by text with numbers blanked, then by their first
 * words (compare.py's diagnosis_diff).
 * @param {string[]} a @param {string[]} b
 */
export function diagnosisDiff(a, b) {
  const [same, restA, restB] = pair(a, b, normalise);
  const [changed, onlyA, onlyB] = pair(restA, restB, topic);
  return {
    only_a: onlyA,
    only_b: onlyB,
    both: [...same.map((p) => ({ ...p, changed: p.a !== p.b })), ...changed.map((p) => ({ ...p, changed: true }))],
  };
}
