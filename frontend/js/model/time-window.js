// The timeline's window math: the window that fits a run, zoom and pan, the axis's ticks, and
// durations in words. Pure.

/** @typedef {import('./timeline-store.js').TimelineStore} TimelineStore */

/**
 * The time window to show. `follow` fits the whole run (plus running fetches up to `now`), from the
 * loader's first event after run_start on, not from the clock's zero.
 * @param {TimelineStore} store @param {number} now
 * @returns {{t0:number, t1:number}}
 */
export function fitWindow(store, now) {
  const t0 = Number.isFinite(store.tfirst) ? store.tfirst : Number.isFinite(store.tmin) ? Math.min(store.tmin, 0) : 0;
  const t1 = Math.max(store.tmax, now, t0 + 0.05);
  return { t0, t1: t1 + (t1 - t0) * 0.02 };
}

/**
 * Zoom [t0, t1] by `factor` (<1 zooms in) around time `at`, clamped to a sane range.
 * @param {TimeWindow} view @param {number} at @param {number} factor @param {number} [minSpan]
 * @returns {TimeWindow}
 */
export function zoomWindow({ t0, t1 }, at, factor, minSpan = 1e-5) {
  const span = Math.max((t1 - t0) * factor, minSpan);
  const rel = (at - t0) / (t1 - t0 || 1);
  const n0 = at - rel * span;
  return { t0: n0, t1: n0 + span };
}

/** Pan by dt seconds. @param {TimeWindow} view @param {number} dt @returns {TimeWindow} */
export function panWindow({ t0, t1 }, dt) {
  return { t0: t0 + dt, t1: t1 + dt };
}

/** @typedef {{t0: number, t1: number}} TimeWindow a time window (s) */

/** "Nice" tick positions for an axis over [t0, t1] with about `count` ticks. @param {number} t0 @param {number} t1 */
export function ticks(t0, t1, count = 8) {
  const span = t1 - t0;
  if (!(span > 0)) return { step: 1, values: [] };
  const raw = span / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const values = [];
  for (let v = Math.ceil(t0 / step) * step; v <= t1 + 1e-12; v += step) values.push(+v.toFixed(12));
  return { step, values };
}

/** Format seconds for humans: 850 µs, 12.3 ms, 1.25 s. @param {number} s */
export function fmtDuration(s) {
  if (!Number.isFinite(s)) return '–';
  const a = Math.abs(s);
  if (a < 1e-3) return `${(s * 1e6).toFixed(0)} µs`;
  if (a < 1) return `${(s * 1e3).toFixed(a < 0.01 ? 2 : 1)} ms`;
  if (a < 60) return `${s.toFixed(2)} s`;
  return `${Math.floor(s / 60)} min ${(s % 60).toFixed(0)} s`;
}
