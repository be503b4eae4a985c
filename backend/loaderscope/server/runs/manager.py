"""Runs: what the dashboard knows about each one, and the manager that starts, steers and ends them.

A run is an event log plus its producer: a run process the dashboard started (origin
"dashboard"), or a script that connected to /ws/ingest by itself (origin "external", e.g.
``watch()``). Everything here runs on the server's event loop; blocking work (waiting for a
process, reading a trace file) goes to worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import signal
import statistics
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from loaderscope.traces import jsonl as trace
from loaderscope.events import MAX_NUMBER, Event, Kind, RunStatus, recording_of
from loaderscope.scenarios.plan import Plan
from loaderscope.server.config import ServerConfig
from loaderscope.server.processes import process
from loaderscope.server.processes.launcher import LaunchedProcess, Launcher
from loaderscope.server.runs.spill import TraceSpill
from loaderscope.server.runs.store import EventLog

RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
LOAD_WAIT = 60.0  # seconds a REST read waits for a logdir run's file to be read to its end
DRAIN_WAIT = 5.0  # seconds to let the ingest side finish reading what an exited process sent
LOG_TAIL_BYTES = 4096
QUIET_STEPS = 16  # the recent steps a live loop's allowed quiet is judged by (Run.quiet_allowed)
REPLAY_CHUNK = 1000
RESTORE_CHUNK = 2000  # events of a parked run's trace read back per step (decoded off the event loop)
# The trace header's field holding SHA-256 of the run's secret: a dashboard restarted on the logdir
# holds no secret in memory, and lets a producer resume the run only if its secret matches this.
OWNER_FIELD = "owner"
# Controls queued for a run whose producer is away (the newest kept): a run on disk, or any disconnected
# one, must not grow with every control a client sends it.
MAX_PENDING_CONTROLS = 16


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


def _of_a_stream(run: Run) -> bool:
    """A run a producer streamed here, or the file this dashboard wrote of one (its header's origin)."""
    return run.origin == "external" if run.source is None else run.source.index.origin == "external"


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


class RunManager:
    """Creates runs, spawns their processes, forwards controls, and cleans up after them."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.runs: dict[str, Run] = {}
        self.launcher: Launcher | None = None
        self.logdir: LogdirLink | None = None  # set by Logdir when the dashboard serves one
        self.owned_paths: set[str] = set()  # trace files this dashboard writes (the logdir scan skips them)
        self.forgotten: list[Run] = []  # delisted runs whose files a temporary data directory still keeps
        self.viewers = 0  # viewer websockets open
        self._tasks: set[asyncio.Task[Any]] = set()
        self._restoring: set[str] = set()  # parked runs whose trace is being read back for their producer

    # --- lookup ---------------------------------------------------------------------------------

    def get(self, run_id: str) -> Run | None:
        return self.runs.get(run_id)

    def require(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise RunRefused(404, f"no run named {run_id!r}; GET /api/runs lists the runs this dashboard holds")
        return run

    def opened(self, run: Run) -> Run:
        """A viewer looks at ``run``: a logdir run's file is then read into its store, and followed."""
        if run.source is not None and self.logdir is not None:
            self.logdir.follow(run)
        return run

    def watched(self, run: Run) -> None:
        """A page streams ``run`` (WS /ws/runs/{id}): a run held for its first viewer goes on. (A REST
        read, such as ``loaderscope compare``'s, is no page.)"""
        if run.awaits_viewer:
            run.awaits_viewer = False
            self._background(self._release(run))

    async def hold_for_viewer(self, run: Run) -> None:
        """Keep ``run`` paused (before its first batch, when the pause reaches it first) until a viewer opens it."""
        await self.control(run, "pause", None)
        run.awaits_viewer = True

    async def _release(self, run: Run) -> None:
        with contextlib.suppress(RunRefused):  # it ended meanwhile (stopped, failed): nothing to resume
            await self.control(run, "resume", None)

    async def read_whole(self, run: Run) -> None:
        """Wait (bounded) until a logdir run's file has been read to its end once."""
        self.opened(run)
        if run.source is not None and run.source.index.problem is None:  # an unreadable file: at once
            try:
                await asyncio.wait_for(run.source.caught_up.wait(), LOAD_WAIT)
            except asyncio.TimeoutError:
                pass  # answer with what has been read so far

    def listed(self) -> list[Run]:
        """The runs as the list shows them, in their order, a stream once: a script that streams here and
        writes its own trace into this dashboard's logdir is one run, not two. Of a recording held by a
        stream (this dashboard's, or the copy it wrote of one) and by other files, the one shown is the
        stream in memory (it is live, and takes controls), else the run with most events (a stream may
        have lost some), else the first; the others still answer by their id. Files that only copy one
        another (a trace copied by hand) are each listed: each is a file of the logdir."""
        recordings: dict[str, list[Run]] = {}
        for run in self.runs.values():
            if (key := run.recording()) is not None:
                recordings.setdefault(key, []).append(run)
        hidden: set[int] = set()
        for runs in recordings.values():
            if len(runs) > 1 and any(map(_of_a_stream, runs)):
                shown = max(runs, key=lambda run: (run.source is None, run.log.next_seq))
                hidden.update(id(run) for run in runs if run is not shown)
        return [run for run in self.runs.values() if id(run) not in hidden]

    def active(self) -> list[Run]:
        """Runs the dashboard started that have not ended yet (what max_active_runs limits)."""
        return [r for r in self.runs.values() if r.origin == "dashboard" and not r.closed]

    @property
    def producers(self) -> int:
        """Producer websockets connected now."""
        return sum(r.producer is not None for r in self.runs.values())

    def producers_of(self, peer: str | None) -> int:
        """Producer websockets of one source connected now (what max_source_producers limits)."""
        return sum(r.producer is not None and r.producer_peer == peer for r in self.runs.values())

    def running(self) -> list[Run]:
        """Runs whose process is still alive."""
        return [r for r in self.runs.values() if r.process is not None and not r.exited.is_set()]

    # --- creating and starting ------------------------------------------------------------------

    def create(self, *, scenario: str | None, mode: str, params: dict[str, Any], origin: str,
               run_id: str | None = None) -> Run:
        self._make_room()
        run_id = run_id or uuid.uuid4().hex[:12]
        secret = secrets.token_urlsafe(24)
        spill = None
        if self.config.data_dir is not None:
            header = trace.header(run_id, scenario=scenario, mode=mode, params=params, origin=origin,
                                  **{OWNER_FIELD: owner_digest(secret)})
            spill = self._new_spill(run_id, header)
            self.owned_paths.add(str(spill.path))
        log = EventLog(run_id, memory_events=self.config.memory_events, spill=spill)
        run = Run(run_id, scenario, mode, params, origin, log, silent_after=self.config.silent_after, secret=secret)
        if spill is not None:
            run.log_path = spill.path.with_name(spill.path.name.removesuffix(".trace.jsonl") + ".log")
        self.runs[run_id] = run
        return run

    def _new_spill(self, run_id: str, header: dict[str, Any]) -> TraceSpill:
        """A new trace file for the run: ``ID.trace.jsonl``, else ``ID.N.trace.jsonl``; never one already
        there (a logdir keeps earlier runs, and an id a producer reuses must not cost the old trace)."""
        assert self.config.data_dir is not None
        n = 1
        while True:
            path = self.config.data_dir / f"{run_id if n == 1 else f'{run_id}.{n}'}.trace.jsonl"
            if not os.path.lexists(path):  # TraceSpill creates it with the first event, never over another
                return TraceSpill(path, header)
            n += 1

    def add(self, run: Run) -> None:
        """A run made elsewhere (a logdir trace): listed, never evicted, no process."""
        self.runs[run.id] = run

    async def start(self, plan: Plan, mode: str, costs: dict[str, Any] | None = None) -> Run:
        """Create a run and its run process (a sim run's costs already validated)."""
        return await self.launch(self.prepare(plan, mode), plan, costs)

    def prepare(self, plan: Plan, mode: str) -> Run:
        """The run of ``plan``, listed (pending) before its process starts: serve() prints a demo's URL
        meanwhile, since the first launch waits for the launcher's imports (a minute on a busy machine)."""
        if len(self.active()) >= self.config.max_active_runs:
            raise RunRefused(429, f"{self.config.max_active_runs} runs are already active; stop one "
                             "(POST /api/runs/ID/control {\"action\": \"stop\"}) or wait for one to end")
        params = plan.values()  # the one place parameters become plain values again: for the trace and argv
        return self.create(scenario=plan.name, mode=mode, params=params, origin="dashboard")

    def launch_soon(self, run: Run, plan: Plan, said: Callable[[str], None]) -> None:
        """Start a prepared run's process in the background (serve() answers requests meanwhile);
        ``said`` gets one line: started, or why not."""
        async def go() -> None:
            try:
                await self.launch(run, plan)
            except RunRefused as exc:
                said(f"the run could not start: {exc.message}")
                return
            said("started")
        self._background(go())

    async def launch(self, run: Run, plan: Plan, costs: dict[str, Any] | None = None) -> Run:
        """Start the run process of a prepared run."""
        argv = process.runproc_argv(run_id=run.id, scenario=plan.name, mode=run.mode, params=run.params,
                                    ingest_url=self.config.ingest_url, costs=costs)
        if plan.scenario.hub is not None:  # the run process registers the same torch.hub entry
            argv += ["--hub", plan.scenario.hub.to_json()]
        try:
            run.process = await self._launch(argv, run.log_path, run.secret)
        except OSError as exc:
            run.error = f"could not start the run process: {exc}"
            self._finish(run, None)
            raise RunRefused(503, run.error) from None
        self._background(self._watch_process(run))
        return run

    async def _launch(self, argv: list[str], log_path: Path | None, secret: str) -> Any:
        """Fork from the preloaded launcher; start a fresh interpreter if it is gone.

        The launcher starts with the first run, not with the server: a dashboard that never starts
        runs (one that ``watch()`` opened, or a replay) should not hold torch in memory. The first
        run waits for its imports, which it would have spent in a fresh interpreter anyway.
        """
        if self.launcher is None and self.config.use_launcher:
            self.launcher = Launcher({**os.environ, process.TOKEN_ENV: self.config.token})
        if self.launcher is not None and self.launcher.alive:
            try:
                return await self.launcher.spawn(argv, log_path, secret)
            except OSError:
                pass  # a launcher that died: the slow way still works
        return process.spawn(argv, token=self.config.token, log_path=log_path, secret=secret)

    def replay(self, path: Path) -> Run:
        """A recorded trace file as an ended run (mode "replay"), parsed as data, streamed, size-limited.

        Raises:
            trace.TraceError: the file is not a loaderscope trace (its first line says so).
        """
        parsed = trace.parsed_trace(path)  # JSON lines or Parquet
        head = next(parsed)
        run = self.create(scenario=head.get("scenario"), mode="replay", params=head.get("params") or {},
                          origin="replay")
        run.attached = True
        chunk: list[Event] = []
        try:
            for event in parsed:
                chunk.append(dict(event))
                if len(chunk) == REPLAY_CHUNK:
                    run.ingest(chunk)
                    chunk = []
        except trace.TraceError as exc:  # keep what came before the damage, and say where it is
            run.error = str(exc)
        run.ingest(chunk)
        self._finish(run, None, why=run.error or f"{path.name} ends before its run did (no run_end)")
        return run

    def _make_room(self) -> None:
        """Room in memory for one more run: the source holding the most runs in memory gives first, its
        ended runs forgotten (their traces stay), its disconnected ones moved to disk (``_park``). Then
        the oldest forgettable traces go past ``disk_bytes``, and parked runs past ``max_parked``.

        Logdir runs are not counted: their files hold them, and the listing must show every one.
        """
        while len(held := self._in_memory()) >= self.config.max_runs:
            run = self._victim(held)
            if run is None:
                raise RunRefused(429, f"this dashboard holds {self.config.max_runs} runs in memory, all live "
                                 "(connected producers or started run processes); stop some, or try again later")
            if self._parkable(run):
                self._park(run)
            else:
                self._forget(run)
        while self._disk_used() > self.config.disk_bytes and (evictable := self._evictable()):
            self._forget(evictable[0])
        while len(parked := [r for r in self.runs.values() if r.log.parked and r.source is None]) > \
                self.config.max_parked:  # a logdir run that ended keeps only its summary too, and is never forgotten
            count = Counter(r.peer for r in parked)
            self._forget(min(parked, key=lambda r: (not r.closed, -count[r.peer], r.detached_at or 0.0)))

    def _in_memory(self) -> list[Run]:
        """Runs whose events and state the dashboard holds (what max_runs limits)."""
        return [r for r in self.runs.values() if r.source is None and not r.log.parked]

    def _victim(self, held: list[Run]) -> Run | None:
        """The run that leaves memory for a new one: of the source (a local uid, else an address) holding
        the most runs in memory, its oldest forgettable run, else its longest gone disconnected one.
        So one source's drive-by runs push out its own, not another's; live runs never go."""
        count = Counter(r.peer for r in held)
        forgettable = set(map(id, self._evictable()))
        candidates = [r for r in held if id(r) in forgettable or _gone(r)]
        return min(candidates, default=None, key=lambda r: (
            -count[r.peer], id(r) not in forgettable, 0.0 if id(r) in forgettable else r.detached_at or 0.0))

    def _evictable(self) -> list[Run]:
        """Ended runs, and external runs whose producer left more than ``reconnect_grace`` ago (or sent
        nothing): a watch()ed script that lost its connection comes back to the same run."""
        now = time.monotonic()
        return [r for r in self.runs.values() if r.source is None and (r.closed or (
            _gone(r) and (r.log.next_seq == 0 or now - (r.detached_at or now) > self.config.reconnect_grace)))]

    def _parkable(self, run: Run) -> bool:
        """A disconnected run whose trace file holds every event can move to disk. A memory-only
        dashboard (``serve(record=False)``) writes no file, by the user's choice: its runs are forgotten."""
        spill = run.log.spill
        return _gone(run) and isinstance(spill, TraceSpill) and spill.created and run.log.spill_error is None

    def _park(self, run: Run) -> None:
        """Move a disconnected run to disk: still listed under its id (``on_disk``), read from its trace,
        and resumed into the same file when its producer comes back with its secret (``_unpark``). A
        file that fails as it is closed leaves the run memory-only: it is then forgotten."""
        run.started()  # its wall clock, read while its first event may still be in memory, not from the file
        if not run.log.park():
            self._forget(run)
        run.changed.notify()

    def _unpark(self, run: Run) -> None:
        """Its producer is back: read the trace back into memory (in the background), then let it in.

        Raises:
            RunRefused: 429 (close 1013) until the trace has been read back: the producer retries.
        """
        if run.id not in self._restoring:
            self._make_room()
            self._restoring.add(run.id)
            self._background(self._restore(run))
        raise RunRefused(429, f"run {run.id} is being read back from its trace file; reconnect in a moment")

    async def _restore(self, run: Run) -> None:
        """Read a parked run's trace back into a whole state, then reopen the file for its producer; a
        trace that cannot be read back is said, and the run forgotten (its producer starts it again)."""
        log, spill = run.log, run.log.spill
        assert isinstance(spill, TraceSpill)
        rebuilt = EventLog(run.id, memory_events=log.memory_events, memory_bytes=log.memory_bytes)
        try:
            while rebuilt.next_seq < log.next_seq:
                events = await asyncio.to_thread(_decoded, spill, rebuilt.next_seq, RESTORE_CHUNK)
                if not events:
                    raise OSError(f"it ends after {rebuilt.next_seq} of its {log.next_seq} events")
                rebuilt.append(events)
            if log.parked and not run.closed and self.runs.get(run.id) is run:  # not ended or forgotten meanwhile
                log.unpark(rebuilt, spill.reopened())
                run.detached_at = time.monotonic()  # the youngest gone: kept while its producer reconnects
        except (OSError, ValueError) as exc:  # ValueError: orjson's JSONDecodeError, a line changed on disk
            print(f"loaderscope: run {run.id} cannot come back from its trace file {spill.path} ({exc}); its "
                  "producer starts it again as a new run under the same id", flush=True)
            if self.runs.get(run.id) is run:
                self._forget(run)
        finally:
            self._restoring.discard(run.id)
        run.changed.notify()

    def _forget(self, run: Run) -> None:
        """Delist ``run``. Its trace stays; a temporary data directory keeps the newest ``keep_forgotten``."""
        run.log.close()
        del self.runs[run.id]
        if not self.config.remove_data_dir or self.config.logdir is not None:
            return  # the user's directory: nothing in it is ever deleted
        self.forgotten.append(run)
        while len(self.forgotten) > self.config.keep_forgotten or (
                self.forgotten and self._disk_used() > self.config.disk_bytes):
            _delete_files(self.forgotten.pop(0))

    def _disk_used(self) -> int:
        """Bytes of the traces this dashboard wrote that are still on disk (listed or kept)."""
        runs = [*self.runs.values(), *self.forgotten]
        return sum(r.log.spill.size for r in runs if isinstance(r.log.spill, TraceSpill))

    # --- producers (the ingest websocket) -------------------------------------------------------

    def attach(self, run_id: str | None, channel: ControlChannel, secret: str | None = None,
               peer: str | None = None) -> tuple[Run, list[dict[str, Any]]]:
        """A producer connects: to a run the dashboard started, or as a new (or returning) external run.

        A run belongs to whoever created it: attaching to an existing run takes its ``secret``.
        Returns the run and the control messages queued for it. Raises RunRefused (with a
        websocket close reason) when the run cannot take a producer.
        """
        if run_id is not None and not RUN_ID.match(run_id):
            raise RunRefused(4400, "run ids are 1 to 64 characters from A-Z a-z 0-9 _ -")
        if (held := self.producers_of(peer)) >= self.config.max_source_producers:
            raise RunRefused(429, f"{peer} has {held} producers connected, the most one source may "
                             "(max_source_producers); try again when one ends")
        run = self.runs.get(run_id) if run_id else None
        if run is None:
            run = self.create(scenario=None, mode="", params={}, origin="external", run_id=run_id)
            run.peer = peer
        elif run.source is None and not run.closed and not secrets.compare_digest(secret or "", run.secret):
            raise RunRefused(4403, f"run {run.id} is another producer's: its owner returns with the "
                             f"{process.SECRET_HEADER} header")
        if run.source is not None:
            if self.logdir is None:
                raise RunRefused(4409, f"run {run.id} is read from a trace file; a producer cannot add to it")
            self.logdir.resume(run, secret)  # the run it streamed before this dashboard restarted, or refused
        if run.closed:
            raise RunRefused(4409, f"run {run.id} has ended; a producer cannot add to it (start a new run)")
        if run.producer is not None:
            raise RunRefused(4409, f"run {run.id} already has a producer connected")
        if run.log.parked:
            self._unpark(run)
        run.producer, run.producer_peer = channel, peer
        run.attached = True
        run.producer_gone.clear()
        queued, run.pending_control = run.pending_control, []
        run.changed.notify()
        return run, queued

    def detach(self, run: Run) -> None:
        run.producer, run.producer_peer = None, None
        run.detached_at = time.monotonic()
        run.producer_gone.set()
        if run.origin == "external" and run.log.ended:
            self._close(run)
        run.changed.notify()

    # --- controls -------------------------------------------------------------------------------

    async def control(self, run: Run, action: str | None, delay: float | None) -> None:
        if run.source is not None:
            raise RunRefused(409, f"run {run.id} is read from a trace file ({run.source.relative}): its producer "
                             "does not take controls from this dashboard")
        if run.closed or run.log.ended:
            raise RunRefused(409, f"run {run.id} has already ended ({run.status}); start a new run")
        if delay is not None:
            run.delay = delay
            await self._send(run, {"delay": delay})
        if action == "stop":
            await self.stop(run)
        elif action == "inspect":  # the batch inspector asks for values; playback is unchanged
            await self._send(run, {"action": action})
        elif action is not None:
            run.paused = action in ("pause", "step")
            await self._send(run, {"action": action})
        run.changed.notify()

    async def stop(self, run: Run) -> None:
        """Ask the run to stop; if its process has not ended after a grace period, end its group."""
        run.stop_requested = True
        await self._send(run, {"action": "stop"})
        if run.process is not None:
            self._background(self._terminate(run))
        elif run.producer is None:
            self._finish(run, None)  # an external run with nobody connected: just end it

    async def _send(self, run: Run, message: dict[str, Any]) -> None:
        if run.producer is not None:
            try:
                await run.producer.send(message)
                return
            except Exception:  # noqa: BLE001 (a producer that just went away: its run ends on its own)
                pass
        run.pending_control = [*run.pending_control[1 - MAX_PENDING_CONTROLS:], message]

    # --- process life ---------------------------------------------------------------------------

    async def _watch_process(self, run: Run) -> None:
        assert run.process is not None
        code = await asyncio.to_thread(run.process.wait)
        run.exitcode = code
        run.exited.set()
        process.kill_group(run.process.pid)  # workers the run process left behind
        await asyncio.to_thread(remove_stack_dirs, run.process.pid)
        try:
            await asyncio.wait_for(run.producer_gone.wait(), DRAIN_WAIT)
        except asyncio.TimeoutError:
            pass
        self._finish(run, code)

    async def _terminate(self, run: Run) -> None:
        assert run.process is not None
        pgid = run.process.pid
        for sig, wait in ((None, self.config.stop_grace), (signal.SIGTERM, self.config.kill_grace),
                          (signal.SIGKILL, None)):
            if run.exited.is_set():
                return
            if sig is not None:
                process.signal_group(pgid, sig)
            if wait is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(run.exited.wait()), wait)
                except asyncio.TimeoutError:
                    continue

    def _finish(self, run: Run, code: int | None, why: str | None = None) -> None:
        """The producer is gone for good: make sure the log says how the run ended, then close it."""
        if run.closed:
            return
        if not run.log.ended:
            if run.log.parked:
                self._reopen(run)
            reason = RunStatus.STOPPED if run.stop_requested else RunStatus.ERROR
            message = why or run.error or describe_exit(code)
            run.log.append([{"kind": "run_end", "t": run.log.state.t, "rank": 0, "reason": reason,
                             "source": "server", "message": message, "exitcode": code}])
            if reason == RunStatus.ERROR and run.error is None:
                run.error = message
        self._close(run)

    def _reopen(self, run: Run) -> None:
        """A parked run's trace takes the run_end the server writes for it (stopped, or server exit)."""
        spill = run.log.spill
        assert isinstance(spill, TraceSpill)
        try:
            run.log.reopen(spill.reopened())
        except OSError as exc:
            run.log.reopen(None, str(exc))

    def close(self, run: Run) -> None:
        """No more events will come (a logdir run whose file reached its run_end)."""
        self._close(run)

    def _close(self, run: Run) -> None:
        run.closed = True
        run.log.close()
        if self.logdir is not None and isinstance(run.log.spill, TraceSpill) and run.log.spill.created:
            self.logdir.index_own(run, run.log.spill.path)  # the next start lists it without reading it
        run.changed.notify()

    # --- housekeeping ---------------------------------------------------------------------------

    def background(self, coro: Any) -> None:
        """Run ``coro`` as a task that server exit cancels."""
        self._background(coro)

    def _background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def flush(self) -> None:
        for run in self.runs.values():
            if not run.closed and run.source is None:  # a logdir file is its producer's to flush
                run.log.flush()

    async def shutdown(self) -> None:
        """Server exit: end every run process group and close every trace file."""
        for run in self.running():
            run.stop_requested = True
            process.signal_group(run.process.pid, signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + self.config.kill_grace
        while self.running() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for run in self.runs.values():
            if run.process is not None:
                process.kill_group(run.process.pid)
                remove_stack_dirs(run.process.pid)
        for task in list(self._tasks):
            task.cancel()
        for run in self.runs.values():
            if run.source is not None:
                continue  # a logdir file is its producer's: nothing is appended to it
            if run.origin == "external" and (run.log.next_seq == 0 or self.logdir is not None):
                # nothing to end (no event: no file either), or a logdir run: its file stays open-ended,
                # and the producer resumes into it when it reconnects to the next dashboard on this logdir
                self._close(run)
            else:
                self._finish(run, run.exitcode)
        if self.launcher is not None:
            await asyncio.to_thread(self.launcher.close)


def remove_stack_dirs(pid: int) -> None:
    """The stack files a run process's workers dump to: its own exit removes them, a SIGKILL does not.

    Imported here, not at the top: the server imports nothing of the probe until a run has ended.
    """
    from loaderscope.probe.stacks import remove_stale_stack_dirs

    remove_stale_stack_dirs(pid)


def _delete_files(run: Run) -> None:
    """A forgotten run's trace, sidecar index and log, in a temporary data directory."""
    spill = run.log.spill
    paths = [run.log_path] + ([spill.path, spill.path.with_name(spill.path.name + ".idx.json")]
                              if isinstance(spill, TraceSpill) else [])
    for path in paths:
        if path is not None:
            path.unlink(missing_ok=True)


def owner_digest(secret: str) -> str:
    """What a trace header keeps of its run's secret (``OWNER_FIELD``): SHA-256 of a 192-bit random
    secret gives nothing to whoever reads the trace (a team logdir is readable by others)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _gone(run: Run) -> bool:
    """An external run whose producer left and may come back (disconnected)."""
    return run.source is None and run.origin == "external" and run.producer is None \
        and run.detached_at is not None and not run.closed


def _decoded(spill: TraceSpill, start: int, count: int) -> list[Event]:
    """Events ``start ..`` of a trace file, decoded (blocking: a worker thread's)."""
    return [orjson.loads(line) for line in spill.read(start, count)]


def describe_exit(code: int | None) -> str:
    if code is None:
        return "the producer disconnected before the run ended"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the run process was killed by {name} before the run ended"
    return f"the run process exited with code {code} before the run ended; its log has the details"
