"""torchdata's StatefulDataLoader, vanilla against watched: whole epochs, and a mid-epoch
state_dict() resumed by a fresh loader with load_state_dict()."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from tests.stacks import checks as stacks

pytest.importorskip("torchdata.stateful_dataloader")
from torchdata.stateful_dataloader import StatefulDataLoader

SAMPLES, BATCH = 40, 4  # 10 batches an epoch
RESUME_AFTER = 3


class Pairs(Dataset[dict[str, Any]]):
    """A map-style dataset whose samples say where they came from; a random draw per sample shows
    that the workers' seeds (from the loader's generator) are the same too."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, "x": torch.full((3,), float(index)) + torch.rand(3)}


def make(num_workers: int) -> StatefulDataLoader:
    torch.manual_seed(0)  # with num_workers=0 the samples draw from the main process's RNG
    return StatefulDataLoader(Pairs(), batch_size=BATCH, shuffle=True, num_workers=num_workers,
                              generator=torch.Generator().manual_seed(7))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_full_epochs(num_workers: int) -> None:
    events = stacks.Events()

    def vanilla() -> list[list[Any]]:
        loader = make(num_workers)
        return [stacks.collect(loader) for _ in range(2)]

    def watched() -> list[list[Any]]:
        loader = stacks.watch(make(num_workers), events)
        assert isinstance(loader, StatefulDataLoader)
        epochs = [stacks.collect(loader) for _ in range(2)]
        loader.close()
        return epochs

    expected, got = stacks.compare(vanilla, watched)
    assert [len(epoch) for epoch in expected] == [10, 10]
    for got_epoch, expected_epoch in zip(got, expected, strict=True):
        stacks.assert_same(got_epoch, expected_epoch)
    stacks.assert_trace(events.only_run(), consumed=[10, 10])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_mid_epoch(num_workers: int) -> None:
    first_events, resumed_events = stacks.Events(), stacks.Events()

    def save_and_resume(watch: bool) -> tuple[list[Any], dict[str, Any], list[Any]]:
        loader = make(num_workers)
        if watch:
            stacks.watch(loader, first_events)
        iterator = iter(loader)
        head = [stacks.clone(next(iterator)) for _ in range(RESUME_AFTER)]
        state = loader.state_dict()
        del iterator
        if watch:
            loader.close()
        fresh = make(num_workers)
        if watch:
            stacks.watch(fresh, resumed_events)
        fresh.load_state_dict(state)
        tail = stacks.collect(fresh)
        if watch:
            fresh.close()
        return head, state, tail

    (v_head, v_state, v_tail), (w_head, w_state, w_tail) = stacks.compare(
        lambda: save_and_resume(False), lambda: save_and_resume(True))
    assert len(v_head) + len(v_tail) == 10  # torchdata itself resumes where it stopped
    stacks.assert_same(w_head, v_head)
    assert stacks.same(w_state, v_state), f"watched state_dict {w_state!r}\n!= vanilla's {v_state!r}"
    stacks.assert_same(w_tail, v_tail)
    stacks.assert_trace(first_events.only_run(), consumed=[RESUME_AFTER], complete=[False])
    # the resumed loader's epoch: the batches this loader yielded, run to the end of the epoch
    stacks.assert_trace(resumed_events.only_run(), consumed=[10 - RESUME_AFTER])


def test_each_dispatch_names_the_samples_its_batch_holds() -> None:
    """torchdata's own ``_try_put_index`` sends ``(index, snapshot)`` to a worker: the dispatch event
    holds the sampler's indices alone, the ones the batch it yields was made of."""
    events = stacks.Events()
    loader = stacks.watch(make(2), events)
    batches = stacks.collect(loader)
    loader.close()
    dispatched = {e["idx"]: e["indices"] for e in events.only_run() if e["kind"] == "dispatch"}
    assert [dispatched[idx] for idx in range(len(batches))] == [batch["index"].tolist() for batch in batches]
