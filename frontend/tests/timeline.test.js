import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SlotMap, TimelineStore } from '../js/model/timeline-store.js';
import { SpanColumn, lowerBound, upperBound } from '../js/model/span-column.js';
import { fitWindow, zoomWindow, panWindow, ticks, fmtDuration } from '../js/model/time-window.js';
import { synthesize } from '../dev/synth.js';
import { EventTable } from '../js/model/event-table.js';

function column(spans) {
  const c = new SpanColumn(2);
  spans.forEach(([a, b], i) => c.push(a, b, i, 0));
  return c;
}

test('binary searches', () => {
  const a = new Float64Array([1, 2, 2, 3]);
  assert.equal(lowerBound(a, 4, 2), 1);
  assert.equal(upperBound(a, 4, 2), 3);
  assert.equal(lowerBound(a, 4, 9), 4);
});

test('visible() returns exactly the spans intersecting the window', () => {
  const c = column([
    [0, 1],
    [2, 3],
    [4, 5],
    [6, 7],
  ]);
  assert.deepEqual(c.visible(1.5, 4.5), [1, 3]);
  assert.deepEqual(c.visible(0.5, 0.6), [0, 1]);
  assert.deepEqual(c.visible(7.5, 9), [4, 4]);
  assert.deepEqual(c.visible(-2, -1), [0, 0]);
});

test('busy() and occupancy() measure covered time, clipped at the edges', () => {
  const c = column([
    [0, 1],
    [2, 3],
    [4, 5],
  ]);
  assert.equal(c.busy(0, 5), 3);
  assert.equal(c.busy(0.5, 2.5), 1);
  assert.equal(c.busy(2.2, 2.7), 0.5);
  assert.equal(c.busy(1, 2), 0);
  assert.deepEqual([...c.occupancy(0, 6, 3)], [0.5, 0.5, 0.5]);
});

test('occupancy over many spans equals the brute-force sum', () => {
  const c = new SpanColumn();
  let t = 0;
  const spans = [];
  for (let i = 0; i < 5000; i++) {
    const gap = ((i * 7919) % 13) / 1000,
      dur = (((i * 104729) % 17) + 1) / 1000;
    spans.push([t + gap, t + gap + dur]);
    c.push(t + gap, t + gap + dur, i, 0);
    t += gap + dur;
  }
  for (const [a, b] of [
    [0, t],
    [0.1, 0.37],
    [3.3, 3.31],
  ]) {
    const brute = spans.reduce((s, [x, y]) => s + Math.max(0, Math.min(y, b) - Math.max(x, a)), 0);
    assert.ok(Math.abs(c.busy(a, b) - brute) < 1e-9, `busy(${a}, ${b})`);
  }
});

test('out-of-order starts are inserted in order; at() finds the span under a time', () => {
  const c = column([
    [0, 1],
    [4, 5],
    [2, 3],
  ]);
  assert.deepEqual([...c.start.slice(0, 3)], [0, 2, 4]);
  assert.equal(c.busy(0, 10), 3);
  assert.equal(c.at(2.5), 1);
  assert.equal(c.at(3.5), -1);
});

test('the store builds one fetch row per worker and a consumer row from the events', () => {
  const store = new TimelineStore();
  store.table = new EventTable();
  for (const e of synthesize({ num_workers: 4, batches: 20, pin_ms: 1 })) {
    store.table.push(e);
    store.apply(e, store.table.length - 1);
  }
  assert.equal(store.workers.size, 4);
  let fetches = 0;
  for (const col of store.workers.values()) {
    fetches += col.n;
    for (let i = 1; i < col.n; i++)
      assert.ok(col.start[i] >= col.end[i - 1] - 1e-12, 'a worker fetches one task at a time');
  }
  assert.equal(fetches, 20);
  assert.equal(store.consumer.n, 20);
  assert.equal(store.open.size, 0);
  const col = store.workers.get(1);
  assert.deepEqual(store.samplesAt(col.ref2[0]).indices, [4, 5, 6, 7], "a span knows its task's samples");
  assert.equal(store.eventAt(col.ref[0]).kind, 'fetch_end');
  assert.equal(store.pin.n, 20, 'one pin span per batch');
  for (let i = 1; i < store.pin.n; i++) assert.ok(store.pin.start[i] >= store.pin.end[i - 1] - 1e-12, 'one pin thread');
  assert.equal(store.eventAt(store.consumer.ref[0]).kind, 'yield');
});

test('a running fetch stays open until its fetch_end', () => {
  const store = new TimelineStore();
  const events = synthesize({ num_workers: 2, batches: 4 });
  const cut = events.findIndex((e) => e.kind === 'fetch_end');
  events.slice(0, cut).forEach((e) => store.apply(e));
  assert.equal(store.open.size, 2);
});

test('a million-event trace stays cheap to store and to query', () => {
  const store = new TimelineStore();
  const events = synthesize({
    num_workers: 32,
    prefetch_factor: 2,
    batches: 1_000_000 / 6,
    cost: (i, w) => 0.01 + (w % 3) * 0.002,
    step: 0.0001,
  });
  const t0 = performance.now();
  for (const e of events) store.apply(e);
  const ingest = performance.now() - t0;
  const { t0: a, t1: b } = fitWindow(store, 0);
  const q0 = performance.now();
  for (const col of store.workers.values()) col.occupancy(a, b, 1200);
  const query = performance.now() - q0;
  assert.ok(events.length > 900_000);
  // functional checks only; the timings are reported, never asserted (shared CI machines)
  assert.equal(store.workers.size, 32);
  for (const col of store.workers.values()) {
    const occ = col.occupancy(a, b, 1200);
    assert.equal(occ.length, 1200);
    assert.ok(
      [...occ].some((v) => v > 0),
      'every worker row shows work',
    );
  }
  console.log(
    `# ${events.length} events: ingest ${ingest.toFixed(0)} ms, occupancy of 32 rows × 1200 px ${query.toFixed(1)} ms`,
  );
});

test('window math: fit, zoom around a point, pan, ticks, durations', () => {
  const store = new TimelineStore();
  store.apply({ seq: 0, t: 0, kind: 'run_start', config: { num_workers: 1 } });
  store.apply({ seq: 1, t: 0, kind: 'epoch_start', epoch: 0 });
  store.apply({ seq: 2, t: 2, kind: 'epoch_end', epoch: 0 });
  const w = fitWindow(store, 3);
  assert.equal(w.t0, 0);
  assert.ok(w.t1 > 3);
  const z = zoomWindow({ t0: 0, t1: 10 }, 5, 0.5);
  assert.deepEqual(z, { t0: 2.5, t1: 7.5 });
  const z2 = zoomWindow({ t0: 0, t1: 10 }, 0, 0.5);
  assert.deepEqual(z2, { t0: 0, t1: 5 });
  assert.deepEqual(panWindow({ t0: 0, t1: 1 }, 0.5), { t0: 0.5, t1: 1.5 });
  assert.deepEqual(ticks(0, 1, 5).values, [0, 0.2, 0.4, 0.6, 0.8, 1]);
  assert.equal(fmtDuration(0.0123), '12.3 ms');
  assert.equal(fmtDuration(1.5), '1.50 s');
});

test("a recorded run's timeline starts at the loader's first event, not at the clock's zero", () => {
  // the probe's clock starts when the loader is built; its first iter() came 8.7 s later
  const store = new TimelineStore();
  store.apply({ seq: 0, t: 8.7, kind: 'run_start', config: { num_workers: 1 } });
  store.apply({ seq: 1, t: 8.71, kind: 'epoch_start', epoch: 0 });
  store.apply({ seq: 2, t: 8.75, kind: 'worker_start', worker: 0, pid: 1 });
  store.apply({ seq: 3, t: 9.7, kind: 'epoch_end', epoch: 0 });
  const w = fitWindow(store, 9.7);
  assert.equal(w.t0, 8.71);
  assert.ok(w.t1 > 9.7 && w.t1 < 9.8, `the run's 1 s fills the view (${w.t1})`);
  const bare = new TimelineStore(); // nothing after run_start yet
  bare.apply({ seq: 0, t: 8.7, kind: 'run_start', config: { num_workers: 1 } });
  assert.equal(fitWindow(bare, 8.7).t0, 0);
});

test('occupancy() galloping from slice to slice gives what busy() gives for each slice alone', () => {
  let seed = 7;
  const random = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  const c = new SpanColumn(4);
  let t = 0;
  for (let i = 0; i < 5000; i++) {
    // gaps and spans of every size, a few zero-length
    const start = t + (random() < 0.3 ? random() * 0.05 : 0);
    t = start + (random() < 0.05 ? 0 : random() * random() * 0.02);
    c.push(start, t, i, 0);
  }
  for (const [t0, t1, buckets] of [
    [-1, t + 1, 600],
    [0, t, 7],
    [t * 0.4, t * 0.41, 300],
    [t * 0.2, t * 0.9, 1],
    [t + 1, t + 2, 50],
  ]) {
    const w = (t1 - t0) / buckets;
    const each = Float32Array.from({ length: buckets }, (_, k) => Math.min(1, c.busy(t0 + k * w, t0 + k * w + w) / w));
    assert.deepEqual(c.occupancy(t0, t1, buckets), each, `[${t0}, ${t1}) in ${buckets}`);
  }
  // on a grid of eighths, so that slice edges fall exactly on span starts and ends
  const grid = new SpanColumn(4);
  let g = 0;
  for (let i = 0; i < 2000; i++) {
    const start = g + Math.floor(random() * 3) / 8;
    g = start + Math.floor(random() * 4) / 8;
    grid.push(start, g, i, 0);
  }
  for (const [t0, t1, buckets] of [
    [0, g, g * 8],
    [0, g, g * 4],
    [1, g - 1, (g - 2) * 2],
  ]) {
    const w = (t1 - t0) / buckets;
    const each = Float32Array.from({ length: buckets }, (_, k) =>
      Math.min(1, grid.busy(t0 + k * w, t0 + k * w + w) / w),
    );
    assert.deepEqual(grid.occupancy(t0, t1, buckets), each, `grid [${t0}, ${t1}) in ${buckets}`);
  }
  assert.deepEqual(new SpanColumn().occupancy(0, 1, 3), new Float32Array(3));
});

test('SlotMap answers as a Map does, keys that share a slot and negative keys included', () => {
  const map = new Map();
  const slots = new SlotMap();
  let seed = 7;
  const random = (n) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  // keys a few slots' worth apart (SLOTS = 4096): most collide with a live one
  const keys = [-3, -1, 0, 1, 2, 4095, 4096, 4097, 8192, 12288, 2 ** 31 - 1, -4096];
  for (let step = 0; step < 20000; step++) {
    const key = keys[random(keys.length)];
    const op = random(10);
    if (op < 4) {
      map.set(key, step);
      slots.set(key, step);
    } else if (op < 8) {
      map.delete(key);
      slots.delete(key);
    } else if (op === 8 && random(100) === 0) {
      map.clear();
      slots.clear();
    }
    for (const k of keys) assert.equal(slots.get(k), map.get(k), `key ${k} at step ${step}`);
    assert.equal(slots.size, map.size);
  }
});
