"""The built-in scenarios' builders: validated parameters in, a ``Workload`` (torch objects) out.

Named in the catalog by dotted path (``loaderscope.scenarios.builders:NAME``) and imported only
when a run is built: this module imports torch.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal

import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from loaderscope.scenarios import params as p
from loaderscope.scenarios.datasets import (
    AspectRatioDataset,
    CostDataset,
    CrashDataset,
    DescendingRoundCost,
    FileDataset,
    GroupSampler,
    LengthSortedBatchSampler,
    RaisingDataset,
    ShardedRange,
    StragglerCost,
    StuckDataset,
    UniformCost,
    shard_bounds,
    write_files,
)
from loaderscope.scenarios.hub import HubEntry, HubError
from loaderscope.scenarios.workload import Workload


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def map_workload(params: p.CommonParams, cost: Any, **extra: Any) -> Workload:
    """A map-style workload over a CostDataset with a sequential sampler unless told otherwise."""
    return Workload(
        settings=params.loader_settings(batched_by_sampler="make_batch_sampler" in extra),
        dataset_kind="map",
        length=params.dataset_size,
        sample_cost=cost,
        make_dataset=extra.pop("make_dataset", lambda: CostDataset(params.dataset_size, cost)),
        epochs=params.epochs,
        step_cost=params.step_ms / 1000,
        **extra,
    )


def uniform_workload(params: p.CommonParams, dataset: Callable[[UniformCost], Any], **extra: Any) -> Workload:
    """A map-style workload with uniform per-sample cost over a dataset built from that cost."""
    cost = UniformCost(params.sample_ms)
    return map_workload(params, cost, make_dataset=lambda: dataset(cost), **extra)


def out_of_order(params: p.OutOfOrderParams) -> Workload:
    return map_workload(params, DescendingRoundCost(params.sample_ms, params.batch_size, params.num_workers,
                                                    params.hold_every, params.hold_ms))


def uniform(params: p.CommonParams) -> Workload:
    return map_workload(params, UniformCost(params.sample_ms))


def straggler(params: p.StragglerParams) -> Workload:
    return map_workload(params, StragglerCost(params.sample_ms, params.slow_worker, params.slow_factor))


def iterable_shards(params: p.IterableParams) -> Workload:
    cost = UniformCost(params.sample_ms)
    size, uneven = params.dataset_size, params.uneven
    return Workload(
        settings=params.loader_settings(),
        dataset_kind="iterable",
        length=size,
        sample_cost=cost,
        make_dataset=lambda: ShardedRange(size, cost, uneven),
        epochs=params.epochs,
        step_cost=params.step_ms / 1000,
        shard_sizes=lambda workers: [end - start for start, end in shard_bounds(size, workers, uneven)],
    )


def group_sampler(params: p.CommonParams) -> Workload:
    cost = UniformCost(params.sample_ms)
    dataset = AspectRatioDataset(params.dataset_size, cost, params.seed)
    return map_workload(
        params,
        cost,
        make_dataset=lambda: dataset,
        make_batch_sampler=lambda ds: BatchSampler(GroupSampler(ds, params.batch_size, params.seed),
                                                   params.batch_size, params.drop_last),
        describe={"sampler": "GroupSampler", "batch_sampler": "BatchSampler"},
    )


def make_sampler(params: p.SamplerParams, dataset: Any) -> Any:
    n = params.num_samples or len(dataset)
    match params.sampler:
        case "sequential":
            return SequentialSampler(dataset)
        case "random":
            return RandomSampler(dataset, generator=_generator(params.seed))
        case "random_replacement":
            return RandomSampler(dataset, replacement=True, num_samples=n, generator=_generator(params.seed))
        case "subset_random":
            return SubsetRandomSampler(range(0, len(dataset), 2), generator=_generator(params.seed))
        case "weighted_random":
            weights = [1.0 + (i % 4) for i in range(len(dataset))]
            return WeightedRandomSampler(weights, n, generator=_generator(params.seed))
        case "distributed":
            return DistributedSampler(dataset, num_replicas=params.world_size, rank=params.rank, shuffle=True,
                                      seed=params.seed)
    raise ValueError(f"unknown sampler {params.sampler!r}")


def samplers(params: p.SamplerParams) -> Workload:
    cost = UniformCost(params.sample_ms)
    if params.sampler == "length_sorted":
        lengths = [(i * 7919) % 50 + 1 for i in range(params.dataset_size)]
        return map_workload(
            params,
            cost,
            make_batch_sampler=lambda ds: LengthSortedBatchSampler(lengths, params.batch_size, params.seed,
                                                                   params.drop_last),
            describe={"batch_sampler": "LengthSortedBatchSampler"},
        )
    return map_workload(params, cost, make_sampler=lambda ds: make_sampler(params, ds),
                        describe={"sampler": params.sampler})


def persistent_epochs(params: p.PersistentParams) -> Workload:
    extra: dict[str, Any] = {}
    if params.shuffle:
        extra["make_sampler"] = lambda ds: RandomSampler(ds, generator=_generator(params.seed))
    return map_workload(params, UniformCost(params.sample_ms), **extra)


def slow_consumer(params: p.SlowConsumerParams) -> Workload:
    return map_workload(params, UniformCost(params.sample_ms))


def stuck_worker(params: p.StuckParams) -> Workload:
    return uniform_workload(params, lambda cost: StuckDataset(params.dataset_size, cost, params.stuck_index,
                                                              params.stuck_seconds))


def crash_worker(params: p.CrashParams) -> Workload:
    return uniform_workload(params, lambda cost: CrashDataset(params.dataset_size, cost, params.crash_index,
                                                              params.how))


def raising_dataset(params: p.RaisingParams) -> Workload:
    return uniform_workload(params, lambda cost: RaisingDataset(params.dataset_size, cost, params.bad_index))


def timeout(params: p.TimeoutParams) -> Workload:
    return uniform_workload(params, lambda cost: StuckDataset(params.dataset_size, cost, params.stuck_index,
                                                              params.stuck_seconds))


def io_bound(params: p.FileParams) -> Workload:
    directory = tempfile.mkdtemp(prefix="loaderscope-io-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)

    def make(cost: UniformCost) -> FileDataset:
        write_files(directory, params.dataset_size, params.file_kib, params.seed)
        return FileDataset(directory, params.dataset_size, cost)

    return uniform_workload(params, make)


def gpu_step(params: p.GpuParams) -> Workload:
    from loaderscope.scenarios.gpu import GpuStep, ImageDataset

    return map_workload(params, UniformCost(params.sample_ms),
                        make_dataset=lambda: ImageDataset(params.dataset_size, params.image_size), make_step=GpuStep)


def pickle_heavy(params: p.PickleParams) -> Workload:
    from loaderscope.scenarios.gpu import ImageDataset, numpy_collate

    workload = map_workload(params, UniformCost(params.sample_ms),
                            make_dataset=lambda: ImageDataset(params.dataset_size, params.image_size, as_numpy=True))
    if params.collate == "numpy":
        return replace(workload, collate_fn=numpy_collate)
    return workload


def hub(params: p.HubParams, entry: HubEntry) -> Workload:
    """A torch.hub entry's dataset (and samplers, collate_fn) under the loader's own parameters."""
    loaded = torch.hub.load(  # type: ignore[no-untyped-call]  # torch/hub.py: load is unannotated
        str(entry.directory), entry.entry, source="local", **entry.kwargs)
    parts = dict(loaded) if isinstance(loaded, Mapping) else {"dataset": loaded}
    if "dataset" not in parts:
        raise HubError(f"hub entry {entry.entry!r} returned a dict without 'dataset'")
    dataset = parts["dataset"]
    extra: dict[str, Any] = {}
    if parts.get("batch_sampler") is not None:
        extra["make_batch_sampler"] = lambda ds: parts["batch_sampler"]
    elif parts.get("sampler") is not None:
        extra["make_sampler"] = lambda ds: parts["sampler"]
    kind: Literal["map", "iterable"] = "iterable" if isinstance(dataset, torch.utils.data.IterableDataset) else "map"
    return Workload(
        settings=params.loader_settings(batched_by_sampler="make_batch_sampler" in extra),
        collate_fn=parts.get("collate_fn"),
        dataset_kind=kind,
        length=len(dataset) if kind == "map" else params.dataset_size,
        sample_cost=UniformCost(params.sample_ms),  # unknown: the simulator needs a recorded trace to fit
        make_dataset=lambda: dataset,
        epochs=params.epochs,
        step_cost=params.step_ms / 1000,
        describe={"hub": f"{entry.directory}:{entry.entry}"},
        **extra,
    )
