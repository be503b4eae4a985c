"""Real datasets, samplers and cost models the built-in scenarios are made of.

Latency is real work in the worker (``time.sleep`` inside ``__getitem__``), never faked events.
Every class here is module-level and picklable, so it reaches workers under fork, spawn and forkserver.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, Sampler, get_worker_info

SAMPLE_SHAPE = (8,)


def _worker_id() -> int:
    info = get_worker_info()
    return info.id if info is not None else 0


def make_sample(index: int) -> torch.Tensor:
    """A sample that names its own index, so batches can be compared with vanilla torch."""
    return torch.full(SAMPLE_SHAPE, float(index))


# --- cost models: seconds per sample, functions of (index, worker) -------------------------------


@dataclass(frozen=True)
class UniformCost:
    ms: float

    def __call__(self, index: int, worker: int) -> float:
        return self.ms / 1000


@dataclass(frozen=True)
class StragglerCost:
    """One worker is ``factor`` times slower than the others (a slow disk, a noisy neighbour)."""

    ms: float
    slow_worker: int
    factor: float

    def __call__(self, index: int, worker: int) -> float:
        return self.ms * (self.factor if worker == self.slow_worker else 1.0) / 1000


@dataclass(frozen=True)
class DescendingRoundCost:
    """Within each round of ``num_workers`` tasks, earlier tasks are mostly slower than later ones.

    With a sequential sampler and round-robin dispatch, later tasks finish first, so results reach the main
    process out of order and wait in the reorder buffer (``_task_info[idx] += (data,)`` in torch's
    ``_MultiProcessingDataLoaderIter._next_data``), made to happen every time. The slow slot rotates by one each
    round, so no single worker is the straggler; and worker w pays a small extra (a fifth of a sample's base
    cost per sample, times w), so no two workers ever finish at the same moment: which results get parked does
    not depend on jitter.
    """

    ms: float
    batch_size: int
    num_workers: int
    # every ``hold_every``-th task (0: none) is held up: each of its samples takes ``hold_ms``. With a
    # slow consumer (the demo's pace) the rounds alone stop reordering after the first window; a held
    # task keeps later results overtaking it and parking in the reorder buffer all run long.
    hold_every: int = 0
    hold_ms: float = 0.0

    def __call__(self, index: int, worker: int) -> float:
        workers = max(self.num_workers, 1)
        task = index // self.batch_size
        if self.hold_every and task % self.hold_every == self.hold_every - 1:
            return self.hold_ms / 1000
        rank_in_round = (task - task // workers) % workers
        return self.ms * (workers - rank_in_round + TIE_BREAK * worker) / 1000


TIE_BREAK = 0.2


# --- datasets --------------------------------------------------------------------------------------


class CostDataset(Dataset[torch.Tensor]):
    """Map-style dataset: sample ``i`` takes ``cost(i, worker)`` seconds to produce."""

    def __init__(self, length: int, cost: UniformCost | StragglerCost | DescendingRoundCost) -> None:
        self.length = length
        self.cost = cost

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for a dataset of {self.length}")
        time.sleep(self.cost(index, _worker_id()))
        return make_sample(index)


class AspectRatioDataset(CostDataset):
    """mmdetection-style: each image has a ``flag`` (0: portrait, 1: landscape) for GroupSampler."""

    def __init__(self, length: int, cost: UniformCost, seed: int) -> None:
        super().__init__(length, cost)
        self.flag = np.random.default_rng(seed).integers(0, 2, size=length).astype(np.int64)


def shard_bounds(length: int, num_workers: int, uneven: bool) -> list[tuple[int, int]]:
    """Split ``range(length)`` per worker; ``uneven`` gives worker k a share proportional to k+1."""
    workers = max(num_workers, 1)
    weights = [k + 1 if uneven else 1 for k in range(workers)]
    bounds, start = [], 0
    for k, weight in enumerate(weights):
        end = length if k == workers - 1 else start + math.floor(length * weight / sum(weights))
        bounds.append((start, end))
        start = end
    return bounds


class ShardedRange(IterableDataset[torch.Tensor]):
    """The sharding pattern of torch's ``IterableDataset`` docstring (torch/utils/data/dataset.py): each worker
    takes its own slice via ``get_worker_info()``."""

    def __init__(self, length: int, cost: UniformCost, uneven: bool) -> None:
        self.length = length
        self.cost = cost
        self.uneven = uneven

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        if info is None:
            start, end = 0, self.length
        else:
            start, end = shard_bounds(self.length, info.num_workers, self.uneven)[info.id]
        for index in range(start, end):
            time.sleep(self.cost(index, _worker_id()))
            yield make_sample(index)


# --- samplers --------------------------------------------------------------------------------------


class GroupSampler(Sampler[int]):
    """mmdetection's aspect-ratio GroupSampler (mmdet/datasets/samplers/group_sampler.py), seeded per epoch
    for reproducibility.

    Indices of one group are shuffled and padded to a multiple of ``samples_per_gpu``; chunks are
    then permuted, so every batch (under a BatchSampler of the same size) holds one aspect ratio.
    """

    def __init__(self, dataset: AspectRatioDataset, samples_per_gpu: int, seed: int = 0) -> None:
        self.flag = dataset.flag
        self.samples_per_gpu = samples_per_gpu
        self.group_sizes = np.bincount(self.flag)
        self.seed = seed
        self.epoch = 0
        self.num_samples = sum(
            int(math.ceil(size / samples_per_gpu)) * samples_per_gpu for size in self.group_sizes
        )

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng(self.seed + self.epoch)
        self.epoch += 1
        groups = []
        for group, size in enumerate(self.group_sizes):
            if size == 0:
                continue
            indices = np.where(self.flag == group)[0]
            rng.shuffle(indices)
            extra = int(math.ceil(size / self.samples_per_gpu)) * self.samples_per_gpu - size
            groups.append(np.concatenate([indices, rng.choice(indices, extra)]))
        flat = np.concatenate(groups)
        chunks = len(flat) // self.samples_per_gpu
        order = rng.permutation(chunks)
        per = self.samples_per_gpu
        return iter(np.concatenate([flat[i * per : (i + 1) * per] for i in order]).astype(np.int64).tolist())

    def __len__(self) -> int:
        return self.num_samples


class LengthSortedBatchSampler(Sampler[list[int]]):
    """A length-bucketing batch sampler (passed as ``batch_sampler=``): sort by length so each batch pads
    little, shuffle the batches."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int = 0, drop_last: bool = False) -> None:
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

    def _batches(self) -> list[list[int]]:
        order = sorted(range(len(self.lengths)), key=lambda i: (self.lengths[i], i))
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        self.epoch += 1
        for i in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[i]

    def __len__(self) -> int:
        return len(self._batches())


# --- misbehaving datasets (stuck, crashing, raising, reading files) --------------------------------


class StuckDataset(CostDataset):
    """Sample ``stuck_index`` hangs for ``stuck_seconds`` (a dead NFS mount, a deadlocked decoder)."""

    def __init__(self, length: int, cost: UniformCost, stuck_index: int, stuck_seconds: float) -> None:
        super().__init__(length, cost)
        self.stuck_index = stuck_index
        self.stuck_seconds = stuck_seconds

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.stuck_index:
            wait_for_remote_storage(self.stuck_seconds)
        return super().__getitem__(index)


def wait_for_remote_storage(seconds: float) -> None:
    time.sleep(seconds)  # the line a stuck worker is found on


class CrashDataset(CostDataset):
    """Sample ``crash_index`` kills its worker: SIGKILL (what the OOM killer sends) or ``os._exit``."""

    def __init__(self, length: int, cost: UniformCost, crash_index: int, how: str) -> None:
        super().__init__(length, cost)
        self.crash_index = crash_index
        self.how = how

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.crash_index and get_worker_info() is not None:  # never kill the main process
            if self.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)
        return super().__getitem__(index)


class RaisingDataset(CostDataset):
    """Sample ``bad_index`` is corrupt: decoding it raises, as a truncated JPEG would."""

    def __init__(self, length: int, cost: UniformCost, bad_index: int) -> None:
        super().__init__(length, cost)
        self.bad_index = bad_index

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.bad_index:
            raise ValueError(f"sample {index}: corrupt record (truncated file?)")
        return super().__getitem__(index)


class FileDataset(Dataset[torch.Tensor]):
    """Reads one real file per sample from a directory (page cache permitting, real I/O)."""

    def __init__(self, directory: str, length: int, cost: UniformCost) -> None:
        self.directory = directory
        self.length = length
        self.cost = cost

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        with open(os.path.join(self.directory, f"{index:06d}.bin"), "rb") as file:
            raw = file.read()
        time.sleep(self.cost(index, _worker_id()))
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).float().mean().expand(SAMPLE_SHAPE).clone()


def write_files(directory: str, length: int, kib: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for index in range(length):
        with open(os.path.join(directory, f"{index:06d}.bin"), "wb") as file:
            file.write(rng.integers(0, 256, size=kib * 1024, dtype=np.uint8).tobytes())
