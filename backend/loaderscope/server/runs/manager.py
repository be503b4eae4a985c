"""The run manager: it starts, steers and ends runs, and lists them.

A run is an event log plus its producer: a run process the dashboard started (origin
"dashboard"), or a script that connected to /ws/ingest by itself (origin "external", e.g.
``watch()``). Everything here runs on the server's event loop; blocking work (waiting for a
process, reading a trace file) goes to worker threads. A run itself is ``run.py``'s; which runs stay
in memory is ``eviction.py``'s; a producer's connection and its controls are ``producers.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaderscope.events import Event, RunStatus
from loaderscope.scenarios.plan import Plan
from loaderscope.server.config import ServerConfig
from loaderscope.server.offloop import in_daemon_thread
from loaderscope.server.processes import process
from loaderscope.server.processes.launcher import Launcher
from loaderscope.server.runs.eviction import Eviction
from loaderscope.server.runs.producers import ProducerControl
from loaderscope.server.runs.run import LogdirLink, Run, RunRefused
from loaderscope.server.runs.spill import TraceSpill
from loaderscope.server.runs.store import EventLog
from loaderscope.traces import jsonl as trace

LOAD_WAIT = 60.0  # seconds a REST read waits for a logdir run's file to be read to its end
DRAIN_WAIT = 5.0  # seconds to let the ingest side finish reading what an exited process sent
REPLAY_CHUNK = 1000
# The trace header's field holding SHA-256 of the run's secret: a dashboard restarted on the logdir
# holds no secret in memory, and lets a producer resume the run only if its secret matches this.
OWNER_FIELD = "owner"


def _of_a_stream(run: Run) -> bool:
    """A run a producer streamed here, or the file this dashboard wrote of one (its header's origin)."""
    return run.origin == "external" if run.source is None else run.source.index.origin == "external"


class RunManager(ProducerControl):
    """Creates runs, spawns their processes, forwards controls, and cleans up after them."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.runs: dict[str, Run] = {}
        self.launcher: Launcher | None = None
        self.logdir: LogdirLink | None = None  # set by Logdir when the dashboard serves one
        self.owned_paths: set[str] = set()  # trace files this dashboard writes (the logdir scan skips them)
        self.viewers = 0  # viewer websockets open
        self._tasks: set[asyncio.Task[Any]] = set()
        self.eviction = Eviction(config, self.runs, self._background)

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
            except TimeoutError:
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
        self.eviction.make_room()
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

    # --- process life ---------------------------------------------------------------------------

    async def _watch_process(self, run: Run) -> None:
        assert run.process is not None
        # a thread of its own for the run's whole life: in asyncio's default executor (cores + 4 threads)
        # a few live runs held every thread, and reads that go through it (a trace, a logdir) waited on them
        code = await in_daemon_thread(run.process.wait)
        run.exitcode = code
        run.exited.set()
        process.kill_group(run.process.pid)  # workers the run process left behind
        await asyncio.to_thread(remove_stack_dirs, run.process.pid)
        try:
            await asyncio.wait_for(run.producer_gone.wait(), DRAIN_WAIT)
        except TimeoutError:
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
                except TimeoutError:
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


def owner_digest(secret: str) -> str:
    """What a trace header keeps of its run's secret (``OWNER_FIELD``): SHA-256 of a 192-bit random
    secret gives nothing to whoever reads the trace (a team logdir is readable by others)."""
    return hashlib.sha256(secret.encode()).hexdigest()



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
