// The timeline canvas: one row per worker (fetch spans), one for the consumer (time waiting for
// each batch). Wheel zooms, drag pans, double-click fits the whole run; hover names the span.
// Draws only what is visible; zoomed out, each pixel column shows how busy the row was.

import { PALETTE, taskColor } from './colors.js';
import { fitWindow, zoomWindow, panWindow, ticks, fmtDuration } from './timeline-store.js';
import { fmtIndices } from './pipeline-view.js';

const GUTTER = 112;
const AXIS = 20;
const CONSUMER_H = 24;
const LIVE_REDRAW_MS = 50;

export class TimelineView {
  /** @param {HTMLElement} host @param {import('./timeline-store.js').TimelineStore} store */
  constructor(host, store) {
    this.host = host;
    this.store = store;
    this.canvas = document.createElement('canvas');
    this.canvas.className = 'timeline-canvas';
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', 'timeline of fetches per worker and consumer waits');
    this.tip = document.createElement('div');
    this.tip.className = 'tooltip';
    this.tip.hidden = true;
    host.append(this.canvas, this.tip);
    this.ctx = /** @type {CanvasRenderingContext2D} */ (this.canvas.getContext('2d'));
    this.follow = true;
    this.view = { t0: 0, t1: 1 };
    this.drawn = '';
    this.hover = null;
    this.inProcess = false;
    this.lastFrameMs = 0;
    this.mode = 'spans';
    this.lastDrawWall = 0;
    this.forced = false;
    this.bind();
  }

  rows() {
    return [...this.store.workers.keys()].sort((a, b) => a - b);
  }

  rowH(n) {
    return n <= 8 ? 22 : n <= 16 ? 14 : 9;
  }

  geometry() {
    const rows = this.rows();
    const rh = this.rowH(rows.length);
    const height = AXIS + rows.length * rh + 6 + CONSUMER_H + 8;
    return { rows, rh, height, width: Math.max(this.host.clientWidth, 400) };
  }

  /** Time at canvas x. */
  timeAt(x) {
    const g = this.geo;
    return this.view.t0 + ((x - GUTTER) / (g.width - GUTTER)) * (this.view.t1 - this.view.t0);
  }

  bind() {
    const c = this.canvas;
    c.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const rect = c.getBoundingClientRect();
      const x = ev.clientX - rect.left;
      if (x < GUTTER) return;
      const factor = Math.exp((ev.deltaY || ev.deltaX) * 0.0015);
      this.view = zoomWindow(this.view, this.timeAt(x), factor);
      this.follow = false;
      this.invalidate();
    }, { passive: false });
    let drag = null;
    c.addEventListener('pointerdown', (ev) => {
      drag = { x: ev.clientX, view: { ...this.view } };
      c.setPointerCapture(ev.pointerId);
    });
    c.addEventListener('pointermove', (ev) => {
      const rect = c.getBoundingClientRect();
      if (drag) {
        const dx = ev.clientX - drag.x;
        if (Math.abs(dx) > 2) {
          const dt = -(dx / (this.geo.width - GUTTER)) * (drag.view.t1 - drag.view.t0);
          this.view = panWindow(drag.view, dt);
          this.follow = false;
          this.invalidate();
        }
        return;
      }
      this.hover = { x: ev.clientX - rect.left, y: ev.clientY - rect.top };
      this.invalidate();
    });
    c.addEventListener('pointerup', () => { drag = null; });
    c.addEventListener('pointerleave', () => { this.hover = null; this.tip.hidden = true; this.invalidate(); });
    c.addEventListener('dblclick', () => this.fit());
  }

  fit() {
    this.follow = true;
    this.invalidate();
  }

  invalidate() {
    this.drawn = '';
    this.forced = true;
    this.onInvalidate?.();
  }

  /**
   * Redraw if anything visible changed.
   * @param {{now:number, live:boolean}} clock
   * @returns {boolean} drew
   */
  draw(clock) {
    // following a live run, 20 redraws a second are plenty; interaction redraws at once
    const wall = performance.now();
    if (this.follow && clock.live && !this.forced && wall - this.lastDrawWall < LIVE_REDRAW_MS) return false;
    this.forced = false;
    const g = this.geometry();
    if (this.follow) this.view = fitWindow(this.store, this.store.open.size && clock.live ? clock.now : this.store.tmax);
    const key = `${this.store.version}:${g.width}:${g.height}:${this.view.t0}:${this.view.t1}:${this.hover?.x}:${this.hover?.y}:${this.store.open.size && clock.live ? clock.now.toFixed(2) : ''}`;
    if (key === this.drawn) return false;
    this.drawn = key;
    this.lastDrawWall = wall;
    const start = performance.now();
    this.geo = g;
    const dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(g.width * dpr) || this.canvas.height !== Math.round(g.height * dpr)) {
      this.canvas.width = Math.round(g.width * dpr);
      this.canvas.height = Math.round(g.height * dpr);
      this.canvas.style.width = `${g.width}px`;
      this.canvas.style.height = `${g.height}px`;
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, g.width, g.height);
    const { t0, t1 } = this.view;
    const plotW = g.width - GUTTER;
    const X = (t) => GUTTER + ((t - t0) / (t1 - t0)) * plotW;

    // axis
    ctx.font = '10px system-ui, sans-serif';
    ctx.fillStyle = PALETTE.dim;
    ctx.strokeStyle = '#222c39';
    ctx.lineWidth = 1;
    const tk = ticks(t0, t1, Math.max(3, Math.floor(plotW / 110)));
    for (const v of tk.values) {
      const x = Math.round(X(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, AXIS - 4);
      ctx.lineTo(x, g.height);
      ctx.stroke();
      ctx.fillText(fmtTick(v, tk.step), x + 3, 12);
    }
    ctx.fillText('run time →', 8, 12);
    // epochs
    ctx.strokeStyle = '#5b6b82';
    ctx.setLineDash([3, 3]);
    for (const ep of this.store.epochs) {
      if (ep.t < t0 || ep.t > t1) continue;
      const x = Math.round(X(ep.t)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, AXIS);
      ctx.lineTo(x, g.height);
      ctx.stroke();
      ctx.fillStyle = '#9fb0c6';
      ctx.fillText(`epoch ${ep.epoch}`, x + 3, AXIS + 9);
    }
    ctx.setLineDash([]);

    // worker rows (clipped to the plot area, right of the labels)
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, AXIS, g.width, g.height - AXIS);
    ctx.clip();
    let aggregated = false;
    const nowT = clock.live ? clock.now : this.store.tmax;
    g.rows.forEach((wid, r) => {
      const y = AXIS + r * g.rh;
      const col = this.store.workers.get(wid);
      ctx.fillStyle = r % 2 ? '#121821' : '#0f141b';
      ctx.fillRect(GUTTER, y, plotW, g.rh);
      ctx.fillStyle = PALETTE.dim;
      ctx.font = `${Math.min(11, g.rh - 1)}px system-ui, sans-serif`;
      ctx.fillText(this.inProcess ? 'main process' : `worker ${wid}`, 8, y + g.rh / 2 + 4);
      if (!col) return;
      ctx.save();
      ctx.beginPath();
      ctx.rect(GUTTER, y, plotW, g.rh);
      ctx.clip();
      aggregated = drawRow(ctx, col, t0, t1, X, y + 2, g.rh - 4, plotW, (i) => taskColor(col.idx[i]), PALETTE.fetch) || aggregated;
      const open = this.store.open.get(wid);
      if (open && open.start <= t1) {
        const x0 = Math.max(GUTTER, X(open.start)), x1 = Math.min(g.width, X(Math.max(nowT, open.start)));
        ctx.fillStyle = taskColor(open.idx);
        ctx.globalAlpha = 0.45;
        ctx.fillRect(x0, y + 2, Math.max(1, x1 - x0), g.rh - 4);
        ctx.globalAlpha = 1;
        ctx.strokeStyle = taskColor(open.idx);
        ctx.strokeRect(x0 + 0.5, y + 2.5, Math.max(1, x1 - x0 - 1), g.rh - 5);
      }
      ctx.restore();
    });
    // consumer row: time spent waiting inside next() for each batch
    const cy = AXIS + g.rows.length * g.rh + 6;
    ctx.fillStyle = '#15121a';
    ctx.fillRect(GUTTER, cy, plotW, CONSUMER_H);
    ctx.fillStyle = PALETTE.ink;
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillText('consumer waits', 8, cy + 15);
    ctx.beginPath();
    ctx.rect(GUTTER, cy, plotW, CONSUMER_H);
    ctx.clip();
    aggregated = drawRow(ctx, this.store.consumer, t0, t1, X, cy + 3, CONSUMER_H - 6, plotW, () => PALETTE.wait, PALETTE.wait, true) || aggregated;
    ctx.restore();
    // markers: stuck, died, errors, timeouts
    for (const m of this.store.marks) {
      if (m.t < t0 || m.t > t1) continue;
      const x = X(m.t);
      ctx.fillStyle = PALETTE.stuck;
      ctx.beginPath();
      ctx.moveTo(x, AXIS);
      ctx.lineTo(x - 4, AXIS - 6);
      ctx.lineTo(x + 4, AXIS - 6);
      ctx.fill();
    }
    this.mode = aggregated ? 'aggregated' : 'spans';
    this.canvas.dataset.mode = this.mode;
    this.hoverTip(g, X, nowT);
    this.lastFrameMs = performance.now() - start;
    return true;
  }

  hoverTip(g, X, nowT) {
    const h = this.hover;
    if (!h || h.x < GUTTER) { this.tip.hidden = true; return; }
    const t = this.timeAt(h.x);
    const slack = (2 / (g.width - GUTTER)) * (this.view.t1 - this.view.t0);
    let text = '';
    const r = Math.floor((h.y - AXIS) / g.rh);
    const cy = AXIS + g.rows.length * g.rh + 6;
    if (r >= 0 && r < g.rows.length) {
      const wid = g.rows[r];
      const col = this.store.workers.get(wid);
      const open = this.store.open.get(wid);
      const i = col ? nearest(col, t, slack) : -1;
      const who = this.inProcess ? 'main process' : `worker ${wid}`;
      if (i >= 0) {
        const info = col.info[i] || {};
        text = `task ${col.idx[i]} (epoch ${col.epoch[i]}) · ${who}\nfetch took ${fmtDuration(col.end[i] - col.start[i])}` +
          `\nsamples ${fmtIndices(info.indices, info.n) || '?'}${info.nbytes ? `\n${info.nbytes} bytes` : ''}`;
      } else if (open && t >= open.start) {
        text = `task ${open.idx} · ${who}\nstill fetching: ${fmtDuration(nowT - open.start)} so far\nsamples ${fmtIndices(open.info?.indices, open.info?.n) || '?'}`;
      } else {
        text = `${who} idle at ${fmtDuration(t)}`;
      }
    } else if (h.y >= cy && h.y <= cy + CONSUMER_H) {
      const col = this.store.consumer;
      const i = nearest(col, t, slack * 2);
      if (i >= 0) {
        const info = col.info[i] || {};
        text = `batch ${col.idx[i]} handed to the training loop at ${fmtDuration(col.end[i])}\nconsumer waited ${fmtDuration(info.wait || 0)} for it${info.from_buffer ? '\n(it was already in the reorder buffer)' : ''}`;
      } else text = 'consumer busy training (not waiting)';
    }
    if (!text) { this.tip.hidden = true; return; }
    this.tip.textContent = text;
    this.tip.hidden = false;
    const left = Math.min(h.x + 14, g.width - 260);
    this.tip.style.left = `${left}px`;
    this.tip.style.top = `${h.y + 14}px`;
  }
}

/** The span under t (within slack), or -1. */
function nearest(col, t, slack) {
  let i = col.at(t);
  if (i >= 0) return i;
  i = col.at(t + slack);
  if (i >= 0) return i;
  return col.at(t - slack);
}

/** Draw one row; returns true when it had to aggregate (too many spans to draw one by one). */
function drawRow(ctx, col, t0, t1, X, y, h, plotW, colorOf, aggColor, zeroTicks = false) {
  const [i0, i1] = col.visible(t0, t1);
  if (i1 - i0 <= plotW / 3) {
    for (let i = i0; i < i1; i++) {
      const x0 = X(col.start[i]), x1 = X(col.end[i]);
      const w = x1 - x0;
      ctx.fillStyle = colorOf(i);
      if (w >= 1) ctx.fillRect(x0, y, w, h);
      if (zeroTicks || w < 1) {
        ctx.fillRect(x1 - 0.5, y, 1, h);
      }
      if (!zeroTicks && w > 3) {
        ctx.fillStyle = 'rgba(0,0,0,0.35)';
        ctx.fillRect(x1 - 1, y, 1, h);
      }
    }
    return false;
  }
  const buckets = Math.max(1, Math.floor(plotW / 2));
  const occ = col.occupancy(t0, t1, buckets);
  const bw = plotW / buckets;
  ctx.fillStyle = aggColor;
  for (let k = 0; k < buckets; k++) {
    const v = occ[k];
    if (v <= 0) continue;
    ctx.globalAlpha = 0.25 + 0.75 * v;
    const bh = Math.max(1, h * v);
    ctx.fillRect(X(t0) + k * bw, y + h - bh, Math.ceil(bw), bh);
  }
  ctx.globalAlpha = 1;
  return true;
}

function fmtTick(v, step) {
  if (step >= 1) return `${v.toFixed(0)} s`;
  if (step >= 0.001) return `${(v * 1000).toFixed(0)} ms`;
  return `${(v * 1e6).toFixed(0)} µs`;
}
