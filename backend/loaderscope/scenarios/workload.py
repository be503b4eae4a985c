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
        """The batches this workload's own torch samplers yield, epoch by epoch (imports torch).

        A simulated ``samplers`` or ``group_sampler`` run dispatches the same sample indices as a real
        one because they come from the very same sampler objects, iterated once per epoch as
        ``DataLoader`` iterates them (``iter(batch_sampler)`` at every ``_reset``). No sample is
        loaded: only ``len(dataset)`` and the samplers are touched. It lives with the scenarios, not
        the simulator, because only a scenario can build its samplers; the simulator takes the lists.
        """
        from torch.utils.data import BatchSampler, SequentialSampler

        if self.dataset_kind == "iterable":
            # torch feeds an IterableDataset from _InfiniteConstantSampler; the shards decide the batches.
            return SamplerOrder([], "_InfiniteConstantSampler", "BatchSampler")
        dataset = self.make_dataset()
        if self.make_batch_sampler is not None:
            batch_sampler = self.make_batch_sampler(dataset)
            inner = getattr(batch_sampler, "sampler", None)
            sampler_name = type(inner).__name__ if inner is not None else "None"
        else:
            sampler = self.make_sampler(dataset) if self.make_sampler is not None else SequentialSampler(dataset)
            batch_sampler = BatchSampler(sampler, self.settings.batch_size or 1, self.settings.drop_last)
            sampler_name = type(sampler).__name__
        batches = [[[_plain(i) for i in batch] for batch in batch_sampler] for _ in range(self.epochs)]
        return SamplerOrder(batches, sampler_name, type(batch_sampler).__name__)


def _plain(index: Any) -> Any:
    """Samplers may yield tensors or numpy integers; the simulator and the events want plain ints."""
    return index if isinstance(index, int) else int(index)
