"""``simulate``: a scenario's workload in, the ◆ events of a simulated run out.

The thin shell around the pure core: it turns a ``Workload`` (its ``LoaderSettings``, handed on as
they are, and unless given the order of its own samplers) into a ``SimConfig``, compiles the cost
model, runs the ``Simulator`` and puts the reducer's summary into ``run_end``, exactly as the real probe does.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from loaderscope.events import MAX_INDICES, Event, Kind
from loaderscope.model.ranks import encode_shard
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.scenarios.workload import SamplerOrder, Workload
from loaderscope.sim.costs import CostModel, TaskCosts
from loaderscope.sim.engine import Simulator
from loaderscope.sim.job import JobRun, batched, distributed_shard, simulate_job
from loaderscope.sim.records import SimConfig

# A run this long holds ~1 GB of events; beyond it the run ends with reason "stopped".
DEFAULT_MAX_EVENTS = 2_000_000


def run_start_config(workload: Workload, order: SamplerOrder) -> dict[str, Any]:
    """``run_start.config``: the loader's arguments as torch resolves them, the dataset and its samplers."""
    batches = order.batches[0] if workload.dataset_kind == "map" else None
    return {
        **workload.settings.config(),
        "dataset_kind": workload.dataset_kind,
        "dataset_length": workload.length,
        "sampler": order.sampler,
        "batch_sampler": order.batch_sampler,
        "batches_per_epoch": len(batches) if batches is not None else None,
        "epochs": workload.epochs,
        **workload.describe,
    }


def given_order(workload: Workload, batches: list[list[list[Any]]]) -> SamplerOrder:
    """Batches the caller gives (a replayed trace, a sweep's shared order), named as the workload names them."""
    describe = workload.describe
    return SamplerOrder(batches, describe.get("sampler", "given"), describe.get("batch_sampler", "given"))


def sim_config(
    workload: Workload,
    *,
    run_id: str,
    scenario: str,
    params: dict[str, Any],
    costs: CostModel,
    order: SamplerOrder,
) -> SimConfig:
    """The core's configuration for ``workload`` dispatching ``order``."""
    if workload.dataset_kind == "map" and len(order.batches) < workload.epochs:
        raise ValueError(f"batches cover {len(order.batches)} epochs, the plan runs {workload.epochs}")
    config = run_start_config(workload, order)
    config["costs"] = costs.model_dump(exclude_defaults=True)
    # torch pins only with an accelerator; the simulator pins when a pin cost says what it costs
    config["pin_memory_active"] = bool(workload.settings.pin_memory and costs.pin_ms_per_mb > 0)
    return SimConfig(
        loader=workload.settings,
        dataset_kind=workload.dataset_kind,
        epochs=workload.epochs,
        batches=order.batches,
        shard_sizes=_shards(workload, workload.settings.num_workers),
        run_id=run_id,
        scenario=scenario,
        config=config,
        extra_start={"params": dict(params)},
    )


def _shards(workload: Workload, workers: int) -> list[int]:
    """Samples per worker shard. Without a sharding rule every worker replays the whole stream, as in torch."""
    if workload.dataset_kind != "iterable":
        return []
    if workers == 0:
        return [workload.length]
    if workload.shard_sizes is None:
        return [workload.length] * workers
    return list(workload.shard_sizes(workers))


def simulate(
    workload: Workload,
    *,
    run_id: str,
    scenario: str,
    params: dict[str, Any],
    costs: CostModel | None = None,
    batches: list[list[list[Any]]] | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
) -> list[Event]:
    """Every event of a simulated run of ``workload`` (``mode: "sim"``), ``run_end`` carrying the summary.

    Args:
        workload: the scenario's workload (its latencies are the default costs).
        run_id, scenario, params: recorded in the events, as the real probe records them.
        costs: what-if costs on top of the workload's (see ``CostModel``).
        batches: sample indices per batch per epoch; by default iterated from the workload's own
            samplers (``Workload.sampler_order``, which imports torch).
        max_events: the run stops (reason "stopped", ``truncated``) past this many events.

    Raises:
        ValueError: if ``batches`` cover fewer epochs than the workload runs.
    """
    model = costs or CostModel()
    order = workload.sampler_order() if batches is None else given_order(workload, batches)
    cfg = sim_config(workload, run_id=run_id, scenario=scenario, params=params, costs=model, order=order)
    seed = model.seed if model.seed is not None else int(params.get("seed", 0))
    task_costs = TaskCosts(model, workload.sample_cost, workload.step_cost, random.Random(seed),
                           pin_memory=workload.settings.pin_memory)
    events = Simulator(cfg, task_costs, max_events=max_events).run()
    if events and events[-1]["kind"] == Kind.RUN_END:
        events[-1]["stats"] = summary(reduce(events))
    return events


def simulate_ranks(
    workload: Workload,
    *,
    job: str,
    scenario: str,
    params: dict[str, Any],
    costs: Sequence[CostModel],
    max_events: int = DEFAULT_MAX_EVENTS,
    shards: Sequence[Sequence[int]] | None = None,
) -> JobRun:
    """A data-parallel job of ``len(costs)`` ranks, each running ``workload``'s loader on its shard.

    Each rank reads what ``DistributedSampler(shuffle=False, drop_last=workload's)`` deals it, in
    batches of the workload's batch size; ranks step together (``sim.job``). ``costs[r]`` is rank
    r's cost model (a slow rank is one with a ``worker_factor`` on every worker). Run ids are
    ``{job}-rank{r}``; every ``run_start`` names the job and the world size, as a real rank's does.
    ``shards[r]``, if given, are the indices rank r reads each epoch in place of DistributedSampler's
    (a split that overlaps or misses, to see the shard check name it). Each ``epoch_end`` carries the
    digest of the indices the rank dispatched that epoch, as the probe's does (``probe/iterators.py``).

    Raises:
        ValueError: for an iterable dataset (torch shards those inside the dataset, not by sampler).
    """
    if workload.dataset_kind != "map":
        raise ValueError("a simulated job shards a map-style dataset with DistributedSampler; "
                         "this workload's dataset is iterable")
    world = len(costs)
    settings = workload.settings
    per_rank = []
    if shards is not None and len(shards) != world:
        raise ValueError(f"{len(shards)} shards for {world} ranks: give one list of indices per rank")
    orders = []
    for rank, model in enumerate(costs):
        shard = distributed_shard(workload.length, world, rank, drop_last=settings.drop_last) \
            if shards is None else list(shards[rank])
        epoch = batched(shard, settings.batch_size or 1, drop_last=settings.drop_last)
        order = SamplerOrder([epoch] * workload.epochs, "DistributedSampler", "BatchSampler")
        orders.append(order)
        cfg = sim_config(workload, run_id=f"{job}-rank{rank}", scenario=scenario, params=params, costs=model,
                         order=order)
        cfg = dataclasses.replace(cfg, rank=rank, extra_start={**cfg.extra_start, "job": job, "world_size": world})
        seed = (model.seed if model.seed is not None else int(params.get("seed", 0))) + rank
        per_rank.append((cfg, TaskCosts(model, workload.sample_cost, workload.step_cost, random.Random(seed),
                                        pin_memory=settings.pin_memory)))
    run = simulate_job(per_rank, max_events=max_events)
    for events, order in zip(run.events, orders, strict=True):
        add_shard_digests(events, order.batches, workload.length)
        if events and events[-1]["kind"] == Kind.RUN_END:
            events[-1]["stats"] = summary(reduce(events))
    return run


def add_shard_digests(events: list[Event], batches: Sequence[Sequence[Sequence[int]]], length: int) -> None:
    """Put on each ``epoch_end`` the digest of the sample indices dispatched in its epoch.

    A ``dispatch`` event keeps only the first ``MAX_INDICES`` of a batch, so each is matched to the
    sampler's next batch that begins with them and has its length: torch drops a batch it took from
    the sampler when no worker can take it (``_try_put_index``), so dispatches are a subsequence of
    the sampler's batches, in order.
    """
    read: dict[int, list[int]] = {}
    position: dict[int, int] = {}
    for event in events:
        if event["kind"] == Kind.DISPATCH:
            epoch = event["epoch"]
            order, at = batches[epoch], position.get(epoch, 0)
            head = event.get("indices") or []
            while at < len(order) and (len(order[at]) != event.get("n") or list(order[at][:MAX_INDICES]) != head):
                at += 1
            if at < len(order):
                read.setdefault(epoch, []).extend(order[at])
            position[epoch] = at + 1
        elif event["kind"] == Kind.EPOCH_END:
            event["shard"] = encode_shard(read.get(event["epoch"], []), length)
            event["shard_length"] = length
