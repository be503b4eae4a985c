"""One run's numbers for ``GET /metrics`` (``server/web/metrics.py``), kept up to date as its events
are applied, so that a scrape reads a few dozen numbers per run and never the run's workers.

Walking every worker of every run at each scrape, on the event loop, held it (and ``/api/health``)
for 17–19 s with 128 runs of 4,096 workers. Here a frame costs what it touched: the workers its
events name, or every worker of the run for a ``run_start`` or an ``epoch_start``, which set them all
(``state._run_start``, ``state._epoch_start``). ``tests/server/test_metrics_exporter.py`` holds these readings equal,
frame after frame, to the state's own workers. The fetch times are counted into the run's histogram
buckets once, as they come. The numbers outlive the state: a run moved to disk (``EventLog.park``)
keeps its meters and is exported as it was.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

from loaderscope.contract.rules import WorkerStatus
from loaderscope.events import Kind
from loaderscope.model.memory import MAIN, MemoryModel
from loaderscope.model.state import LoaderState, Worker

# Fetch times in seconds: 0.5 ms (a tensor slice) to a minute (a stuck read is past the last bound).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STATES = tuple(WorkerStatus)
# States that name their workers (loaderscope_worker_state): someone is paged for them. At most
# MAX_NAMED workers of a run are named, the lowest ids; loaderscope_workers counts them all.
NAMED = frozenset({WorkerStatus.STUCK, WorkerStatus.DIED})
MAX_NAMED = 4
_STATE = {status: position for position, status in enumerate(STATES)}
_NAMED = frozenset(_STATE[status] for status in NAMED)
_UNSEEN = 255  # a worker id the meters have not counted yet
_EVERY = frozenset({Kind.RUN_START, Kind.EPOCH_START})  # kinds that set every worker of the run
WALK_COST = 8  # counting a worker again costs about as much as finding the workers of this many events


@dataclass(frozen=True)
class Reading:
    """A run's meters at one moment, copied (the event loop's numbers, for another thread to encode)."""

    values: tuple[float | None, ...]  # in the order of Meters.values (None: not sampled)
    workers: tuple[int, ...]  # workers in each state, in the order of STATES
    fetches: list[int]  # the run's fetches per bucket of BUCKETS, +Inf last (not cumulative)
    fetch_sum: float
    named: list[tuple[int, WorkerStatus]]  # (worker id, state) of the first MAX_NAMED stuck or dead workers


class Meters:
    """A run's numbers for /metrics: ``touched`` before a frame is applied, ``update`` after it."""

    def __init__(self) -> None:
        self.values: tuple[float | None, ...] = self._values(LoaderState())
        self.workers = [0] * len(STATES)
        self.fetches = [0] * (len(BUCKETS) + 1)
        self.fetch_sum = 0.0
        self.named: dict[int, int] = {}  # worker id → its state's position, for the workers in a NAMED state
        # per worker id, as counted: its state's position in STATES, the fetch times counted
        self._state = bytearray()
        self._seen = array("q")

    @property
    def alarming(self) -> bool:
        """A worker of the run is stuck or dead now."""
        return bool(self.named)

    def touched(self, state: LoaderState, events: list[Any]) -> set[int] | None:
        """The workers ``events`` (dicts, not applied yet) may change; None to count them all again: for
        a run_start or an epoch_start, and for a run of fewer workers than the frame has events over
        WALK_COST (walking those costs less than finding the named ones: ~40 ns an event)."""
        if len(state.workers) * WALK_COST <= len(events):
            return None
        if not _EVERY.isdisjoint(map(dict.get, events, repeat("kind"))):
            return None
        found = set(map(dict.get, events, repeat("worker")))
        found.discard(None)  # the events that name no worker
        return cast(set[int], found)

    def update(self, state: LoaderState, touched: set[int] | None) -> None:
        """Count again what ``touched`` (from before the frame) says the frame may have changed."""
        workers = state.workers
        for worker in workers.values() if touched is None else _present(workers, touched):
            self._count(worker)
        self.values = self._values(state)

    def reading(self) -> Reading:
        named = heapq.nsmallest(MAX_NAMED, self.named.items()) if len(self.named) > MAX_NAMED else \
            sorted(self.named.items())
        return Reading(self.values, tuple(self.workers), list(self.fetches), self.fetch_sum,
                       [(wid, STATES[position]) for wid, position in named])

    @staticmethod
    def _values(s: LoaderState) -> tuple[float | None, ...]:
        """batches, epochs, wait, epoch seconds, deaths, timeouts, outstanding, window, result queue,
        reorder buffer, its high-water mark, then memory (``_memory``) (server/web/metrics.py's families,
        in that order)."""
        return (s.batches, s.epochs_done, s.consumer_wait, s.consumer_wait + s.step_total, s.worker_deaths,
                s.timeouts, s.outstanding, s.window, len(s.result_queue), len(s.parked), s.parked_high,
                *_memory(s.memory))

    def _count(self, worker: Worker) -> None:
        wid = worker.id
        if wid >= len(self._state):
            self._grow(wid + 1)
        now, was = _STATE[worker.status], self._state[wid]
        if now != was:
            if was != _UNSEEN:
                self.workers[was] -= 1
            self.workers[now] += 1
            self._state[wid] = now
            if now in _NAMED:
                self.named[wid] = now
            else:
                self.named.pop(wid, None)
        times, seen = worker.fetch_times, self._seen[wid]
        if len(times) > seen:
            new, counts = times[seen:], self.fetches
            for bucket in map(bisect_left, repeat(BUCKETS), new):  # "left": a time equal to a bound is in it (le: ≤)
                counts[bucket] += 1
            self.fetch_sum += sum(new)
            self._seen[wid] = len(times)

    def _grow(self, size: int) -> None:
        more = size - len(self._state)
        self._state.extend(bytes([_UNSEEN]) * more)
        self._seen.extend(repeat(0, more))


def _memory(model: MemoryModel) -> tuple[float | None, ...]:
    """The run's memory as four numbers, whatever its workers (absent until its first sample): the
    workers' USS and of it the pages copied from the main process (copy-on-read), each at its last
    full sample, the loader's processes' PSS together (at the last full sample), and the host's headroom
    (at the last sample, light or full)."""
    if not model.samples:
        return (None,) * 4
    workers = [proc for key, proc in model.procs.items() if key != MAIN]
    return (sum(proc.uss or 0 for proc in workers), sum(proc.copied for proc in workers), model.total_pss,
            model.headroom)


def _present(workers: Mapping[int, Worker], ids: Iterable[int]) -> Iterable[Worker]:
    return (worker for wid in ids if (worker := workers.get(wid)) is not None)
