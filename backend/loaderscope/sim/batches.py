"""The sampler order of a plan, from the real torch samplers (the one shell of the simulator that needs torch).

A simulated ``samplers`` or ``group_sampler`` run dispatches the same sample indices as a real one
because the indices come from the very same sampler objects, iterated once per epoch exactly as
``DataLoader`` iterates them (``iter(batch_sampler)`` at every ``_reset``). No sample is loaded:
only ``len(dataset)`` and the samplers are touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loaderscope.scenarios.base import LoaderPlan


@dataclass(frozen=True)
class SamplerOrder:
    """Sample indices of every batch of every epoch, and the names of the samplers that made them."""

    batches: list[list[list[Any]]]
    sampler: str
    batch_sampler: str


def sampler_order(plan: LoaderPlan) -> SamplerOrder:
    """Iterate the plan's (batch) sampler for ``plan.epochs`` epochs, as the DataLoader would."""
    if plan.dataset_kind == "iterable":
        # torch feeds an IterableDataset from _InfiniteConstantSampler; the shards decide the batches.
        return SamplerOrder([], "_InfiniteConstantSampler", "BatchSampler")
    from torch.utils.data import BatchSampler, SequentialSampler

    dataset = plan.make_dataset()
    if plan.make_batch_sampler is not None:
        batch_sampler = plan.make_batch_sampler(dataset)
        inner = getattr(batch_sampler, "sampler", None)
        sampler_name = type(inner).__name__ if inner is not None else "None"
    else:
        sampler = plan.make_sampler(dataset) if plan.make_sampler is not None else SequentialSampler(dataset)
        kwargs = plan.loader_kwargs
        batch_sampler = BatchSampler(sampler, kwargs.get("batch_size", 1), kwargs.get("drop_last", False))
        sampler_name = type(sampler).__name__
    batches = [[[_plain(i) for i in batch] for batch in batch_sampler] for _ in range(plan.epochs)]
    return SamplerOrder(batches, sampler_name, type(batch_sampler).__name__)


def _plain(index: Any) -> Any:
    """Samplers may yield tensors or numpy integers; the simulator and the events want plain ints."""
    return index if isinstance(index, int) else int(index)
