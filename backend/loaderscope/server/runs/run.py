"""A run as the dashboard knows it (``Run``: its event log, its producer, its process, its file) and
the protocols the rooms above fill in for it (``RunSource``, ``LogdirLink``, ``ControlChannel``).
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, Protocol

import orjson

from loaderscope.events import MAX_NUMBER, Event, Kind, RunStatus, recording_of
from loaderscope.server.processes.launcher import LaunchedProcess
from loaderscope.server.runs.store import EventLog

LOG_TAIL_BYTES = 4096
QUIET_STEPS = 16  # the recent steps a live loop's allowed quiet is judged by (Run.quiet_allowed)


class RunRefused(Exception):
    """A request the manager cannot honour now; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ControlChannel(Protocol):
    """Where control messages for a run go: its producer's websocket."""

    async def send(self, message: dict[str, Any]) -> None: ...


class SourceIndex(Protocol):
    """What the manager and the run list read of a logdir file's index (``server/logdir/index.py``)."""

    @property
    def size(self) -> int: ...
    @property
    def mtime_ns(self) -> int: ...
    @property
    def batches(self) -> int | None: ...
    @property
    def problem(self) -> str | None: ...
    @property
    def recording(self) -> str | None: ...
    @property
    def origin(self) -> str | None: ...
    # what /metrics exports of a file not read yet (server/web/metrics.py)
    @property
    def events(self) -> int: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def mode(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def job(self) -> str | None: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...


class RunSource(Protocol):
    """A run's producer when it is a trace file that someone else writes (``server/logdir/follow.py``,
    ``FileSource``): the logdir room imports this room, never the other way round."""

    @property
    def relative(self) -> str: ...
    @property
    def index(self) -> SourceIndex: ...
    @property
    def read_whole(self) -> bool: ...
    @property
    def caught_up(self) -> asyncio.Event: ...
    @property
    def grew(self) -> float:
        """time.monotonic() of the file's last growth or heartbeat."""
    def status(self) -> str: ...
    def brief(self) -> dict[str, Any]: ...


class LogdirLink(Protocol):
    """What the manager asks of the logdir it serves (``server/logdir/follow.py``, ``Logdir``)."""

    def follow(self, run: Run) -> None: ...
    def resume(self, run: Run, secret: str | None) -> None: ...
    def index_own(self, run: Run, path: Path) -> None: ...


class Signal:
    """Wakes everything waiting on it, once per ``notify`` (event loop only)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()


_EPOCH_OPENS = frozenset({Kind.EPOCH_START, Kind.EPOCH_RESUME})
_EPOCH_CLOSES = frozenset({Kind.EPOCH_END, Kind.RUN_END})
_EPOCH_KINDS = _EPOCH_OPENS | _EPOCH_CLOSES


@dataclass(eq=False)
class Run:
    id: str
    scenario: str | None
    mode: str
    params: dict[str, Any]
    origin: str
    log: EventLog
    created: float = field(default_factory=time.time)
    changed: Signal = field(default_factory=Signal)
    paused: bool = False
    delay: float = 0.0
    producer: ControlChannel | None = None
    attached: bool = False  # a producer has connected at least once
    producer_gone: asyncio.Event = field(default_factory=asyncio.Event)
    pending_control: list[dict[str, Any]] = field(default_factory=list)
    process: subprocess.Popen[bytes] | LaunchedProcess | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    exitcode: int | None = None
    stop_requested: bool = False
    closed: bool = False  # no more events will come
    error: str | None = None
    dropped: int = 0  # events the producer reported (or its seq showed) as lost before reaching us
    last_producer_seq: int | None = None
    # between epoch_start/epoch_resume and epoch_end: only then does silence mean something. Between
    # epochs a loader sends nothing while the script evaluates or checkpoints, for as long as it likes.
    in_epoch: bool = False
    log_path: Path | None = None
    source: RunSource | None = None  # a run read from a trace file in the logdir (origin "logdir")
    detached_at: float | None = None  # time.monotonic() when its producer last went away
    viewers: int = 0  # websockets watching it
    # held paused until a page opens it (`loaderscope demo`: the first look is at a live run, never at
    # one that ended while the page was still on its way); the first viewer resumes it
    awaits_viewer: bool = False
    # Proof of ownership: handed to the producer that created the run (in its hello) or to the run
    # process the dashboard started (in its environment); a producer attaching to an existing run shows it.
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    peer: str | None = None  # its first producer's source, "uid:N" on loopback else the address (ingest.source_of)
    producer_peer: str | None = None  # the source of the producer connected now (max_source_producers)
    silent_after: float = 30.0  # a live producer quiet this long is shown as silent
    wall_start: float | None = None  # run_start's wall clock at t = 0 (started())
    recorded: str | None = None  # events.recording_of its run_start (recording())
    run_start_read: bool = False
    # GET /api/runs/{id}/advice of an ended run, with the last seq it was made of: it cannot change
    advice: tuple[int, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self.producer_gone.set()

    @property
    def status(self) -> str:
        if self.log.ended:
            return self.log.state.status
        if self.source is not None:
            return self.source.status()
        if self.producer is None and not self.attached:
            return RunStatus.STARTING
        if self.producer is None and self.origin == "external":
            return RunStatus.DISCONNECTED  # it may come back (watch() reconnects)
        return RunStatus.PAUSED if self.paused else RunStatus.RUNNING

    @property
    def live(self) -> bool:
        return not self.closed

    def event_age(self) -> float | None:
        """Seconds since the last event arrived (None before the first)."""
        last = self.log.last_event_at
        return None if last is None else time.monotonic() - last

    @property
    def silent(self) -> bool:
        """Connected, inside an epoch, yet nothing came for ``quiet_allowed()`` (a stopped or hung loop)."""
        age = self.event_age()
        return (self.in_epoch and self.status == RunStatus.RUNNING and self.producer is not None
                and age is not None and age > self.quiet_allowed())

    def quiet_allowed(self) -> float:
        """How long a live loop may send nothing inside an epoch: ``silent_after``, or three of its recent
        steps where that is longer (a large model's step of a minute sends one batch's events a minute)."""
        recent = self.log.state.step_gaps[-QUIET_STEPS:]
        return max(self.silent_after, 3 * statistics.median(recent)) if recent else self.silent_after

    def add_dropped(self, count: int) -> None:
        self.dropped = min(self.dropped + count, MAX_NUMBER)  # stays a JSON integer whatever producers claim

    def ingest(self, events: list[Event]) -> None:
        """Events from the producer: count what it lost on the way, then number and keep them."""
        self._count_dropped(list(map(dict.get, events, repeat("seq"))))
        kinds = list(map(dict.get, events, repeat("kind")))
        if not _EPOCH_KINDS.isdisjoint(kinds):
            self.in_epoch = next(kind for kind in reversed(kinds) if kind in _EPOCH_KINDS) in _EPOCH_OPENS
        self.log.append(events)
        self.changed.notify()

    def _count_dropped(self, produced: list[Any]) -> None:
        """Add the jumps in the producer's own seq to ``dropped`` (a seq that is not an integer is not counted)."""
        first = produced[0] if produced else None
        run_of_seqs = type(first) is int and set(map(type, produced)) == {int} and \
            produced == list(range(first, first + len(produced)))  # a producer's frame: no jump after its first
        for seq in [first] if run_of_seqs else produced:
            if isinstance(seq, int) and not isinstance(seq, bool):
                # a run resumed from its trace (§7) holds events its producer numbered before
                expected = self.log.next_seq if self.last_producer_seq is None else self.last_producer_seq + 1
                if seq > expected:  # lost on the way, or sent to a dashboard that has since died
                    self.add_dropped(seq - expected)
                self.last_producer_seq = seq
        if run_of_seqs:
            self.last_producer_seq = produced[-1]

    def brief(self) -> dict[str, Any]:
        """The run as listed by GET /api/runs."""
        state = self.log.state
        brief = {
            "id": self.id,
            "scenario": self.scenario or state.config.get("scenario"),
            "mode": self.mode or state.mode,
            "origin": self.origin,
            "status": self.status,
            "paused": self.paused,
            "delay": self.delay,
            "created": self.created,
            "events": self.log.next_seq,
            "last_seq": self.log.last_seq,
            "first_held": self.log.first_held,
            "batches": state.batches,
            "dropped": self.dropped,
            "silent": self.silent,
            "last_event_age": self.event_age(),
            "name": state.name,
            "job": state.job,
            "rank": state.rank,
            "world_size": state.world_size,
            # epochs of training begun: peeks (an iterator left after a batch or two) are none
            "epochs": state.epochs_done + state.epoch_open if self.source is None or self.source.read_whole else None,
            "on_disk": self.log.parked and self.source is None,  # a logdir run's events are always on disk
            **(self.source.brief() if self.source is not None else {}),
        }
        # a replay's `created` is when it was opened here, not when it ran
        return {**brief, "started": self.started() or (brief["created"] if self.origin != "replay" else None)}

    def started(self) -> float | None:
        """The wall clock of the loader's first event (its first ``iter()``): run_start's
        ``wall_start`` plus its ``t``. None before it, or when its run_start has no wall clock."""
        first_t = self.log.state.first_t
        if first_t is None:
            return None
        self._read_run_start()
        return None if self.wall_start is None else self.wall_start + first_t

    def recording(self) -> str | None:
        """Which probe's run this is (``events.recording_of``): a run with the recording of another is a
        copy of it. A logdir file's from its index; a streamed run's once its first event is here."""
        if self.source is not None:
            return self.source.index.recording
        if self.log.state.first_t is not None:
            self._read_run_start()
        return self.recorded

    def _read_run_start(self) -> None:
        """run_start's wall clock and recording, read once: the listing asks for every run, often."""
        if self.run_start_read:
            return
        self.run_start_read = True
        try:
            lines, _ = self.log.read(0, 1)
            first = orjson.loads(lines[0]) if lines else {}
        except (OSError, orjson.JSONDecodeError):
            first = {}
        if first.get("kind") != "run_start":
            return
        wall = first.get("wall_start")
        if isinstance(wall, (int, float)) and not isinstance(wall, bool):
            self.wall_start = float(wall)
        self.recorded = recording_of(first)

    def detail(self) -> dict[str, Any]:
        """The run as GET /api/runs/{id} shows it: status, config, statistics and diagnosis."""
        state = self.log.state
        statistics, findings = self.log.summary()
        brief = self.brief()
        if self.source is not None and not self.source.read_whole and self.source.index.problem is None:
            brief["status"] = RunStatus.PENDING  # its file is still being read: nothing below is its own yet
        return {
            **brief,
            "params": self.params,
            "config": state.config,
            "statistics": statistics,
            "diagnosis": findings,
            "error": self.error,
            "exitcode": self.exitcode,
            "pid": self.process.pid if self.process is not None else None,  # leader of the run's process group
            "trace": self.log.spill is not None,
            "trace_error": self.log.spill_error,
            "state_problems": self.log.state_problems,
            "cut_events": self.log.cut_events,
            "forgotten_tasks": self.log.forgotten_tasks,
            "log_tail": self._log_tail() if self.status == RunStatus.ERROR else None,
        }

    def _log_tail(self) -> str | None:
        if self.log_path is None:
            return None
        try:
            with self.log_path.open("rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return None
