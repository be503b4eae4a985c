// Fetch-time histograms, one small chart per worker on one canvas, sharing a log-scaled time axis
// so workers compare at a glance. Binning is pure (exported for tests); drawing happens at most a
// few times a second, and only when the fetch counts or the playhead changed.

import { binCounts, logEdges } from './bins.js';
import { PALETTE } from './colors.js';
import { fmtDuration } from './timeline-store.js';

export const BINS = 28;

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
   * @param {import('./reducer.js').LoaderState} state
   * @param {Set<number>} slow straggler worker ids @param {boolean} inProcess num_workers=0
   */
  draw(state, slow, inProcess) {
    const workers = [...state.workers.values()].sort((a, b) => a.id - b.id);
    const counts = workers.map((w) => w.fetch_times.length);
    const width = Math.max(this.host.clientWidth, 300);
    const key = `${width}:${counts.join(',')}:${[...slow].join(',')}:${state.epoch}`;
    if (key === this.key) return false;
    this.key = key;
    let lo = Infinity, hi = 0;
    for (const w of workers) for (const v of w.fetch_times) { if (v < lo) lo = v; if (v > hi) hi = v; }
    const n = workers.length;
    const cols = Math.max(1, Math.min(n, Math.floor(width / 170)));
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
    /** @type {string[]} */
    const summary = [];
    if (!Number.isFinite(lo)) {
      ctx.fillStyle = PALETTE.dim;
      ctx.font = '11px system-ui, sans-serif';
      ctx.fillText('no fetch has finished yet', 8, 16);
      this.canvas.setAttribute('aria-label', 'no fetch has finished yet');
      return true;
    }
    const edges = logEdges(lo, hi, BINS);
    const a = Math.log(edges[0]), span = Math.log(edges[BINS]) - a;
    workers.forEach((w, i) => {
      const x0 = (i % cols) * cellW + 6, y0 = Math.floor(i / cols) * cellH + 4;
      const pw = cellW - 14, ph = cellH - 30;
      const c = binCounts(w.fetch_times, edges);
      let max = 0;
      for (const v of c) max = Math.max(max, v);
      ctx.fillStyle = '#121821';
      ctx.fillRect(x0, y0 + 14, pw, ph);
      const bw = pw / BINS;
      ctx.fillStyle = slow.has(w.id) ? PALETTE.stuck : PALETTE.fetch;
      for (let k = 0; k < BINS; k++) {
        if (!c[k]) continue;
        const h = Math.max(1, (c[k] / max) * (ph - 2));
        ctx.fillRect(x0 + k * bw + 0.5, y0 + 14 + ph - h, Math.max(1, bw - 1), h);
      }
      const sorted = Float64Array.from(w.fetch_times).sort();
      const p50 = quantile(sorted, 0.5), p95 = quantile(sorted, 0.95);
      if (sorted.length) {
        const mx = x0 + ((Math.log(p50) - a) / span) * pw;
        ctx.fillStyle = PALETTE.ink;
        ctx.fillRect(mx - 0.5, y0 + 12, 1.5, ph + 4);
      }
      ctx.font = '600 11px system-ui, sans-serif';
      ctx.fillStyle = slow.has(w.id) ? PALETTE.stuck : PALETTE.ink;
      const name = inProcess ? 'main process' : `worker ${w.id}`;
      ctx.fillText(name, x0, y0 + 10);
      ctx.font = '10px system-ui, sans-serif';
      ctx.fillStyle = PALETTE.dim;
      const stat = sorted.length ? `${sorted.length} · p50 ${fmtDuration(p50)} · p95 ${fmtDuration(p95)}` : 'no fetch yet';
      ctx.fillText(stat, x0 + ctx.measureText(name).width + 14, y0 + 10);
      ctx.fillStyle = PALETTE.faint;
      ctx.fillText(fmtDuration(edges[0]), x0, y0 + 14 + ph + 11);
      const right = fmtDuration(edges[BINS]);
      ctx.fillText(right, x0 + pw - ctx.measureText(right).width, y0 + 14 + ph + 11);
      summary.push(`${name}: ${stat}`);
    });
    this.canvas.setAttribute('aria-label', `fetch time histograms: ${summary.join('; ')}`);
    return true;
  }
}
