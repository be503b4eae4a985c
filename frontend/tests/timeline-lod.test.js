// The timeline's level of detail (timeline-view.js drawRow) against a canvas that records its calls:
// every span is still drawn, with far fewer colour changes and fills than one call per span.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { drawRow } from '../js/views/timeline-paint.js';
import { SpanColumn } from '../js/model/span-column.js';

function recorder() {
  const calls = { styles: 0, rects: [] };
  const ctx = {
    globalAlpha: 1,
    set fillStyle(v) {
      calls.styles += 1;
      this.style = v;
    },
    get fillStyle() {
      return this.style;
    },
    fillRect(x, y, w, h) {
      calls.rects.push({ x, y, w, h, style: this.style });
    },
  };
  return { ctx, calls };
}

/** n spans back to back, each `width` seconds, task ids 0..n-1 */
function column(n, width) {
  const col = new SpanColumn();
  for (let i = 0; i < n; i++) col.push(i * width, (i + 1) * width, i, 0);
  return col;
}

const X = (t) => 100 + t * 1000; // 1 ms a pixel

test('a dense row draws every span, a colour at a time', () => {
  const { ctx, calls } = recorder();
  const aggregated = drawRow(ctx, column(300, 0.004), 0, 1.2, X, 0, 8, 1200, { lightness: 58 }, '#00f');
  assert.equal(aggregated, false);
  const spans = calls.rects.filter((r) => r.w >= 1 && r.style !== 'rgba(0,0,0,0.35)');
  assert.equal(spans.length, 300, 'each span has its rectangle');
  assert.ok(calls.styles <= 37, `${calls.styles} colour changes for 300 spans`);
});

test('a sparse row keeps each task its exact colour', () => {
  const { ctx, calls } = recorder();
  drawRow(ctx, column(10, 0.004), 0, 1.2, X, 0, 8, 1200, { lightness: 58 }, '#00f');
  assert.equal(new Set(calls.rects.filter((r) => r.style.startsWith('hsl')).map((r) => r.style)).size, 10);
});

test('sub-pixel spans in one pixel column make one tick', () => {
  const { ctx, calls } = recorder();
  drawRow(ctx, column(20, 0.00001), 0, 1.2, X, 0, 8, 1200, { lightness: 58 }, '#00f');
  assert.equal(calls.rects.length, 1);
});

test('an aggregated row is one rectangle per run of equally busy columns', () => {
  const { ctx, calls } = recorder();
  // 5,000 spans back to back over 10 s: every column fully busy
  const aggregated = drawRow(
    ctx,
    column(5000, 0.002),
    0,
    10,
    (t) => 100 + t * 120,
    0,
    8,
    1200,
    { lightness: 58 },
    '#00f',
  );
  assert.equal(aggregated, true);
  assert.equal(calls.rects.length, 1);
  assert.deepEqual({ x: calls.rects[0].x, w: calls.rects[0].w, h: calls.rects[0].h }, { x: 100, w: 1200, h: 8 });
});
