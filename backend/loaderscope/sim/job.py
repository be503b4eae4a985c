"""A data-parallel job on the virtual clock: one ``Simulator`` per rank, stepping together.

Ranks of a DistributedDataParallel job all-reduce their gradients in every step, so no rank
starts step k+1 before every rank has its batch k: the slowest rank's loader sets the job's pace,
and the other ranks wait in the all-reduce rather than in ``next()``. Each rank reads its own
shard of the dataset, as torch's ``DistributedSampler`` deals it (torch/utils/data/distributed.py).

Pure, like the core: ranks' steps run in one time order from one heap of their next step times.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loaderscope.events import Event
from loaderscope.model.ranks import TIE_S
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import summary
from loaderscope.sim.costs import TaskCosts
from loaderscope.sim.engine import Simulator
from loaderscope.sim.records import SimConfig


def distributed_shard(length: int, world_size: int, rank: int, *, drop_last: bool = False) -> list[int]:
    """The indices ``DistributedSampler(shuffle=False)`` gives ``rank``: padded to a multiple of the
    world size by repeating the first indices (or cut to one, with ``drop_last``), then strided."""
    if drop_last and length % world_size:
        total = (length // world_size) * world_size
        indices = list(range(total))
    else:
        total = math.ceil(length / world_size) * world_size
        indices = list(range(length))
        while len(indices) < total:
            indices += indices[: total - len(indices)]
    return indices[rank:total:world_size]


def batched(indices: Sequence[int], batch_size: int, *, drop_last: bool = False) -> list[list[int]]:
    """``BatchSampler`` over ``indices``."""
    batches = [list(indices[i : i + batch_size]) for i in range(0, len(indices), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


@dataclass
class StepBarrier:
    """The all-reduce at the end of every step: released when the last rank delivers its batch."""

    ranks: list[Simulator]
    arrived: dict[int, list[float]] = field(default_factory=dict)  # step -> delivery times so far
    delivered: dict[int, int] = field(default_factory=dict)  # rank -> batches it has delivered
    # per step: (the rank that delivered last, or None if all delivered together; how late)
    slowest: list[tuple[int | None, float]] = field(default_factory=list)
    released: Callable[[], None] = lambda: None

    def __call__(self, sim: Simulator) -> None:
        rank = sim.cfg.rank
        step = self.delivered.get(rank, 0)
        self.delivered[rank] = step + 1
        times = self.arrived.setdefault(step, [math.nan] * len(self.ranks))
        times[rank] = sim.now
        if not any(math.isnan(t) for t in times):
            del self.arrived[step]
            last = max(range(len(times)), key=times.__getitem__)
            lag = times[last] - min(times)
            self.slowest.append((last if lag > TIE_S else None, lag))
            for other in self.ranks:
                other.resume_at(times[last] + other.costs.step)
            self.released()


@dataclass(frozen=True)
class JobRun:
    """What a simulated job produced: each rank's events, and who was slowest at every step."""

    events: list[list[Event]]
    counts: list[int]  # events each rank produced (kept or not)
    slowest: list[tuple[int | None, float]]  # per step: (the rank that delivered last or None, its lag)
    wall: float  # virtual seconds until the last rank stopped
    # Ranks left waiting in the all-reduce for a rank whose loader ended early (uneven inputs: a
    # real DDP job hangs there until its collective timeout).
    hung: list[int]


def simulate_job(
    ranks: Sequence[tuple[SimConfig, TaskCosts]], *, keep_events: bool = True, max_events: int | None = None
) -> JobRun:
    """Run every rank's loader, stepping together; ``cfg.rank`` must be 0..len(ranks)-1 in order.

    With ``keep_events=False`` events are counted and dropped (a long job's events do not fit in
    memory as dicts); ``JobRun.events`` then holds one empty list per rank. ``max_events`` stops each
    rank past that many events (the rest then wait for it in the all-reduce: ``hung``).
    """
    sims: list[Simulator] = []
    barrier = StepBarrier(sims)
    for position, (cfg, costs) in enumerate(ranks):
        if cfg.rank != position:
            raise ValueError(f"rank {position}'s SimConfig says rank {cfg.rank}: give ranks in order 0..N-1")
        sims.append(Simulator(cfg, costs, barrier=barrier, max_events=max_events))
    events: list[list[Event]] = [[] for _ in sims]
    counts = [0] * len(sims)
    pending = [(sim.next_time, rank) for rank, sim in enumerate(sims)]
    heapq.heapify(pending)

    def wake_all() -> None:  # a release schedules every rank's next step
        for rank, sim in enumerate(sims):
            heapq.heappush(pending, (sim.next_time, rank))

    barrier.released = wake_all
    while pending:
        t, rank = heapq.heappop(pending)
        sim = sims[rank]
        if t != sim.next_time or math.isinf(t):
            continue  # a stale entry: this rank's next step moved (a fresher entry is queued)
        sim.step()
        out = sim.take()
        counts[rank] += len(out)
        if keep_events:
            events[rank].extend(out)
        heapq.heappush(pending, (sim.next_time, rank))
    hung = [sim.cfg.rank for sim in sims if not sim.done]
    return JobRun(events, counts, barrier.slowest, max(sim.now for sim in sims), hung)


def rank_figures(job: JobRun) -> list[dict[str, Any]]:
    """Per rank: batches, batches/s, the share of its time spent waiting in ``next()``, and the steps
    it delivered last with its worst lag.

    A rank's rate is ``summary``'s ``batches_per_s`` (its batches over its time from its first event to
    its last batch), the one definition the page's job table uses too (``frontend/js/model/ranks.js``
    ``rankRate``): read from the rank's own events, not from whatever its ``run_end`` carries.
    """
    figures = []
    for rank, events in enumerate(job.events):
        state = LoaderState()
        for event in events:
            state.apply(event)
        stats = summary(state)
        lags = [lag for last, lag in job.slowest if last == rank]
        figures.append({"rank": rank, "batches": stats["batches"], "batches_per_s": stats["batches_per_s"],
                        "input_bound": stats["input_bound"], "slowest_steps": len(lags),
                        "worst_lag": max(lags) if lags else None})
    return figures
