"""Squares: the small map-style dataset the watch() tests load through a real DataLoader, in the probe's
tests and the server's alike (an index and its square, after an optional delay per sample)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class Squares(Dataset[torch.Tensor]):
    def __init__(self, length: int = 64, delay: float = 0.0) -> None:
        self.length, self.delay = length, delay

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.delay)
        return torch.tensor([index, index * index])
