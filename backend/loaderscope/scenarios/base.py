"""What a scenario is: typed parameters in, a plan that both the real loader and the simulator run.

A plan names its costs as plain functions of (sample index, worker id), so the real dataset
sleeps exactly what the simulator charges on its virtual clock: the two modes agree by construction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class SampleCost(Protocol):
    """Seconds a worker spends producing one sample (picklable: it travels to worker processes)."""

    def __call__(self, index: int, worker: int) -> float: ...


class CommonParams(BaseModel):
    """Parameters every scenario takes; bounds keep a request from exhausting the machine."""

    model_config = ConfigDict(extra="forbid")

    num_workers: int = Field(4, ge=0, le=64, description="worker processes (0: load in the main process)")
    batch_size: int = Field(4, ge=1, le=1024, description="samples per batch")
    dataset_size: int = Field(96, ge=1, le=100_000, description="samples in the dataset")
    prefetch_factor: int = Field(2, ge=1, le=16, description="tasks in flight per worker")
    persistent_workers: bool = Field(False, description="keep workers alive across epochs")
    in_order: bool = Field(True, description="yield batches in sampler order")
    drop_last: bool = Field(False, description="drop the last incomplete batch")
    timeout: float = Field(0.0, ge=0, le=600, description="seconds to wait for a batch (0: forever)")
    pin_memory: bool = Field(False, description="copy batches to page-locked memory")
    epochs: int = Field(1, ge=1, le=50, description="passes over the dataset")
    sample_ms: float = Field(5.0, ge=0, le=5_000, description="work per sample in a worker, ms")
    step_ms: float = Field(0.0, ge=0, le=10_000, description="training step per batch in the consumer, ms")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="seed for samplers and workers")
    stuck_after: float = Field(0.0, ge=0, le=3_600, description="report a fetch stuck after this many s "
                               "(0: the larger of 10 s and 20× the median fetch)")


@dataclass(frozen=True)
class LoaderPlan:
    """Everything needed to run a scenario, really or simulated.

    ``make_dataset``/``make_sampler``/``make_batch_sampler`` build torch objects (real mode, and the
    simulator's sampler order); ``sample_cost`` and ``step_cost`` are the latency model both share.
    """

    dataset_kind: Literal["map", "iterable"]
    length: int
    sample_cost: SampleCost
    loader_kwargs: dict[str, Any]
    make_dataset: Callable[[], Any]
    make_sampler: Callable[[Any], Any] | None = None
    make_batch_sampler: Callable[[Any], Any] | None = None
    epochs: int = 1
    step_cost: float = 0.0
    # Iterable datasets: the samples each worker's shard yields, for a given worker count.
    shard_sizes: Callable[[int], Sequence[int]] | None = None
    describe: dict[str, Any] = field(default_factory=dict)
    # A consumer step of its own (called with each batch, returns timings): replaces step_cost.
    make_step: Callable[[], Callable[[Any], dict[str, Any]]] | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    description: str
    params: type[CommonParams]
    build: Callable[[Any], LoaderPlan]
    fails: bool = False  # demonstrates a failure: the DataLoader raises (a dead worker, a timeout, ...)

    def plan(self, values: dict[str, Any] | None = None) -> LoaderPlan:
        """Validate ``values`` (raises pydantic.ValidationError naming the field) and build the plan."""
        return self.build(self.params.model_validate(values or {}))

    def describe(self) -> dict[str, Any]:
        """The ◆ /api/scenarios entry: name, title, description and typed, bounded params."""
        schema = self.params.model_json_schema()
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "fails": self.fails,
            "params": schema["properties"],
        }


REGISTRY: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    REGISTRY[scenario.name] = scenario
    return scenario


class UnknownScenario(KeyError):
    def __str__(self) -> str:
        return f"no scenario named {self.args[0]!r}; choose one of: {', '.join(sorted(REGISTRY))}"


def get(name: str) -> Scenario:
    from loaderscope.scenarios import catalog  # noqa: F401  (registers the built-ins)

    if name.startswith("hub:") and name not in REGISTRY:
        from loaderscope.scenarios.hub import register_from_env

        register_from_env()
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownScenario(name) from None
