// The compare view's memory (memory-compare.js) against Python on the same events: each process's figures
// at its last sample and at its highs, and the host's rows, are stats.summary()['memory']'s; each run's
// memory verdicts are diagnosis.findings()' memory findings, word for word. The runs are the real
// recordings of fixtures/make_memory.py (copy-on-read, a leak, batches in flight, a worker SIGKILLed) and
// a run without memory samples.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { compareMemory } from '../js/model/memory-compare.js';
import { reduce } from '../js/model/reducer.js';
import { synthesize } from '../dev/synth.js';
import { ROOT, needsPython, python } from './python.js';

const fixture = (/** @type {string} */ name) => join(ROOT, 'frontend', 'tests', 'fixtures', `memory_${name}.jsonl`);
/** @param {string} name */
const events = (name) =>
  readFileSync(fixture(name), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));

// Python's memory summary and memory findings of each file named on the command line (the same codes and
// signals as memory-compare.js: its choice of findings is checked, not only their words)
const PY_MEMORY = `
import json, sys
from loaderscope.model.diagnosis import findings
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
CODES = {'copy_on_read', 'memory_leak', 'headroom', 'shm_low', 'in_flight', 'shm_full'}
out = []
for path in sys.argv[1:]:
    s = reduce([json.loads(line) for line in open(path) if line.strip()])
    killed = [n for n in s.notes if n['kind'] == 'worker_died' and n.get('signal') in ('SIGKILL', 'SIGBUS')]
    said = [f.text for f in findings(s) if f.code in CODES
            or (f.code == 'worker_died' and any(f"(pid {n.get('pid')})" in f.text for n in killed))]
    out.append({'memory': summary(s)['memory'], 'verdicts': said})
print(json.dumps(out))
`;

/** The process `name` of a Python memory summary. @param {any} m @param {string} name */
function pyProc(m, name) {
  const procs = m.main ? [m.main, ...m.workers] : m.workers;
  return procs.find((p) => (p.worker === null ? 'main' : `worker ${p.worker}`) === name);
}

/** The figures the model gives for one side against Python's summary of that run. */
function agrees(/** @type {any} */ cmp, /** @type {'a'|'b'} */ side, /** @type {any} */ py) {
  const i = side === 'a' ? 0 : 1;
  if (py.memory === null) {
    assert.equal(cmp.sides[i], null);
    for (const row of [...cmp.procs, ...cmp.host]) assert.equal(row[side], null, row.name ?? row.key);
    return;
  }
  const m = py.memory;
  assert.deepEqual(cmp.sides[i], { samples: m.samples, source: m.source, verdicts: py.verdicts });
  const named = cmp.procs.filter((/** @type {any} */ r) => r[side] !== null).map((/** @type {any} */ r) => r.name);
  const want = [...(m.main ? [m.main] : []), ...m.workers].map((p) =>
    p.worker === null ? 'main' : `worker ${p.worker}`,
  );
  assert.deepEqual(named, want, 'every process of the run, the main process first');
  for (const row of cmp.procs) {
    if (row[side] === null) continue;
    const p = pyProc(m, row.name);
    assert.deepEqual(row[side], {
      last: { uss: p.uss, pss: p.pss, rss: p.rss },
      high: { uss: p.high_uss, pss: p.high_pss, rss: p.high_rss },
    });
  }
  for (const row of cmp.host) {
    const want = row.key === 'shm_high' && !m.shm_total ? null : m[row.key];
    assert.equal(row[side], want, row.key);
  }
}

test('both runs’ memory figures and verdicts are Python’s for the same events', { skip: needsPython }, () => {
  const names = ['copy_on_read', 'leak', 'in_flight', 'killed'];
  const py = python(PY_MEMORY, { args: names.map(fixture) });
  const runs = names.map(events);
  // each recording gives the verdict it was made for, so the comparison below is not of empty lists
  assert.match(py[0].verdicts.join('\n'), /^copy-on-read: /m);
  assert.match(py[1].verdicts.join('\n'), /^memory leak: /m);
  assert.match(py[2].verdicts.join('\n'), /^batches in flight held /m);
  assert.match(py[3].verdicts.join('\n'), /died by SIGKILL .*its last memory sample/);
  for (const [i, j] of [
    [0, 1],
    [2, 3],
    [1, 0],
  ]) {
    const cmp = compareMemory(reduce(runs[i]), reduce(runs[j]));
    agrees(cmp, 'a', py[i]);
    agrees(cmp, 'b', py[j]);
  }
});

test('a run without memory samples is null on its side; the other run keeps its figures', () => {
  const plain = reduce(synthesize({ num_workers: 2, batches: 12 }));
  const sampled = reduce(events('copy_on_read'));
  const cmp = compareMemory(plain, sampled);
  assert.equal(cmp.sides[0], null);
  assert.ok(cmp.sides[1] !== null && cmp.sides[1].samples > 0);
  assert.deepEqual(
    cmp.procs.map((r) => [r.name, r.a, r.b !== null]),
    [
      ['main', null, true],
      ['worker 0', null, true],
      ['worker 1', null, true],
    ],
  );
  assert.ok(cmp.host.every((r) => r.a === null));
  const neither = compareMemory(plain, plain);
  assert.deepEqual(neither, { sides: [null, null], procs: [], host: neither.host });
  assert.ok(neither.host.every((r) => r.a === null && r.b === null));
});
