"""Hugging Face ``datasets`` (built locally with Dataset.from_dict, never downloaded) through a
DataLoader, vanilla against watched: map-style ``with_format("torch")`` and
``to_iterable_dataset(num_shards=4)`` read by two workers."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests import stacks

# nothing comes from the hub: every dataset here is built in memory
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
datasets = pytest.importorskip("datasets")

ROWS, BATCH = 32, 4


def table() -> Any:
    return datasets.Dataset.from_dict({
        "id": list(range(ROWS)),
        "features": [[float(i), float(i) / 2, float(-i)] for i in range(ROWS)],
        "text": [f"row {i}" for i in range(ROWS)],
    })


def run(make: Any, events: stacks.Events | None, epochs: int = 2) -> list[list[Any]]:
    loader = make()
    if events is not None:
        stacks.watch(loader, events)
    got = [stacks.collect(loader) for _ in range(epochs)]
    if events is not None:
        loader.close()
    return got


@pytest.mark.parametrize("num_workers", [0, 2])
def test_hf_map_style_with_torch_format(num_workers: int) -> None:
    dataset = table().with_format("torch")

    def make() -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=num_workers,
                          generator=torch.Generator().manual_seed(3))

    events = stacks.Events()
    expected, got = stacks.compare(lambda: run(make, None), lambda: run(make, events))
    assert [len(epoch) for epoch in expected] == [ROWS // BATCH] * 2
    assert isinstance(expected[0][0]["features"], torch.Tensor)
    for got_epoch, expected_epoch in zip(got, expected):
        stacks.assert_same(got_epoch, expected_epoch)
    stacks.assert_trace(events.only_run(), consumed=[ROWS // BATCH] * 2)


def test_hf_iterable_dataset_sharded_over_two_workers() -> None:
    dataset = table().to_iterable_dataset(num_shards=4).with_format("torch")

    def make() -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=BATCH, num_workers=2)

    events = stacks.Events()
    expected, got = stacks.compare(lambda: run(make, None), lambda: run(make, events))
    ids = sorted(int(i) for batch in expected[0] for i in batch["id"])
    assert ids == list(range(ROWS))  # every row once, across both workers' shards
    for got_epoch, expected_epoch in zip(got, expected):
        stacks.assert_same(got_epoch, expected_epoch)
    stacks.assert_trace(events.only_run(), consumed=[len(epoch) for epoch in got])
