// How the timeline paints: its measures (gutter, axis strip, label size, shared by the view, its
// input and its marks) and one row of spans at any zoom: culled to the view, sub-pixel spans merged,
// dense rows a colour at a time, aggregated rows as occupancy (level of detail).

import { PALETTE, taskColor, taskHue } from '../model/colors.js';

export const GUTTER = 112;
export const AXIS = 22;
export const LABEL_PX = 11; // every text the timeline draws is at least this size
export const FONT = `${LABEL_PX}px system-ui, sans-serif`;
export const MIN_DRAG_PX = 3; // a Shift+drag shorter than this is a click, not a selection

/**
 * How a row's spans are coloured: one colour for all, or each its task's colour at a lightness.
 * @typedef {{fixed: string} | {lightness: number}} Paint
 */

/** @typedef {import('../model/span-column.js').SpanColumn} SpanColumn */

const DENSE_SPANS = 48; // more spans than this in a row: their hues are rounded and drawn a colour at a time
const HUE_STEP = 10; // degrees; golden-angle neighbours stay far apart after rounding
/** @type {Map<string, string>} */
const roundedColors = new Map();

/**
 * A task's colour with its hue rounded to HUE_STEP: a few dozen colours for any number of tasks.
 * @param {number} idx
 * @param {number} lightness
 */
function roundedColor(idx, lightness) {
  const hue = (Math.round(taskHue(idx) / HUE_STEP) * HUE_STEP) % 360;
  const key = `${hue}:${lightness}`;
  let color = roundedColors.get(key);
  if (color === undefined) roundedColors.set(key, (color = `hsl(${hue} 70% ${lightness}%)`));
  return color;
}

/**
 * Draw one row; returns true when it had to aggregate (too many spans to draw one by one).
 * Level of detail: spans are culled to the view (`visible`); a sub-pixel span in a pixel column
 * that already has one is left out; a dense row is drawn a colour at a time; an aggregated row is
 * one rectangle per run of equal columns. In software rendering a fill costs about 0.7 µs and a
 * change of fill colour about 2 µs, so with many thin rows the calls, not the arithmetic, are
 * what a frame costs.
 * @param {CanvasRenderingContext2D} ctx @param {SpanColumn} col @param {number} t0 @param {number} t1
 * @param {(t: number) => number} X @param {number} y @param {number} h @param {number} plotW
 * @param {Paint} paint @param {string} aggColor @param {boolean} [zeroTicks]
 */
export function drawRow(ctx, col, t0, t1, X, y, h, plotW, paint, aggColor, zeroTicks = false) {
  const [i0, i1] = col.visible(t0, t1);
  if (i1 - i0 <= plotW / 3) {
    drawSpans(ctx, col, i0, i1, X, y, h, paint, zeroTicks);
    return false;
  }
  drawOccupancy(ctx, col.occupancy(t0, t1, Math.max(1, Math.floor(plotW / 2))), X(t0), y, h, plotW, aggColor);
  return true;
}

/**
 * Spans one by one, grouped by colour (a dense row's hues rounded), then the dark edges that part
 * neighbouring spans wider than 3 px.
 * @param {CanvasRenderingContext2D} ctx @param {SpanColumn} col @param {number} i0 @param {number} i1
 * @param {(t: number) => number} X @param {number} y @param {number} h @param {Paint} paint @param {boolean} zeroTicks
 */
function drawSpans(ctx, col, i0, i1, X, y, h, paint, zeroTicks) {
  const dense = i1 - i0 > DENSE_SPANS;
  /** @type {Map<string, number[]>} colour -> x, width, x, width, ... */
  const groups = new Map();
  /** @type {number[]} */
  const edges = [];
  let lastTick = -Infinity;
  for (let i = i0; i < i1; i++) {
    const x0 = X(col.start[i]),
      x1 = X(col.end[i]);
    const w = x1 - x0;
    if (w < 1 && !zeroTicks && Math.round(x1) === lastTick) continue;
    const color =
      'fixed' in paint
        ? paint.fixed
        : dense
          ? roundedColor(col.idx[i], paint.lightness)
          : taskColor(col.idx[i], paint.lightness);
    let rects = groups.get(color);
    if (rects === undefined) groups.set(color, (rects = []));
    if (w >= 1) rects.push(x0, w);
    if (zeroTicks || w < 1) {
      rects.push(x1 - 0.5, 1);
      lastTick = Math.round(x1);
    }
    if (!zeroTicks && w > 3) edges.push(x1 - 1, 1);
  }
  for (const [color, rects] of groups) fillRects(ctx, color, rects, y, h);
  fillRects(ctx, PALETTE.spanEdge, edges, y, h);
}

/**
 * @param {CanvasRenderingContext2D} ctx @param {string} color
 * @param {number[]} rects x, width, x, width, ... all from y to y + h @param {number} y @param {number} h
 */
function fillRects(ctx, color, rects, y, h) {
  if (!rects.length) return;
  ctx.fillStyle = color;
  for (let k = 0; k < rects.length; k += 2) ctx.fillRect(rects[k], y, rects[k + 1], h);
}

/**
 * How busy each column was, as bars from the row's floor: the busy share is rounded to the row's
 * whole pixels (all a bar can show), so neighbouring columns alike make one rectangle.
 * @param {CanvasRenderingContext2D} ctx @param {Float32Array} occ @param {number} x0 @param {number} y
 * @param {number} h @param {number} plotW @param {string} color
 */
function drawOccupancy(ctx, occ, x0, y, h, plotW, color) {
  const bw = plotW / occ.length;
  const level = (/** @type {number} */ v) => (v > 0 ? Math.max(1, Math.round(h * v)) : 0);
  ctx.fillStyle = color;
  let k = 0;
  while (k < occ.length) {
    const px = level(occ[k]);
    let end = k + 1;
    while (end < occ.length && level(occ[end]) === px) end++;
    if (px > 0) {
      ctx.globalAlpha = 0.25 + (0.75 * px) / h;
      ctx.fillRect(x0 + k * bw, y + h - px, Math.ceil((end - k) * bw), px);
    }
    k = end;
  }
  ctx.globalAlpha = 1;
}
