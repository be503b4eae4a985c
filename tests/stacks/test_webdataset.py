"""webdataset, vanilla against watched: .tar shards written to tmp_path, read through
``DataLoader(wds.WebDataset(...))`` and through ``wds.WebLoader(...)`` (a pipeline around a
DataLoader: watch() must instrument the DataLoader inside)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.stacks import checks as stacks

wds = pytest.importorskip("webdataset")

SHARDS, PER_SHARD, BATCH = 4, 6, 4  # 24 samples; each of 2 workers reads 2 shards: 3 batches each


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    paths = []
    for shard in range(SHARDS):
        path = tmp_path / f"shard-{shard:02d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(PER_SHARD):
                index = shard * PER_SHARD + i
                sink.write({"__key__": f"sample{index:04d}", "cls": index,
                            "pth": torch.arange(4, dtype=torch.float32) * index, "txt": f"caption {index}"})
        paths.append(str(path))
    return paths


def dataset(shards: list[str]) -> Any:
    return wds.WebDataset(shards, shardshuffle=False, empty_check=False).decode().to_tuple("pth", "cls", "txt")


def run(make: Any, events: stacks.Events | None) -> list[list[Any]]:
    loader = make()
    if events is not None:
        stacks.watch(loader, events)
        assert stacks.probed_loaders(loader), f"nothing instrumented in {type(loader).__name__}"
    got = [stacks.collect(loader) for _ in range(2)]
    if events is not None:
        stacks.close(loader)
    return got


def check(expected: list[list[Any]], got: list[list[Any]], events: stacks.Events) -> None:
    assert [len(epoch) for epoch in expected] == [SHARDS * PER_SHARD // BATCH] * 2
    labels = sorted(int(i) for batch in expected[0] for i in batch[1])
    assert labels == list(range(SHARDS * PER_SHARD))  # every sample once, across the workers' shards
    for got_epoch, expected_epoch in zip(got, expected, strict=True):
        stacks.assert_same(got_epoch, expected_epoch)
    stacks.assert_trace(events.only_run(), consumed=[len(epoch) for epoch in got])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_webdataset_through_a_dataloader(shards: list[str], num_workers: int) -> None:
    def make() -> DataLoader[Any]:
        return DataLoader(dataset(shards), batch_size=BATCH, num_workers=num_workers)

    events = stacks.Events()
    expected, got = stacks.compare(lambda: run(make, None), lambda: run(make, events))
    check(expected, got, events)


def test_webdataset_webloader(shards: list[str]) -> None:
    def make() -> Any:
        return wds.WebLoader(dataset(shards), batch_size=BATCH, num_workers=2)

    events = stacks.Events()
    expected, got = stacks.compare(lambda: run(make, None), lambda: run(make, events))
    check(expected, got, events)
