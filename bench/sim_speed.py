"""How fast the simulator runs: one ImageNet-sized epoch, a 64-rank job, and a 5×5 what-if sweep.

    .venv/bin/python bench/sim_speed.py

Prints events simulated per second (the pure core alone, and ``simulate()`` with the reducer's
summary on top) and wall times. Not part of the test suite.
"""

from __future__ import annotations

import random
import time

from loaderscope.scenarios.plan import resolve
from loaderscope.scenarios.workload import Workload
from loaderscope.settings import LoaderSettings
from loaderscope.sim import CostModel, SampleDist, SimConfig, Simulator, TaskCosts, format_table, simulate, sweep
from loaderscope.sim.job import batched, distributed_shard, simulate_job

IMAGENET = 1_281_167
BATCH = 256
WORKERS = 32
SAMPLE_S = 0.004  # decode + augment of one image
STEP_S = 0.030  # a training step of one batch


def imagenet_batches() -> list[list[int]]:
    """A sequential sampler under BatchSampler(batch_size=256): the order torch would dispatch."""
    return [list(range(start, min(start + BATCH, IMAGENET))) for start in range(0, IMAGENET, BATCH)]


def image_cost(index: int, worker: int) -> float:
    return SAMPLE_S


def bench_core(batches: list[list[int]]) -> None:
    cfg = SimConfig(LoaderSettings(num_workers=WORKERS, prefetch_factor=2), batches=[batches], run_id="bench",
                    config={"num_workers": WORKERS, "prefetch_factor": 2})
    costs = TaskCosts(CostModel(), image_cost, STEP_S, random.Random(0))
    start = time.perf_counter()
    events = Simulator(cfg, costs).run()
    wall = time.perf_counter() - start
    print(f"core       : {len(events):>9,} events in {wall:6.2f} s = {len(events) / wall:>10,.0f} events/s "
          f"({len(batches):,} batches, {events[-1]['t']:.0f} s of virtual time)")


def bench_simulate(batches: list[list[int]]) -> None:
    workload = Workload(settings=LoaderSettings(num_workers=WORKERS, batch_size=BATCH), dataset_kind="map",
                        length=IMAGENET, sample_cost=image_cost, make_dataset=lambda: None, step_cost=STEP_S)
    start = time.perf_counter()
    events = simulate(workload, run_id="bench", scenario="imagenet", params={}, batches=[batches])
    wall = time.perf_counter() - start
    stats = events[-1]["stats"]
    print(f"simulate() : {len(events):>9,} events in {wall:6.2f} s = {len(events) / wall:>10,.0f} events/s "
          f"(with the reducer's summary; {stats['batches_per_s']:.1f} batches/s, "
          f"input-bound {stats['input_bound']:.0%})")


def bench_noisy(batches: list[list[int]]) -> None:
    """The same epoch with a lognormal per-sample draw: 1.28 M random draws."""
    cfg = SimConfig(LoaderSettings(num_workers=WORKERS, prefetch_factor=2), batches=[batches], run_id="bench",
                    config={"num_workers": WORKERS, "prefetch_factor": 2})
    model = CostModel(sample={"dist": "lognormal", "mean_ms": 4.0, "sd_ms": 2.0})
    costs = TaskCosts(model, None, STEP_S, random.Random(0))
    start = time.perf_counter()
    events = Simulator(cfg, costs).run()
    wall = time.perf_counter() - start
    print(f"lognormal  : {len(events):>9,} events in {wall:6.2f} s = {len(events) / wall:>10,.0f} events/s")


def bench_job(ranks: int, workers: int, batch: int, *, whole_epoch_each: bool) -> None:
    """A data-parallel job: every rank reads its DistributedSampler shard of ImageNet (or, with
    ``whole_epoch_each``, all of it), 8 workers per rank, noisy samples, ranks stepping together."""
    model = CostModel(sample=SampleDist(dist="lognormal", mean_ms=4.0, sd_ms=2.0))
    per_rank = []
    for rank in range(ranks):
        indices = range(IMAGENET) if whole_epoch_each else distributed_shard(IMAGENET, ranks, rank)
        cfg = SimConfig(LoaderSettings(num_workers=workers, prefetch_factor=2), batches=[batched(indices, batch)],
                        run_id=f"rank{rank}",
                        rank=rank, config={"num_workers": workers, "prefetch_factor": 2},
                        extra_start={"job": "bench", "world_size": ranks})
        per_rank.append((cfg, TaskCosts(model, None, STEP_S, random.Random(rank))))
    start = time.perf_counter()
    job = simulate_job(per_rank, keep_events=False)
    wall = time.perf_counter() - start
    events = sum(job.counts)
    slowest = max(range(ranks), key=[rank for rank, _ in job.slowest].count)
    what = "a whole epoch per rank" if whole_epoch_each else "one epoch, sharded"
    print(f"job        : {ranks} ranks x {workers} workers, {what} ({len(job.slowest):,} steps of {batch} per rank): "
          f"{events:,} events in {wall:6.2f} s = {events / wall:>10,.0f} events/s; "
          f"{job.wall:.0f} s of virtual time, rank {slowest} slowest most often")


def bench_sweep() -> None:
    grid = {"num_workers": [1, 2, 4, 8, 16], "prefetch_factor": [1, 2, 4, 8, 16]}
    base = {"dataset_size": 100_000, "batch_size": 64, "sample_ms": 2.0, "step_ms": 20.0}
    start = time.perf_counter()
    rows = sweep(resolve("uniform", base), grid)
    wall = time.perf_counter() - start
    batches = rows[0]["batches"]
    print(f"5x5 sweep  : {len(rows)} runs of {batches:,} batches in {wall:.2f} s")
    print(format_table(rows[:5]))


def main() -> None:
    start = time.perf_counter()
    batches = imagenet_batches()
    print(f"ImageNet epoch: {IMAGENET:,} samples, batch {BATCH}, {WORKERS} workers "
          f"(batches built in {time.perf_counter() - start:.2f} s)")
    bench_core(batches)
    bench_simulate(batches)
    bench_noisy(batches)
    bench_job(64, 8, 32, whole_epoch_each=False)
    bench_job(64, 8, 256, whole_epoch_each=True)
    import loaderscope.scenarios.builders  # noqa: F401  (torch import: not part of the sweep's time)

    bench_sweep()


if __name__ == "__main__":
    main()
