import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  pipelineLayout,
  queueSlot,
  queueCapacity,
  fetchSlot,
  resultSlot,
  bufferSlot,
  consumerSlot,
  gridCapacity,
  overlaps,
  inside,
  HEADER,
  MIN_WIDTH,
  tokenSize,
  pinSlot,
  pinnedSlot,
  handSlot,
  pipelineHeight,
  RCVD_TEXT,
} from '../js/model/layout.js';

const SIZES = [
  [1000, 360],
  [1400, 420],
  [1920, 700],
  [MIN_WIDTH, 300],
];

test('columns never overlap and stay inside the canvas', () => {
  for (const [width, height] of SIZES) {
    for (const lanes of [1, 2, 4, 8, 16, 32]) {
      const L = pipelineLayout({ width, height, lanes });
      const cols = [L.sampler, L.dispatcher, L.lanes[0].rect, L.result, L.buffer, L.consumer];
      for (let i = 0; i < cols.length; i++) {
        assert.ok(cols[i].x >= 0 && cols[i].x + cols[i].w <= L.width, `col ${i} inside at ${width}x${height}/${lanes}`);
        for (let j = i + 1; j < cols.length; j++)
          assert.ok(!overlaps(cols[i], cols[j]), `cols ${i},${j} at ${width}/${lanes}`);
      }
    }
  }
});

test('one lane per worker, stacked without overlap inside the area', () => {
  for (const lanes of [1, 4, 8, 32]) {
    const L = pipelineLayout({ width: 1400, height: 420, lanes });
    assert.equal(L.lanes.length, lanes);
    for (let i = 0; i < lanes; i++) {
      const { rect, label, queue, fetch } = L.lanes[i];
      assert.ok(rect.y + rect.h <= L.top + L.areaH + 0.5, `lane ${i} fits`);
      assert.ok(!overlaps(label, queue) && !overlaps(queue, fetch) && !overlaps(label, fetch));
      if (i) assert.ok(!overlaps(rect, L.lanes[i - 1].rect));
    }
  }
});

test('slots lie inside their boxes; head of the index queue sits next to the fetch box', () => {
  for (const lanes of [1, 4, 8, 32]) {
    const L = pipelineLayout({ width: 1400, height: 420, lanes, digits: 3 });
    const cap = queueCapacity(L, 0);
    assert.ok(cap >= 3, 'room for a few waiting tasks');
    for (let k = 0; k < cap; k++) assert.ok(inside(queueSlot(L, 0, k), L.token, L.lanes[0].queue), `queue slot ${k}`);
    assert.equal(queueSlot(L, 0, cap), null);
    assert.ok(queueSlot(L, 0, 0).x > queueSlot(L, 0, 1).x, 'head is rightmost');
    assert.ok(inside(fetchSlot(L, lanes - 1), L.token, L.lanes[lanes - 1].fetch));
    for (const [slot, box, header] of [
      [resultSlot, L.result, HEADER.result],
      [bufferSlot, L.buffer, HEADER.buffer],
      [consumerSlot, L.consumer, HEADER.consumer],
    ]) {
      const n = gridCapacity(box, L.token, header);
      assert.ok(n >= 4, 'room for a few tokens');
      for (let k = 0; k < n; k++) assert.ok(inside(slot(L, k), L.token, box));
      assert.equal(slot(L, n), null);
    }
  }
});

test('tokens grow with task id digits and shrink with lane height, within bounds', () => {
  assert.ok(tokenSize(40, 5).w > tokenSize(40, 1).w);
  assert.ok(tokenSize(60, 2).h <= 22 && tokenSize(5, 2).h >= 10);
});

test('with a pin column (active or disabled) nothing overlaps and the index queues keep room', () => {
  for (const pin of ['active', 'disabled']) {
    for (const [width, height] of [
      [1100, 420],
      [1400, 500],
      [800, 360],
    ]) {
      for (const lanes of [1, 4, 8, 32]) {
        const L = pipelineLayout({ width, height, lanes, pin, digits: 3 });
        const cols = [L.sampler, L.dispatcher, L.lanes[0].rect, L.result, L.pinCol, L.buffer, L.consumer];
        for (let i = 0; i < cols.length; i++) {
          assert.ok(cols[i].x >= 0 && cols[i].x + cols[i].w <= L.width, `col ${i} inside (${pin} ${width}/${lanes})`);
          for (let j = i + 1; j < cols.length; j++)
            assert.ok(!overlaps(cols[i], cols[j]), `cols ${i},${j} (${pin} ${width}/${lanes})`);
        }
        // a slim picture (800 px with a pin column) keeps full-size text and gives up index-queue slots: one at least
        assert.ok(
          queueCapacity(L, 0) >= (L.slim ? 1 : 2),
          `index queue shows tokens (${pin} ${width}/${lanes}): ${queueCapacity(L, 0)}`,
        );
        assert.ok(!overlaps(L.pinThread, L.pinned));
        assert.ok(inside(pinSlot(L), L.token, L.pinThread), 'the pinning task sits in the pin thread box');
        for (let k = 0; k < gridCapacity(L.pinned, L.token, HEADER.pinned); k++)
          assert.ok(inside(pinnedSlot(L, k), L.token, L.pinned));
      }
    }
  }
  assert.equal(pipelineLayout({ width: 1100, height: 400, lanes: 2 }).pinCol, null, 'pin_memory=False: no column');
});

test('many workers (17..64): compact rows, two columns past 32, nothing overlaps, tokens fit', async () => {
  const { pipelineHeight, laneGrid, COMPACT_ROW } = await import('../js/model/layout.js');
  for (const width of [MIN_WIDTH, 1100, 1440]) {
    for (const lanes of [16, 17, 24, 32, 33, 48, 63, 64]) {
      for (const pin of ['none', 'active']) {
        const L = pipelineLayout({ width, height: pipelineHeight(lanes), lanes, digits: 4, pin });
        const g = laneGrid(lanes);
        assert.equal(L.lanes.length, lanes);
        assert.equal(L.laneCols, lanes >= 33 ? 2 : 1);
        if (g.compact) assert.equal(L.laneH, COMPACT_ROW, `full-height rows at ${lanes}`);
        const right = (L.pinCol ?? L.result).x;
        for (let i = 0; i < lanes; i++) {
          const { rect, label, queue, fetch } = L.lanes[i];
          assert.ok(
            rect.y + rect.h <= L.top + L.areaH + 0.5 && rect.x + rect.w <= L.result.x,
            `lane ${i} inside (${width}/${lanes})`,
          );
          assert.ok(label.w >= 60 && label.h >= 16, 'room for "worker 63"');
          assert.ok(!overlaps(label, queue) && !overlaps(queue, fetch) && !overlaps(label, fetch));
          assert.ok(inside(fetchSlot(L, i), L.token, fetch));
          assert.ok(queue.w >= 0 && fetch.w >= L.token.w + 8, `queue and fetch room (${width}/${lanes})`);
          for (let j = 0; j < i; j++)
            assert.ok(!overlaps(rect, L.lanes[j].rect), `lanes ${i},${j} (${width}/${lanes})`);
        }
        assert.ok(right > L.lanes[lanes - 1].rect.x);
      }
    }
  }
});

test('the batch next() holds has a lane of its own under rcvd_idx, clear of its text and of the consumer', () => {
  for (const lanes of [1, 4, 8, 16, 64]) {
    for (const pin of ['none', 'active']) {
      const L = pipelineLayout({ width: 1200, height: pipelineHeight(lanes), lanes, pin });
      const p = handSlot(L);
      assert.ok(inside(p, L.token, L.rcvdCursor), `lanes ${lanes}: inside rcvd_idx's box`);
      assert.ok(p.y >= L.rcvdCursor.y + RCVD_TEXT, `lanes ${lanes}: below the text`);
      assert.ok(!overlaps({ ...p, ...L.token }, L.consumer), `lanes ${lanes}: not on the consumer`);
    }
  }
});

test('a window narrower than the minimum gets slim columns at full size (no scaling) down to NARROW_MIN', async () => {
  const { NARROW_MIN, NARROW_MIN_PIN } = await import('../js/model/layout.js');
  for (const pin of ['none', 'active', 'disabled']) {
    for (const width of [pin === 'none' ? NARROW_MIN : NARROW_MIN_PIN, 778, 900]) {
      for (const lanes of [1, 4, 8]) {
        const L = pipelineLayout({ width, height: pipelineHeight(lanes), lanes, pin, digits: 2 });
        assert.ok(L.slim, `slim at ${width}`);
        assert.equal(
          L.width,
          Math.max(width, pin === 'none' ? NARROW_MIN : NARROW_MIN_PIN),
          `no wider than the window (${pin} ${width})`,
        );
        const cols = [L.sampler, L.dispatcher, L.lanes[0].rect, L.result, L.pinCol, L.buffer, L.consumer].filter(
          Boolean,
        );
        for (let i = 0; i < cols.length; i++) {
          assert.ok(
            cols[i].x >= 0 && cols[i].x + cols[i].w <= L.width + 0.5,
            `col ${i} inside (${pin} ${width}/${lanes})`,
          );
          for (let j = i + 1; j < cols.length; j++)
            assert.ok(!overlaps(cols[i], cols[j]), `cols ${i},${j} (${pin} ${width}/${lanes})`);
        }
        assert.ok(queueCapacity(L, 0) >= 1, `index queue (${pin} ${width}/${lanes})`);
      }
    }
  }
});
