"""Scenarios from ``torch.hub`` entry points: a team's real dataset on the dashboard, no scenario code.

``loaderscope run --hub DIR:ENTRY`` (and ``serve --hub``) loads ``hubconf.py`` from DIR with
``torch.hub.load(DIR, ENTRY, source="local", **kwargs)`` (seed 002 describes torch.hub). The entry
returns a Dataset, or a dict with ``dataset`` and optionally ``sampler``, ``batch_sampler`` and
``collate_fn``. Only entries named on the command line by whoever started loaderscope can load:
the page may pick among them, never name a path; its parameters are the loader's, typed and bounded.
The list travels to run processes in ``$LOADERSCOPE_HUB``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loaderscope.scenarios.base import REGISTRY, CommonParams, LoaderPlan, Scenario
from loaderscope.scenarios.catalog import loader_kwargs
from loaderscope.scenarios.datasets import UniformCost

HUB_ENV = "LOADERSCOPE_HUB"
PREFIX = "hub:"


class HubError(ValueError):
    """A --hub argument that cannot be used; the message says why and what to pass instead."""


def parse_spec(spec: str) -> tuple[Path, str]:
    directory, sep, entry = spec.rpartition(":")
    if not sep or not directory or not entry.isidentifier():
        raise HubError(f"--hub {spec!r}: expected DIR:ENTRY, e.g. --hub ./examples:synthetic_images")
    path = Path(directory).expanduser().resolve()
    if not (path / "hubconf.py").is_file():
        raise HubError(f"--hub {spec!r}: {path} has no hubconf.py")
    return path, entry


class HubParams(CommonParams):
    """Only the loader's own parameters: the entry's keyword arguments are fixed at registration."""


def _build(directory: Path, entry: str, kwargs: Mapping[str, Any], p: HubParams) -> LoaderPlan:
    import torch

    loaded = torch.hub.load(str(directory), entry, source="local", **kwargs)
    parts = dict(loaded) if isinstance(loaded, Mapping) else {"dataset": loaded}
    if "dataset" not in parts:
        raise HubError(f"hub entry {entry!r} returned a dict without 'dataset'")
    dataset = parts["dataset"]
    extra = {}
    if parts.get("batch_sampler") is not None:
        extra["make_batch_sampler"] = lambda ds: parts["batch_sampler"]
    elif parts.get("sampler") is not None:
        extra["make_sampler"] = lambda ds: parts["sampler"]
    kind = "iterable" if isinstance(dataset, torch.utils.data.IterableDataset) else "map"
    kwargs_ = loader_kwargs(p, batched_by_sampler="make_batch_sampler" in extra)
    if parts.get("collate_fn") is not None:
        kwargs_["collate_fn"] = parts["collate_fn"]
    return LoaderPlan(
        dataset_kind=kind,
        length=len(dataset) if kind == "map" else p.dataset_size,
        sample_cost=UniformCost(p.sample_ms),  # unknown: the simulator needs a recorded trace to fit
        loader_kwargs=kwargs_,
        make_dataset=lambda: dataset,
        epochs=p.epochs,
        step_cost=p.step_ms / 1000,
        describe={"hub": f"{directory}:{entry}"},
        **extra,
    )


def register(spec: str, kwargs: Mapping[str, Any] | None = None) -> Scenario:
    """Make ``hub:ENTRY`` a scenario in this process and in run processes started from it."""
    directory, entry = parse_spec(spec)
    fixed = dict(kwargs or {})
    scenario = Scenario(
        f"{PREFIX}{entry}",
        f"hub: {entry}",
        f"torch.hub entry {entry!r} from {directory} (registered on the command line)",
        HubParams,
        lambda p: _build(directory, entry, fixed, p),
    )
    REGISTRY[scenario.name] = scenario
    registered = [item for item in _from_env() if item["spec"] != spec] + [{"spec": spec, "kwargs": fixed}]
    os.environ[HUB_ENV] = json.dumps(registered)
    return scenario


def _from_env() -> list[dict[str, Any]]:
    try:
        items = json.loads(os.environ.get(HUB_ENV, "[]"))
    except ValueError:
        return []
    return [item for item in items if isinstance(item, dict) and isinstance(item.get("spec"), str)]


def register_from_env() -> None:
    """Run processes: register what the dashboard's command line registered."""
    for item in _from_env():
        if f"{PREFIX}{item['spec'].rpartition(':')[2]}" not in REGISTRY:
            register(item["spec"], item.get("kwargs") or {})
