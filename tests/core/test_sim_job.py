"""A simulated data-parallel job: ranks step together, and each reads torch's DistributedSampler shard."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch.utils.data

from loaderscope.sim import CostModel, SimConfig, TaskCosts
from loaderscope.sim.job import batched, distributed_shard, simulate_job
from tests.core.sim_helpers import make_config, problems

STEP_S = 0.010


def _rank(rank: int, world: int, sample_s: float, *, length: int = 64, batch: int = 4) -> tuple[SimConfig, TaskCosts]:
    cfg = make_config(num_workers=2, size=length, batch_size=batch)
    cfg = dataclasses.replace(cfg, rank=rank, run_id=f"r{rank}",
                              batches=[batched(distributed_shard(length, world, rank), batch)],
                              extra_start={"job": "j", "world_size": world})
    return cfg, TaskCosts(CostModel(), lambda i, w: sample_s, STEP_S, random.Random(rank))


def _yield_times(events: list[dict]) -> list[float]:
    return [e["t"] for e in events if e["kind"] == "yield"]


@pytest.mark.parametrize(("length", "world", "drop_last"),
                         [(10, 3, False), (10, 3, True), (64, 4, False), (7, 8, False)])
def test_shards_are_torchs(length: int, world: int, drop_last: bool) -> None:
    for rank in range(world):
        sampler = torch.utils.data.DistributedSampler(range(length), num_replicas=world, rank=rank, shuffle=False,
                                                      drop_last=drop_last)
        assert distributed_shard(length, world, rank, drop_last=drop_last) == list(sampler)


def test_no_rank_starts_a_step_before_the_slowest_delivered_the_last() -> None:
    world = 4
    # rank 2 needs 12 ms per batch with its 2 workers, longer than the 10 ms step: it sets the pace
    job = simulate_job([_rank(r, world, 0.006 if r == 2 else 0.001, length=256) for r in range(world)])
    assert job.hung == []
    yields = [_yield_times(events) for events in job.events]
    assert all(len(times) == len(yields[0]) == 16 for times in yields)  # 64 samples per rank, batches of 4
    for step in range(len(yields[0]) - 1):
        released = max(times[step] for times in yields) + STEP_S
        assert all(times[step + 1] >= released - 1e-9 for times in yields)
    # the slow rank delivers last at every step, and the job goes at its pace
    assert len(job.slowest) == 16
    late = [rank for rank, _ in job.slowest if rank is not None]
    assert set(late) == {2} and len(late) >= 8
    assert all(lag == 0 for rank, lag in job.slowest if rank is None)  # the others: delivered together
    assert job.wall > 16 * 0.012
    for rank, events in enumerate(job.events):
        assert problems(events) == []
        assert {e["rank"] for e in events} == {rank}
        assert events[0]["job"] == "j" and events[0]["world_size"] == world


def test_fast_ranks_wait_in_the_all_reduce_not_in_next() -> None:
    job = simulate_job([_rank(r, 2, 0.008 if r == 1 else 0.001) for r in range(2)])
    waits = [[e["wait"] for e in events if e["kind"] == "yield"] for events in job.events]
    # after the first step the fast rank's batch is ready when it asks (it waited for rank 1 instead)
    assert max(waits[0][1:]) == pytest.approx(0.0, abs=1e-9)
    assert max(waits[1][1:]) > 0


def test_events_can_be_counted_without_keeping_them() -> None:
    kept = simulate_job([_rank(r, 3, 0.001) for r in range(3)])
    counted = simulate_job([_rank(r, 3, 0.001) for r in range(3)], keep_events=False)
    assert counted.counts == [len(events) for events in kept.events]
    assert counted.events == [[], [], []] and counted.wall == kept.wall


def test_a_rank_that_runs_out_early_leaves_the_others_hung() -> None:
    ranks = [_rank(r, 2, 0.001) for r in range(2)]
    cfg, costs = ranks[1]
    ranks[1] = (dataclasses.replace(cfg, batches=[cfg.batches[0][:2]]), costs)  # uneven inputs
    job = simulate_job(ranks)
    assert job.hung == [0]
    assert len(job.slowest) == 2


def test_ranks_must_come_in_order() -> None:
    with pytest.raises(ValueError, match="rank 0's SimConfig says rank 1"):
        simulate_job([_rank(1, 2, 0.001)])


def test_a_step_delivered_together_has_no_slowest_rank() -> None:
    from loaderscope.model.ranks import slowest_per_step

    def run(*times: float) -> list[dict]:
        return [{"kind": "run_start", "wall_start": 1.7e9}, {"kind": "epoch_start", "epoch": 0},
                *({"kind": "yield", "t": t} for t in times)]

    steps = slowest_per_step({0: run(1.0, 2.0), 1: run(1.0, 2.5)})
    assert [s["rank"] for s in steps] == [None, 1]
