// The cost form sends only what differs from the defaults, nested as CostModel expects, and the
// simulator accepts it (checked against loaderscope.sim.CostModel).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { COST_FIELDS, costsFromForm, costField } from '../js/model/costs.js';
import { fieldsFromSchema, readValue } from '../js/views/form.js';
import { python, needsPython } from './python.js';

const defaults = () => Object.fromEntries(fieldsFromSchema(COST_FIELDS).map((f) => [f.name, f.default ?? null]));

test('defaults send nothing; changes are nested as CostModel wants them', () => {
  assert.equal(costsFromForm(defaults()), null);
  const v = {
    ...defaults(),
    pin_ms_per_mb: 20,
    sample_bytes: 100000,
    slow_worker: 1,
    slow_factor: 4,
    stall_task: 3,
    stall_seconds: 2,
    die_task: 7,
    sample_dist: 'lognormal',
    sample_mean_ms: 4,
    sample_sd_ms: 2,
  };
  assert.deepEqual(costsFromForm(v), {
    pin_ms_per_mb: 20,
    sample_bytes: 100000,
    worker_factor: { 1: 4 },
    stalls: [{ task: 3, seconds: 2 }],
    die: { task: 7 },
    sample: { dist: 'lognormal', mean_ms: 4, sd_ms: 2 },
  });
  assert.equal(
    readValue(
      fieldsFromSchema(COST_FIELDS).find((f) => f.name === 'step_ms'),
      '',
    ).value,
    null,
    "empty means the scenario's",
  );
});

test('server problems find their field', () => {
  assert.equal(costField('costs.pin_ms_per_mb'), 'pin_ms_per_mb');
  assert.equal(costField('costs.stalls.0.seconds'), 'stall_seconds');
  assert.equal(costField('costs.sample.mean_ms'), 'sample_mean_ms');
  assert.equal(costField('costs.worker_factor.1'), 'slow_factor');
  assert.equal(costField('params.num_workers'), null);
});

test('CostModel accepts what the form sends', { skip: needsPython }, () => {
  const v = {
    ...defaults(),
    pin_ms_per_mb: 20,
    slow_worker: 1,
    slow_factor: 4,
    stall_task: 3,
    stall_seconds: 2,
    die_task: 7,
    sample_dist: 'normal',
    sample_mean_ms: 4,
    sample_sd_ms: 1,
    step_ms: 3,
  };
  const model = python(
    'import json,sys; from loaderscope.sim import CostModel; ' +
      'print(CostModel.model_validate(json.loads(sys.argv[1])).model_dump_json())',
    { args: [JSON.stringify(costsFromForm(v))] },
  );
  assert.equal(model.pin_ms_per_mb, 20);
});
