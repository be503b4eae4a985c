// The timeline's memory lanes read the memory model's series: the point in force at a time, a
// process's figures in it, and the lanes' scales. Checked on a real recorded copy-on-read run
// (fixtures/make_memory.py) against its own `memory` events.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { reduce } from '../js/model/reducer.js';
import { MAIN, headroom, headroomScale, pointAt, procAt, rssScale } from '../js/model/memory.js';

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
