"""The last hops of a batch: pinning, the host-to-device copy, and a training step on the GPU.

The ``gpu_step`` scenario's consumer copies each batch to the GPU with ``non_blocking=True`` and
runs a small model step, timing the copy and the compute with CUDA events, and copies the same
batch once more from pageable memory, so pinned and pageable copies are compared in the same run.
Without CUDA it runs on the CPU and says so: the copy is then a no-op.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import nn

from loaderscope.probe.batchinfo import first_tensor


class GpuStep:
    """One training step per batch; returns where the consumer's time went (seconds)."""

    def __init__(self) -> None:
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                   nn.Flatten(), nn.Linear(16, 10)).to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def __call__(self, batch: Any) -> dict[str, Any]:
        images = first_tensor(batch)
        if self.device.type != "cuda":
            start = time.perf_counter()
            self._train(images)
            return {"device": "cpu", "h2d": 0.0, "compute": time.perf_counter() - start, "bytes": images.nbytes}
        # torch/cuda/streams.py: Event.__new__ is unannotated
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(5)]  # type: ignore[no-untyped-call]
        marks[0].record()
        on_gpu = images.to(self.device, non_blocking=True)
        marks[1].record()
        self._train(on_gpu)
        marks[2].record()
        pageable = images.clone() if images.is_pinned() else images  # clone() allocates pageable memory
        marks[3].record()
        pageable.to(self.device, non_blocking=True)
        marks[4].record()
        torch.cuda.synchronize()
        return {"device": torch.cuda.get_device_name(), "bytes": images.nbytes, "pinned": images.is_pinned(),
                "h2d": marks[0].elapsed_time(marks[1]) / 1000, "compute": marks[1].elapsed_time(marks[2]) / 1000,
                "h2d_pageable": marks[3].elapsed_time(marks[4]) / 1000}

    def _train(self, images: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.model(images).square().mean().backward()
        self.optimizer.step()


class ImageDataset(torch.utils.data.Dataset[torch.Tensor]):
    """3×size×size float images; numpy arrays when ``as_numpy`` (they then cross pickled)."""

    def __init__(self, length: int, size: int, as_numpy: bool = False) -> None:
        self.length, self.size, self.as_numpy = length, size, as_numpy

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        image = np.full((3, self.size, self.size), index % 251, dtype=np.float32)
        return image if self.as_numpy else torch.from_numpy(image)


def numpy_collate(batch: list[np.ndarray]) -> np.ndarray:
    """A collate_fn that keeps numpy arrays: the batch then crosses the process boundary pickled."""
    return np.stack(batch)
