"""Every scenario's typed, bounded parameters (pydantic models): what the catalog lists and ``resolve`` checks.

No torch here: the dashboard lists and validates parameters without loading it. Bounds keep a
request from exhausting the machine.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from loaderscope.contract.loader import TORCH_PREFETCH_FACTOR
from loaderscope.settings import (
    BatchSize,
    DropLast,
    InOrder,
    LoaderSettings,
    NumWorkers,
    PersistentWorkers,
    PinMemory,
    PrefetchFactor,
    Timeout,
)


class CommonParams(BaseModel):
    """Parameters every scenario takes."""

    model_config = ConfigDict(extra="forbid")

    # The loader's settings: their types carry the bounds (loaderscope/settings.py); the defaults are ours.
    num_workers: NumWorkers = 4
    batch_size: BatchSize = 4
    dataset_size: int = Field(96, ge=1, le=100_000, description="samples in the dataset")
    prefetch_factor: PrefetchFactor = TORCH_PREFETCH_FACTOR
    persistent_workers: PersistentWorkers = False
    in_order: InOrder = True
    drop_last: DropLast = False
    timeout: Timeout = 0.0
    pin_memory: PinMemory = False
    epochs: int = Field(1, ge=1, le=50, description="passes over the dataset")
    sample_ms: float = Field(5.0, ge=0, le=5_000, description="work per sample in a worker, ms")
    step_ms: float = Field(0.0, ge=0, le=10_000, description="training step per batch in the consumer, ms")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="seed for samplers and workers")
    stuck_after: float = Field(0.0, ge=0, le=3_600, description="report a fetch stuck after this many s "
                               "(0: the larger of 10 s and 20× the median fetch)")

    def loader_settings(self, *, batched_by_sampler: bool = False) -> LoaderSettings:
        """The DataLoader settings these parameters ask for (a batch sampler makes its own batches)."""
        return LoaderSettings(
            num_workers=self.num_workers,
            batch_size=None if batched_by_sampler else self.batch_size,
            drop_last=False if batched_by_sampler else self.drop_last,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
            in_order=self.in_order,
            timeout=self.timeout,
            pin_memory=self.pin_memory,
        )


class OutOfOrderParams(CommonParams):
    sample_ms: float = Field(10.0, ge=0, le=5_000, description="work per sample of the fastest task, ms")
    hold_every: int = Field(0, ge=0, le=10_000, description="hold up every Nth task, so later results keep "
                            "overtaking it and parking in the reorder buffer (0: never)")
    hold_ms: float = Field(400.0, ge=0, le=5_000, description="work per sample of a held-up task, ms")


class StragglerParams(CommonParams):
    slow_worker: int = Field(0, ge=0, le=63, description="the worker that is slow")
    slow_factor: float = Field(4.0, ge=1, le=100, description="how many times slower it is")


class IterableParams(CommonParams):
    dataset_size: int = Field(90, ge=1, le=100_000, description="samples in the stream")
    uneven: bool = Field(True, description="give worker k a shard proportional to k+1")


SamplerName = Literal[
    "sequential", "random", "random_replacement", "subset_random", "weighted_random", "length_sorted", "distributed"
]


class SamplerParams(CommonParams):
    sampler: SamplerName = Field("random", description="which sampler feeds the batch sampler")
    num_samples: int = Field(0, ge=0, le=100_000,
                             description="samples drawn (random_replacement, weighted; 0: dataset size)")
    world_size: int = Field(2, ge=1, le=64, description="ranks (distributed)")
    rank: int = Field(0, ge=0, le=63, description="this rank (distributed)")

    @field_validator("rank")
    @classmethod
    def _rank_in_world(cls, rank: int, info: ValidationInfo) -> int:
        # A field rule, not a model rule: the error then names the field the user should change.
        world_size = info.data.get("world_size")
        if world_size is not None and rank >= world_size:
            raise ValueError(f"rank {rank} must be below world_size {world_size} (ranks count from 0)")
        return rank


class PersistentParams(CommonParams):
    persistent_workers: PersistentWorkers = True
    epochs: int = Field(3, ge=1, le=50, description="passes over the dataset")
    dataset_size: int = Field(48, ge=1, le=100_000, description="samples in the dataset")
    shuffle: bool = Field(True, description="reshuffle every epoch")


class SlowConsumerParams(CommonParams):
    sample_ms: float = Field(1.0, ge=0, le=5_000, description="work per sample in a worker, ms")
    step_ms: float = Field(40.0, ge=0, le=10_000, description="training step per batch in the consumer, ms")
    dataset_size: int = Field(64, ge=1, le=100_000, description="samples in the dataset")


class StuckParams(CommonParams):
    stuck_index: int = Field(13, ge=0, le=100_000, description="the sample whose read hangs")
    stuck_seconds: float = Field(6.0, ge=0, le=600, description="how long it hangs before recovering")
    stuck_after: float = Field(2.0, ge=0, le=3_600, description="report a fetch stuck after this many s")


class CrashParams(CommonParams):
    crash_index: int = Field(21, ge=0, le=100_000, description="the sample whose read kills its worker")
    how: Literal["sigkill", "exit"] = Field("sigkill", description="SIGKILL (like the OOM killer) or os._exit(3)")


class RaisingParams(CommonParams):
    bad_index: int = Field(17, ge=0, le=100_000, description="the corrupt sample")


class TimeoutParams(CommonParams):
    timeout: Timeout = 1.0
    stuck_index: int = Field(9, ge=0, le=100_000, description="the sample that takes too long")
    stuck_seconds: float = Field(3.0, ge=0, le=600, description="how long it takes")


class FileParams(CommonParams):
    file_kib: int = Field(256, ge=1, le=16_384, description="size of each sample file, KiB")
    sample_ms: float = Field(0.0, ge=0, le=5_000, description="extra decode work per sample, ms")


class GpuParams(CommonParams):
    batch_size: BatchSize = 64
    dataset_size: int = Field(2048, ge=1, le=100_000, description="images in the dataset")
    image_size: int = Field(64, ge=8, le=512, description="images are 3×size×size float32")
    pin_memory: PinMemory = True
    num_workers: NumWorkers = 2
    sample_ms: float = Field(0.0, ge=0, le=5_000, description="extra work per sample in a worker, ms")


class PickleParams(CommonParams):
    collate: Literal["numpy", "tensor"] = Field("numpy", description="numpy: batches cross pickled; tensor: "
                                                "default_collate, through shared memory")
    image_size: int = Field(128, ge=8, le=512, description="samples are 3×size×size float32")
    batch_size: BatchSize = 16
    dataset_size: int = Field(256, ge=1, le=100_000, description="samples in the dataset")
    sample_ms: float = Field(0.0, ge=0, le=5_000, description="extra work per sample in a worker, ms")


class HubParams(CommonParams):
    """Only the loader's own parameters: a hub entry's keyword arguments are fixed at registration."""
