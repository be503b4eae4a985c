// The job table of a logdir job: the window of rows a scroll offset draws, the loader of the open run
// in a job of two, and the slowest rank of each loader named in the words `loaderscope job` prints (cli/job.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { visibleRows, openLoader, sentences, sortedRows, ROW_PX } from '../js/views/job-table.js';
import { python, needsPython } from './python.js';

/** @param {number} rank @param {number} slowest_steps @param {number|null} worst_lag @param {string} [loader] */
const row = (rank, slowest_steps, worst_lag, loader = 'train') => ({
  run: `r${rank}`,
  dashboard_run: `${loader}-${rank}`,
  rank,
  loader,
  name: loader,
  job: 'j',
  batches: 8,
  batches_per_s: 10,
  input_bound: 0.5,
  slowest_worker: 0,
  slowest_worker_mean: 0.01,
  slowest_worker_p95: 0.02,
  slowest_steps,
  worst_lag,
});

test('only the rows in view, and a few past each edge, are drawn', () => {
  assert.deepEqual(visibleRows(0, 10 * ROW_PX, 1024), { first: 0, last: 14 });
  const mid = visibleRows(500 * ROW_PX, 10 * ROW_PX, 1024);
  assert.deepEqual(mid, { first: 496, last: 514 });
  assert.deepEqual(visibleRows(1020 * ROW_PX, 10 * ROW_PX, 1024), { first: 1016, last: 1024 });
  assert.deepEqual(visibleRows(0, 10 * ROW_PX, 0), { first: 0, last: 0 });
});

test("a job's train and eval loaders: the open run's loader, else the first", () => {
  const answer = {
    job: 'j',
    shards: [],
    loaders: [
      { job: 'j', loader: 'train', name: 'train', ranks: 2, steps: 2, slowest: null },
      { job: 'j', loader: 'eval', name: 'eval', ranks: 1, steps: 1, slowest: null },
    ],
    ranks: [row(1, 2, 0.1), row(0, 0, null), row(0, 5, 0.3, 'eval')],
    steps: [],
  };
  assert.equal(openLoader(answer, 'eval-0'), 'eval');
  assert.equal(openLoader(answer, 'train-1'), 'train');
  assert.equal(openLoader(answer, 'elsewhere'), 'train');
});

test('each loader is named as `loaderscope job` names it: its slowest rank, or why none', { skip: needsPython }, () => {
  const cases = [
    [[row(0, 1, 0.002), row(1, 3, 0.0125), row(2, 3, 0.5)]],
    [[row(0, 0, null), row(1, 0, null)]],
    [[row(0, 0, null)]],
    [
      [row(0, 4, 0.02), row(1, 0, null)],
      [row(0, 0, null, 'val'), row(1, 2, 0.001, 'val')],
    ],
    [[row(0, 0, null)], [row(0, 0, null, 'train #2')]], // one process, two loaders of one name: no slowest rank
  ];
  const printed = python(
    `
import json, sys
from loaderscope.cli.job import sentences
from loaderscope.traces.jobtable import JobTable
from rich.text import Text
out = []
for loaders in json.load(sys.stdin):
    ranks = [row for rows in loaders for row in rows]
    steps = [{"job": "j", "loader": rows[0]["loader"]} for rows in loaders for _ in range(7)]
    table = JobTable(ranks=ranks, steps=steps, shards=[])
    out.append({"loaders": table.loaders(), "lines": [Text.from_markup(line).plain for line in sentences(table)]})
print(json.dumps(out))
`,
    { input: JSON.stringify(cases) },
  );
  assert.deepEqual(
    printed.map((/** @type {any} */ p) => sentences(p.loaders).map((s) => s.text)),
    printed.map((/** @type {any} */ p) => p.lines),
  );
  assert.equal(sentences(printed[0].loaders)[0].rank, 1, 'a tie goes to the lower rank');
  assert.equal(sentences(printed[1].loaders)[0].rank, null);
  assert.deepEqual(
    sentences(printed[3].loaders).map((s) => [s.loader, s.rank]),
    [
      ['train', 0],
      ['val', 1],
    ],
  );
  assert.ok(
    sentences(printed[3].loaders)[1].text.startsWith('val: rank 1 is the slowest: last to deliver 2 of 7 steps'),
  );
  assert.deepEqual(
    sentences(printed[4].loaders).map((s) => s.text),
    ['train: 1 rank, 7 steps: one rank waits for no other', 'train #2: 1 rank, 7 steps: one rank waits for no other'],
  );
});

test('a column sorts largest first, rank ascending; again the other way; ties and no figure in rank order', () => {
  const rows = [row(0, 3, 0.1), row(1, 9, 0.4), row(2, 3, 0.2), { ...row(3, 0, null), slowest_worker_p95: null }];
  assert.deepEqual(
    sortedRows(rows, 'slowest_steps', true).map((r) => r.rank),
    [1, 0, 2, 3],
  );
  assert.deepEqual(
    sortedRows(rows, 'slowest_steps', false).map((r) => r.rank),
    [3, 0, 2, 1],
  );
  assert.deepEqual(
    sortedRows(rows, 'slowest_worker_p95', true).map((r) => r.rank),
    [0, 1, 2, 3],
  );
  assert.deepEqual(
    sortedRows([...rows].reverse(), 'rank', false).map((r) => r.rank),
    [0, 1, 2, 3],
  );
  const two = [row(1, 0, null, 'val'), row(0, 0, null, 'val'), row(1, 0, null), row(0, 0, null)];
  assert.deepEqual(
    sortedRows(two, 'rank', false).map((r) => `${r.loader} ${r.rank}`),
    ['train 0', 'val 0', 'train 1', 'val 1'],
  );
  assert.deepEqual(
    sortedRows(two, 'loader', false).map((r) => `${r.loader} ${r.rank}`),
    ['train 0', 'train 1', 'val 0', 'val 1'],
  );
});
