// The view in the URL (url-state.js), search (search.js), a range's figures (range.js) and the run
// compare opens beside the viewed one (run-list.js previousRun). The browser tests drive them in the
// page (tests/browser/test_views.py, test_views_themes_and_axe.py); these pin their rules.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseView, viewSearch, withoutRunView } from '../js/model/url-state.js';
import { parseQuery, search } from '../js/model/search.js';
import { rangeFigures, stateAt } from '../js/model/range.js';
import { previousRun } from '../js/model/run-list.js';
import { Track } from '../js/model/track.js';
import { reduce } from '../js/model/reducer.js';
import { synthesize } from '../dev/synth.js';

test('a view survives its URL: every parameter, and the run and others kept as they were', () => {
  const v = {
    at: 1234,
    view: [0.5, 2.25],
    worker: 3,
    batch: [1, 17],
    range: [1, 1.5],
    compare: ['abc', 'def'],
    theme: 'light',
  };
  const s = viewSearch(v, '?run=abc&token=secret&other=1');
  assert.equal(s, '?run=abc&other=1&at=1234&view=0.5,2.25&worker=3&batch=1.17&range=1,1.5&compare=abc,def&theme=light');
  assert.deepEqual(parseView(s), v);
  assert.equal(viewSearch({}, s), '?run=abc&other=1', 'an empty view leaves no parameter of its own');
  const url = withoutRunView(new URL(`http://x/${s}`));
  assert.deepEqual(
    [...url.searchParams.keys()],
    ['run', 'other', 'compare', 'theme'],
    "another run: the old run's view goes",
  );
});

test('a parameter that does not parse is left out, never an error', () => {
  assert.deepEqual(parseView('?at=-1&view=2,1&worker=x&batch=1&range=1,&compare=a&theme=blue'), {});
  assert.deepEqual(parseView('?view=0,1e-3'), { view: [0, 0.001] });
  assert.equal(viewSearch({ view: [0.1234567891, 2] }, ''), '?view=0.123457,2', 'times to the microsecond');
});

test('queries: task, sample, worker, rank by prefix; a bare number asks for all; words for the notes', () => {
  assert.deepEqual([...parseQuery('task 17').kinds], ['task']);
  assert.deepEqual([...parseQuery('#17').kinds], ['task']);
  assert.equal(parseQuery('  Sample   13 ').number, 13);
  assert.deepEqual([...parseQuery('s13').kinds], ['sample']);
  assert.deepEqual([...parseQuery('w2').kinds], ['worker']);
  assert.deepEqual([...parseQuery('rank 1').kinds], ['rank']);
  assert.deepEqual([...parseQuery('17').kinds].sort(), ['rank', 'sample', 'task', 'worker']);
  assert.equal(parseQuery('stuck on').number, null);
});

/** A track with a synthetic run in it. */
function run(o = {}) {
  const tr = new Track({ rank: 0, label: 'rank 0', source: 'file' });
  const events = synthesize({ num_workers: 3, batches: 30, ...o });
  events.forEach((e, i) => {
    e.seq = i;
    tr.ingest(e);
  });
  return { tr, events };
}

test('search finds a task where it was fetched, and a sample in the task that held it', () => {
  const { tr, events } = run();
  const notes = [{ text: 'worker 1 stuck on task 4 for 11.0 s', t: 1, row: 20, worker: 1 }];
  const where = { store: tr.store, table: tr.player.table, notes, ranks: [0], rank: 0 };
  const [hit] = search(where, 'task 7');
  const start = events.find((e) => e.kind === 'fetch_start' && e.idx === 7);
  const end = events.find((e) => e.kind === 'fetch_end' && e.idx === 7);
  assert.equal(hit.kind, 'task');
  assert.equal(hit.t, start.t);
  assert.deepEqual(hit.spans, [{ worker: start.worker, t0: start.t, t1: end.t }]);
  assert.deepEqual(hit.tasks, ['0:7']);
  const held = events.find((e) => e.kind === 'dispatch' && (e.indices ?? []).includes(40));
  const [sample] = search(where, 'sample 40');
  assert.equal(sample.idx, held.idx);
  assert.match(sample.text, new RegExp(`^sample index 40 \\(\\d+ of \\d+\\) in task ${held.idx} `));
  assert.deepEqual(
    search(where, 'worker 2').map((h) => h.kind),
    ['worker'],
  );
  assert.deepEqual(
    search(where, 'rank 0').map((h) => h.kind),
    ['rank'],
    'asked by name: the one rank too',
  );
  assert.deepEqual(
    search(where, '0')
      .map((h) => h.kind)
      .filter((k) => k === 'rank'),
    [],
    'a bare number: a rank only in a job',
  );
  const [finding] = search(where, 'STUCK ON');
  assert.deepEqual([finding.kind, finding.row, finding.worker], ['finding', 20, 1]);
  assert.deepEqual(search(where, 'task 999'), []);
});

test("a range's figures are the difference of the states at its ends, as Python's reduce gives them", () => {
  const { tr, events } = run({ batches: 60 });
  const p = tr.player;
  const t0 = events[40].t,
    t1 = events[200].t;
  const f = rangeFigures(p, t0, t1);
  assert.ok(f.from > 0 && f.to > f.from && f.to < p.length);
  const a = reduce(events.slice(0, f.from)),
    b = reduce(events.slice(0, f.to));
  assert.equal(f.events, f.to - f.from);
  assert.equal(f.batches, b.batches - a.batches);
  assert.equal(f.wait, b.consumer_wait - a.consumer_wait);
  for (const w of f.workers) {
    const times = b.workers.get(w.worker).fetch_times.slice(a.workers.get(w.worker)?.fetch_times.length ?? 0);
    assert.equal(w.fetches, times.length);
  }
  // the player's cursor stays where it was
  p.seek(17);
  rangeFigures(p, t0, t1);
  assert.equal(p.cursor, 17);
  assert.equal(stateAt(p, p.length), p.full);
});

test('compare opens beside the previous run of the same loader, else the run before, else the newest', () => {
  const runs = [
    { id: 'u1', scenario: 'uniform', started: 10 },
    { id: 'o1', scenario: 'out_of_order', started: 20 },
    { id: 'u2', scenario: 'uniform', started: 30 },
    { id: 'r1', name: 'train', rank: 1, started: 40 },
    { id: 'r0', name: 'train', rank: 0, started: 41 },
  ];
  assert.equal(previousRun(runs, 'u2'), 'u1');
  assert.equal(previousRun(runs, 'o1'), 'u1', 'no earlier run of its loader: the run before it');
  assert.equal(previousRun(runs, 'u1'), 'r0', 'the first run: the newest other');
  assert.equal(previousRun(runs, 'r0'), 'r1', 'another rank is not the same loader: the run before');
  assert.equal(previousRun([...runs, { id: 'r0b', name: 'train', rank: 0, started: 50 }], 'r0b'), 'r0');
  assert.equal(previousRun([{ id: 'x' }], 'x'), null);
});
