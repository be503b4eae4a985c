// advice.js must word the advice as backend/loaderscope/model/advicetext.py's advice_text does: the same
// Advice in, the same sentence out, numbers rounded as Python rounds them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { adviceText } from '../js/model/advice.js';
import { needsPython, python } from './python.js';

/** @returns {import('../js/model/advice.js').Advice} */
function advice(/** @type {Partial<import('../js/model/advice.js').Advice>} */ o) {
  return {
    status: 'keep_up',
    workers: 3,
    batches_per_s: 41.25,
    waiting: 0.045,
    recorded_workers: 1,
    recorded_batches_per_s: 14.5,
    replayed_batches_per_s: 14.75,
    error: 0.0172,
    setting: { num_workers: 1 },
    step_ms: 20.5,
    rows: [],
    reason: null,
    ...o,
  };
}

const CASES = [
  advice({}),
  advice({ workers: 0, recorded_workers: 2 }),
  // exact ties, which Python rounds to the even digit: 0.125 → 12%, 9.995 and 10.25 → .2f/.1f
  advice({ waiting: 0.125, batches_per_s: 10.25, recorded_batches_per_s: 0.125, replayed_batches_per_s: 9.995 }),
  advice({ status: 'limited', workers: 4, waiting: 0.315, error: -0.0004 }),
  advice({ status: 'limited', workers: 2, error: -0.0 }),
  advice({ status: 'more', workers: 32, batches_per_s: 812.75, waiting: 0.6, error: 0.0999 }),
  advice({ status: 'keep_up', error: 0, waiting: 0 }),
  advice({
    status: 'off',
    workers: null,
    batches_per_s: null,
    waiting: null,
    error: 0.14,
    reason:
      "the simulator's replay of the recorded setting is off by 14.0% (1.14 batches/s against 1.00 recorded), " +
      'more than the 10% it must come within: no recommendation',
  }),
  advice({ status: 'none', workers: null, reason: 'the run yielded no batch: nothing to advise on' }),
  // a count over the memory the run had (sim.footprint.over_text's words)
  advice({
    workers: 16,
    memory:
      'num_workers=16: about 16 × 1.2 GB for the workers (19.8 GB with the main process), ' +
      'more than the 12.0 GB available',
  }),
];

test('advice.js says what advice_text says, case by case', { skip: needsPython }, () => {
  const said = python(
    'import json, sys\nfrom loaderscope.model.advicetext import advice_text\n' +
      'print(json.dumps([advice_text(a) for a in json.load(sys.stdin)]))',
    { input: JSON.stringify(CASES) },
  );
  assert.deepEqual(CASES.map(adviceText), said);
  assert.ok(
    said
      .at(-1)
      .endsWith(
        'own; but it would not fit in memory: num_workers=16: about 16 × 1.2 GB for the ' +
          'workers (19.8 GB with the main process), more than the 12.0 GB available',
      ),
  );
});

test('advice.js words a real advice as advice_text does', { skip: needsPython }, () => {
  // a simulated run (4 ms per sample, a 2 ms step, one worker), advised by the Python core: the page
  // gets this JSON. A workload of its own, with its batches given: no torch to import.
  const [given, text] = python(
    'import json\nfrom loaderscope.scenarios.workload import Workload\n' +
      'from loaderscope.settings import LoaderSettings\n' +
      'from loaderscope.sim import simulate\nfrom loaderscope.model.advicetext import advice_text\n' +
      'from loaderscope.sim.advice import advise\n' +
      'loader = Workload(LoaderSettings(batch_size=8, num_workers=1), "map", 64, lambda index, worker: 0.004,\n' +
      '                  lambda: None, step_cost=0.002)\n' +
      'batches = [[list(range(i, i + 8)) for i in range(0, 64, 8)]]\n' +
      'events = simulate(loader, run_id="r", scenario="mine", params={}, batches=batches)\n' +
      'a = advise(events)\nprint(json.dumps([a, advice_text(a)]))',
  );
  assert.equal(given.status, 'keep_up');
  assert.equal(adviceText(given), text);
});
