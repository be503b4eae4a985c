// Text on the canvases: drawn, and when asked (a test, `labels.on`), recorded with its box and
// size, so that what a canvas says can be checked like the DOM's text (size, overlap, contrast
// measured from the pixels). Off, it is a plain fillText: no measuring in the frames that matter.

/**
 * A label as drawn: its text, its ink box in CSS pixels (left, top, width, height) and font size.
 * @typedef {{text: string, x: number, y: number, w: number, h: number, px: number}} Label
 */

/** @type {WeakMap<HTMLCanvasElement, Label[]>} */
const drawn = new WeakMap();

/** `labels.on`: record what each canvas draws (tests turn it on; the page never does). */
export const labels = { on: false };

/** The labels of `canvas`'s last draw (empty unless recording). @param {HTMLCanvasElement} canvas */
export function labelsOf(canvas) {
  return drawn.get(canvas) ?? [];
}

/** A canvas is drawn afresh: forget its labels. @param {CanvasRenderingContext2D} ctx */
export function clearLabels(ctx) {
  if (labels.on) drawn.set(ctx.canvas, []);
}

/**
 * fillText, recorded when asked. Canvases drawn in parts (clipped rows) record every part's text.
 * @param {CanvasRenderingContext2D} ctx @param {string} text @param {number} x @param {number} y
 */
export function fillLabel(ctx, text, x, y) {
  ctx.fillText(text, x, y);
  if (!labels.on || !text) return;
  const m = ctx.measureText(text);
  const px = Number(/(\d+(?:\.\d+)?)px/.exec(ctx.font)?.[1] ?? 0);
  const list = drawn.get(ctx.canvas) ?? [];
  drawn.set(ctx.canvas, list);
  list.push({
    text,
    x: x - m.actualBoundingBoxLeft,
    y: y - m.actualBoundingBoxAscent,
    w: m.actualBoundingBoxLeft + m.actualBoundingBoxRight,
    h: m.actualBoundingBoxAscent + m.actualBoundingBoxDescent,
    px,
  });
}

/**
 * `text` cut with an ellipsis to fit `width` at the context's font (whole when it fits).
 * @param {CanvasRenderingContext2D} ctx @param {string} text @param {number} width
 */
export function fitText(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let lo = 0,
    hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= width) lo = mid;
    else hi = mid - 1;
  }
  return lo ? `${text.slice(0, lo)}…` : '';
}
