"""``simulate``: a scenario's plan in, the ◆ events of a simulated run out.

The thin shell around the pure core: it turns a ``LoaderPlan`` (and, unless given, the order of its
real samplers) into a ``SimConfig``, compiles the cost model, runs the ``Simulator`` and puts the
reducer's summary into ``run_end``, exactly as the real probe does.
"""

from __future__ import annotations

import random
from typing import Any

from loaderscope.events import Event, Kind
from loaderscope.scenarios.base import LoaderPlan
from loaderscope.sim.costs import CostModel, TaskCosts
from loaderscope.sim.engine import SimConfig, Simulator
from loaderscope.state import reduce, summary

# A run this long holds ~1 GB of events; beyond it the run ends with reason "stopped".
DEFAULT_MAX_EVENTS = 2_000_000


def loader_config(plan: LoaderPlan, sampler: str, batch_sampler: str, batches: list[list[Any]] | None) -> dict[str, Any]:
    """The DataLoader arguments as torch resolves them (its defaults filled in), for ``run_start``."""
    kwargs = plan.loader_kwargs
    workers = kwargs.get("num_workers", 0)
    return {
        "num_workers": workers,
        "batch_size": kwargs.get("batch_size"),
        "prefetch_factor": kwargs.get("prefetch_factor", 2) if workers else None,
        "persistent_workers": kwargs.get("persistent_workers", False),
        "in_order": kwargs.get("in_order", True),
        "drop_last": kwargs.get("drop_last", False),
        "timeout": kwargs.get("timeout", 0),
        "pin_memory": kwargs.get("pin_memory", False),
        "dataset_kind": plan.dataset_kind,
        "dataset_length": plan.length,
        "sampler": sampler,
        "batch_sampler": batch_sampler,
        "batches_per_epoch": len(batches) if batches is not None else None,
        "epochs": plan.epochs,
        **plan.describe,
    }


def sim_config(
    plan: LoaderPlan,
    *,
    run_id: str,
    scenario: str,
    params: dict[str, Any],
    costs: CostModel,
    batches: list[list[list[Any]]] | None,
) -> SimConfig:
    """The core's configuration for ``plan``; ``batches`` (per epoch) come from the real samplers unless given."""
    names = ("given", "given")
    if batches is None:
        from loaderscope.sim.batches import sampler_order

        order = sampler_order(plan)
        batches, names = order.batches, (order.sampler, order.batch_sampler)
    elif plan.describe:
        names = (plan.describe.get("sampler", "given"), plan.describe.get("batch_sampler", "given"))
    if plan.dataset_kind == "map" and len(batches) < plan.epochs:
        raise ValueError(f"batches cover {len(batches)} epochs, the plan runs {plan.epochs}")
    kwargs = plan.loader_kwargs
    workers = kwargs.get("num_workers", 0)
    config = loader_config(plan, *names, batches[0] if plan.dataset_kind == "map" else None)
    config["costs"] = costs.model_dump(exclude_defaults=True)
    # torch pins only with an accelerator; the simulator pins when a pin cost says what it costs
    config["pin_memory_active"] = bool(config["pin_memory"] and costs.pin_ms_per_mb > 0)
    return SimConfig(
        num_workers=workers,
        prefetch_factor=config["prefetch_factor"] or 2,
        in_order=config["in_order"],
        persistent_workers=config["persistent_workers"],
        drop_last=config["drop_last"],
        timeout=config["timeout"],
        dataset_kind=plan.dataset_kind,
        epochs=plan.epochs,
        batches=batches,
        batch_size=kwargs.get("batch_size") or 1,
        shard_sizes=_shards(plan, workers),
        run_id=run_id,
        scenario=scenario,
        config=config,
        extra_start={"params": dict(params)},
    )


def _shards(plan: LoaderPlan, workers: int) -> list[int]:
    """Samples per worker shard. Without a sharding rule every worker replays the whole stream, as in torch."""
    if plan.dataset_kind != "iterable":
        return []
    if workers == 0:
        return [plan.length]
    if plan.shard_sizes is None:
        return [plan.length] * workers
    return list(plan.shard_sizes(workers))


def simulate(
    plan: LoaderPlan,
    *,
    run_id: str,
    scenario: str,
    params: dict[str, Any],
    costs: CostModel | None = None,
    batches: list[list[list[Any]]] | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
) -> list[Event]:
    """Every event of a simulated run of ``plan`` (``mode: "sim"``), ``run_end`` carrying the summary.

    Args:
        plan: the scenario's plan (its latencies are the default costs).
        run_id, scenario, params: recorded in the events, as the real probe records them.
        costs: what-if costs on top of the plan's (see ``CostModel``).
        batches: sample indices per batch per epoch; by default iterated from the plan's real samplers.
        max_events: the run stops (reason "stopped", ``truncated``) past this many events.

    Raises:
        ValueError: if ``batches`` cover fewer epochs than the plan runs.
    """
    model = costs or CostModel()
    cfg = sim_config(plan, run_id=run_id, scenario=scenario, params=params, costs=model, batches=batches)
    seed = model.seed if model.seed is not None else int(params.get("seed", 0))
    task_costs = TaskCosts(model, plan.sample_cost, plan.step_cost, random.Random(seed),
                           pin_memory=bool(cfg.config["pin_memory"]))
    events = Simulator(cfg, task_costs, max_events=max_events).run()
    if events and events[-1]["kind"] == Kind.RUN_END:
        events[-1]["stats"] = summary(reduce(events))
    return events
