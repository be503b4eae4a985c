"""The scenario catalog: an explicit table of name → metadata, parameters and the builder's dotted path.

Nothing here imports torch: the dashboard lists and validates scenarios from this table alone.
A builder (``scenarios.builders``, ``torch.hub`` entries) is imported when a run is built.
torch.hub entries join the table through ``register``, the same function that enters the built-ins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from loaderscope.problems import ParamError, UnknownScenario
from loaderscope.scenarios import params as p
from loaderscope.scenarios.hub import PREFIX, HubEntry
from loaderscope.scenarios.workload import Workload


@dataclass(frozen=True)
class Scenario:
    """A catalog entry. ``builder`` is ``"module:function"``, called with the validated parameters
    (and, for a torch.hub scenario, its ``hub`` entry)."""

    name: str
    title: str
    description: str
    params: type[p.CommonParams]
    builder: str
    fails: bool = False  # demonstrates a failure: the DataLoader raises (a dead worker, a timeout, ...)
    hub: HubEntry | None = None  # where a torch.hub scenario loads from; a run process registers it again

    def validate(self, values: Mapping[str, Any] | None = None) -> p.CommonParams:
        """The parameters, typed and checked; raises ParamError naming each bad field."""
        try:
            return self.params.model_validate(dict(values or {}))
        except ValidationError as exc:
            raise ParamError.of(exc, self.params, self.name) from None

    def build(self, params: p.CommonParams) -> Workload:
        """The workload for validated ``params`` (imports the builder, and with it torch)."""
        module, _, function = self.builder.partition(":")
        builder: Callable[..., Workload] = getattr(importlib.import_module(module), function)
        return builder(params) if self.hub is None else builder(params, self.hub)

    def plan(self, values: Mapping[str, Any] | None = None) -> Workload:
        """Validate and build in one step (tests and benchmarks that want the workload at once)."""
        return self.build(self.validate(values))

    def describe(self) -> dict[str, Any]:
        """The ◆ /api/scenarios entry: name, title, description and typed, bounded params."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "fails": self.fails,
            "params": self.params.model_json_schema()["properties"],
        }


def _built_in(name: str, title: str, description: str, params: type[p.CommonParams], *,
              fails: bool = False) -> Scenario:
    return Scenario(name, title, description, params, f"loaderscope.scenarios.builders:{name}", fails)


BUILT_INS: tuple[Scenario, ...] = (
    _built_in("out_of_order", "Out-of-order arrival", "Earlier tasks are slower, so results arrive in reverse and "
              "wait in the reorder buffer (_task_info) until rcvd_idx reaches them.", p.OutOfOrderParams),
    _built_in("uniform", "Uniform cost", "Every sample costs the same: the baseline.", p.CommonParams),
    _built_in("straggler", "One slow worker", "One worker is several times slower; the in-order cursor waits on it "
              "while others sit idle.", p.StragglerParams),
    _built_in("iterable_shards", "Iterable dataset shards", "An IterableDataset split with get_worker_info(); "
              "uneven shards exhaust early and their tasks are skipped.", p.IterableParams),
    _built_in("group_sampler", "mmdetection GroupSampler", "Aspect-ratio groups under a BatchSampler: every batch "
              "holds images of one orientation (mmdetection's GroupSampler).", p.CommonParams),
    _built_in("samplers", "Sampler variants", "Sequential, random (with/without replacement), subset, weighted, "
              "length-sorted batches or DistributedSampler.", p.SamplerParams),
    _built_in("persistent_epochs", "Persistent workers across epochs", "Several epochs with "
              "persistent_workers=True: workers survive, each epoch resets the cursors.", p.PersistentParams),
    _built_in("slow_consumer", "Slow training step", "The step is slower than loading: the prefetch window fills "
              "and the consumer never waits.", p.SlowConsumerParams),
    _built_in("stuck_worker", "A stuck worker", "One sample's read hangs far past the stuck threshold: find the "
              "worker, the sample and the line.", p.StuckParams),
    _built_in("crash_worker", "A worker dies", "A worker is killed mid-task (the OOM killer's SIGKILL, or "
              "os._exit): which one, on which task.", p.CrashParams, fails=True),
    _built_in("raising_dataset", "A corrupt sample", "__getitem__ raises for one sample: the worker's traceback, "
              "the task and the sample indices.", p.RaisingParams, fails=True),
    _built_in("timeout", "timeout= expires", "A slow sample outlasts DataLoader(timeout=...): what every worker "
              "was doing when it expired.", p.TimeoutParams, fails=True),
    _built_in("io_bound", "Reading real files", "Each sample is a file the scenario writes to a temporary "
              "directory; workers read and decode it.", p.FileParams),
    _built_in("gpu_step", "Pinning and the GPU step", "Each batch is pinned, copied to the GPU (non_blocking) and "
              "trained on: wait vs copy vs compute.", p.GpuParams),
    _built_in("pickle_heavy", "Batches that cross pickled", "A collate_fn returning numpy arrays pickles every "
              "batch through a pipe; tensors use shared memory.", p.PickleParams),
)

_REGISTRY: dict[str, Scenario] = {}


def hub_scenario(entry: HubEntry) -> Scenario:
    """``hub:ENTRY`` as a catalog entry (``register`` makes it runnable)."""
    return Scenario(
        f"{PREFIX}{entry.entry}",
        f"hub: {entry.entry}",
        f"torch.hub entry {entry.entry!r} from {entry.directory} (registered on the command line)",
        p.HubParams,
        "loaderscope.scenarios.builders:hub",
        hub=entry,
    )


def register(scenario: Scenario) -> Scenario:
    """Make ``scenario`` runnable by name in this process (a later entry of the same name replaces it)."""
    _REGISTRY[scenario.name] = scenario
    return scenario


for _scenario in BUILT_INS:
    register(_scenario)


def get(name: str) -> Scenario:
    """The scenario called ``name``; raises UnknownScenario (a ParamError) naming the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownScenario(name, list(_REGISTRY)) from None


def all_scenarios() -> list[Scenario]:
    return sorted(_REGISTRY.values(), key=lambda s: s.name)
