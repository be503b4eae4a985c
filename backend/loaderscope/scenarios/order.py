"""The sampler order of a workload, from its real torch samplers.

A simulated ``samplers`` or ``group_sampler`` run dispatches the same sample indices as a real one
because the indices come from the very same sampler objects, iterated once per epoch exactly as
``DataLoader`` iterates them (``iter(batch_sampler)`` at every ``_reset``). No sample is loaded:
only ``len(dataset)`` and the samplers are touched. It lives with the scenarios, not the simulator,
because only a scenario can build its samplers; the simulator takes the plain index lists.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import BatchSampler, SequentialSampler

from loaderscope.scenarios.workload import SamplerOrder, Workload


def sampler_order(workload: Workload) -> SamplerOrder:
    """Iterate the workload's (batch) sampler for ``workload.epochs`` epochs, as the DataLoader would."""
    if workload.dataset_kind == "iterable":
        # torch feeds an IterableDataset from _InfiniteConstantSampler; the shards decide the batches.
        return SamplerOrder([], "_InfiniteConstantSampler", "BatchSampler")
    dataset = workload.make_dataset()
    if workload.make_batch_sampler is not None:
        batch_sampler = workload.make_batch_sampler(dataset)
        inner = getattr(batch_sampler, "sampler", None)
        sampler_name = type(inner).__name__ if inner is not None else "None"
    else:
        sampler = workload.make_sampler(dataset) if workload.make_sampler is not None else SequentialSampler(dataset)
        settings = workload.settings
        batch_sampler = BatchSampler(sampler, settings.batch_size or 1, settings.drop_last)
        sampler_name = type(sampler).__name__
    batches = [[[_plain(i) for i in batch] for batch in batch_sampler] for _ in range(workload.epochs)]
    return SamplerOrder(batches, sampler_name, type(batch_sampler).__name__)


def _plain(index: Any) -> Any:
    """Samplers may yield tensors or numpy integers; the simulator and the events want plain ints."""
    return index if isinstance(index, int) else int(index)
