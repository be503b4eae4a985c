"""Builders shared by the simulator tests: a core configuration without torch (no tests in here)."""

from __future__ import annotations

import random
from typing import Any

from loaderscope.events import validate
from loaderscope.model.conformance import check
from loaderscope.settings import LoaderSettings
from loaderscope.sim import CostModel, SimConfig, Simulator, TaskCosts


def map_batches(size: int, batch: int, drop_last: bool, epochs: int, shuffle_seed: int | None = None) -> list:
    """A BatchSampler over a (possibly shuffled) range, per epoch, as plain lists."""
    rng = random.Random(shuffle_seed)
    out = []
    for _ in range(epochs):
        order = list(range(size))
        if shuffle_seed is not None:
            rng.shuffle(order)
        batches = [order[i : i + batch] for i in range(0, size, batch)]
        if drop_last and batches and len(batches[-1]) < batch:
            batches.pop()
        out.append(batches)
    return out


def make_config(
    *,
    num_workers: int = 4,
    prefetch_factor: int = 2,
    in_order: bool = True,
    persistent_workers: bool = False,
    drop_last: bool = False,
    kind: str = "map",
    size: int = 32,
    batch_size: int = 4,
    epochs: int = 1,
    shards: list[int] | None = None,
    timeout: float = 0.0,
    shuffle_seed: int | None = None,
) -> SimConfig:
    config = {
        "num_workers": num_workers,
        "prefetch_factor": prefetch_factor if num_workers else None,
        "in_order": in_order,
        "persistent_workers": persistent_workers,
        "drop_last": drop_last,
        "batch_size": batch_size,
        "timeout": timeout,
    }
    loader = LoaderSettings(num_workers=num_workers, batch_size=batch_size, drop_last=drop_last,
                            prefetch_factor=prefetch_factor, persistent_workers=persistent_workers, in_order=in_order,
                            timeout=timeout)
    return SimConfig(
        loader=loader,
        dataset_kind=kind,  # type: ignore[arg-type]
        epochs=epochs,
        batches=map_batches(size, batch_size, drop_last, epochs, shuffle_seed) if kind == "map" else [],
        shard_sizes=(shards if shards is not None else [size] * max(num_workers, 1)) if kind == "iterable" else [],
        run_id="t",
        scenario="test",
        config=config,
    )


def run_core(cfg: SimConfig, costs: CostModel | None = None, sample_s: float = 0.005, step_s: float = 0.0,
             seed: int = 0, pin_memory: bool = True) -> list[dict[str, Any]]:
    task_costs = TaskCosts(costs or CostModel(), lambda i, w: sample_s, step_s, random.Random(seed),
                           pin_memory=pin_memory)
    return Simulator(cfg, task_costs).run()




def problems(events: list[dict[str, Any]], *, complete: bool = True) -> list[str]:
    """The shared conformance check, plus what only a simulated trace can promise.

    A simulated trace is also schema-valid with seq 0, 1, 2, ... and time that never runs back
    (real traces merge worker records late, so their ``t`` may step back a little).
    """
    found = check(events) if complete else []
    for position, event in enumerate(events):
        validate(event)
        if event["seq"] != position:
            found.append(f"seq {event['seq']} at position {position}")
        if position and event["t"] < events[position - 1]["t"]:
            found.append(f"seq {event['seq']}: time runs back")
    return found
