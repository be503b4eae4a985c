// The timeline's memory lanes read the memory model's series: the point in force at a time, a
// process's figures in it, and the lanes' scales. Checked on a real recorded copy-on-read run
// (fixtures/make_memory.py) against its own `memory` events.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { reduce } from '../js/model/reducer.js';
import { MAIN, headroom, headroomScale, memorySummary, pointAt, procAt, rssScale } from '../js/model/memory.js';
import { withLightSamples } from './memory-light.js';

const events = readFileSync(fileURLToPath(new URL('fixtures/memory_copy_on_read.jsonl', import.meta.url)), 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((line) => JSON.parse(line));
const samples = events.filter((e) => e.kind === 'memory');
const series = reduce(events).memory.series;

test('the point in force at t is the last sample at or before t', () => {
  assert.ok(samples.length >= 3 && series.length === samples.length); // few samples: none dropped
  assert.equal(pointAt(series, samples[0].t - 1e-6), -1);
  samples.forEach((e, i) => {
    assert.equal(pointAt(series, e.t), i);
    const next = samples[i + 1]?.t ?? e.t + 1;
    assert.equal(pointAt(series, (e.t + next) / 2), i);
  });
  assert.equal(pointAt([], 1), -1);
});

test("a process's figures at a point are its sample's, and the scales the highest seen", () => {
  let top = 0;
  samples.forEach((e, i) => {
    for (const p of e.procs) {
      const key = p.worker ?? MAIN;
      assert.deepEqual(procAt(series, i, key), { t: e.t, uss: p.uss, shared: p.shared, rss: p.rss });
      top = Math.max(top, p.rss);
    }
    assert.equal(procAt(series, i, 99), null); // no such worker
  });
  assert.equal(procAt(series, -1, MAIN), null);
  assert.equal(rssScale(series), top);
  assert.equal(headroomScale(series), Math.max(...samples.map((e) => headroom(e) ?? 0)));
  assert.equal(rssScale([]), 0);
});

/** @param {string} name */
function fixture(name) {
  return readFileSync(fileURLToPath(new URL(`fixtures/memory_${name}.jsonl`, import.meta.url)), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

test('light samples count for RSS and its high, full ones alone for USS, PSS, copy-on-read and the trend', () => {
  const run = fixture('leak');
  const mixed = withLightSamples(run);
  const all = mixed.filter((e) => e.kind === 'memory');
  const full = all.filter((e) => !e.light);
  const m = reduce(mixed).memory,
    alone = memorySummary(reduce(run).memory);
  const sum = memorySummary(m);
  assert.ok(sum !== null && alone !== null && full.length >= 3);
  assert.equal(sum.samples, all.length);
  assert.equal(sum.full_samples, full.length);
  /** @param {any[]} list @param {number} key */
  const of = (list, key) => list.flatMap((e) => e.procs.filter((p) => (p.worker ?? MAIN) === key));
  for (const p of [sum.main, ...sum.workers]) {
    assert.ok(p !== null);
    const key = p.worker ?? MAIN;
    assert.equal(p.rss, of(all, key).at(-1).rss); // the latest sample's, a light one
    assert.equal(p.high_rss, Math.max(...of(all, key).map((q) => q.rss)));
    assert.ok(p.high_rss > Math.max(...of(full, key).map((q) => q.rss)));
    assert.equal(p.uss, of(full, key).at(-1).uss); // the last full sample's
    assert.equal(p.high_uss, Math.max(...of(full, key).map((q) => q.uss)));
    assert.equal(p.t, all.at(-1).t);
    assert.equal(p.full_t, full.at(-1).t);
  }
  // what reads PSS or USS is the full samples' alone: the same as the run without light samples
  for (const name of ['total_pss', 'total_high', 'growth_per_s', 'trend_span'])
    assert.equal(sum[name], alone[name], name);
  assert.deepEqual(
    sum.workers.map((w) => [w.grown, w.copied]),
    alone.workers.map((w) => [w.grown, w.copied]),
  );
  // the series: a light point has RSS, no USS, shared or PSS sum
  const light = m.series.find((point) => point[3] === null);
  assert.ok(light !== undefined && light[4].every((p) => p[1] === null && p[2] === null && p[3] > 0));
});

test("a worker killed after a light sample is said with that sample's RSS", () => {
  const mixed = withLightSamples(fixture('killed'));
  const died = reduce(mixed).notes.find((n) => n.kind === 'worker_died');
  const last = mixed.filter((e) => e.kind === 'memory' && e.t <= died.t + 1).at(-1);
  const worker = last.procs.find((/** @type {any} */ p) => p.worker === died.worker);
  assert.ok(last.light && worker !== undefined);
  assert.equal(died.memory.rss, worker.rss);
  assert.equal(died.memory.t, last.t);
});

test('a long run of mixed samples keeps its full points when the series is halved', () => {
  const events = [];
  for (let i = 0; i < 4000; i++) {
    const full = i % 8 === 0;
    const p = full ? { pid: 1, rss: 100 + i, uss: 50, pss: 60, shared: 50 + i } : { pid: 1, rss: 100 + i };
    events.push({
      seq: i,
      t: i / 4,
      run: 'r',
      rank: 0,
      kind: 'memory',
      source: 's',
      procs: [p],
      ...(full ? {} : { light: true }),
    });
  }
  const m = reduce(events).memory;
  assert.ok(m.series.length < 512);
  const fulls = m.series.filter((point) => point[3] !== null).length;
  assert.ok(fulls >= m.series.length / 3, `${fulls} full points of ${m.series.length}`);
  assert.equal(m.full_samples, 500);
});
