// Ranks side by side: shard digests written by backend/loaderscope/model/ranks.py decode here to the same
// report, and the slowest rank per step agrees with slowest_per_step.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { shardReport, shardText, decodeShard, JobSteps, slowestWorker, rankRate } from '../js/model/ranks.js';
import { reduce } from '../js/model/reducer.js';
import { perRank, timelineRanks } from '../js/views/ranks-view.js';
import { synthesize } from '../dev/synth.js';
import { python, needsPython } from './python.js';

const py = (script, input) => python(script, { input });

test('shard digests from ranks.py: disjoint and complete, or overlapping and missing', {
  skip: needsPython,
}, async () => {
  const cases = py(`
import json
from loaderscope.model.ranks import encode_shard, shard_report
out = []
for shards in ([range(0, 100, 2), range(1, 100, 2)], [range(0, 60), range(50, 90)]):
    ends = {r: {"shard": encode_shard(s, 100)} for r, s in enumerate(shards)}
    out.append({"ends": ends, "report": shard_report(ends, 100)})
print(json.dumps(out))`);
  for (const { ends, report } of cases) {
    const js = await shardReport(ends, 100);
    assert.deepEqual(js, {
      ...report,
      per_rank: Object.fromEntries(Object.entries(report.per_rank).map(([k, v]) => [k, v])),
    });
  }
  assert.equal(cases[0].report.disjoint && cases[0].report.complete, true);
  assert.equal(cases[1].report.overlap, 10);
  assert.equal(cases[1].report.missing, 10);
});

test("DistributedSampler's padding is named padding, not overlap, in the same words as ranks.py", {
  skip: needsPython,
}, async () => {
  // torch's own DistributedSampler: 11 samples over 3 ranks pads one index, 10 over 4 two; a rank that
  // reads an index of another, with nothing to pad, is overlap
  const cases = py(`
import json
from torch.utils.data import DistributedSampler
from loaderscope.model.ranks import encode_shard, shard_report, shard_text
out = []
def shards(length, ranks):
    return [list(DistributedSampler(range(length), num_replicas=ranks, rank=r, seed=3)) for r in range(ranks)]
for length, parts in ((11, shards(11, 3)), (10, shards(10, 4)), (12, shards(12, 4)), (10, [range(0, 5), range(4, 10)]),
                      (10, [range(0, 6), range(4, 10)])):
    ends = {r: {"shard": encode_shard(s, length)} for r, s in enumerate(parts)}
    report = shard_report(ends, length)
    out.append({"ends": ends, "length": length, "report": report, "text": shard_text(1, report)})
print(json.dumps(out))`);
  for (const { ends, length, report, text } of cases) {
    const js = await shardReport(ends, length);
    assert.deepEqual(js, report);
    assert.equal(shardText(1, js), text);
  }
  assert.deepEqual(
    cases.map((c) => [c.report.padding, c.report.overlap]),
    [
      [1, 0],
      [2, 0],
      [0, 0],
      [0, 1],
      [0, 2],
    ],
  );
  assert.match(
    cases[0].text,
    /^epoch 1 shards: padding: 1 index read twice, as DistributedSampler pads ranks to equal length/,
  );
  assert.match(cases[3].text, /OVERLAP: 1 index read by more than one rank \(e\.g\. 4\)/);
});

test('a digest of the wrong length is refused', { skip: needsPython }, async () => {
  const { digest } = py(
    'import json; from loaderscope.model.ranks import encode_shard; ' +
      'print(json.dumps({"digest": encode_shard([1, 2], 10)}))',
  );
  assert.equal((await decodeShard(digest, 10))[1], 1);
  await assert.rejects(decodeShard(digest, 11), /holds 10 counts for a dataset of 11/);
});

test('a digest is never inflated past its length, nor a length past the limit taken', {
  skip: needsPython,
}, async () => {
  const { bomb } = py(
    'import base64, json, zlib; ' +
      'print(json.dumps({"bomb": base64.b64encode(zlib.compress(bytes(50_000_000), 9)).decode()}))',
  );
  await assert.rejects(decodeShard(bomb, 100), /holds more than 100 counts for a dataset of 100/);
  await assert.rejects(decodeShard(bomb, 2 ** 40), /at most 134217728 are checked/);
});

/** A rank as JobSteps sees it: delivery times of epoch 0, the first `upto` of them so far. */
function fakeTrack(rank, times, upto = times.length, wall0 = 100) {
  return { rank, wall0, yields: new Map([[0, times.slice(0, upto)]]), slow: [] };
}

/** A rank's delivery times of epoch 0 from its events, on the wall clock (wall_start + t), as Track keeps them. */
function deliveries(events) {
  let wall0 = 0,
    epoch = -1;
  const times = [];
  for (const e of events) {
    if (e.kind === 'run_start') wall0 = e.wall_start ?? 0;
    else if (e.kind === 'epoch_start') epoch = e.epoch;
    else if (e.kind === 'yield' && epoch === 0) times.push(wall0 + e.t);
  }
  return times;
}

/** Every step JobSteps looked at, given all deliveries at once. */
function allSteps(times) {
  const steps = new JobSteps();
  const tracks = [...times].map(([rank, list]) => fakeTrack(rank, list));
  steps.update(tracks);
  return { steps, tracks };
}

test('slowest rank per step agrees with ranks.slowest_per_step', { skip: needsPython }, () => {
  const runs = {
    0: synthesize({ num_workers: 2, batches: 12, rank: 0, job: 'j', world_size: 2, wall_start: 100 }),
    1: synthesize({
      num_workers: 2,
      batches: 12,
      rank: 1,
      job: 'j',
      world_size: 2,
      wall_start: 100.004,
      cost: (i) => 0.01 + (i % 3) * 0.01,
    }),
  };
  const expected = py(
    `
import json, sys
from loaderscope.model.ranks import slowest_per_step
runs = {int(k): v for k, v in json.load(sys.stdin).items()}
print(json.dumps(slowest_per_step(runs)))`,
    JSON.stringify(runs),
  );
  const { steps } = allSteps(new Map(Object.entries(runs).map(([r, ev]) => [Number(r), deliveries(ev)])));
  const got = steps.recent;
  assert.equal(got.length, expected.length);
  got.forEach((s, i) => {
    assert.equal(s.rank, expected[i].rank, `step ${i}`);
    assert.ok(Math.abs(s.lag - expected[i].lag) < 1e-9);
  });
  assert.equal(
    [...steps.counts.values()].reduce((a, c) => a + c.steps, 0),
    got.filter((s) => s.rank !== null).length,
  );
});

test('JobSteps, fed as deliveries arrive, finds the same slowest rank per step as when given them all at once', () => {
  let seed = 7;
  const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  const times = new Map();
  for (let rank = 0; rank < 12; rank++) {
    let t = 100;
    times.set(
      rank,
      Array.from({ length: 200 }, () => (t += 0.01 + rnd() * 0.005 * (rank === 5 ? 3 : 1))),
    );
  }
  const whole = allSteps(times).steps;
  const steps = new JobSteps();
  const tracks = [...times].map(([rank, list]) => fakeTrack(rank, list, 0));
  for (let upto = 0; upto <= 200; upto += 37) {
    // arrivals in uneven slices, one rank ahead of the others
    tracks.forEach((tr, k) => tr.yields.set(0, times.get(tr.rank).slice(0, Math.min(200, upto + (k === 3 ? 20 : 0)))));
    steps.update(tracks);
  }
  tracks.forEach((tr) => tr.yields.set(0, times.get(tr.rank)));
  steps.update(tracks);
  assert.equal(steps.total, whole.total);
  for (const [rank, c] of whole.counts) {
    assert.equal(steps.counts.get(rank).steps, c.steps, `rank ${rank}`);
    assert.ok(Math.abs(steps.counts.get(rank).worst - c.worst) < 1e-12);
    assert.equal(tracks.find((tr) => tr.rank === rank).slow.length, c.steps);
  }
  assert.equal(steps.recent.at(-1).step, 199);
  assert.equal(steps.recent.at(-1).rank, whole.recent.at(-1).rank);
  assert.ok(steps.recent.length < whole.total, 'only the recent steps are kept');
});

test('a rank found later restarts the count over the new set of ranks', () => {
  const steps = new JobSteps();
  const a = fakeTrack(0, [1, 2, 3]),
    b = fakeTrack(1, [1.5, 2.5, 3.5]);
  steps.update([a, b]);
  assert.equal(steps.counts.get(1).steps, 3);
  steps.update([a, b, fakeTrack(2, [2, 3, 4])]);
  assert.equal(steps.total, 3);
  assert.equal(steps.counts.get(2).steps, 3);
  assert.equal(steps.counts.get(1), undefined);
  assert.equal(b.slow.length, 0, 'the ticks of the old count are gone');
});

test('the slowest worker is named with its mean fetch against the median of its rank', () => {
  const w = (id, mean, n = 4) => ({ id, busy: mean * n, fetch_times: Array(n).fill(mean) });
  const got = slowestWorker([w(0, 0.01), w(1, 0.012), w(2, 0.04), w(3, 0.011)]);
  assert.equal(got.worker, 2);
  assert.ok(Math.abs(got.ratio - 0.04 / 0.0115) < 1e-9);
  assert.equal(slowestWorker([{ id: 0, busy: 0, fetch_times: [] }]), null);
});

test('the timeline draws every rank of a small job, the selected and the slowest of a large one', () => {
  const small = [0, 1, 2].map((rank) => ({ rank }));
  assert.equal(timelineRanks(small, small[1], 2).length, 3);
  const job = Array.from({ length: 64 }, (_, rank) => ({ rank }));
  assert.deepEqual(
    timelineRanks(job, job[9], 37).map((t) => t.rank),
    [9, 37],
  );
  assert.deepEqual(
    timelineRanks(job, job[9], null).map((t) => t.rank),
    [9],
  );
});

test('a step every rank delivered together names no rank (as ranks.slowest_per_step)', () => {
  const t0 = 1.7e9; // wall_start + t: equal times differ by rounding only
  const times = new Map([
    [0, [t0 + 1, t0 + 2]],
    [1, [t0 + 1 + 1e-7, t0 + 2.5]],
  ]);
  const steps = new JobSteps();
  const tracks = [...times].map(([rank, list]) => fakeTrack(rank, list, list.length, t0));
  steps.update(tracks);
  assert.equal(steps.total, 2);
  assert.deepEqual([...steps.counts.keys()], [1]);
  assert.deepEqual(
    steps.recent.map((s) => s.rank),
    [null, 1],
  );
  assert.deepEqual(
    tracks.map((tr) => tr.slow.length),
    [0, 1],
  );
});

test("a rank's batches/s is the one `loaderscope run --ranks` prints, ended or live", { skip: needsPython }, () => {
  // a 3-step job (the page's last-2-s rate read 0.0 once it ended) and a 63-step one (42.0 against
  // the terminal's figure); rank 1 is slow. Each rank also cut halfway, as a live page holds it.
  const jobs = py(`
import json
from loaderscope.scenarios.plan import resolve
from loaderscope.sim import CostModel
from loaderscope.sim.job import rank_figures
from loaderscope.sim.run import simulate_ranks
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import summary
out = []
for size in (24, 504):
    plan = resolve("uniform", {"num_workers": 2, "dataset_size": size, "step_ms": 5})
    costs = [CostModel(), CostModel(worker_factor={0: 3.0, 1: 3.0})]
    job = simulate_ranks(plan.build(), job="j", scenario="uniform", params={}, costs=costs)
    halves = []
    for events in job.events:
        state = LoaderState()
        for e in events[: len(events) // 2]:
            state.apply(e)
        halves.append(summary(state)["batches_per_s"])
    out.append({"events": job.events, "figures": rank_figures(job), "halves": halves})
print(json.dumps(out))`);
  for (const { events, figures, halves } of jobs) {
    events.forEach((rankEvents, rank) => {
      const shown = rankRate(reduce(rankEvents));
      assert.ok(figures[rank].batches_per_s > 0);
      assert.ok(
        Math.abs(shown - figures[rank].batches_per_s) < 1e-9,
        `rank ${rank}: page ${shown}, terminal ${figures[rank].batches_per_s}`,
      );
      assert.equal(shown.toFixed(1), figures[rank].batches_per_s.toFixed(1));
      const live = rankRate(reduce(rankEvents.slice(0, Math.floor(rankEvents.length / 2))));
      assert.ok(Math.abs(live - halves[rank]) < 1e-9, `rank ${rank} halfway: page ${live}, Python ${halves[rank]}`);
    });
  }
  assert.deepEqual(
    jobs.map((j) => j.figures[0].batches),
    [3, 63],
    'jobs of 3 and 63 steps',
  );
});

test("a shard line's samples per rank stay one short line at 1,024 ranks", () => {
  assert.equal(perRank({ 1: 3, 0: 4 }), 'rank 0: 4, rank 1: 3 samples');
  const even = Object.fromEntries(Array.from({ length: 1024 }, (_, r) => [r, 98]));
  assert.equal(perRank(even), 'every one of 1024 ranks: 98 samples');
  assert.equal(perRank({ ...even, 731: 97 }), '97–98 samples a rank over 1024 ranks, fewest rank 731');
});
