// Fetch-time histograms, one small chart per worker on one canvas, sharing a log-scaled time axis
// so workers compare at a glance. Binning is pure (exported for tests); drawing happens at most a
// few times a second, and only when the fetch counts or the playhead changed.

import { binCounts, logEdges } from '../model/bins.js';
import { PALETTE } from '../model/colors.js';
import { fmtDuration } from '../model/time-window.js';
import { fillLabel, clearLabels, fitText } from './canvas-text.js';

export const BINS = 28;
const CELL_MIN_W = 230; // a worker's chart: its name and figures on one line at 11 px

/** @param {ArrayLike<number>} sorted @param {number} q */
function quantile(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.round(q * (sorted.length - 1)))] : NaN;
}

export class HistogramView {
  /** @param {HTMLElement} host */
  constructor(host) {
    this.host = host;
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'hist-canvas';
    this.canvas.setAttribute('role', 'img');
    host.append(this.canvas);
    this.ctx = /** @type {CanvasRenderingContext2D} */ (this.canvas.getContext('2d'));
    this.key = '';
  }

  /** The next draw redraws (a resize, another rank or run). */
  invalidate() {
    this.key = '';
  }

  /**
   * @param {import('../model/reducer.js').LoaderState} state
   * @param {Set<number>} slow straggler worker ids @param {boolean} inProcess num_workers=0
   */
  draw(state, slow, inProcess) {
    const workers = [...state.workers.values()].sort((a, b) => a.id - b.id);
    const counts = workers.map((w) => w.fetch_times.length);
    const width = Math.max(this.host.clientWidth, 300);
    const key = `${width}:${counts.join(',')}:${[...slow].join(',')}:${state.epoch}:${PALETTE.bg}`;
    if (key === this.key) return false;
    this.key = key;
    let lo = Infinity,
      hi = 0;
    for (const w of workers)
      for (const v of w.fetch_times) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    const n = workers.length;
    const cols = Math.max(1, Math.min(n, Math.floor(width / CELL_MIN_W)));
    const cellW = width / cols;
    const cellH = 74;
    const rows = Math.ceil(n / cols);
    const height = rows * cellH + 16;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.width = Math.round(width * dpr);
    this.canvas.height = Math.round(height * dpr);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    clearLabels(ctx);
    /** @type {string[]} */
    const summary = [];
    if (!Number.isFinite(lo)) {
      ctx.fillStyle = PALETTE.dim;
      ctx.font = '11px system-ui, sans-serif';
      fillLabel(ctx, 'no fetch has finished yet', 8, 16);
      this.canvas.setAttribute('aria-label', 'no fetch has finished yet');
      return true;
    }
    const edges = logEdges(lo, hi, BINS);
    const a = Math.log(edges[0]),
      span = Math.log(edges[BINS]) - a;
    workers.forEach((w, i) => {
      const x0 = (i % cols) * cellW + 6,
        y0 = Math.floor(i / cols) * cellH + 4;
      const pw = cellW - 14,
        ph = cellH - 30;
      const c = binCounts(w.fetch_times, edges);
      let max = 0;
      for (const v of c) max = Math.max(max, v);
      ctx.fillStyle = PALETTE.plotBg;
      ctx.fillRect(x0, y0 + 14, pw, ph);
      const bw = pw / BINS;
      ctx.fillStyle = slow.has(w.id) ? PALETTE.stuck : PALETTE.fetch;
      for (let k = 0; k < BINS; k++) {
        if (!c[k]) continue;
        const h = Math.max(1, (c[k] / max) * (ph - 2));
        ctx.fillRect(x0 + k * bw + 0.5, y0 + 14 + ph - h, Math.max(1, bw - 1), h);
      }
      const sorted = Float64Array.from(w.fetch_times).sort();
      const p50 = quantile(sorted, 0.5),
        p95 = quantile(sorted, 0.95);
      if (sorted.length) {
        const mx = x0 + ((Math.log(p50) - a) / span) * pw;
        ctx.fillStyle = PALETTE.ink;
        ctx.fillRect(mx - 0.5, y0 + 12, 1.5, ph + 4);
      }
      const name = inProcess ? 'main process' : `worker ${w.id}`;
      const stat = sorted.length
        ? `${sorted.length} · p50 ${fmtDuration(p50)} · p95 ${fmtDuration(p95)}`
        : 'no fetch yet';
      chartLabels(ctx, {
        name,
        stat,
        slow: slow.has(w.id),
        x0,
        y0,
        pw,
        nameY: 10,
        axisY: 14 + ph + 12,
        lo: edges[0],
        hi: edges[BINS],
      });
      summary.push(`${name}: ${stat}`);
    });
    this.canvas.setAttribute('aria-label', `fetch time histograms: ${summary.join('; ')}`);
    return true;
  }
}

/**
 * A small chart's words: the worker's name and figures above it, the axis' ends below, all at
 * 11 px and within the chart's width (the figures are cut with an ellipsis before they would run
 * into the next chart). The compare view's histograms use it too.
 * @param {CanvasRenderingContext2D} ctx
 * @param {{name: string, stat: string, slow: boolean, x0: number, y0: number, pw: number, nameY: number,
 *   axisY: number, lo: number, hi: number}} o
 */
export function chartLabels(ctx, { name, stat, slow, x0, y0, pw, nameY, axisY, lo, hi }) {
  ctx.font = '600 11px system-ui, sans-serif';
  ctx.fillStyle = slow ? PALETTE.stuck : PALETTE.ink;
  const shownName = fitText(ctx, name, pw);
  fillLabel(ctx, shownName, x0, y0 + nameY);
  const nameW = ctx.measureText(shownName).width;
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = PALETTE.dim;
  const figures = fitText(ctx, stat, pw - nameW - 10);
  if (figures) fillLabel(ctx, figures, x0 + nameW + 10, y0 + nameY);
  const left = fmtDuration(lo),
    right = fmtDuration(hi);
  fillLabel(ctx, left, x0, y0 + axisY);
  const rw = ctx.measureText(right).width;
  if (ctx.measureText(left).width + 8 + rw <= pw) fillLabel(ctx, right, x0 + pw - rw, y0 + axisY);
}
