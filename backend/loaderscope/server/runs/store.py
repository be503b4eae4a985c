"""One run's events: numbered by the store, held for replay, reduced into a live LoaderState.

The store's seq is authoritative: strictly increasing from 0 per run, whatever the producer
sent (a producer that reconnects, or drops events under pressure, cannot create duplicates).
Memory holds the newest ``memory_events`` encoded events; every event also goes to the run's
trace file, from which older ones are read back. Without a trace file, evicted events are
gone and readers are told so (a gap), never silently skipped. A parked log (``park``) holds no
event and no reducer state at all: its trace file answers for every event, a frozen summary for
the statistics, until ``unpark`` hands it a state read back from that file.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import IO, Any, Protocol

import msgspec
import orjson

from loaderscope.events import Event
from loaderscope.model.diagnosis import diagnosis
from loaderscope.model.fastpath import apply_all
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import FetchOrder, summary
from loaderscope.server.budgets import (
    MAX_EVENT_BYTES,
    MEMORY_BYTES,
    STATE_EVENT_BYTES,
    encode,
    fitted,
    state_view,
    trim_open_tasks,
)
from loaderscope.server.runs.meters import Meters

MAX_STATE_PROBLEMS = 20  # reducer failures remembered per run (they are counted beyond that)
# A live run's statistics are brought up to date at most this often: a dashboard polling many runs
# pays for each at most once a second (each update costs ~2 ms at 1M events, see FetchOrder)...
SUMMARY_EVERY = 1.0
# ...and, as an update copies the run's sorted fetch times (~15 ms at 1M batches, ~150 ms at the 10M
# of the event cap), never more often than keeps it under this share of a core: the run's last
# update's CPU time over it (every 7.5 s at 10M batches).
SUMMARY_SHARE = 0.02


class Spill(Protocol):
    """A run's trace file: ``TraceSpill`` (the store writes it) or ``TraceFile`` (a producer did)."""

    @property
    def flushed_bytes(self) -> int: ...

    def write_many(self, lines: list[bytes]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def read(self, start: int, count: int, max_bytes: int | None = None) -> list[bytes]: ...

    def open(self) -> IO[bytes]:
        """The file for reading its first ``flushed_bytes`` as they are."""


@dataclass(frozen=True)
class Gap:
    """Events ``first .. last`` (inclusive) that the store no longer holds."""

    first: int
    last: int

    def meta(self, reason: str) -> dict[str, Any]:
        return {"type": "gap", "from": self.first, "to": self.last, "reason": reason}


class EventLog:
    """Append events, read them back by seq; memory bounded, optionally spilled to a trace file."""

    def __init__(self, run_id: str, *, memory_events: int, memory_bytes: int = MEMORY_BYTES,
                 spill: Spill | None = None) -> None:
        self.run_id = run_id
        self.memory_events = max(1, memory_events)
        self.memory_bytes = memory_bytes
        self.spill = spill
        self.spill_error: str | None = None
        self.state = LoaderState()
        self.next_seq = 0
        self.ended = False
        self.state_problems: list[str] = []
        self.state_problem_count = 0
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self._first_in_memory = 0
        self.cut_events = 0  # events over MAX_EVENT_BYTES, kept with their largest fields cut
        self.forgotten_tasks = 0  # open tasks the reducer stopped tracking (MAX_OPEN_TASKS)
        self.last_event_at: float | None = None  # time.monotonic() of the last append
        self._order = FetchOrder()  # the statistics' sorted fetch times, caught up at each summary
        # (next_seq, when, seconds until the next update, it)
        self._summary: tuple[int, float, float, tuple[dict[str, Any], list[str]]] | None = None
        self.parked = False  # on disk only: see park()
        self.meters = Meters()  # what /metrics reads of the run, kept as events come (and while parked)

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    @property
    def first_held(self) -> int:
        """The oldest seq still readable (from memory or the trace file)."""
        return 0 if self.spill is not None else self._first_in_memory

    def append(self, events: Iterable[Event]) -> int:
        """Number, reduce, keep and spill ``events`` (dicts, changed in place). Returns how many."""
        events = events if isinstance(events, list) else list(events)
        run_id = self.run_id
        for seq, event in enumerate(events, self.next_seq):
            event["seq"] = seq
            event["run"] = run_id
        lines = encode_each(events)
        views = events
        # rare: a large event is cut for the store, the reducer, or both
        if max(map(len, lines), default=0) > STATE_EVENT_BYTES:
            views = list(events)
            for position, line in enumerate(lines):
                if len(line) > STATE_EVENT_BYTES:
                    _, lines[position], views[position] = self._fit(events[position], line)
        metered = not self.parked  # a parked log's slim state has no statistics: its meters stay as they were
        touched = self.meters.touched(self.state, views) if metered else None
        apply_all(self.state, views, self._note_problem)  # a surprising event is kept, and the problem noted
        if metered:
            self.meters.update(self.state, touched)
        if "run_end" in map(dict.get, events, repeat("kind")):
            self.ended = True
        self.next_seq += len(lines)
        self.last_event_at = time.monotonic()
        self.forgotten_tasks += trim_open_tasks(self.state.tasks)
        self._tail.extend(lines)
        self._tail_bytes += sum(map(len, lines))
        if self.spill is not None:
            spill = self.spill
            self._guard(lambda: spill.write_many(lines))
        self._evict()
        return len(lines)

    def read_memory(self, start: int, limit: int, max_bytes: int | None = None) -> list[bytes]:
        """Encoded events from ``start`` that are still in memory (callers check ``in_memory``),
        at most ``limit`` of them and, past the first, at most ``max_bytes`` in all."""
        offset = start - self._first_in_memory
        if offset < 0 or limit <= 0:
            return []
        stop = min(len(self._tail), offset + limit)
        if max_bytes is None:
            if offset == 0 and stop == len(self._tail):
                return list(self._tail)
            return [self._tail[i] for i in range(offset, stop)]
        return within(map(self._tail.__getitem__, range(offset, stop)), max_bytes)

    def in_memory(self, seq: int) -> bool:
        return seq >= self._first_in_memory

    def read(self, start: int, limit: int, max_bytes: int | None = None) -> tuple[list[bytes], Gap | None]:
        """Events from ``start`` (at most ``limit`` and ``max_bytes``), from memory or disk, and any gap
        before them.

        Disk reads block: the server calls this in a worker thread, after ``flush``.
        """
        gap = None
        if start < self.first_held:
            gap = Gap(start, self.first_held - 1)
            start = self.first_held
        if self.in_memory(start):
            return self.read_memory(start, limit, max_bytes), gap
        assert self.spill is not None  # first_held is 0 only with a spill
        return self.spill.read(start, limit, max_bytes), gap

    def summary(self) -> tuple[dict[str, Any], list[str]]:
        """The run's statistics and diagnosis, brought up to date at most every SUMMARY_EVERY seconds
        (or less often, within SUMMARY_SHARE of a core) while events come, and once more when they
        change after the run ended: by adding the fetches that came since to the sorted ones
        (FetchOrder), not by sorting them all again."""
        now = time.monotonic()
        cached = self._summary
        if self.parked and cached is not None:  # frozen at park(): the slim state has no statistics
            return cached[3]
        if cached is not None and (cached[0] == self.next_seq or (not self.ended and now - cached[1] < cached[2])):
            return cached[3]
        cpu = time.thread_time()
        stats = summary(self.state, self._order)
        found = diagnosis(self.state, stats)
        every = max(SUMMARY_EVERY, (time.thread_time() - cpu) / SUMMARY_SHARE)
        self._summary = (self.next_seq, now, every, (stats, found))
        return self._summary[3]

    def park(self) -> bool:
        """Move to disk: keep what lists the run (a slim state, the summary and the meters as of now) and
        nothing else.

        The trace file, closed, answers every read from now on. Only for a log whose trace file holds
        every event (``first_held`` 0); appending afterwards (the server's own ``run_end``) needs the
        file reopened first (``reopen``). Returns False, the log kept whole but memory-only, where
        closing the file failed (``spill_error`` says why).
        """
        self.close()
        if self.spill is None:
            return False
        stats = summary(self.state, self._order)
        self._summary = (self.next_seq, time.monotonic(), SUMMARY_EVERY, (stats, diagnosis(self.state, stats)))
        self.state, self._order = listing_state(self.state), FetchOrder()
        self._tail = deque()  # not clear(): a deque keeps up to 16 freed blocks (8 KiB) for reuse
        self._tail_bytes, self._first_in_memory = 0, self.next_seq
        self.parked = True
        return True

    def reopen(self, spill: Spill | None, problem: str | None = None) -> None:
        """A parked log's trace file again open for appending (``spill``), or, where it could not be
        reopened, ``problem``: the log is then memory-only from here on."""
        self.spill = spill
        if spill is None:
            self.spill_error = f"trace file stopped before seq {self.next_seq}: {problem}"

    def unpark(self, rebuilt: EventLog, spill: Spill) -> None:
        """Whole again: the state and newest events of ``rebuilt`` (this log's trace read back into a
        log without a file), appending to ``spill`` (the trace reopened) from now on."""
        assert rebuilt.next_seq == self.next_seq, "the trace read back must hold every event"
        self.state, self._order, self.meters = rebuilt.state, rebuilt._order, rebuilt.meters
        self._tail, self._tail_bytes = rebuilt._tail, rebuilt._tail_bytes
        self._first_in_memory = rebuilt._first_in_memory
        self.state_problems, self.state_problem_count = rebuilt.state_problems, rebuilt.state_problem_count
        self.forgotten_tasks, self.ended = rebuilt.forgotten_tasks, rebuilt.ended
        self.spill, self._summary, self.parked = spill, None, False

    def flush(self) -> None:
        if self.spill is not None:
            self._guard(self.spill.flush)

    def close(self) -> None:
        if self.spill is not None:
            self._guard(self.spill.close)

    # --- internals ------------------------------------------------------------------------------

    def _fit(self, event: Event, line: bytes) -> tuple[Event, bytes, Event]:
        """A large event as stored (cut to MAX_EVENT_BYTES) and as the reducer gets it."""
        if len(line) > MAX_EVENT_BYTES:
            event, line = fitted(event, line, MAX_EVENT_BYTES)
            self.cut_events += 1
        return event, line, state_view(event, line)

    def _note_problem(self, event: Mapping[str, Any], exc: Exception) -> None:
        self.state_problem_count += 1
        if len(self.state_problems) < MAX_STATE_PROBLEMS:
            self.state_problems.append(f"seq {event['seq']} ({event.get('kind')}): {type(exc).__name__}: {exc}")

    def _guard(self, action: Any) -> None:
        """A failing disk (full, removed) turns the run memory-only, with the reason shown."""
        try:
            action()
        except OSError as exc:
            self.spill_error = f"trace file stopped before seq {self.next_seq}: {exc}"
            spill, self.spill = self.spill, None  # from now on first_held is the oldest event in memory
            if spill is not None and action != spill.close:  # its descriptor is freed, not kept for the server's life
                with contextlib.suppress(OSError):
                    spill.close()

    def _evict(self) -> None:
        tail, popleft = self._tail, self._tail.popleft
        over = max(0, len(tail) - self.memory_events)  # by count first: no test per event
        self._tail_bytes -= sum(len(popleft()) for _ in range(over))
        self._first_in_memory += over
        while self._tail_bytes > self.memory_bytes and len(tail) > 1:
            self._tail_bytes -= len(popleft())
            self._first_in_memory += 1


def listing_state(state: LoaderState) -> LoaderState:
    """What a parked run's listing and detail read of its state: names, config, counts; none of the
    tasks, workers, notes and fetch times the reducer keeps (those come back with ``unpark``)."""
    return LoaderState(run=state.run, mode=state.mode, rank=state.rank, name=state.name, job=state.job,
                       world_size=state.world_size, config=state.config, status=state.status, seq=state.seq,
                       t=state.t, epoch=state.epoch, batches=state.batches, epochs_done=state.epochs_done,
                       first_t=state.first_t)


_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])


def encode_each(events: list[Event]) -> list[bytes]:
    """Each event as ``budgets.encode`` makes it, the same bytes, for about 0.7 of its CPU (one call
    into C per frame, not per event): one ``orjson.dumps`` of the list (compact: its items are each
    event's own encoding, joined by commas) cut at the items' bounds by msgspec, each item copied to
    bytes of its own size."""
    try:
        return list(map(bytes, _ITEMS.decode(orjson.dumps(events, option=orjson.OPT_NON_STR_KEYS))))
    except (TypeError, msgspec.DecodeError):  # an event orjson cannot write (JSONEncodeError): its error, as before
        return [encode(event) for event in events]


def within(lines: Iterable[bytes], max_bytes: int) -> list[bytes]:
    """The first lines whose sizes add up to at most ``max_bytes`` (always at least one)."""
    out: list[bytes] = []
    total = 0
    for line in lines:
        total += len(line) + 1
        if out and total > max_bytes:
            break
        out.append(line)
    return out
