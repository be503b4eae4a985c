"""``serve --logdir DIR``: every trace under DIR is a run, listed at once and followed as it grows.

Producers on any node write trace files into DIR (``watch(logdir=...)``, ``loaderscope record``,
this dashboard's own runs). The dashboard polls DIR (every ``logdir_poll`` seconds: plain
``os.scandir`` + ``stat``, which works the same on NFS and Lustre, where inotify sees nothing a
remote node writes) and:

- lists a new file from its index (a sidecar ``<trace>.idx.json``, or ``logindex.quick_index``:
  header, first and last line), never by parsing its events;
- reads a file (``TraceFile``, by byte offset, complete lines only) when a viewer opens its run
  or when it is live (no ``run_end`` and grown within ``silent_after`` seconds), feeding the
  events into the run's store as a live ingest would: viewers on ``/ws/runs/{id}`` get them;
- shows a file without ``run_end`` that has not grown for ``silent_after`` seconds as
  ``truncated`` (its producer was killed, or is silent; it is ``running`` again if it grows).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderscope.server.logindex import Index, load_sidecar, quick_index, save_sidecar
from loaderscope.server.runs import Run, RunManager
from loaderscope.server.store import EventLog
from loaderscope.server.tracefile import TraceFile
from loaderscope.trace import TraceError

TRACE_SUFFIX = ".trace.jsonl"
CHUNK_BYTES = 2 << 20  # read per step while catching up: ~15k events, ~50 ms of the event loop
MAX_FILES = 10_000  # traces listed from one logdir

log = logging.getLogger("loaderscope.logdir")


@dataclass(eq=False)
class FileSource:
    """Where a logdir run's events come from: its trace file, and what is known about it."""

    path: Path
    relative: str
    file: TraceFile
    index: Index
    silent_after: float
    grew: float  # time.monotonic() of the file's last growth (from its mtime when first seen)
    read_whole: bool = False  # every complete line has been read into the store at least once
    following: bool = False
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)

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


def run_id_for(relative: str) -> str:
    """Stable across restarts (the same file is the same run id), and never a producer's id."""
    return "log-" + hashlib.sha1(relative.encode()).hexdigest()[:12]


class Logdir:
    """Indexes, lists and follows the traces under one directory, for one RunManager."""

    def __init__(self, manager: RunManager, root: Path) -> None:
        self.manager = manager
        self.root = root
        self.poll_every = manager.config.logdir_poll
        self.silent_after = manager.config.silent_after
        self.files: dict[Path, Run] = {}
        self.scan_problem: str | None = None
        self._said: set[str] = set()
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
        while True:
            await asyncio.sleep(self.poll_every)
            try:
                await self.scan()
            except Exception as exc:  # noqa: BLE001 (one bad scan must not end the polling for good)
                self._say(f"scanning {self.root} failed: {type(exc).__name__}: {exc}")

    async def scan(self) -> tuple[int, int]:
        """Add new traces, re-index changed ones. Returns (listed from a sidecar, indexed now)."""
        found = await asyncio.to_thread(self._find)
        fresh = [(path, stat) for path, stat in found if self._changed(path, stat)]
        indexes = await asyncio.to_thread(_index_all, fresh) if fresh else []
        from_sidecar = 0
        for (path, stat), (index, cached) in zip(fresh, indexes, strict=True):
            from_sidecar += cached
            self._take(path, stat, index)
        return from_sidecar, len(fresh) - from_sidecar

    def _find(self) -> list[tuple[Path, os.stat_result | None]]:
        """Every trace under the root (recursively), oldest first; blocking."""
        found: list[tuple[Path, os.stat_result | None]] = []
        for directory, _, names in os.walk(self.root, onerror=self._walk_error):
            for name in names:
                if name.endswith(TRACE_SUFFIX):
                    path = Path(directory, name)
                    found.append((path, _stat(path)))
        self.scan_problem = None if self.root.is_dir() else f"the logdir {self.root} does not exist (any more)"
        found.sort(key=lambda item: item[1].st_mtime_ns if item[1] else 0)
        return found[:MAX_FILES]

    def _walk_error(self, exc: OSError) -> None:
        self._say(f"cannot list {exc.filename}: {exc.strerror}")

    def _changed(self, path: Path, stat: os.stat_result | None) -> bool:
        """A file to (re-)index: new, or changed while nobody follows it."""
        if path in self.manager.owned_paths:
            return False  # one of this dashboard's own runs, being written right now
        run = self.files.get(path)
        if run is None:
            return True
        source = run.source
        assert source is not None
        if source.following or source.file.offset > 0:
            return False  # followed, or read and then stopped (shrank): the run keeps what it read
        return stat is not None and not source.index.matches(stat)

    def _take(self, path: Path, stat: os.stat_result | None, index: Index) -> None:
        run = self.files.get(path)
        if run is not None and run.source is not None:  # an indexed file that grew: now it is live
            run.source.index = index
            run.source.file.size = index.size
            run.source.grew = _grew(stat)
        else:
            run = self._add(path, stat, index)
        if index.problem is not None:
            self._say(f"{path}: {index.problem}")
        elif index.reason is None and not run.source.silent:  # type: ignore[union-attr]
            self.follow(run)
        run.changed.notify()

    def _add(self, path: Path, stat: os.stat_result | None, index: Index) -> Run:
        relative = path.relative_to(self.root).as_posix()
        run_id = run_id_for(relative)
        source = FileSource(path, relative, TraceFile(path, run_id), index, self.silent_after, _grew(stat))
        source.file.size = index.size  # growth is measured from the size the index saw
        log_ = EventLog(run_id, memory_events=self.manager.config.memory_events, spill=source.file)  # type: ignore[arg-type]
        run = Run(run_id, index.scenario, index.mode, {}, "logdir", log_, source=source)
        run.attached = True
        self.manager.add(run)
        self.files[path] = run
        return run

    # --- following a file -----------------------------------------------------------------------

    def follow(self, run: Run) -> None:
        """Read the run's file into its store and keep reading what is appended (idempotent)."""
        source = run.source
        if source is None or source.following or run.closed or source.index.problem is not None:
            return
        source.following = True
        self.manager.background(self._follow(run, source))

    async def _follow(self, run: Run, source: FileSource) -> None:
        status = run.status
        while not run.closed:
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
        if file.size < file.offset or file.size < before:
            self._stop(run, source, f"{source.relative} shrank from {before} to {file.size} bytes: rewritten? "
                       "the run shows what was read before")
            return False
        if file.size != before:
            source.grew = time.monotonic()
        if events:
            run.ingest(events)
            if run.log.ended:
                self._caught_up(source)
                self.manager.close(run)
                await self._save_index(run, source)
            return True
        self._caught_up(source)
        return False

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
            await asyncio.to_thread(_save, source.path, index)
        except OSError as exc:
            self._say(f"cannot write the index next to {source.relative} ({exc.strerror}); "
                      "the logdir is read-only: it is indexed again at each start")

    def index_own(self, run: Run, path: Path) -> None:
        """Write the sidecar of one of this dashboard's own runs, now complete on disk (blocking, small)."""
        stat = _stat(path)
        if stat is None:
            return
        state = run.log.state
        index = Index(size=stat.st_size, mtime_ns=stat.st_mtime_ns, created=run.created, scenario=run.scenario,
                      mode=run.mode or state.mode, name=state.name, job=state.job, rank=state.rank,
                      world_size=state.world_size, events=run.log.next_seq, batches=state.batches,
                      reason=state.status if run.log.ended else None)
        _save_quietly(path, index)

    def _say(self, message: str) -> None:
        """Problems go to the server's log once each; the listing shows them per run."""
        if message not in self._said:
            self._said.add(message)
            print(f"loaderscope: {message}", flush=True)


def _index_all(found: list[tuple[Path, os.stat_result | None]]) -> list[tuple[Index, bool]]:
    """Each file's index, from its sidecar where it is current, else read and saved. Blocking."""
    indexes = []
    for path, stat in found:
        cached = load_sidecar(path, stat) if stat is not None else None
        if cached is not None:
            indexes.append((cached, True))
            continue
        index = quick_index(path)
        if index.problem is None:  # a live file's sidecar is stale at its next write: harmless
            _save_quietly(path, index)
        indexes.append((index, False))
    return indexes


def _save(path: Path, index: Index) -> None:
    stat = path.stat()  # the sidecar describes the file as it is now
    index.size, index.mtime_ns = stat.st_size, stat.st_mtime_ns
    save_sidecar(path, index)


def _save_quietly(path: Path, index: Index) -> None:
    try:
        save_sidecar(path, index)
    except OSError:
        pass  # a read-only logdir: listed all the same, indexed again at the next start


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def _grew(stat: os.stat_result | None) -> float:
    """The monotonic time of the file's last change, from its mtime (clocks of other nodes may drift)."""
    if stat is None:
        return float("-inf")
    return time.monotonic() - max(0.0, time.time() - stat.st_mtime)
