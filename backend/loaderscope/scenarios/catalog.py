"""The built-in scenarios: each one shows one thing about the DataLoader protocol."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from typing import Any, Literal

import torch
from pydantic import Field, model_validator
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from loaderscope.scenarios.base import CommonParams, LoaderPlan, Scenario, register
from loaderscope.scenarios.datasets import (
    AspectRatioDataset,
    CostDataset,
    CrashDataset,
    FileDataset,
    RaisingDataset,
    StuckDataset,
    write_files,
    DescendingRoundCost,
    GroupSampler,
    LengthSortedBatchSampler,
    ShardedRange,
    StragglerCost,
    UniformCost,
    shard_bounds,
)


def loader_kwargs(p: CommonParams, *, batched_by_sampler: bool = False) -> dict[str, Any]:
    """DataLoader arguments from the common parameters, leaving out what torch rejects.

    torch refuses ``prefetch_factor``/``persistent_workers`` without workers, and ``batch_size``/
    ``drop_last`` next to a ``batch_sampler``: a scenario must stay a valid DataLoader call.
    """
    kwargs: dict[str, Any] = {
        "num_workers": p.num_workers,
        "timeout": p.timeout,
        "pin_memory": p.pin_memory,
        "in_order": p.in_order,
    }
    if not batched_by_sampler:
        kwargs |= {"batch_size": p.batch_size, "drop_last": p.drop_last}
    if p.num_workers > 0:
        kwargs |= {"prefetch_factor": p.prefetch_factor, "persistent_workers": p.persistent_workers}
    return kwargs


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def map_plan(p: CommonParams, cost: Any, **extra: Any) -> LoaderPlan:
    """A map-style scenario over a CostDataset with a sequential sampler unless told otherwise."""
    return LoaderPlan(
        dataset_kind="map",
        length=p.dataset_size,
        sample_cost=cost,
        loader_kwargs=loader_kwargs(p, batched_by_sampler="make_batch_sampler" in extra),
        make_dataset=extra.pop("make_dataset", lambda: CostDataset(p.dataset_size, cost)),
        epochs=p.epochs,
        step_cost=p.step_ms / 1000,
        **extra,
    )


def uniform_plan(p: CommonParams, dataset: Callable[[UniformCost], Any], **extra: Any) -> LoaderPlan:
    """A map-style plan with uniform per-sample cost over a dataset built from that cost."""
    cost = UniformCost(p.sample_ms)
    return map_plan(p, cost, make_dataset=lambda: dataset(cost), **extra)


# --- out_of_order ----------------------------------------------------------------------------------


class OutOfOrderParams(CommonParams):
    sample_ms: float = Field(10.0, ge=0, le=5_000, description="work per sample of the fastest task, ms")


def _out_of_order(p: OutOfOrderParams) -> LoaderPlan:
    return map_plan(p, DescendingRoundCost(p.sample_ms, p.batch_size, p.num_workers))


register(Scenario(
    "out_of_order",
    "Out-of-order arrival",
    "Earlier tasks are slower, so results arrive in reverse and wait in the reorder buffer (seed 001).",
    OutOfOrderParams,
    _out_of_order,
))


# --- uniform ---------------------------------------------------------------------------------------


def _uniform(p: CommonParams) -> LoaderPlan:
    return map_plan(p, UniformCost(p.sample_ms))


register(Scenario("uniform", "Uniform cost", "Every sample costs the same: the baseline.", CommonParams, _uniform))


# --- straggler -------------------------------------------------------------------------------------


class StragglerParams(CommonParams):
    slow_worker: int = Field(0, ge=0, le=63, description="the worker that is slow")
    slow_factor: float = Field(4.0, ge=1, le=100, description="how many times slower it is")


def _straggler(p: StragglerParams) -> LoaderPlan:
    return map_plan(p, StragglerCost(p.sample_ms, p.slow_worker, p.slow_factor))


register(Scenario(
    "straggler",
    "One slow worker",
    "One worker is several times slower; the in-order cursor waits on it while others sit idle.",
    StragglerParams,
    _straggler,
))


# --- iterable_shards -------------------------------------------------------------------------------


class IterableParams(CommonParams):
    dataset_size: int = Field(90, ge=1, le=100_000, description="samples in the stream")
    uneven: bool = Field(True, description="give worker k a shard proportional to k+1")


def _iterable(p: IterableParams) -> LoaderPlan:
    cost = UniformCost(p.sample_ms)
    return LoaderPlan(
        dataset_kind="iterable",
        length=p.dataset_size,
        sample_cost=cost,
        loader_kwargs=loader_kwargs(p),
        make_dataset=lambda: ShardedRange(p.dataset_size, cost, p.uneven),
        epochs=p.epochs,
        step_cost=p.step_ms / 1000,
        shard_sizes=lambda workers: [end - start for start, end in shard_bounds(p.dataset_size, workers, p.uneven)],
    )


register(Scenario(
    "iterable_shards",
    "Iterable dataset shards",
    "An IterableDataset split with get_worker_info(); uneven shards exhaust early and their tasks are skipped.",
    IterableParams,
    _iterable,
))


# --- group_sampler ---------------------------------------------------------------------------------


def _group(p: CommonParams) -> LoaderPlan:
    cost = UniformCost(p.sample_ms)
    dataset = AspectRatioDataset(p.dataset_size, cost, p.seed)
    return map_plan(
        p,
        cost,
        make_dataset=lambda: dataset,
        make_batch_sampler=lambda ds: BatchSampler(GroupSampler(ds, p.batch_size, p.seed), p.batch_size, p.drop_last),
        describe={"sampler": "GroupSampler", "batch_sampler": "BatchSampler"},
    )


register(Scenario(
    "group_sampler",
    "mmdetection GroupSampler",
    "Aspect-ratio groups under a BatchSampler: every batch holds images of one orientation (seed 004).",
    CommonParams,
    _group,
))


# --- samplers --------------------------------------------------------------------------------------

SamplerName = Literal[
    "sequential", "random", "random_replacement", "subset_random", "weighted_random", "length_sorted", "distributed"
]


class SamplerParams(CommonParams):
    sampler: SamplerName = Field("random", description="which sampler feeds the batch sampler")
    num_samples: int = Field(0, ge=0, le=100_000, description="samples drawn (random_replacement, weighted; 0: dataset size)")
    world_size: int = Field(2, ge=1, le=64, description="ranks (distributed)")
    rank: int = Field(0, ge=0, le=63, description="this rank (distributed)")

    @model_validator(mode="after")
    def _rank_in_world(self) -> SamplerParams:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} must be below world_size {self.world_size} (ranks count from 0)")
        return self


def make_sampler(p: SamplerParams, dataset: Any) -> Any:
    n = p.num_samples or len(dataset)
    match p.sampler:
        case "sequential":
            return SequentialSampler(dataset)
        case "random":
            return RandomSampler(dataset, generator=_generator(p.seed))
        case "random_replacement":
            return RandomSampler(dataset, replacement=True, num_samples=n, generator=_generator(p.seed))
        case "subset_random":
            return SubsetRandomSampler(range(0, len(dataset), 2), generator=_generator(p.seed))
        case "weighted_random":
            weights = [1.0 + (i % 4) for i in range(len(dataset))]
            return WeightedRandomSampler(weights, n, generator=_generator(p.seed))
        case "distributed":
            return DistributedSampler(dataset, num_replicas=p.world_size, rank=p.rank, shuffle=True, seed=p.seed)
    raise ValueError(f"unknown sampler {p.sampler!r}")


def _samplers(p: SamplerParams) -> LoaderPlan:
    cost = UniformCost(p.sample_ms)
    if p.sampler == "length_sorted":
        lengths = [(i * 7919) % 50 + 1 for i in range(p.dataset_size)]
        return map_plan(
            p,
            cost,
            make_batch_sampler=lambda ds: LengthSortedBatchSampler(lengths, p.batch_size, p.seed, p.drop_last),
            describe={"batch_sampler": "LengthSortedBatchSampler"},
        )
    return map_plan(p, cost, make_sampler=lambda ds: make_sampler(p, ds), describe={"sampler": p.sampler})


register(Scenario(
    "samplers",
    "Sampler variants",
    "Sequential, random (with/without replacement), subset, weighted, length-sorted batches or DistributedSampler.",
    SamplerParams,
    _samplers,
))


# --- persistent_epochs -----------------------------------------------------------------------------


class PersistentParams(CommonParams):
    persistent_workers: bool = Field(True, description="keep workers alive across epochs")
    epochs: int = Field(3, ge=1, le=50, description="passes over the dataset")
    dataset_size: int = Field(48, ge=1, le=100_000, description="samples in the dataset")
    shuffle: bool = Field(True, description="reshuffle every epoch")


def _persistent(p: PersistentParams) -> LoaderPlan:
    cost = UniformCost(p.sample_ms)
    extra: dict[str, Any] = {}
    if p.shuffle:
        extra["make_sampler"] = lambda ds: RandomSampler(ds, generator=_generator(p.seed))
    return map_plan(p, cost, **extra)


register(Scenario(
    "persistent_epochs",
    "Persistent workers across epochs",
    "Several epochs with persistent_workers=True: workers survive, each epoch resets the cursors.",
    PersistentParams,
    _persistent,
))


# --- slow_consumer ---------------------------------------------------------------------------------


class SlowConsumerParams(CommonParams):
    sample_ms: float = Field(1.0, ge=0, le=5_000, description="work per sample in a worker, ms")
    step_ms: float = Field(40.0, ge=0, le=10_000, description="training step per batch in the consumer, ms")
    dataset_size: int = Field(64, ge=1, le=100_000, description="samples in the dataset")


register(Scenario(
    "slow_consumer",
    "Slow training step",
    "The step is slower than loading: the prefetch window fills and the consumer never waits.",
    SlowConsumerParams,
    lambda p: map_plan(p, UniformCost(p.sample_ms)),
))


# --- stuck_worker ----------------------------------------------------------------------------------


class StuckParams(CommonParams):
    stuck_index: int = Field(13, ge=0, le=100_000, description="the sample whose read hangs")
    stuck_seconds: float = Field(6.0, ge=0, le=600, description="how long it hangs before recovering")
    stuck_after: float = Field(2.0, ge=0, le=3_600, description="report a fetch stuck after this many s")


def _stuck(p: StuckParams) -> LoaderPlan:
    return uniform_plan(p, lambda cost: StuckDataset(p.dataset_size, cost, p.stuck_index, p.stuck_seconds))


register(Scenario(
    "stuck_worker",
    "A stuck worker",
    "One sample's read hangs far past the stuck threshold: find the worker, the sample and the line.",
    StuckParams,
    _stuck,
))


# --- crash_worker ----------------------------------------------------------------------------------


class CrashParams(CommonParams):
    crash_index: int = Field(21, ge=0, le=100_000, description="the sample whose read kills its worker")
    how: Literal["sigkill", "exit"] = Field("sigkill", description="SIGKILL (like the OOM killer) or os._exit(3)")


def _crash(p: CrashParams) -> LoaderPlan:
    return uniform_plan(p, lambda cost: CrashDataset(p.dataset_size, cost, p.crash_index, p.how))


register(Scenario(
    "crash_worker",
    "A worker dies",
    "A worker is killed mid-task (the OOM killer's SIGKILL, or os._exit): which one, on which task.",
    CrashParams,
    _crash,
    fails=True,
))


# --- raising_dataset -------------------------------------------------------------------------------


class RaisingParams(CommonParams):
    bad_index: int = Field(17, ge=0, le=100_000, description="the corrupt sample")


def _raising(p: RaisingParams) -> LoaderPlan:
    return uniform_plan(p, lambda cost: RaisingDataset(p.dataset_size, cost, p.bad_index))


register(Scenario(
    "raising_dataset",
    "A corrupt sample",
    "__getitem__ raises for one sample: the worker's traceback, the task and the sample indices.",
    RaisingParams,
    _raising,
    fails=True,
))


# --- timeout ---------------------------------------------------------------------------------------


class TimeoutParams(CommonParams):
    timeout: float = Field(1.0, ge=0, le=600, description="seconds to wait for a batch (0: forever)")
    stuck_index: int = Field(9, ge=0, le=100_000, description="the sample that takes too long")
    stuck_seconds: float = Field(3.0, ge=0, le=600, description="how long it takes")


def _timeout(p: TimeoutParams) -> LoaderPlan:
    return uniform_plan(p, lambda cost: StuckDataset(p.dataset_size, cost, p.stuck_index, p.stuck_seconds))


register(Scenario(
    "timeout",
    "timeout= expires",
    "A slow sample outlasts DataLoader(timeout=...): what every worker was doing when it expired.",
    TimeoutParams,
    _timeout,
    fails=True,
))


# --- io_bound --------------------------------------------------------------------------------------


class FileParams(CommonParams):
    file_kib: int = Field(256, ge=1, le=16_384, description="size of each sample file, KiB")
    sample_ms: float = Field(0.0, ge=0, le=5_000, description="extra decode work per sample, ms")


def _files(p: FileParams) -> LoaderPlan:
    directory = tempfile.mkdtemp(prefix="loaderscope-io-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)

    def make(cost: UniformCost) -> FileDataset:
        write_files(directory, p.dataset_size, p.file_kib, p.seed)
        return FileDataset(directory, p.dataset_size, cost)

    return uniform_plan(p, make)


register(Scenario(
    "io_bound",
    "Reading real files",
    "Each sample is a file the scenario writes to a temporary directory; workers read and decode it.",
    FileParams,
    _files,
))


# --- gpu_step --------------------------------------------------------------------------------------


class GpuParams(CommonParams):
    batch_size: int = Field(64, ge=1, le=1024, description="images per batch")
    dataset_size: int = Field(2048, ge=1, le=100_000, description="images in the dataset")
    image_size: int = Field(64, ge=8, le=512, description="images are 3×size×size float32")
    pin_memory: bool = Field(True, description="copy batches to page-locked memory")
    num_workers: int = Field(2, ge=0, le=64, description="worker processes (0: load in the main process)")
    sample_ms: float = Field(0.0, ge=0, le=5_000, description="extra work per sample in a worker, ms")


def _gpu(p: GpuParams) -> LoaderPlan:
    from loaderscope.scenarios.gpu import GpuStep, ImageDataset

    return map_plan(p, UniformCost(p.sample_ms), make_dataset=lambda: ImageDataset(p.dataset_size, p.image_size),
                    make_step=GpuStep)


register(Scenario(
    "gpu_step",
    "Pinning and the GPU step",
    "Each batch is pinned, copied to the GPU (non_blocking) and trained on: wait vs copy vs compute.",
    GpuParams,
    _gpu,
))


# --- pickle_heavy ----------------------------------------------------------------------------------


class PickleParams(CommonParams):
    collate: Literal["numpy", "tensor"] = Field("numpy", description="numpy: batches cross pickled; tensor: "
                                                "default_collate, through shared memory")
    image_size: int = Field(128, ge=8, le=512, description="samples are 3×size×size float32")
    batch_size: int = Field(16, ge=1, le=1024, description="samples per batch")
    dataset_size: int = Field(256, ge=1, le=100_000, description="samples in the dataset")
    sample_ms: float = Field(0.0, ge=0, le=5_000, description="extra work per sample in a worker, ms")


def _pickle(p: PickleParams) -> LoaderPlan:
    from loaderscope.scenarios.gpu import ImageDataset, numpy_collate

    plan = map_plan(p, UniformCost(p.sample_ms),
                    make_dataset=lambda: ImageDataset(p.dataset_size, p.image_size, as_numpy=True))
    if p.collate == "numpy":
        plan.loader_kwargs["collate_fn"] = numpy_collate
    return plan


register(Scenario(
    "pickle_heavy",
    "Batches that cross pickled",
    "A collate_fn returning numpy arrays pickles every batch through a pipe; tensors use shared memory.",
    PickleParams,
    _pickle,
))
