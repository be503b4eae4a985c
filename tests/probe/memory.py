"""What the memory tests share: the probe's memory samples as they arrive, and datasets that show each
memory verdict (Python strings read by index, a leak, big batches, a worker to kill). The page's memory
fixtures (frontend/tests/fixtures/make_memory.py) record the same datasets."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from loaderscope.runner import Collector
from tests.conftest import wait_for

N = 600_000  # metadata strings: about 60 MB of Python objects


def paths(n: int) -> list[str]:
    return [f"/data/shard-{i % 997:04d}/sample-{i:08d}.jpg" for i in range(n)]


class Strings(Dataset[int]):
    """The copy-on-read case of pytorch/pytorch#13246: a list of Python strings read by index."""

    def __init__(self) -> None:
        self.items = paths(N)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        return len(self.items[i])


def samples(c: Collector) -> list[dict[str, Any]]:
    return [e for e in list(c.events) if e["kind"] == "memory"]


def full_samples(c: Collector) -> list[dict[str, Any]]:
    """The samples with every figure (USS, PSS, shared), not the light ones (RSS and swap) between them."""
    return [e for e in samples(c) if not e.get("light")]


def next_sample(c: Collector) -> dict[str, Any]:
    """A full sample taken wholly after now: the second one to arrive from here."""
    seen = len(full_samples(c))
    wait_for(lambda: len(full_samples(c)) >= seen + 2, timeout=30)
    return full_samples(c)[seen + 1]


class Leaky(Dataset[int]):
    """A dataset that keeps 4 MiB per sample it reads, in the worker that read it: persistent workers keep it."""

    def __init__(self) -> None:
        self.kept: list[np.ndarray[Any, Any]] = []

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        self.kept.append(np.full(2**19, 1.0))  # one allocation of 4 MiB, every page written
        return i


class Big(Dataset[torch.Tensor]):
    """128 MiB a sample: a batch of one is 128 MiB of shared memory in flight."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((32 * 2**20,), float(i))


class Hog(Dataset[int]):
    """Index 0 takes 300 MiB and waits: the test kills its worker there, as the OOM killer would."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        if i == 0:
            held = bytearray(b"x" * (300 * 2**20))
            threading.Event().wait(120)  # killed long before
            return len(held)
        return i
