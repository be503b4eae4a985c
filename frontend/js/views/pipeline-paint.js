// Canvas drawing for the pipeline picture: rounded boxes, arrows, hatching for a stage that is
// off, task tokens, and the background (boxes and arrows that change only with the layout, the
// workers' statuses and the reorder buffer's highlight).

import { PALETTE, taskColor, taskInk } from '../model/colors.js';
import { WorkerStatus } from '../model/reducer.js';
import { fillLabel } from './canvas-text.js';

/**
 * The background: every box and arrow of the picture.
 * @param {CanvasRenderingContext2D} ctx @param {import('../model/layout.js').Layout} L pipelineLayout()
 * @param {import('../model/reducer.js').LoaderState} state @param {number[]} ids worker ids by lane
 * @param {boolean} bufferFull results are parked: the reorder buffer is highlighted
 */
export function paintBackground(ctx, L, state, ids, bufferFull) {
  box(ctx, L.sampler, PALETTE.panel, PALETTE.panelEdge);
  box(ctx, L.dispatcher, PALETTE.panel, PALETTE.panelEdge);
  arrow(
    ctx,
    L.sampler.x + L.sampler.w / 2,
    L.sampler.y + L.sampler.h,
    L.sampler.x + L.sampler.w / 2,
    L.dispatcher.y,
    PALETTE.faint,
  );
  L.lanes.forEach((lane, i) => {
    const w = state.workers.get(ids[i]);
    const status = w ? w.status : WorkerStatus.STARTING;
    const alarm = status === WorkerStatus.STUCK || status === WorkerStatus.DIED;
    const tint = alarm ? PALETTE.alarmTint : status === WorkerStatus.EXITED ? PALETTE.exitedTint : PALETTE.panel;
    box(ctx, lane.rect, tint, alarm ? PALETTE.stuck : PALETTE.panelEdge);
    box(ctx, lane.fetch, alarm ? PALETTE.alarmFetch : PALETTE.fetchBox, alarm ? PALETTE.stuck : PALETTE.fetchEdge);
    if (L.laneCols > 1) return; // two columns: one arrow in and out of the whole grid, not 64 crossing ones
    arrow(
      ctx,
      L.dispatcher.x + L.dispatcher.w,
      L.dispatcher.y + L.dispatcher.h / 2,
      lane.rect.x - 1,
      lane.rect.y + lane.rect.h / 2,
      PALETTE.arrow,
      1,
    );
    arrow(
      ctx,
      lane.rect.x + lane.rect.w,
      lane.rect.y + lane.rect.h / 2,
      L.result.x - 2,
      L.result.y + Math.min(L.result.h / 2, 30 + i * 2),
      PALETTE.arrow,
    );
  });
  if (L.laneCols > 1) {
    const midY = L.top + L.lanesH / 2;
    arrow(
      ctx,
      L.dispatcher.x + L.dispatcher.w,
      L.dispatcher.y + L.dispatcher.h / 2,
      L.lanesX - 1,
      midY,
      PALETTE.arrow,
      1.4,
    );
    arrow(
      ctx,
      L.lanesX + L.lanesW,
      midY,
      L.result.x - 2,
      L.result.y + Math.min(L.result.h / 2, 60),
      PALETTE.arrow,
      1.4,
    );
  }
  box(ctx, L.result, PALETTE.panel, PALETTE.panelEdge);
  const resultMidY = L.buffer.y + 24;
  if (L.pin === 'active' && L.pinThread && L.pinned) {
    // layout.js gives an active pin stage its boxes
    box(ctx, L.pinThread, PALETTE.pinBox, PALETTE.pinEdge);
    box(ctx, L.pinned, PALETTE.panel, PALETTE.panelEdge);
    arrow(
      ctx,
      L.result.x + L.result.w,
      L.pinThread.y + 22,
      L.pinThread.x - 2,
      L.pinThread.y + 22,
      PALETTE.pinEdge,
      1.4,
    );
    arrow(
      ctx,
      L.pinThread.x + L.pinThread.w / 2,
      L.pinThread.y + L.pinThread.h,
      L.pinned.x + L.pinned.w / 2,
      L.pinned.y - 1,
      PALETTE.pinEdge,
      1.2,
    );
  } else if (L.pin === 'disabled' && L.pinCol) {
    hatch(ctx, L.pinCol);
    arrow(ctx, L.result.x + L.result.w, resultMidY, L.pinCol.x + L.pinCol.w + 2, resultMidY, PALETTE.arrowDim, 1);
  }
  box(
    ctx,
    L.buffer,
    bufferFull ? PALETTE.bufferFull : PALETTE.panel,
    bufferFull ? PALETTE.buffer : PALETTE.panelEdge,
    bufferFull ? 2 : 1,
  );
  box(ctx, L.consumer, PALETTE.panel, PALETTE.panelEdge);
  // result queue -> straight on when it is the task rcvd_idx wants; -> reorder buffer when early
  const midY = L.buffer.y + 24;
  const rx = L.pinCol ? L.pinCol.x + L.pinCol.w : L.result.x + L.result.w;
  arrow(ctx, rx, midY, L.buffer.x - 2, midY, bufferFull ? PALETTE.buffer : PALETTE.arrowDim, 1.4);
  const inY = L.rcvdCursor.y + L.rcvdCursor.h / 2;
  ctx.strokeStyle = PALETTE.arrowDim;
  ctx.lineWidth = 1.4;
  ctx.beginPath();
  const fromY = L.pin === 'active' && L.pinned ? L.pinned.y + 14 : L.result.y + 14;
  ctx.moveTo(rx, fromY);
  ctx.bezierCurveTo(rx + 14, fromY, rx + 6, L.bypassY, rx + 22, L.bypassY);
  ctx.lineTo(L.buffer.x + L.buffer.w - 10, L.bypassY);
  ctx.stroke();
  arrow(ctx, L.buffer.x + L.buffer.w - 10, L.bypassY, L.rcvdCursor.x - 2, inY - 5, PALETTE.arrowDim, 1.4);
  arrow(
    ctx,
    L.buffer.x + L.buffer.w,
    L.buffer.y + 24,
    L.rcvdCursor.x - 2,
    inY + 5,
    bufferFull ? PALETTE.buffer : PALETTE.arrowDim,
    1.4,
  );
  ctx.fillStyle = PALETTE.dim;
  ctx.font = '11px system-ui, sans-serif';
  fillLabel(ctx, L.slim ? 'in order' : 'in order: straight on', L.buffer.x + 4, L.bypassY - 4);
  fillLabel(ctx, 'early', rx + 3, midY - 5);
  box(ctx, L.rcvdCursor, PALETTE.rcvdBox, PALETTE.accent);
}

/** @typedef {import('../model/layout.js').Rect} Rect */

/**
 * A stage that exists but does not run: dashed outline over diagonal hatching.
 * @param {CanvasRenderingContext2D} ctx
 * @param {Rect} r
 */
export function hatch(ctx, r) {
  ctx.save();
  roundRect(ctx, r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1, 8);
  ctx.fillStyle = PALETTE.exitedTint;
  ctx.fill();
  ctx.clip();
  ctx.strokeStyle = PALETTE.hatchStroke;
  ctx.lineWidth = 6;
  for (let d = -r.h; d < r.w + r.h; d += 16) {
    ctx.beginPath();
    ctx.moveTo(r.x + d, r.y);
    ctx.lineTo(r.x + d + r.h, r.y + r.h);
    ctx.stroke();
  }
  ctx.restore();
  ctx.setLineDash([5, 4]);
  ctx.strokeStyle = PALETTE.faint;
  ctx.lineWidth = 1;
  roundRect(ctx, r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1, 8);
  ctx.stroke();
  ctx.setLineDash([]);
}

/**
 * A rounded rectangle's path.
 * @param {CanvasRenderingContext2D} ctx
 * @param {number} x
 * @param {number} y
 * @param {number} w
 * @param {number} h
 * @param {number} r corner radius
 */
export function roundRect(ctx, x, y, w, h, r) {
  ctx.beginPath();
  ctx.moveTo(x + r, y);
  ctx.arcTo(x + w, y, x + w, y + h, r);
  ctx.arcTo(x + w, y + h, x, y + h, r);
  ctx.arcTo(x, y + h, x, y, r);
  ctx.arcTo(x, y, x + w, y, r);
  ctx.closePath();
}

/**
 * A filled, outlined box.
 * @param {CanvasRenderingContext2D} ctx
 * @param {Rect} r
 * @param {string} fill
 * @param {string} stroke
 * @param {number} [lw]
 */
export function box(ctx, r, fill, stroke, lw = 1) {
  roundRect(ctx, r.x + 0.5, r.y + 0.5, r.w - 1, r.h - 1, Math.min(8, r.h / 3));
  ctx.fillStyle = fill;
  ctx.fill();
  ctx.strokeStyle = stroke;
  ctx.lineWidth = lw;
  ctx.stroke();
}

/**
 * A curved arrow from (x0, y0) to (x1, y1).
 * @param {CanvasRenderingContext2D} ctx @param {number} x0 @param {number} y0 @param {number} x1 @param {number} y1
 * @param {string} color @param {number} [lw]
 */
export function arrow(ctx, x0, y0, x1, y1, color, lw = 1) {
  ctx.strokeStyle = color;
  ctx.fillStyle = color;
  ctx.lineWidth = lw;
  ctx.beginPath();
  const mx = (x0 + x1) / 2;
  ctx.moveTo(x0, y0);
  ctx.bezierCurveTo(mx, y0, mx, y1, x1 - 5, y1);
  ctx.stroke();
  ctx.beginPath();
  ctx.moveTo(x1, y1);
  ctx.lineTo(x1 - 6, y1 - 3.5);
  ctx.lineTo(x1 - 6, y1 + 3.5);
  ctx.closePath();
  ctx.fill();
}

/**
 * A task token: a rounded chip in the task's color with its id; parked ones get an amber rim.
 * @param {CanvasRenderingContext2D} ctx @param {number} x @param {number} y @param {number} w @param {number} h
 * @param {number} idx @param {boolean} parked @param {boolean} failed
 */
export function drawToken(ctx, x, y, w, h, idx, parked, failed) {
  roundRect(ctx, x, y, w, h, Math.min(5, h / 3));
  ctx.fillStyle = failed ? PALETTE.failedToken : taskColor(idx);
  ctx.fill();
  if (parked || failed) {
    ctx.strokeStyle = failed ? PALETTE.stuck : PALETTE.buffer;
    ctx.lineWidth = 2;
    ctx.stroke();
  }
  ctx.fillStyle = failed ? PALETTE.alarmInk : taskInk(idx);
  ctx.fillText(String(idx), x + w / 2, y + h / 2 + 0.5);
}
