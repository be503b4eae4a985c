import { test } from 'node:test';
import assert from 'node:assert/strict';
import { niceMax, parseValues, sweepErrorField, sweepRequest, sweepSeries } from '../js/model/sweep.js';

test('values: numbers, booleans, strings; empty and repeated refused', () => {
  assert.deepEqual(parseValues('1, 2,4 8').values, [1, 2, 4, 8]);
  assert.deepEqual(parseValues('0.5,true,spawn').values, [0.5, true, 'spawn']);
  assert.ok(parseValues(' ').error);
  assert.ok(parseValues('1,1').error);
});

test('request: grid of one or two keys, bounded to 36 combinations', () => {
  const r = sweepRequest({ scenario: 'uniform', params: { dataset_size: 96 }, key: 'num_workers', values: '1,2,4' });
  assert.deepEqual(r.body, { scenario: 'uniform', params: { dataset_size: 96 }, grid: { num_workers: [1, 2, 4] } });
  const two = sweepRequest({
    scenario: 'u',
    params: {},
    costs: { a: 1 },
    key: 'num_workers',
    values: '1,2',
    key2: 'batch_size',
    values2: '8,16',
  });
  assert.deepEqual(two.body.grid, { num_workers: [1, 2], batch_size: [8, 16] });
  assert.deepEqual(two.body.costs, { a: 1 });
  assert.ok(
    sweepRequest({ scenario: 'u', params: {}, key: 'a', values: '1,2,3,4,5,6,7', key2: 'b', values2: '1,2,3,4,5,6' })
      .errors.values2,
  );
  assert.ok(sweepRequest({ scenario: 'u', params: {}, key: 'a', values: '1', key2: 'a', values2: '2' }).errors.key2);
  assert.ok(sweepRequest({ scenario: 'u', params: {}, key: '', values: '1' }).errors.key);
});

test('server problems map to the panel fields', () => {
  assert.equal(sweepErrorField('grid.num_workers', 'num_workers', ''), 'values');
  assert.equal(sweepErrorField('grid.batch_size', 'num_workers', 'batch_size'), 'values2');
  assert.equal(sweepErrorField('grid', 'num_workers', 'batch_size'), 'values2');
  assert.equal(sweepErrorField('params.dataset_size', 'num_workers', ''), null);
});

test('series: one per value of the second key, points in the order sent', () => {
  const rows = [
    { num_workers: 4, batch_size: 8, batches_per_s: 30, input_bound: 0.1 },
    { num_workers: 1, batch_size: 8, batches_per_s: 10, input_bound: 0.8 },
    { num_workers: 1, batch_size: 16, batches_per_s: 5, input_bound: 0.9 },
    { num_workers: 4, batch_size: 16, batches_per_s: 18, input_bound: 0.2 },
  ];
  const { xs, series } = sweepSeries(rows, 'num_workers', 'batch_size', [1, 4]);
  assert.deepEqual(xs, ['1', '4']);
  assert.deepEqual(
    series.map((s) => s.label),
    ['batch_size=8', 'batch_size=16'],
  );
  assert.deepEqual(
    series[0].points.map((p) => p.batches_per_s),
    [10, 30],
  );
  assert.equal(sweepSeries(rows.slice(0, 2), 'num_workers', '', null).series.length, 1);
  assert.equal(niceMax(37), 50);
  assert.equal(niceMax(0), 1);
});
