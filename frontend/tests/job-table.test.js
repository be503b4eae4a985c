// The job table of a logdir job: the window of rows a scroll offset draws, one loader's rows of a
// job with two, and the slowest rank named in the words `loaderscope job` prints (cli/job.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { visibleRows, loaderRows, slowestSentence, sortedRows, ROW_PX } from '../js/job-table.js';
import { python, needsPython } from './python.js';

/** @param {number} rank @param {number} slowest_steps @param {number|null} worst_lag @param {string|null} [name] */
const row = (rank, slowest_steps, worst_lag, name = null) => ({
  run: `r${rank}`, rank, name, job: 'j', batches: 8, batches_per_s: 10, input_bound: 0.5, slowest_worker: 0,
  slowest_worker_mean: 0.01, slowest_worker_p95: 0.02, slowest_steps, worst_lag,
});

test('only the rows in view, and a few past each edge, are drawn', () => {
  assert.deepEqual(visibleRows(0, 10 * ROW_PX, 1024), { first: 0, last: 14 });
  const mid = visibleRows(500 * ROW_PX, 10 * ROW_PX, 1024);
  assert.deepEqual(mid, { first: 496, last: 514 });
  assert.deepEqual(visibleRows(1020 * ROW_PX, 10 * ROW_PX, 1024), { first: 1016, last: 1024 });
  assert.deepEqual(visibleRows(0, 10 * ROW_PX, 0), { first: 0, last: 0 });
});

test("a job's train and eval loaders: the open loader's rows and steps only", () => {
  const answer = {
    job: 'j', shards: [], slowest: null,
    ranks: [row(1, 2, 0.1, 'train'), row(0, 0, null, 'train'), row(0, 5, 0.3, 'eval')],
    steps: [{ name: 'train', epoch: 0, step: 0, rank: 1, lag: 0.1 }, { name: 'train', epoch: 0, step: 1, rank: 1, lag: 0.05 },
      { name: 'eval', epoch: 0, step: 0, rank: 0, lag: 0.3 }],
  };
  const { rows, steps } = loaderRows(answer, 'train');
  assert.deepEqual(rows.map((r) => r.rank), [0, 1]);
  assert.equal(steps, 2);
  assert.deepEqual(loaderRows({ ...answer, shards: [{ name: 'eval', epoch: 0, report: { error: 'x' } }] }, 'train').shards, []);
  assert.equal(loaderRows({ ...answer, ranks: answer.ranks.slice(0, 2) }, null).rows.length, 2, 'one loader: all rows');
});

test('the slowest rank is named as `loaderscope job` names it', { skip: needsPython }, () => {
  const cases = [[row(0, 1, 0.002), row(1, 3, 0.0125), row(2, 3, 0.5)], [row(0, 0, null), row(1, 0, null)], [row(0, 0, null)]];
  const printed = python(`
import json, sys
from loaderscope.cli.job import slowest_sentence
from loaderscope.jobquery import JobTable
from rich.text import Text
out = []
for ranks in json.load(sys.stdin):
    table = JobTable(ranks=ranks, steps=[{}] * 7, shards=[])
    out.append(Text.from_markup(slowest_sentence(table)).plain)
print(json.dumps(out))
`, { input: JSON.stringify(cases) });
  assert.deepEqual(cases.map((rows) => slowestSentence(rows, 7).text), printed);
  assert.equal(slowestSentence(cases[0], 7).rank, 1, 'a tie goes to the lower rank');
  assert.equal(slowestSentence(cases[1], 7).rank, null);
});

test('a column sorts largest first, rank ascending; again the other way; ties and no figure in rank order', () => {
  const rows = [row(0, 3, 0.1), row(1, 9, 0.4), row(2, 3, 0.2), { ...row(3, 0, null), slowest_worker_p95: null }];
  assert.deepEqual(sortedRows(rows, 'slowest_steps', true).map((r) => r.rank), [1, 0, 2, 3]);
  assert.deepEqual(sortedRows(rows, 'slowest_steps', false).map((r) => r.rank), [3, 0, 2, 1]);
  assert.deepEqual(sortedRows(rows, 'slowest_worker_p95', true).map((r) => r.rank), [0, 1, 2, 3]);
  assert.deepEqual(sortedRows([...rows].reverse(), 'rank', false).map((r) => r.rank), [0, 1, 2, 3]);
});
