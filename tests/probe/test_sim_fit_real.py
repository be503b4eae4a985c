"""The simulator fitted to a real training loop predicts the loop it was fitted to.

A real DataLoader with real worker processes feeds a real model (forward, backward, optimizer step)
and an eval pass runs on a second loader between epochs, as in most training scripts. The run is
recorded by ``watch()``; the cost model is fitted to that recording and replayed at the recorded
setting. Both batches/s are ``stats.summary``'s, so the replay must come within 10% of the
recording: it is fitted from the same run, so this checks the model (what it charges for the step,
the eval gap, the workers' boot, the main process's next()), not the machine.

The model charges each cost its fitted distribution, so a load spike in the middle of one recording
(CI's machine is shared: 2.2 batches/s for a second where the rest ran at 15) is averaged into costs
that then replay a smoother run. Such a recording is taken again, up to ``ATTEMPTS`` times; a model
that is wrong misses on every one. The bench (bench/fit_accuracy.py) prints the figure across
scenarios and loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import loaderscope
from loaderscope.sim import describe_fit, fit_from_trace, recorded_check
from loaderscope.sim.sweep import plan_from_trace
from tests.conftest import wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore:.*suggested max number of worker")]
TOLERANCE = 0.10
ATTEMPTS = 3


class Images(Dataset[tuple[torch.Tensor, int]]):
    """Small images made and augmented per sample on the CPU."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, 32, 32, generator=generator)
        return (image.flip(2) - 0.5) / 0.25, index % 10


def net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(128, 10))


def train(workers: int, epochs: int = 3, peek: bool = False) -> list[dict[str, Any]]:
    """A real loop: train on one loader, evaluate on another between epochs; the train loader's events.

    ``peek``: take one batch with ``next(iter(loader))`` before each epoch (the pytorch/examples habit).
    """
    events: list[dict[str, Any]] = []
    torch.manual_seed(0)
    train_loader = loaderscope.watch(DataLoader(Images(192), batch_size=16, shuffle=True, num_workers=workers),
                                     sink=events.extend, name="train_loader")
    val_loader = DataLoader(Images(256), batch_size=16)  # ~30-50 ms: an eval well above a step's jitter
    model, loss_fn = net(), nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    with train_loader:
        for _ in range(epochs):
            if peek:
                next(iter(train_loader))
            for images, labels in train_loader:
                optimizer.zero_grad()
                loss_fn(model(images), labels).backward()
                optimizer.step()
            with torch.no_grad():
                for images, _labels in val_loader:
                    model(images)
    wait_for(lambda: any(e["kind"] == "run_end" for e in events), what="the run to end")
    return events


def closest_of_recordings(record: Callable[[], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A recording and its ``recorded_check``: the first within ``TOLERANCE``, else the closest of ``ATTEMPTS``."""
    tries = []
    for _ in range(ATTEMPTS):
        events = record()
        tries.append((events, recorded_check(events)))
        if abs(tries[-1][1]["error"]) <= TOLERANCE:
            break
    return min(tries, key=lambda pair: abs(pair[1]["error"]))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_fitted_training_loop_replays_its_recorded_batches_per_s(workers: int) -> None:
    events, check = closest_of_recordings(lambda: train(workers))
    fitted = {cost["field"] for cost in describe_fit(fit_from_trace(events))}
    assert check["setting"]["num_workers"] == workers
    assert abs(check["error"]) <= TOLERANCE, (check, fitted)
    assert {"sample", "step_ms"} <= fitted  # the model step
    if workers:
        # The gap between epochs is charged first to the workers each epoch re-spawns: on a busy machine a
        # slow spawn can take all of the short eval, so the gap may fit as 0 and stay out of the model.
        assert {"spawn_ms", "startup_ms"} <= fitted
    else:
        assert "epoch_gap_ms" in fitted  # the eval between epochs


def test_a_peek_before_each_epoch_is_replayed_as_the_batch_it_took() -> None:
    events, check = closest_of_recordings(lambda: train(2, epochs=2, peek=True))
    _, batches = plan_from_trace(events)
    assert [len(epoch) for epoch in batches] == [1, 12, 1, 12]  # not the 4 tasks each peek prefetched
    assert abs(check["error"]) <= TOLERANCE, check
