"""Pinning and the host-to-device copy. Tests that need CUDA are marked and skip without it;
the rest check what a machine without an accelerator shows (pinning silently off)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from loaderscope import InstrumentedDataLoader
from loaderscope.model.diagnosis import diagnosis
from loaderscope.model.stats import summary
from loaderscope.runner import Collector, run_real

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _kinds(collector: Collector, kind: str) -> list[dict[str, Any]]:
    return [e for e in collector.events if e["kind"] == kind]


def test_without_an_accelerator_pinning_is_reported_off() -> None:
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator")
    collector = Collector()
    run_real("gpu_step", {"dataset_size": 128, "batch_size": 32, "num_workers": 1}, collector)
    assert collector.state.config["pin_memory"] and not collector.state.config["pin_memory_active"]
    assert not _kinds(collector, "pin_start")
    assert any("turned pinning off" in line for line in diagnosis(collector.state))
    assert summary(collector.state)["consumer_split"]["device"] == "cpu"


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("num_workers", [0, 2])
def test_pin_thread_is_observed_and_batches_are_pinned(num_workers: int) -> None:
    collector = Collector()
    run_real("gpu_step", {"dataset_size": 1024, "batch_size": 64, "num_workers": num_workers}, collector)
    starts, ends = _kinds(collector, "pin_start"), _kinds(collector, "pin_end")
    assert len(starts) == len(ends) == 16
    assert all(e["pinned"] for e in ends) and all(e["nbytes"] == 64 * 3 * 64 * 64 * 4 for e in ends)
    stats = summary(collector.state)
    assert stats["pin_mb_per_s"] > 0
    split = stats["consumer_split"]
    assert split["h2d"] > 0 and split["h2d_pageable"] > 0 and split["compute"] > 0
    print(f"\nnum_workers={num_workers}: pin {stats['pin_mb_per_s']:.0f} MB/s; H2D per batch pinned "
          f"{split['h2d'] * 1e3:.3f} ms vs pageable {split['h2d_pageable'] * 1e3:.3f} ms; compute "
          f"{split['compute'] * 1e3:.3f} ms; {stats['pin_wait_share']:.0%} of the wait behind pinning")
    for line in diagnosis(collector.state):
        print("  ", line)


class Pair:
    """A custom batch type with its own pin_memory() (seed 000: torch calls it when pinning)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def pin_memory(self) -> Pair:
        return Pair(self.x.pin_memory(), self.y.pin_memory())


class Pairs(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((4,), float(index)), torch.tensor(index)


def collate_pair(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> Pair:
    return Pair(torch.stack([b[0] for b in batch]), torch.stack([b[1] for b in batch]))


@pytest.mark.cuda
@cuda
def test_custom_batch_type_with_its_own_pin_memory() -> None:
    collector = Collector()
    loader = InstrumentedDataLoader(Pairs(), batch_size=8, num_workers=2, pin_memory=True, collate_fn=collate_pair,
                                    sink=collector)
    batches = list(loader)
    loader.close()
    assert all(b.x.is_pinned() for b in batches)
    ends = _kinds(collector, "pin_end")
    assert len(ends) == 4
    assert all(e["pinned"] is True for e in ends)  # found inside the custom type's attributes


class SlowTensors(Dataset[torch.Tensor]):
    """Samples that take a few ms each: a run that outlasts several memory-sample periods (probe/memory.py)."""

    def __len__(self) -> int:
        return 512

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.005)
        return torch.full((3, 64, 64), float(index))


@pytest.mark.cuda
@cuda
def test_memory_samples_carry_the_pinned_host_memory_torch_holds() -> None:
    collector = Collector()
    loader = InstrumentedDataLoader(SlowTensors(), batch_size=8, num_workers=2, pin_memory=True, sink=collector)
    for batch in loader:
        batch.to("cuda", non_blocking=True)
    loader.close()
    pinned = [e["pinned"] for e in _kinds(collector, "memory") if "pinned" in e]
    peak = torch.cuda.host_memory_stats_as_nested_dict()["allocated_bytes"]["peak"]
    assert pinned, "no memory sample carried the pinned bytes"
    assert 8 * 3 * 64 * 64 * 4 <= max(pinned) <= peak  # at least one pinned batch; never more than torch held
