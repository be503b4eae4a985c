// The "What if…" panel's chart: batches/s and the training loop's waiting share against the swept
// value, one line per value of the second parameter, with the numbers in its aria-label and test hooks.

import { PALETTE } from '../model/colors.js';
import { fillLabel, clearLabels, fitText } from './canvas-text.js';
import { niceMax, sweepSeries } from '../model/sweep.js';

/** @typedef {import('./sweep-view.js').SweepPanel} SweepPanel */
/** @typedef {import('./sweep-view.js').Shown} Shown */

const $ = (/** @type {string} */ id) => /** @type {any} */ (document.getElementById(id));

/** Short numbers for the table and axes. @param {unknown} v @param {number} [digits] */
export function fmt(v, digits = 2) {
  if (typeof v !== 'number') return String(v);
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(digits);
}

/**
 * Two small charts side by side: batches/s (higher is better), and the share of time the training loop waits.
 * @param {SweepPanel} panel
 * @param {Shown} shown
 */
export function drawChart(panel, { rows, key, key2, xs }) {
  const { xs: order, series } = sweepSeries(rows, key, key2, xs);
  const host = $('sweep-chart-host');
  const width = Math.max(Math.min(host.clientWidth || 600, 1100), 360),
    height = 190;
  const dpr = window.devicePixelRatio || 1;
  const c = panel.canvas;
  c.width = Math.round(width * dpr);
  c.height = Math.round(height * dpr);
  c.style.width = `${width}px`;
  c.style.height = `${height}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (c.getContext('2d'));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  clearLabels(ctx);
  const legendH = key2 ? 16 : 0;
  const gap = 40,
    padL = 44,
    padR = 22,
    top = 22 + legendH,
    bottom = 32;
  const pw = (width - 2 * padL - padR - gap) / 2,
    ph = height - top - bottom;
  const bestRate = Math.max(...rows.map((r) => Number(r.batches_per_s) || 0));
  /** @type {{title: string, metric: 'batches_per_s'|'input_bound', max: number, fmt: (v: number) => string}[]} */
  const charts = [
    { title: 'batches/s (higher is better)', metric: 'batches_per_s', max: niceMax(bestRate), fmt: (v) => fmt(v, 1) },
    {
      title: 'training loop waiting for data (lower is better)',
      metric: 'input_bound',
      max: 1,
      fmt: (v) => `${Math.round(v * 100)}%`,
    },
  ];
  const n = Math.max(order.length, 1);
  let points = 0;
  charts.forEach((ch, ci) => {
    const x0 = padL + ci * (pw + gap + padL),
      y0 = top;
    /** @param {number} i */
    const X = (i) => x0 + (n === 1 ? pw / 2 : (i / (n - 1)) * pw);
    /** @param {number} v */
    const Y = (v) => y0 + ph - (Math.max(0, Math.min(v, ch.max)) / ch.max) * ph;
    ctx.font = '600 11px system-ui, sans-serif';
    ctx.fillStyle = PALETTE.ink;
    ctx.textAlign = 'left';
    fillLabel(ctx, fitText(ctx, ch.title, pw + padL - 4), x0, 12);
    ctx.font = '11px system-ui, sans-serif';
    for (let k = 0; k <= 4; k++) {
      // horizontal grid lines with their values
      const v = (ch.max * k) / 4,
        y = Y(v);
      ctx.strokeStyle = k === 0 ? PALETTE.faint : PALETTE.chartGrid;
      ctx.beginPath();
      ctx.moveTo(x0, y + 0.5);
      ctx.lineTo(x0 + pw, y + 0.5);
      ctx.stroke();
      ctx.fillStyle = PALETTE.dim;
      ctx.textAlign = 'right';
      fillLabel(ctx, ch.fmt(v), x0 - 5, y + 4);
    }
    ctx.textAlign = 'center';
    order.forEach((x, i) => {
      ctx.fillStyle = PALETTE.dim;
      fillLabel(ctx, x, X(i), y0 + ph + 14);
    });
    fillLabel(ctx, key, x0 + pw / 2, y0 + ph + 28);
    series.forEach((s, si) => {
      const color = PALETTE.lines[si % PALETTE.lines.length];
      ctx.strokeStyle = color;
      ctx.fillStyle = color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      s.points.forEach((p, j) => {
        const x = X(p.i),
          y = Y(p[ch.metric]);
        if (j) ctx.lineTo(x, y);
        else ctx.moveTo(x, y);
      });
      ctx.stroke();
      for (const p of s.points) {
        ctx.beginPath();
        ctx.arc(X(p.i), Y(p[ch.metric]), 3.5, 0, Math.PI * 2);
        ctx.fill();
        if (ci === 0) points += 1;
      }
      ctx.lineWidth = 1;
    });
  });
  if (key2) {
    // legend: one entry per value of the second parameter
    ctx.font = '11px system-ui, sans-serif';
    ctx.textAlign = 'left';
    let x = padL;
    series.forEach((s, si) => {
      ctx.fillStyle = PALETTE.lines[si % PALETTE.lines.length];
      ctx.fillRect(x, 24, 14, 3);
      ctx.fillStyle = PALETTE.ink;
      fillLabel(ctx, s.label, x + 18, 29);
      x += 28 + ctx.measureText(s.label).width;
    });
  }
  c.dataset.points = String(points);
  c.dataset.series = String(series.length);
  c.setAttribute(
    'aria-label',
    `sweep of ${key}${key2 ? ` by ${key2}` : ''}: ` +
      rows
        .map(
          (r) =>
            `${key}=${r[key]}${key2 ? ` ${key2}=${r[key2]}` : ''}: ${fmt(r.batches_per_s, 1)} batches/s, waiting ` +
            `${Math.round(Number(r.input_bound) * 100)}%`,
        )
        .join('; '),
  );
}
