// What the timeline draws over its rows: findings' red marks and words, search-hit outlines, epoch
// boundaries, the dimmed future, the selected range, the slider's marks and the playhead.

import { PALETTE } from '../model/colors.js';
import { fillLabel } from './canvas-text.js';
import { AXIS, FONT, GUTTER, LABEL_PX } from './timeline-paint.js';

/** @typedef {import('./timeline-view.js').TimelineView} TimelineView */
/** @typedef {import('./timeline-view.js').DrawFrame} DrawFrame */

/**
 * Epoch boundaries: dashed lines with the epoch's number (a peek's says "peek").
 * @param {TimelineView} view
 * @param {DrawFrame} frame
 */
export function drawEpochs(view, { ctx, g, t0, t1, X }) {
  ctx.strokeStyle = PALETTE.epochLine;
  ctx.setLineDash([3, 3]);
  ctx.font = FONT;
  for (const ep of view.store.epochs) {
    if (ep.t < t0 || ep.t > t1) continue;
    const x = Math.round(X(ep.t)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(x, AXIS);
    ctx.lineTo(x, g.height);
    ctx.stroke();
    const text = ep.peek ? 'peek' : `epoch ${ep.epoch}`;
    const w = ctx.measureText(text).width;
    // on a band of the row's own colour, so that the words read over the spans under them
    if (x + 3 + w > g.width || !view.place({ x: x + 2, y: AXIS + 1, w: w + 2, h: LABEL_PX + 1 })) continue;
    ctx.fillStyle = PALETTE.rowA;
    ctx.fillRect(x + 1, AXIS + 1, w + 4, LABEL_PX + 2);
    ctx.fillStyle = PALETTE.epochInk;
    fillLabel(ctx, text, x + 3, AXIS + 11);
  }
  ctx.setLineDash([]);
}

/**
 * Fetches a finding was about, once they ended (a running one is drawn as open): a red outline
 * from the fetch's start to its end, and the finding's words at its moment.
 * @param {TimelineView} view
 * @param {DrawFrame} frame
 */
export function drawAlarms(view, { ctx, g, t0, t1 }) {
  for (const row of g.rows) {
    if (row.kind !== 'worker') continue;
    const tr = row.track,
      off = tr.offset;
    for (const a of tr.store.alarms) {
      if (a.worker !== row.wid || a.end === null || a.end + off < t0 || a.start + off > t1) continue;
      const x0 = Math.max(GUTTER, view.X(a.start + off)),
        x1 = Math.min(g.width, view.X(a.end + off));
      ctx.strokeStyle = PALETTE.stuck;
      ctx.lineWidth = 2;
      ctx.strokeRect(x0 + 1, row.y + 1, Math.max(1, x1 - x0 - 2), row.h - 2);
      ctx.lineWidth = 1;
      const word = a.kind === 'died' ? 'DIED' : 'STUCK';
      const at = Math.max(x0 + 4, Math.min(view.X(a.t + off), x1 - 40));
      view.spanLabel(ctx, `${word} · task ${a.idx}`, at, g.width, row.y, row.h);
    }
  }
}

/** Search hits: an outline around each span found. @param {TimelineView} view @param {DrawFrame} frame */
export function drawHits(view, { ctx, g, t0, t1 }) {
  if (!view.hits.length) return;
  const primary = view.primary;
  ctx.strokeStyle = PALETTE.hit;
  ctx.lineWidth = 2;
  for (const hit of view.hits) {
    if (hit.t1 < t0 || hit.t0 > t1) continue;
    const row = g.rows.find(
      (r) =>
        r.track === primary &&
        (hit.worker === null ? r.kind === 'consumer' : r.kind === 'worker' && r.wid === hit.worker),
    );
    if (!row) continue;
    const x0 = Math.max(GUTTER, view.X(hit.t0)),
      x1 = Math.min(g.width, view.X(hit.t1));
    ctx.strokeRect(x0 - 1, row.y, Math.max(3, x1 - x0 + 2), row.h);
  }
  ctx.lineWidth = 1;
}

/** The selected range: a tinted band with edges. @param {TimelineView} view @param {DrawFrame} frame */
export function drawSelection(view, { ctx, g, X }) {
  const sel = view.selection;
  if (!sel) return;
  const x0 = Math.max(GUTTER, X(sel.t0)),
    x1 = Math.min(g.width, X(sel.t1));
  if (x1 < GUTTER || x0 > g.width) return;
  ctx.fillStyle = PALETTE.selection;
  ctx.fillRect(x0, AXIS, Math.max(1, x1 - x0), g.height - AXIS);
  ctx.fillStyle = PALETTE.accent;
  if (X(sel.t0) >= GUTTER) ctx.fillRect(Math.round(x0) - 1, AXIS, 2, g.height - AXIS);
  if (X(sel.t1) <= g.width) ctx.fillRect(Math.round(x1) - 1, AXIS, 2, g.height - AXIS);
}

/** The future, when the playhead is behind the end: dimmed. @param {TimelineView} view @param {DrawFrame} frame */
export function drawFuture(view, { ctx, g, X }) {
  if (view.playhead === null) return;
  const px = X(view.playhead);
  if (px >= g.width) return;
  ctx.fillStyle = PALETTE.future;
  ctx.fillRect(Math.max(GUTTER, px), AXIS, g.width - Math.max(GUTTER, px), g.height - AXIS);
}

/** Markers on the axis: stuck, died, errors, timeouts. @param {TimelineView} view @param {DrawFrame} frame */
export function drawMarks(view, { ctx, t0, t1, X }) {
  ctx.fillStyle = PALETTE.stuck;
  for (const tr of view.tracks) {
    for (const m of tr.store.marks) {
      const t = m.t + tr.offset;
      if (t < t0 || t > t1) continue;
      const x = X(t);
      ctx.beginPath();
      ctx.moveTo(x, AXIS);
      ctx.lineTo(x - 4, AXIS - 6);
      ctx.lineTo(x + 4, AXIS - 6);
      ctx.fill();
    }
  }
}

/**
 * The playhead: a line through every row and a handle on the axis.
 * @param {TimelineView} view
 * @param {DrawFrame} frame
 */
export function drawPlayhead(view, { ctx, g, X }) {
  if (view.playhead === null) return;
  const px = X(view.playhead);
  if (px < GUTTER || px > g.width) return;
  ctx.fillStyle = PALETTE.accent;
  ctx.fillRect(Math.round(px) - 1, 2, 2, g.height - 2);
  ctx.beginPath();
  ctx.moveTo(px - 6, 0);
  ctx.lineTo(px + 6, 0);
  ctx.lineTo(px, 9);
  ctx.fill();
}
