"""Which runs the dashboard holds in memory, which it moves to disk (parked) and which it forgets:
the budgets of ``ServerConfig`` (max_runs, max_parked, disk_bytes) kept as runs come and go.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from loaderscope.events import Event
from loaderscope.server.config import ServerConfig
from loaderscope.server.runs.run import Run, RunRefused
from loaderscope.server.runs.spill import TraceSpill
from loaderscope.server.runs.store import EventLog

RESTORE_CHUNK = 2000  # events of a parked run's trace read back per step (decoded off the event loop)


class Eviction:
    """The runs' room in memory and on disk, for the manager that shares its ``runs`` with it."""

    def __init__(self, config: ServerConfig, runs: dict[str, Run], background: Callable[[Any], None]) -> None:
        self.config = config
        self.runs = runs
        self._background = background
        self.forgotten: list[Run] = []  # delisted runs whose files a temporary data directory still keeps
        self._restoring: set[str] = set()  # parked runs whose trace is being read back for their producer

    def make_room(self) -> None:
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
        and resumed into the same file when its producer comes back with its secret (``unpark``). A
        file that fails as it is closed leaves the run memory-only: it is then forgotten."""
        run.started()  # its wall clock, read while its first event may still be in memory, not from the file
        if not run.log.park():
            self._forget(run)
        run.changed.notify()

    def unpark(self, run: Run) -> None:
        """Its producer is back: read the trace back into memory (in the background), then let it in.

        Raises:
            RunRefused: 429 (close 1013) until the trace has been read back: the producer retries.
        """
        if run.id not in self._restoring:
            self.make_room()
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


def _delete_files(run: Run) -> None:
    """A forgotten run's trace, sidecar index and log, in a temporary data directory."""
    spill = run.log.spill
    paths = [run.log_path] + ([spill.path, spill.path.with_name(spill.path.name + ".idx.json")]
                              if isinstance(spill, TraceSpill) else [])
    for path in paths:
        if path is not None:
            path.unlink(missing_ok=True)


def _gone(run: Run) -> bool:
    """An external run whose producer left and may come back (disconnected)."""
    return run.source is None and run.origin == "external" and run.producer is None \
        and run.detached_at is not None and not run.closed


def _decoded(spill: TraceSpill, start: int, count: int) -> list[Event]:
    """Events ``start ..`` of a trace file, decoded (blocking: a worker thread's)."""
    return [orjson.loads(line) for line in spill.read(start, count)]
