"""The worker's index-queue tap: what the status slot says of a task, and what torch's loop receives."""

from __future__ import annotations

import os
import queue
from typing import Any

import pytest

from loaderscope.probe import worker
from loaderscope.probe.worker import FETCHING, STATE, Ring, RingReader, _IndexQueueTap, _Progress


def _take(task: tuple[int, object], ring: Ring) -> tuple[Any, RingReader]:
    tasks: queue.Queue[tuple[int, object]] = queue.Queue()
    tasks.put(task)
    received = _IndexQueueTap(tasks, ring, os.getppid()).get(timeout=1.0)
    assert ring.slots[STATE] == FETCHING
    return received, RingReader(0, ring, "")


def test_a_single_sample_task_is_named_and_passed_on_as_torch_sent_it() -> None:
    """batch_size=1: the sample is known when the task arrives, so torch's fetcher gets its own list
    (no per-sample progress wrapper on the hottest path) and a stuck or dead worker is still named."""
    indices = [1234]
    received, reader = _take((7, indices), Ring())
    assert received == (7, indices) and received[1] is indices
    current = reader.current()
    assert current is not None and {**current, "elapsed": 0} == \
        {"idx": 7, "pos": 0, "sample": 1234, "elapsed": 0}


def test_a_task_of_several_samples_notes_each_as_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = Ring()
    monkeypatch.setattr(worker, "_ring", ring)  # what the worker's set-up (_tap) does
    received, reader = _take((3, [10, 11, 12]), ring)
    idx, progress = received
    assert idx == 3 and isinstance(progress, _Progress)
    seen = []
    for sample in progress:
        current = reader.current()
        assert current is not None
        seen.append((current["pos"], current["sample"], sample))
    assert seen == [(0, 10, 10), (1, 11, 11), (2, 12, 12)]
