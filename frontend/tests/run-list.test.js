// The run picker's list (run-list.js): names, ranks, epochs, batches and start times, in the order
// the runs started, a job's loaders grouped by name and rank.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pickerGroups, runText, runName, clockText } from '../js/model/run-list.js';

const T = Date.UTC(2026, 10, 26, 12, 0, 0) / 1000;
const at = (s) => clockText(T + s, T);

test('a Trainer job: train and eval loaders told apart by name, grouped by name then rank, in start order', () => {
  const runs = [
    {
      id: 'e1',
      job: 'train',
      name: 'get_eval_dataloader',
      rank: 1,
      world_size: 2,
      epochs: 2,
      batches: 8,
      started: T + 30,
      status: 'done',
    },
    {
      id: 't0',
      job: 'train',
      name: 'get_train_dataloader',
      rank: 0,
      world_size: 2,
      epochs: 2,
      batches: 40,
      started: T + 1,
      status: 'done',
    },
    {
      id: 'solo',
      name: null,
      scenario: 'uniform',
      mode: 'sim',
      epochs: 1,
      batches: 1,
      started: T + 100,
      status: 'running',
    },
    {
      id: 'e0',
      job: 'train',
      name: 'get_eval_dataloader',
      rank: 0,
      world_size: 2,
      epochs: 2,
      batches: 8,
      started: T + 29,
      status: 'done',
    },
    {
      id: 't1',
      job: 'train',
      name: 'get_train_dataloader',
      rank: 1,
      world_size: 2,
      epochs: 2,
      batches: 40,
      started: T + 2,
      status: 'done',
    },
    {
      id: 'old',
      path: 'a/b/DataLoader-rank0-pid1-x.trace.jsonl',
      created: T - 3600,
      epochs: null,
      batches: null,
      status: 'truncated',
    },
  ];
  const groups = pickerGroups(runs, T);
  assert.deepEqual(
    groups.map((g) => g.options.map((o) => o.id)),
    [['old'], ['t0', 't1', 'e0', 'e1'], ['solo']],
  );
  assert.equal(groups[1].label, `job train · 2 loaders × 2 ranks · ${at(1)}`);
  assert.equal(groups[1].options[0].text, `get_train_dataloader · rank 0 · 2 epochs · 40 batches · ${at(1)} · done`);
  assert.equal(
    groups[0].options[0].text,
    `DataLoader-rank0-pid1-x · ${at(-3600)} · truncated`,
    'unknown counts are left out',
  );
  assert.equal(groups[2].options[0].text, `uniform · sim · 1 epoch · 1 batch · ${at(100)} · running`);
});

test('a job of one run is listed on its own; a run of a job of one rank names no rank', () => {
  const groups = pickerGroups([{ id: 'a', job: 'j', name: 'train_loader', rank: 0, world_size: 1, started: T }], T);
  assert.deepEqual(groups, [{ label: null, options: [{ id: 'a', text: `train_loader · ${at(0)}` }] }]);
  const two = pickerGroups(
    [
      { id: 'a', job: 'j', name: 'train_loader', rank: 0, world_size: 1, started: T },
      { id: 'b', job: 'j', name: 'val_loader', rank: 0, world_size: 1, started: T + 5 },
    ],
    T,
  );
  assert.equal(two[0].label, `job j · 2 loaders · ${at(0)}`);
  assert.deepEqual(
    two[0].options.map((o) => o.text),
    [`train_loader · ${at(0)}`, `val_loader · ${at(5)}`],
  );
});

test("an ignite job's train and val loaders of one name are two loaders of 2 ranks, not 4 ranks", () => {
  const runs = [0, 1].flatMap((rank) =>
    ['train', 'val'].map((kind, k) => ({
      id: `${kind}${rank}`,
      job: 'ig',
      name: 'auto_dataloader',
      rank,
      world_size: 2,
      started: T + k * 10 + rank,
    })),
  );
  const [group] = pickerGroups(runs, T);
  assert.equal(group.label, `job ig · 2 loaders × 2 ranks · ${at(0)}`);
  assert.deepEqual(
    group.options.map((o) => o.id),
    ['train0', 'val0', 'train1', 'val1'],
  );
});

test('names and times', () => {
  assert.equal(runName({ id: 'x', name: 'train.py:41' }), 'train.py:41');
  assert.equal(runName({ id: 'x' }), 'run');
  assert.equal(runName({ id: 'x', path: 'job/r1.trace.parquet' }), 'r1'); // a Parquet trace, a directory of parts
  assert.match(clockText(T - 86400 * 2, T), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/, 'another day gets its date');
  assert.match(clockText(T, T), /^\d\d:\d\d:\d\d$/);
  assert.equal(runText({ id: 'x', name: 'n', rank: 3 }, T, { rank: true }), 'n · rank 3');
  assert.equal(runText({ id: 'x', name: 'n', status: 'disconnected', on_disk: true }, T), 'n · disconnected · on disk');
});
