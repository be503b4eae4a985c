"""``serve --logdir DIR``: every trace under DIR is a run, listed at once and followed as it grows.

Producers on any node write trace files into DIR (``watch(logdir=...)``, ``loaderscope record``,
this dashboard's own runs). DIR is a local path or an fsspec URL (``storage.py``). On a local
filesystem the kernel says what changed in the directories that hold traces (inotify, ``watches.py``:
at most ``logdir_watches`` of them; those beyond are polled), so a change costs a ``stat`` of the
files it touched, and full scans (plain ``os.walk`` + ``stat``) find what no watch sees: a trace in a
directory that held none. NFS, Lustre and remote stores, where inotify sees nothing another node
writes, are found by full scans alone. A full scan costs what the tree holds, which another user may
make large (200,000 empty directories), so scans come every ``logdir_poll`` seconds, or further apart
as they cost more: at most ``SCAN_SHARE`` of one core. Either way the dashboard:

- lists a new file from its index (a sidecar ``<trace>.idx.json``, or ``logindex.quick_index``:
  header, first and last line), never by parsing its events;
- reads a file (``TraceFile``, by byte offset, complete lines only) when a viewer opens its run
  or when it is live (no ``run_end`` and grown within ``silent_after`` seconds), feeding the
  events into the run's store as a live ingest would: viewers on ``/ws/runs/{id}`` get them. A run
  no viewer opened is read for its numbers (``/metrics``, the run list): its store keeps its
  reducer's state and meters and only its newest events (``METERED_BYTES``: the file answers for
  the others), and once it ends, its summary and meters alone (``EventLog.park``);
- shows a file without ``run_end`` that has neither grown nor been touched for ``silent_after``
  seconds as ``truncated`` (its producer was killed: a live one that sends no event, as between
  epochs, sets the file's mtime every ``trace.HEARTBEAT_EVERY``; ``running`` again if it grows).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderscope.server.budgets import MEMORY_BYTES
from loaderscope.server.logdir.index import Index, load_sidecar, quick_index, save_sidecar
from loaderscope.server.logdir.parquetfile import (
    PARQUET_SUFFIX,
    ParquetTraceFile,
    grouped,
    is_part,
    parquet_index,
    trace_entry,
)
from loaderscope.server.logdir.storage import Entry, LocalStorage, Storage
from loaderscope.server.logdir.tracefile import TraceFile
from loaderscope.server.logdir.watches import Change, Watches, watched_directories
from loaderscope.server.processes.process import SECRET_HEADER
from loaderscope.server.runs.manager import OWNER_FIELD, RunManager, owner_digest
from loaderscope.server.runs.producers import RUN_ID
from loaderscope.server.runs.run import Run, RunRefused
from loaderscope.server.runs.spill import TraceSpill, header_of
from loaderscope.server.runs.store import EventLog
from loaderscope.traces.jsonl import HEARTBEAT_EVERY, TraceError

TRACE_SUFFIX = ".trace.jsonl"
CHUNK_BYTES = 2 << 20  # read per step while catching up: ~15k events, ~50 ms of the event loop
SCAN_SHARE = 0.01  # of one core, at most, for full scans: a scan that took 0.1 s of CPU waits 10 s for the next
SLOW_SCAN = 30.0  # seconds between full scans past which the log says how far apart they are
WATCH_SETTLE = 0.05  # seconds a burst of changes is gathered before it is looked at
NEW_DIRECTORY_WALK = 1_000  # directories walked when one appears; the rest wait for the next full scan
MAX_FILES = 10_000  # traces listed from one logdir
# Bytes of its newest events a run no viewer opened keeps in memory (~1,000 events; a viewer that joins
# gets them over its websocket, and the older ones from the file, as ``resync`` says), not the 32 MiB of
# an opened run's: a live rank read for /metrics costs its reducer's state and this (1,024 ranks:
# bench/metrics_fleet.py).
METERED_BYTES = 128 << 10


@dataclass(eq=False)
class FileSource:
    """Where a logdir run's events come from: its trace file, and what is known about it."""

    path: str
    relative: str
    file: TraceFile
    index: Index
    silent_after: float
    grew: float  # time.monotonic() of the file's last growth or heartbeat (from its mtime when looked at)
    read_whole: bool = False  # every complete line has been read into the store at least once
    following: bool = False
    viewed: bool = False  # a viewer opened the run: its store holds its events (else only its numbers)
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)
    looked: float = 0.0  # time.monotonic() of the last look at a quiet file's mtime

    @property
    def silent(self) -> bool:
        return time.monotonic() - self.grew >= self.silent_after

    def status(self) -> str:
        if self.index.problem is not None:
            return "unreadable"
        if not self.read_whole and self.index.reason is not None:
            return self.index.reason
        return "truncated" if self.silent else "running"

    def problem(self) -> str | None:
        """What the listing says about the file itself: unreadable, damaged lines, a torn end."""
        if self.index.problem is not None:
            return self.index.problem
        notes = list(self.file.problems[:3])
        if self.file.problem_count > len(notes):
            notes.append(f"{self.file.problem_count - len(notes)} more damaged lines")
        torn = self.file.torn if self.read_whole else self.index.torn
        if torn and self.silent:
            notes.append("the last line is incomplete: the writer stopped in the middle of it")
        return "; ".join(notes) or None

    def brief(self) -> dict[str, Any]:
        """The listing's fields that come from the index until the file has been read."""
        i = self.index
        fields: dict[str, Any] = {"path": self.relative, "problem": self.problem()}
        if not self.read_whole:
            fields.update(scenario=i.scenario, mode=i.mode, events=i.events, last_seq=i.events - 1,
                          batches=i.batches, name=i.name, job=i.job, rank=i.rank, world_size=i.world_size)
        if i.created is not None:
            fields["created"] = i.created
        return fields


def run_id_for(relative: str, index: Index) -> str:
    """Stable across restarts: the same file is the same run id.

    A dashboard's own file (``ID.trace.jsonl`` at the top of the logdir, or of its ``dashboard/``
    folder where a remote logdir gets them, whose header names run ``ID``: one name, so one file)
    keeps its run's id, so links to it and a producer that reconnects after a restart find it.
    Any other file gets an id made from its path, which is never a producer's.
    """
    if index.run is not None and RUN_ID.match(index.run) and relative in own_paths(index.run):
        return index.run
    return path_id(relative)


def own_paths(run_id: str) -> tuple[str, str]:
    """Where a dashboard writes its run ``run_id`` in a logdir (relative to it): local, remote."""
    return f"{run_id}{TRACE_SUFFIX}", f"dashboard/{run_id}{TRACE_SUFFIX}"


def path_id(relative: str) -> str:
    return "log-" + hashlib.sha1(relative.encode()).hexdigest()[:12]


class Logdir:
    """Indexes, lists and follows the traces under one directory, for one RunManager."""

    def __init__(self, manager: RunManager, storage: Storage) -> None:
        self.manager = manager
        self.storage = storage
        self.root = storage.root
        self.poll_every = manager.config.logdir_poll
        self.silent_after = manager.config.silent_after
        self.files: dict[str, Run] = {}
        self.scan_cpu = 0.0  # CPU seconds the last full scan's walk took
        self._said: set[str] = set()
        self._slow_said = False
        self._watches: Watches | None = None
        self._watching = -1  # len(self.files) when the watches were last chosen
        manager.logdir = self

    # --- scanning -------------------------------------------------------------------------------

    async def start(self) -> asyncio.Task[None]:
        """Index what is there (printing how long it took), then poll for changes in the background."""
        began = time.perf_counter()
        from_sidecar, indexed = await self.scan()
        print(f"loaderscope: logdir {self.root}: {len(self.files)} runs ({from_sidecar} from their index, "
              f"{indexed} indexed) in {time.perf_counter() - began:.2f} s", flush=True)
        return asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        if isinstance(self.storage, LocalStorage) and self.manager.config.logdir_watch \
                and self.storage.kernel_watched():
            try:
                await self._watch(self.storage)
            except Exception as exc:  # no inotify instance left, say: polling still works
                self._say(f"watching {self.root} for changes failed ({type(exc).__name__}: {exc}); polling it "
                          f"every {self.poll_every} s instead")
        while True:
            await asyncio.sleep(self.scan_every())
            await self._scan_said()

    def scan_every(self) -> float:
        """Seconds between full scans: ``logdir_poll``, or longer where a scan costs more than
        ``SCAN_SHARE`` of a core (said once, when it passes ``SLOW_SCAN``)."""
        every = max(self.poll_every, self.scan_cpu / SCAN_SHARE)
        if every > SLOW_SCAN and not self._slow_said:
            self._slow_said = True
            print(f"loaderscope: scanning {self.root} takes {self.scan_cpu:.2f} s of CPU: a full scan every "
                  f"{every:.0f} s (new traces where no inotify watch sees them are listed then)", flush=True)
        return every

    async def _watch(self, storage: LocalStorage) -> None:
        """Look at what the kernel says changed, poll the directories beyond the watch limit, scan
        everything now and then. Runs until cancelled."""
        watches = Watches(self.manager.config.logdir_watches)
        loop = asyncio.get_running_loop()
        woke = asyncio.Event()

        def readable() -> None:  # once per wait: the descriptor stays readable until it is read
            loop.remove_reader(watches.fd)
            woke.set()

        self._watches, self._watching = watches, -1
        try:
            self._rewatch()
            scanned = time.monotonic()
            while True:
                due = scanned + self.scan_every()  # a kernel queue overflow waits for it too
                wait = due - time.monotonic()
                loop.add_reader(watches.fd, readable)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woke.wait(), max(0.0, min(wait, self.poll_every) if watches.unwatched
                                                             else wait))
                if woke.is_set():
                    await asyncio.sleep(WATCH_SETTLE)
                    woke.clear()
                loop.remove_reader(watches.fd)
                changes = watches.read()
                if time.monotonic() >= due:
                    await self._scan_said()
                    scanned, self._watching = time.monotonic(), -1
                elif (paths := {change.path for change in changes if _is_trace(change)}) or watches.unwatched:
                    found = await asyncio.to_thread(self._look_at, storage, paths, list(watches.unwatched))
                    await self._take_all([e for e in found if e.path in self.files or len(self.files) < MAX_FILES])
                self._rewatch()
        finally:
            loop.remove_reader(watches.fd)
            watches.close()
            self._watches = None

    def _rewatch(self) -> None:
        """Watch the directories that hold traces (and those above them), up to the limit; say so once
        when some cannot be. Only when the traces listed changed, or a watched directory went away."""
        watches = self._watches
        if watches is None or (self._watching == len(self.files) and not watches.forgot):
            return
        self._watching, watches.forgot = len(self.files), False
        over = bool(watches.unwatched)
        traces = [os.path.join(path, "part") if path.endswith(PARQUET_SUFFIX) else path for path in self.files]
        watches.want(watched_directories(self.root, traces))
        if watches.unwatched and not over:
            why = ("no inotify watch is left to this user (fs.inotify.max_user_watches)" if watches.exhausted else
                   f"more than the {watches.limit} inotify watches it may take (logdir_watches, and at most a "
                   "quarter of fs.inotify.max_user_watches)")
            print(f"loaderscope: logdir {self.root}: {len(watches.watched) + len(watches.unwatched)} directories "
                  f"hold traces, {why}: {len(watches.watched)} are watched, the other {len(watches.unwatched)} "
                  f"polled every {self.poll_every:g} s", flush=True)

    def _look_at(self, storage: LocalStorage, paths: set[str], polled: list[str]) -> list[Entry]:
        """The traces among ``paths`` as they are now, every trace under a new directory among them
        (its files may have come before the kernel watched it), and those in the ``polled``
        directories (no watch: beyond the limit). Blocking."""
        found: list[Entry] = []
        parquet = {os.path.dirname(path) for path in paths if is_part(path)}
        for path in sorted(paths - {p for p in paths if is_part(p)}):
            if os.path.isdir(path) and not os.path.islink(path):
                inside = storage.walk(self._say, under=path, max_directories=NEW_DIRECTORY_WALK)
                found += [e for e in inside if e.path.endswith(TRACE_SUFFIX)] + grouped(inside)
            elif os.path.lexists(path):
                found.append(storage.entry(path))
        for directory in polled:
            files, traces = _traces_in(directory)
            found += [storage.entry(path) for path in files]
            parquet.update(traces)
        for directory in sorted(parquet - {entry.path for entry in found}):
            try:
                found.append(trace_entry(storage, directory))
            except OSError:
                continue  # gone again: the next scan says what is there
        return found

    async def _scan_said(self) -> None:
        try:
            await self.scan()
        except Exception as exc:  # one bad scan must not end the polling for good
            self._say(f"scanning {self.root} failed: {type(exc).__name__}: {exc}")

    async def scan(self) -> tuple[int, int]:
        """Add new traces, re-index changed ones. Returns (listed from a sidecar, indexed now)."""
        return await self._take_all(await asyncio.to_thread(self._find))

    async def _take_all(self, found: list[Entry]) -> tuple[int, int]:
        fresh = [entry for entry in found if self._changed(entry)]
        indexes = await asyncio.to_thread(_index_all, self.storage, fresh) if fresh else []
        from_sidecar = 0
        for entry, (index, cached) in zip(fresh, indexes, strict=True):
            from_sidecar += cached
            self._take(entry, index)
        return from_sidecar, len(fresh) - from_sidecar

    def _find(self) -> list[Entry]:
        """Every trace under the root (recursively), oldest first; blocking."""
        began = time.thread_time()
        every = self.storage.walk(self._say)
        self.scan_cpu = time.thread_time() - began
        found = [entry for entry in every if entry.path.endswith(TRACE_SUFFIX)] + grouped(every)
        if not self.storage.is_dir():
            self._say(f"the logdir {self.root} does not exist (any more)")
        found.sort(key=lambda entry: entry.mtime_ns)
        return found[-MAX_FILES:]  # the newest, when there are more

    def _changed(self, entry: Entry) -> bool:
        """A file to (re-)index: new, or changed while nobody follows it."""
        if entry.path in self.manager.owned_paths:
            return False  # one of this dashboard's own runs, being written right now
        run = self.files.get(entry.path)
        if run is None:
            return True
        source = run.source
        assert isinstance(source, FileSource)
        if source.following or source.file.offset > 0:
            return False  # followed, or read and then stopped (shrank): the run keeps what it read
        return entry.size >= 0 and not source.index.matches(entry)

    def _take(self, entry: Entry, index: Index) -> None:
        run = self.files.get(entry.path) or self._add(entry, index)
        source = run.source
        assert isinstance(source, FileSource)
        source.index, source.file.size, source.grew = index, index.size, _grew(entry)  # new, or changed
        if index.problem is not None:
            self._say(index.problem)
        elif index.reason is None and not source.silent:
            self._start(run)
        run.changed.notify()

    def _add(self, entry: Entry, index: Index) -> Run:
        relative = self.storage.relative(entry.path)
        run_id = run_id_for(relative, index)
        if run_id in self.manager.runs:  # a live run took the id first: the file is listed by its path
            run_id = path_id(relative)
        kind = ParquetTraceFile if entry.path.endswith(PARQUET_SUFFIX) else TraceFile
        file = kind(self.storage, entry.path, run_id)
        source = FileSource(entry.path, relative, file, index, self.silent_after, _grew(entry))
        file.size = index.size  # growth is measured from the size the index saw
        events = EventLog(run_id, memory_events=self.manager.config.memory_events, memory_bytes=METERED_BYTES,
                          spill=file)
        run = Run(run_id, index.scenario, index.mode, {}, "logdir", events, source=source)
        run.attached = True
        self.manager.add(run)
        self.files[entry.path] = run
        return run

    # --- following a file -----------------------------------------------------------------------

    def follow(self, run: Run) -> None:
        """A viewer opens the run: its store holds its events from now on (those read before are read
        back from the file), and its file is read and followed (idempotent)."""
        source = run.source
        if isinstance(source, FileSource) and not source.viewed:
            source.viewed = True
            run.log.memory_bytes = MEMORY_BYTES
        self._start(run)

    def _start(self, run: Run) -> None:
        """Read the run's file into its store and keep reading what is appended (idempotent)."""
        source = run.source
        if not isinstance(source, FileSource) or source.following or run.closed or source.index.problem is not None:
            return
        source.following = True
        self.manager.background(self._follow(run, source))

    async def _follow(self, run: Run, source: FileSource) -> None:
        status = run.status
        while source.following and not run.closed:  # _stop ends it
            if not await self._step(run, source):
                await asyncio.sleep(self.poll_every)
            if run.status != status:
                status = run.status
                run.changed.notify()
                if status == "truncated":
                    await self._save_index(run, source)

    async def _step(self, run: Run, source: FileSource) -> bool:
        """Read what is new; True when there may be more to read at once."""
        file = source.file
        before = file.size
        try:
            events = await asyncio.to_thread(file.poll, CHUNK_BYTES)
        except (OSError, TraceError) as exc:
            self._stop(run, source, f"{source.relative}: {exc}")
            return False
        if run.source is not source:
            return False  # its producer resumed into the file meanwhile: the run is a live one now
        if file.size < file.offset or file.size < before:
            self._stop(run, source, f"{source.relative} shrank from {before} to {file.size} bytes: rewritten? "
                       "the run shows what was read before")
            return False
        if file.size != before:
            source.grew = time.monotonic()
        else:
            await self._look_alive(source)
        if events:
            run.ingest(events)
            if run.log.ended:
                self._caught_up(source)
                self.manager.close(run)
                await self._save_index(run, source)
                if not source.viewed:  # read for its numbers: they, and its summary, are all it keeps
                    run.log.park()
            return True
        self._caught_up(source)
        return False

    async def _look_alive(self, source: FileSource) -> None:
        """A file that stopped growing may have a writer that lives: a quiet one (an evaluation between
        epochs) sets the file's mtime every few seconds (probe/logfile.py, HEARTBEAT_EVERY), a killed one
        not. Looked at once a quiet file is half-way to ``silent_after``, at most every HEARTBEAT_EVERY."""
        now = time.monotonic()
        if now - source.grew < source.silent_after / 2 or now - source.looked < HEARTBEAT_EVERY:
            return
        source.looked = now
        try:
            entry = await asyncio.to_thread(_entry_now, self.storage, source.path)
        except OSError:
            return  # gone: the next read says so
        source.grew = max(source.grew, _grew(entry))

    def _caught_up(self, source: FileSource) -> None:
        source.read_whole = True
        source.caught_up.set()

    def _stop(self, run: Run, source: FileSource, problem: str) -> None:
        source.index.problem = problem
        source.following = False
        source.caught_up.set()
        self._say(problem)
        run.changed.notify()

    async def _save_index(self, run: Run, source: FileSource) -> None:
        """Remember what reading the whole file found, so the next start lists it from the sidecar."""
        state = run.log.state
        index = source.index
        index.events, index.batches = run.log.next_seq, state.batches
        index.reason = state.status if run.log.ended else None
        index.name, index.job, index.rank, index.world_size = state.name, state.job, state.rank, state.world_size
        index.torn = source.file.torn > 0
        try:
            await asyncio.to_thread(_save, self.storage, source.path, index)
        except OSError as exc:
            self._say(f"cannot write the index next to {source.relative} ({exc.strerror or exc}); "
                      "a read-only logdir is indexed again at each start")

    def resume(self, run: Run, secret: str | None) -> None:
        """A producer reconnects to the run it streamed to this logdir's dashboard before a restart:
        the run becomes its live run again, appending to the same file under the same id, if its
        ``secret`` is the one whose digest the file's header keeps (``runs.OWNER_FIELD``).

        Raises:
            RunRefused: the file is not such a run (someone else's trace, one that ended, a remote
                logdir), the secret is not its owner's (4403), or the file is still being read (429:
                the producer retries).
        """
        source = run.source
        assert isinstance(source, FileSource)
        index, file = source.index, source.file
        own = not self.storage.remote and index.origin == "external" and source.relative == own_paths(run.id)[0]
        if not own or index.problem is not None or run.log.ended or file.problem_count:
            raise RunRefused(4409, f"run {run.id} is read from a trace file in the logdir ({source.relative}); "
                             "a producer cannot add to it")
        try:
            owner = header_of(Path(source.path)).get(OWNER_FIELD)
        except OSError as exc:
            raise RunRefused(4409, f"run {run.id} cannot be resumed: {exc}") from None
        if not isinstance(owner, str) or not secrets.compare_digest(owner, owner_digest(secret or "")):
            raise RunRefused(4403, f"run {run.id} is another producer's: its owner returns with the "
                             f"{SECRET_HEADER} header")
        if not source.read_whole:
            self.follow(run)
            raise RunRefused(429, f"run {run.id} is being read back from {source.relative} after a restart; "
                             "reconnect in a moment")
        try:
            spill = TraceSpill.resume(Path(source.path), count=file.count, offsets=file.offsets, end=file.offset)
        except OSError as exc:
            raise RunRefused(4409, f"run {run.id} cannot be resumed: {exc}") from None
        source.following = False
        run.source, run.origin, run.log.spill, run.secret = None, "external", spill, secret or ""
        run.log.memory_bytes = MEMORY_BYTES  # a stream's store, as any other's
        run.silent_after = self.manager.config.silent_after
        run.last_producer_seq = run.log.last_seq  # what the file lacks of what the producer sent counts as dropped
        self.manager.owned_paths.add(source.path)
        self._say(f"run {run.id} resumed into {source.relative}")

    def index_own(self, run: Run, path: Path) -> None:
        """One of this dashboard's own runs is complete on disk: give it a sidecar (blocking, small).

        With a remote logdir the run was written to a local temporary directory: it is uploaded
        into ``dashboard/`` under the logdir first, sidecar and all.
        """
        state = run.log.state
        index = Index(size=0, mtime_ns=0, created=run.created, scenario=run.scenario, mode=run.mode or state.mode,
                      run=run.id, origin=run.origin,
                      name=state.name, job=state.job, rank=state.rank, world_size=state.world_size,
                      events=run.log.next_seq, batches=state.batches, recording=run.recording(),
                      reason=state.status if run.log.ended else None)
        target = str(path)
        try:
            if self.storage.remote:
                target = f"{self.root}/dashboard/{path.name}"
                self.manager.owned_paths.add(target)
                self.storage.write_atomic(target, path.read_bytes())
            _save(self.storage, target, index)
        except OSError as exc:
            self._say(f"cannot keep run {run.id} in {self.root}: {exc}")

    def _say(self, message: str) -> None:
        """Problems go to the server's log once each; the listing shows them per run."""
        if message not in self._said:
            self._said.add(message)
            print(f"loaderscope: {message}", flush=True)


def _index_all(storage: Storage, found: list[Entry]) -> list[tuple[Index, bool]]:
    """Each file's index, from its sidecar where it is current, else read and saved. Blocking."""
    indexes = []
    for entry in found:
        if entry.problem is not None:  # refused before opening it (a FIFO, a link out of the logdir...)
            indexes.append((Index(size=0, mtime_ns=0, problem=entry.problem), False))
            continue
        cached = load_sidecar(storage, entry.path, entry) if entry.size >= 0 else None
        if cached is not None:
            indexes.append((cached, True))
            continue
        index = (parquet_index if entry.path.endswith(PARQUET_SUFFIX) else quick_index)(storage, entry.path)
        if index.problem is None:  # a live file's sidecar is stale at its next write: harmless
            try:
                save_sidecar(storage, entry.path, index)
            except OSError:
                pass  # a read-only logdir: listed all the same, indexed again at the next start
        indexes.append((index, False))
    return indexes


def _is_trace(change: Change) -> bool:
    """A trace's change, or a directory's (a new one may hold traces already)."""
    return change.path.endswith(TRACE_SUFFIX) or is_part(change.path) or change.directory


def _traces_in(directory: str) -> tuple[list[str], list[str]]:
    """The JSON-lines traces directly in ``directory``, and its Parquet traces (itself, if it is one).
    Blocking; nothing where it cannot be listed (the next full scan says why)."""
    try:
        with os.scandir(directory) as items:
            names = [(item.path, item.is_dir(follow_symlinks=False)) for item in items]
    except OSError:
        return [], []
    files = [path for path, is_dir in names if not is_dir and path.endswith(TRACE_SUFFIX)]
    parquet = [path for path, is_dir in names if is_dir and path.endswith(PARQUET_SUFFIX)]
    return files, parquet + ([directory] if directory.endswith(PARQUET_SUFFIX) else [])


def _save(storage: Storage, path: str, index: Index) -> None:
    # the sidecar describes the file (a Parquet trace: its parts) as it is now
    entry = _entry_now(storage, path)
    index.size, index.mtime_ns = entry.size, entry.mtime_ns
    save_sidecar(storage, path, index)


def _entry_now(storage: Storage, path: str) -> Entry:
    """A trace's size and mtime now (a Parquet trace: of its parts). Raises OSError."""
    return trace_entry(storage, path) if path.endswith(PARQUET_SUFFIX) else storage.stat(path)


def _grew(entry: Entry) -> float:
    """The monotonic time of the file's last change, from its mtime (clocks of other nodes may drift).

    A store without modification times counts the file as changed when first seen.
    """
    if entry.size < 0:
        return float("-inf")
    if entry.mtime_ns == 0:
        return time.monotonic()
    return time.monotonic() - max(0.0, time.time() - entry.mtime_ns / 1e9)
