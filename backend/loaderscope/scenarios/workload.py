"""What a built scenario runs: the DataLoader's arguments, its dataset and samplers, and the latency model.

The real runner and the simulator take the same ``Workload``: its ``sample_cost`` and ``step_cost``
are plain functions, so the real dataset sleeps exactly what the simulator charges on its virtual
clock, and its ``LoaderSettings`` (loaderscope/settings.py) are the loader's settings as torch
resolves them. Pure: no torch here (``make_*`` build torch objects when called; ``sampler_order``
imports torch when asked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from loaderscope.settings import LoaderSettings


class SampleCost(Protocol):
    """Seconds a worker spends producing one sample (picklable: it travels to worker processes)."""

    def __call__(self, index: int, worker: int) -> float: ...


@dataclass(frozen=True)
class SamplerOrder:
    """Sample indices of every batch of every epoch, and the names of the samplers that made them."""

    batches: list[list[list[Any]]]
    sampler: str
    batch_sampler: str


@dataclass(frozen=True)
class Workload:
    """Everything needed to run a scenario, really or simulated.

    ``make_dataset``/``make_sampler``/``make_batch_sampler`` build torch objects (the real loader,
    and the sampler order the simulator dispatches); ``sample_cost`` and ``step_cost`` are the
    latency model both share; ``settings`` and ``collate_fn`` are the DataLoader's arguments.
    """

    settings: LoaderSettings
    dataset_kind: Literal["map", "iterable"]
    length: int
    sample_cost: SampleCost
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
    collate_fn: Callable[[list[Any]], Any] | None = None

    def sampler_order(self) -> SamplerOrder:
        """The batches this workload's own torch samplers yield, epoch by epoch (imports torch)."""
        from loaderscope.scenarios.order import sampler_order

        return sampler_order(self)
