"""A small, realistic training script watched by loaderscope.

A CNN trains on synthetic 3×64×64 images stored compressed in memory; each worker decodes them
(zlib, like a PNG) and augments them on the CPU (random crop, flip, normalisation), the usual
shape of an image pipeline. One line, ``loaderscope.watch(...)``, puts the loader on the dashboard.

    python examples/train_cnn.py                                   # starts a dashboard if none runs
    LOADERSCOPE_URL='http://127.0.0.1:8000/?token=...' python examples/train_cnn.py --workers 4
    torchrun --nproc-per-node 2 examples/train_cnn.py --epochs 2   # one loader per rank, DistributedSampler
"""

from __future__ import annotations

import argparse
import os
import time
import zlib

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import loaderscope

SIZE, CROP = 72, 64


class CompressedImages(Dataset[tuple[torch.Tensor, int]]):
    """Images kept zlib-compressed, decoded and augmented per sample in the worker."""

    def __init__(self, length: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.labels = rng.integers(0, 10, size=length)
        self.blobs = [zlib.compress(self._render(rng, int(label)).tobytes(), level=1) for label in self.labels]

    @staticmethod
    def _render(rng: np.random.Generator, label: int) -> np.ndarray:
        image = rng.integers(0, 64, size=(SIZE, SIZE, 3), dtype=np.uint8)
        image[label * 6 : label * 6 + 12, :, label % 3] = 255  # a class-dependent stripe to learn
        return image

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        pixels = np.frombuffer(zlib.decompress(self.blobs[index]), dtype=np.uint8).reshape(SIZE, SIZE, 3)
        image = torch.from_numpy(pixels.copy()).permute(2, 0, 1).float().div_(255)
        top, left = np.random.randint(0, SIZE - CROP + 1, size=2)
        image = image[:, top : top + CROP, left : left + CROP]
        if np.random.rand() < 0.5:
            image = image.flip(2)
        return (image - 0.5) / 0.25, int(self.labels[index])


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")  # CPU; on GPUs this would be "nccl"
    torch.manual_seed(0)
    dataset = CompressedImages(args.samples)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0) if distributed else None
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    loader = loaderscope.watch(loader, name="train_cnn.py")  # the one line loaderscope needs

    net = model()
    if distributed:
        net = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    rank = dist.get_rank() if distributed else 0
    with loader:
        for epoch in range(args.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            start, total, steps = time.perf_counter(), 0.0, 0
            for images, labels in loader:
                optimizer.zero_grad()
                loss = loss_fn(net(images), labels)
                loss.backward()
                optimizer.step()
                total, steps = total + loss.item(), steps + 1
            print(f"rank {rank} epoch {epoch}: loss {total / max(steps, 1):.3f}, {steps} steps, "
                  f"{steps / (time.perf_counter() - start):.1f} steps/s", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
