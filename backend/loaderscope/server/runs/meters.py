"""One run's numbers for ``GET /metrics`` (``server/web/metrics.py``), kept up to date as its events
are applied, so that a scrape reads a few dozen numbers per run and never the run's workers.

Walking every worker of every run at each scrape, on the event loop, held it (and ``/api/health``)
for 17–19 s with 128 runs of 4,096 workers. Here a frame costs what it touched: the workers its
events name (an ``arrive`` or ``skip`` also its task's worker, whose index queue it may leave), or
every worker of the run for a ``run_start`` or an ``epoch_start``, which set them all
(``state._run_start``, ``state._epoch_start``). ``tests/test_metrics.py`` holds these readings equal,
frame after frame, to the state's own workers. The fetch times are counted into the histogram's
buckets once, as they come. The numbers outlive the state: a run moved to disk (``EventLog.park``)
keeps its meters and is exported as it was.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any, cast

from loaderscope.contract.rules import WorkerStatus
from loaderscope.events import Kind
from loaderscope.state import LoaderState, Worker

# Worker ids with series of their own; the fetches and queues of workers from this id on are added
# up under worker="other". A run has at most 33 + 17 × 20 = 373 series (docs/DESIGN.md §6).
MAX_WORKERS = 16
OTHER = "other"
# Fetch times in seconds: 0.5 ms (a tensor slice) to a minute (a stuck read is past the last bound).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STATES = tuple(WorkerStatus)
_STATE = {status: position for position, status in enumerate(STATES)}
_UNSEEN = 255  # a worker id the meters have not counted yet
_EVERY = frozenset({Kind.RUN_START, Kind.EPOCH_START})  # kinds that set every worker of the run
_BY_TASK = frozenset({Kind.ARRIVE, Kind.SKIP})  # kinds that take their task off its worker's index queue
WALK_COST = 8  # counting a worker again costs about as much as finding the workers of this many events


def worker_label(wid: int) -> str:
    return str(wid) if 0 <= wid < MAX_WORKERS else OTHER


def _slot(wid: int) -> int:
    """A worker label's position: its id, or MAX_WORKERS for "other"."""
    return wid if 0 <= wid < MAX_WORKERS else MAX_WORKERS


@dataclass(frozen=True)
class Reading:
    """A run's meters at one moment, copied (the event loop's numbers, for another thread to encode)."""

    values: tuple[float, ...]  # in the order of Meters.values
    workers: tuple[int, ...]  # workers in each state, in the order of STATES
    queues: dict[str, int]  # tasks in the index queues, per worker label
    fetches: dict[str, tuple[list[int], float]]  # per worker label: fetches per bucket (+Inf last), their sum


class Meters:
    """A run's numbers for /metrics: ``touched`` before a frame is applied, ``update`` after it."""

    def __init__(self) -> None:
        self.values: tuple[float, ...] = self._values(LoaderState())
        self.workers = [0] * len(STATES)
        # per worker id, as counted: its state's position in STATES, its index queue's length, its fetches
        self._state = bytearray()
        self._queued = array("q")
        self._seen = array("q")
        # per label position (_slot), from its first worker on
        self._queues: dict[int, int] = {}
        self._counts: dict[int, list[int]] = {}
        self._sums: dict[int, float] = {}

    def touched(self, state: LoaderState, events: list[Any]) -> set[int] | None:
        """The workers ``events`` (dicts, not applied yet) may change; None to count them all again: for
        a run_start or an epoch_start, and for a run of fewer workers than the frame has events over
        WALK_COST (walking those costs less than finding the named ones: ~40 ns an event)."""
        if len(state.workers) * WALK_COST <= len(events):
            return None
        kinds_of = list(map(dict.get, events, repeat("kind")))
        kinds = set(kinds_of)
        if not kinds.isdisjoint(_EVERY):
            return None
        found = set(map(dict.get, events, repeat("worker")))
        found.discard(None)  # the events that name no worker
        named = cast(set[int], found)
        if not kinds.isdisjoint(_BY_TASK):
            tasks = state.tasks
            for event in compress(events, map(_BY_TASK.__contains__, kinds_of)):
                if (task := tasks.get(event.get("idx"))) is not None:
                    named.add(task.worker)
        return named

    def update(self, state: LoaderState, touched: set[int] | None) -> None:
        """Count again what ``touched`` (from before the frame) says the frame may have changed."""
        workers = state.workers
        for worker in workers.values() if touched is None else _present(workers, touched):
            self._count(worker)
        self.values = self._values(state)

    def reading(self) -> Reading:
        names = {slot: OTHER if slot == MAX_WORKERS else str(slot) for slot in self._counts}
        return Reading(self.values, tuple(self.workers), {names[slot]: n for slot, n in self._queues.items()},
                       {names[slot]: (list(counts), self._sums[slot]) for slot, counts in self._counts.items()})

    @staticmethod
    def _values(s: LoaderState) -> tuple[float, ...]:
        """batches, epochs, wait, epoch seconds, deaths, timeouts, outstanding, window, result queue,
        reorder buffer, its high-water mark (server/web/metrics.py's families, in that order)."""
        return (s.batches, s.epochs_done, s.consumer_wait, s.consumer_wait + s.step_total, s.worker_deaths,
                s.timeouts, s.outstanding, s.window, len(s.result_queue), len(s.buffer), s.buffer_high)

    def _count(self, worker: Worker) -> None:
        wid = worker.id
        if wid >= len(self._state):
            self._grow(wid + 1)
        slot = _slot(wid)
        now, was = _STATE[worker.status], self._state[wid]
        if now != was:
            if was == _UNSEEN:  # a worker's label has its series from its start, 0 until it fetches
                self._counts.setdefault(slot, [0] * (len(BUCKETS) + 1))
                self._sums.setdefault(slot, 0.0)
                self._queues.setdefault(slot, 0)
            else:
                self.workers[was] -= 1
            self.workers[now] += 1
            self._state[wid] = now
        queued = len(worker.queue)
        self._queues[slot] += queued - self._queued[wid]
        self._queued[wid] = queued
        times, seen = worker.fetch_times, self._seen[wid]
        if len(times) > seen:
            new, counts = times[seen:], self._counts[slot]
            for bucket in map(bisect_left, repeat(BUCKETS), new):  # "left": a time equal to a bound is in it (le: ≤)
                counts[bucket] += 1
            self._sums[slot] += sum(new)
            self._seen[wid] = len(times)

    def _grow(self, size: int) -> None:
        more = size - len(self._state)
        self._state.extend(bytes([_UNSEEN]) * more)
        self._queued.extend(repeat(0, more))
        self._seen.extend(repeat(0, more))


def _present(workers: Mapping[int, Worker], ids: Iterable[int]) -> Iterable[Worker]:
    return (worker for wid in ids if (worker := workers.get(wid)) is not None)
