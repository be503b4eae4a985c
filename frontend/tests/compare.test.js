// compare.js must agree with backend/loaderscope/model/compare.py: the same events in, the same
// comparison out (settings, metrics, histograms on shared edges, diagnosis changes).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { writeFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BINS, compareRuns, diagnosisDiff, normalise, sideOf } from '../js/model/compare.js';
import { binCounts, logEdges } from '../js/model/bins.js';
import { reduce } from '../js/model/reducer.js';
import { synthesize } from '../dev/synth.js';
import { PY, ROOT, needsPython } from './python.js';

const ENV = { ...process.env, PYTHONPATH: join(ROOT, 'backend') };

/** Run Python with the backend on its path; its stdout parsed as JSON. */
function python(script, ...args) {
  const r = spawnSync(PY, ['-c', script, ...args], { encoding: 'utf8', cwd: ROOT, env: ENV, maxBuffer: 1 << 28 });
  assert.ok(!r.error, `cannot run Python at ${PY} (${r.error?.message}): set $PYTHON (scripts/test.sh does)`);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

/** Deep equality with numbers equal to a relative 1e-9 (libm and V8 may differ in the last bit). */
function agree(js, py, path = '') {
  if (typeof py === 'number' && typeof js === 'number') {
    assert.ok(Math.abs(js - py) <= 1e-9 * Math.max(1, Math.abs(py)), `${path}: ${js} vs ${py}`);
  } else if (py && typeof py === 'object') {
    assert.equal(typeof js, 'object', path);
    assert.deepEqual(Object.keys(js ?? {}).sort(), Object.keys(py).sort(), `${path} keys`);
    for (const k of Object.keys(py)) agree(js[k], py[k], `${path}.${k}`);
  } else assert.deepEqual(js, py, path);
}

test('normalise blanks numbers but keeps worker ids, as compare.py does', () => {
  assert.equal(
    normalise('straggler: worker 1 fetches 3.1× slower (median 80 ms vs 20 ms)'),
    'straggler: worker 1 fetches #× slower (median # ms vs # ms)',
  );
  assert.equal(
    normalise('worker 2 (pid 12821) died by exit code -9; cuda:0, h2d 1,750 MB/s; 2 worker(s)'),
    'worker 2 (pid #) died by exit code #; cuda:#, h2d # MB/s; # worker(s)',
  );
});

test('diagnosisDiff pairs equal findings, then same topics, and leaves the rest to one side', () => {
  const a = [
    'straggler: worker 1 fetches 3.0× slower',
    'reorder cost: 12 results',
    'training waited for data 90%; loading',
  ];
  const b = [
    'training waited for data 5%; the step',
    'reorder cost: 3 results',
    'straggler: worker 2 fetches 2.0× slower',
  ];
  assert.deepEqual(diagnosisDiff(a, b), {
    only_a: [a[0]],
    only_b: [b[2]],
    both: [
      { a: a[1], b: b[1], changed: true },
      { a: a[2], b: b[0], changed: true },
    ],
  });
});

test('histogram edges are shared and every fetch is counted', () => {
  const a = synthesize({ num_workers: 2, batches: 20 });
  const b = synthesize({ num_workers: 4, batches: 20, cost: (idx) => 0.01 + 0.002 * (idx % 4) });
  const { histograms } = compareRuns(a, b);
  assert.equal(histograms.edges.length, 25);
  for (const side of ['a', 'b'])
    for (const w of histograms[side])
      assert.equal(
        w.counts.reduce((x, y) => x + y, 0),
        w.tasks,
      );
  assert.deepEqual(binCounts([1e-7, 5], logEdges(0.01, 0.1, BINS)), [1, ...new Array(BINS - 2).fill(0), 1]);
});

test('a state with its run_start compares like the events it came from', () => {
  const a = synthesize({ num_workers: 2, batches: 12 }),
    b = synthesize({ num_workers: 3, batches: 12 });
  const fromState = compareRuns({ state: reduce(a), start: a[0] }, { state: reduce(b), start: b[0] });
  assert.deepEqual(fromState, compareRuns(a, b));
  assert.equal(sideOf(a, 'x').start?.kind, 'run_start');
});

test('agrees with backend/loaderscope/model/compare.py on the same events', { skip: needsPython }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'ls-compare-'));
  // the simulator's runs: a straggler that is gone in B, and a num_workers change
  const sims = python(`
import json
from loaderscope.scenarios.plan import resolve
from loaderscope.sim import simulate
def sim(name, **p):
    plan = resolve(name, p)
    return simulate(plan.build(), run_id=name, scenario=name, params=plan.values())
print(json.dumps({"straggler": [sim("straggler", num_workers=4, slow_worker=1),
                                sim("straggler", num_workers=4, slow_factor=1)],
                  "workers": [sim("uniform", num_workers=1), sim("uniform", num_workers=2, prefetch_factor=4)]}))`);
  const h100 = readFileSync(join(ROOT, 'frontend', 'tests', 'fixtures', 'gpu_step_h100.jsonl'), 'utf8')
    .split('\n')
    .slice(1)
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const cases = {
    ...sims,
    synth: [
      synthesize({ num_workers: 2, batches: 30 }),
      synthesize({ num_workers: 4, batches: 30, pin_ms: 3, in_order: false }),
    ],
    slow: [
      synthesize({ num_workers: 3, batches: 24, cost: (idx) => (idx % 3 === 2 ? 0.08 : 0.02) }),
      synthesize({ num_workers: 0, batches: 8 }),
    ],
    h100: [h100, synthesize({ num_workers: 2, batches: 10, step: 0.01 })],
  };
  const file = join(dir, 'cases.json');
  writeFileSync(file, JSON.stringify(cases));
  const py = python(
    `
import json, sys
from loaderscope.model.compare import compare
cases = json.load(open(sys.argv[1]))
print(json.dumps({name: compare(a, b, labels=(name + " A", name + " B")) for name, (a, b) in cases.items()}))`,
    file,
  );
  for (const [name, [a, b]] of Object.entries(cases))
    agree(compareRuns(a, b, [`${name} A`, `${name} B`]), py[name], name);
  assert.ok(
    py.straggler.diagnosis.only_a.some((t) => t.startsWith('straggler: worker 1 ')),
    'the straggler is gone in B',
  );
});
