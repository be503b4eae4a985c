// Ranks side by side: shard digests written by backend/loaderscope/ranks.py decode here to the same
// report, and the slowest rank per step agrees with slowest_per_step.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { shardReport, decodeShard, deliveries, slowestPerStep, slowestCounts } from '../js/ranks.js';
import { synthesize } from '../dev/synth.js';
import { python, needsPython } from './python.js';

const py = (script, input) => python(script, { input });

test('shard digests from ranks.py: disjoint and complete, or overlapping and missing', { skip: needsPython }, async () => {
  const cases = py(`
import json
from loaderscope.ranks import encode_shard, shard_report
out = []
for shards in ([range(0, 100, 2), range(1, 100, 2)], [range(0, 60), range(50, 90)]):
    ends = {r: {"shard": encode_shard(s, 100)} for r, s in enumerate(shards)}
    out.append({"ends": ends, "report": shard_report(ends, 100)})
print(json.dumps(out))`);
  for (const { ends, report } of cases) {
    const js = await shardReport(ends, 100);
    assert.deepEqual(js, { ...report, per_rank: Object.fromEntries(Object.entries(report.per_rank).map(([k, v]) => [k, v])) });
  }
  assert.equal(cases[0].report.disjoint && cases[0].report.complete, true);
  assert.equal(cases[1].report.overlap, 10);
  assert.equal(cases[1].report.missing, 10);
});

test('a digest of the wrong length is refused', { skip: needsPython }, async () => {
  const { digest } = py('import json; from loaderscope.ranks import encode_shard; print(json.dumps({"digest": encode_shard([1, 2], 10)}))');
  assert.equal((await decodeShard(digest, 10))[1], 1);
  await assert.rejects(decodeShard(digest, 11), /holds 10 counts for a dataset of 11/);
});

test('slowest rank per step agrees with ranks.slowest_per_step', { skip: needsPython }, () => {
  const runs = {
    0: synthesize({ num_workers: 2, batches: 12, rank: 0, job: 'j', world_size: 2, wall_start: 100 }),
    1: synthesize({ num_workers: 2, batches: 12, rank: 1, job: 'j', world_size: 2, wall_start: 100.004, cost: (i) => 0.01 + (i % 3) * 0.01 }),
  };
  const expected = py(`
import json, sys
from loaderscope.ranks import slowest_per_step
runs = {int(k): v for k, v in json.load(sys.stdin).items()}
print(json.dumps(slowest_per_step(runs)))`, JSON.stringify(runs));
  const times = new Map(Object.entries(runs).map(([r, ev]) => [Number(r), deliveries(ev, 0)]));
  const got = slowestPerStep(times);
  assert.equal(got.length, expected.length);
  got.forEach((s, i) => {
    assert.equal(s.rank, expected[i].rank, `step ${i}`);
    assert.ok(Math.abs(s.lag - expected[i].lag) < 1e-9);
  });
  const counts = slowestCounts(got);
  assert.equal([...counts.values()].reduce((a, c) => a + c.steps, 0), got.length);
});
