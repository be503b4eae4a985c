"""A watched loader's run written to its own trace file under a logdir, as it happens.

Jobs on a cluster cannot reach a dashboard, and they get killed; so each run goes to a file that is
complete up to its last second whatever happens to the process: written per probe frame, flushed
to the OS at once (a killed process loses nothing written) and synced to the disk at least every
second (a shared filesystem shows it to other nodes). The file is the ordinary trace format
(``traces/jsonl.py``: header line, then one event per line); a file without ``run_end`` or with a torn last
line is a truncated trace, which ``jsonl.read_trace_tolerant`` reads. With ``$LOADERSCOPE_FORMAT=parquet``
(``record --format parquet``) the run is a Parquet trace instead (``traces/parquet.py``): a closed part file
every few seconds, so a killed process loses the events since its last part.

Nothing here may slow or break training. The probe thread only appends to a bounded queue; a
writer thread of its own decodes frames, writes and syncs, so a slow or hung filesystem stalls
neither the training loop nor the probe's stuck-worker checks. When the queue is full the newest
events are dropped and counted. A disk error (full, read-only, permission) is said once, names the
file and the fix, and ends this run's file there; training goes on.

A logdir may be a team's, which other users can write: the trace is made new or not at all, never
through a link (``traces/safefiles.py``); a name someone else took is left alone and the trace goes beside it
under a random suffix, said once. The heartbeat touches the file the writer holds, never a name.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from loaderscope.events import Event, expand
from loaderscope.probe.faults import report
from loaderscope.traces.jsonl import HEARTBEAT_EVERY, SUFFIXES, TraceWriter, chosen_format, open_writer, with_format
from loaderscope.traces.paths import safe_name, trace_path

if TYPE_CHECKING:
    from loaderscope.traces.parquet import ParquetTraceWriter

BUFFER_EVENTS = 200_000  # as transport.BUFFER_EVENTS: what may wait for a slow disk
SYNC_EVERY = 1.0  # seconds between fsyncs while events come
CLOSE_TIMEOUT = 5.0
HEADER_FIELDS = ("name", "job", "rank", "world_size", "pid", "host", "loader", "wall_start")

_said: set[str] = set()  # kinds of problem already reported by this process


def _say(kind: str, message: str) -> None:
    """Print ``message`` the first time this process meets this kind of problem; never raises."""
    if kind in _said:
        return
    _said.add(kind)
    try:
        print(message, file=sys.stderr, flush=True)
    except Exception:  # a closed stderr at interpreter exit
        pass


class LogfileSink:
    """A probe sink writing one run to ``trace_path(logdir, run_start)``; ``close()`` finishes the file.

    It takes the probe's compact frames (``frame``) or lists of events (``__call__``); the file is
    created at the first one, when the run's rank is known (torch.distributed may start late).
    """

    takes_frames = True

    def __init__(self, logdir: str | os.PathLike[str], *, buffer_events: int = BUFFER_EVENTS,
                 trace_format: str | None = None) -> None:
        self.logdir = Path(logdir)
        self.capacity = buffer_events
        self.path: Path | None = None  # once the first events arrived
        self.dropped = 0
        self._queue: deque[bytes | list[Event]] = deque()
        self._queued = 0  # events waiting in the queue
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._failed = False  # a disk error ended this file: the rest is discarded
        self.format = _format(trace_format)
        self._writer: TraceWriter | ParquetTraceWriter | None = None
        self._thread: threading.Thread | None = None
        self._synced = 0.0
        self._touched = 0.0  # monotonic time of the last write or heartbeat
        if self.format == "parquet":
            _import_parquet_writing()

    # --- the probe thread's side: append and return ------------------------------------------------

    def frame(self, data: bytes, count: int) -> None:
        self._put(data, count)

    def __call__(self, events: list[Event]) -> None:
        self._put(events, len(events))

    def _put(self, item: bytes | list[Event], count: int) -> None:
        with self._lock:
            if self._failed or self._closing:
                return
            if self._queued + count > self.capacity:
                self.dropped += count
                return
            self._queue.append(item)
            self._queued += count
            if self._thread is None:  # a loader that is never iterated costs no thread
                self._thread = threading.Thread(target=self._run, name="loaderscope-logfile", daemon=True)
                self._thread.start()
        self._wake.set()

    @property
    def closed(self) -> bool:
        """Whether its run closed it (after ``run_end``); a file never closed reads as truncated."""
        return self._closing

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Write what is queued (for at most ``timeout`` seconds), sync and close the file."""
        with self._lock:
            self._closing = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():  # a hung filesystem: the daemon thread is left to it
                _say("hung", f"loaderscope: the trace {self.path or self.logdir} was still being written "
                     f"{timeout:.0f} s after its run ended (a slow or hung filesystem?); the rest may be lost")
                return
        if self.dropped:
            _say("dropped", f"loaderscope: {self.dropped} events did not reach the trace {self.path} (the disk "
                 "fell behind); the trace has a gap in its seq numbers there")

    # --- the writer thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(SYNC_EVERY)
            self._wake.clear()
            with self._lock:
                items = list(self._queue)
                self._queue.clear()
                self._queued = 0
                closing = self._closing
            self._guarded(self._write, items)
            if closing:
                self._guarded(self._finish)
                return

    def _guarded(self, step: Any, *args: Any) -> None:
        if self._failed:
            return
        try:
            step(*args)
        except OSError as exc:
            self._fail()
            _say("oserror", f"loaderscope: cannot write the trace {self.path or self.logdir} "
                 f"({exc.strerror or exc}); training goes on, and this run's trace ends here. Free space or "
                 f"fix permissions there, or point $LOADERSCOPE_LOGDIR (record --logdir) at a writable directory")
        except Exception as exc:  # a bug of ours, not the user's: said once, never raised into training
            self._fail()
            report("trace file", exc)

    def _fail(self) -> None:
        with self._lock:
            self._failed = True
            self._queue.clear()
            self._queued = 0

    def _write(self, items: list[bytes | list[Event]]) -> None:
        for item in items:
            events = expand(orjson.loads(item)) if isinstance(item, bytes) else item
            if not events:
                continue
            if self._writer is None:
                self._writer = self._open(events[0])
            self._writer.write(events)
        if self._writer is not None:
            # JSON lines: in the OS's hands, a killed process loses nothing written. Parquet: a part
            # due by its age is written, also while no event comes (a stuck loader's last events).
            self._writer.flush()
            now = time.monotonic()
            if items:
                self._touched = now
                if now - self._synced >= SYNC_EVERY:
                    self._sync()
            elif now - self._touched >= HEARTBEAT_EVERY:
                self._heartbeat(now)

    def _heartbeat(self, now: float) -> None:
        """Tell a dashboard following the logdir that this quiet run lives; a file system that refuses it
        costs the heartbeat, not the trace."""
        assert self._writer is not None
        try:
            self._writer.touch()
            self._touched = now
        except OSError as exc:
            self._touched = float("inf")
            _say("heartbeat", f"loaderscope: cannot set the modification time of the trace {self.path} "
                 f"({exc.strerror or exc}); a dashboard following it may show it truncated while no event comes")

    def _open(self, first: Event) -> TraceWriter | ParquetTraceWriter:
        start = first if first["kind"] == "run_start" else {"rank": first.get("rank", 0), "run": first.get("run")}
        path = trace_path(self.logdir, start)
        # The loader's name first: the file a user looks for is `train_loader-...`, not `DataLoader-...`
        path = path.with_name(f"{safe_name(str(start['name']))}-{path.name}") if start.get("name") else path
        self.path = with_format(path, self.format)
        meta = {field: start.get(field) for field in HEADER_FIELDS} | {"mode": "real", "origin": "logdir"}
        try:
            return open_writer(self.path, str(start.get("run")), self.format, exclusive=True, **meta)
        except FileExistsError:
            # The name holds the run's random id: something there is not this run's trace (another user's
            # link, planted where they can write, or a file of a run that named itself the same). Written
            # elsewhere, never through it nor over it.
            taken, self.path = self.path, _fresh(self.path, self.format)
            _say("taken", f"loaderscope: {taken} already exists and is not this run's trace (a link or a file "
                 f"someone else may have put there): left alone; this run's trace is {self.path.name} beside it")
            return open_writer(self.path, str(start.get("run")), self.format, exclusive=True, **meta)

    def _sync(self) -> None:
        assert self._writer is not None
        self._writer.sync()
        self._synced = time.monotonic()

    def _finish(self) -> None:
        if self._writer is not None:
            self._sync()
            self._writer.close()


def _fresh(path: Path, fmt: str) -> Path:
    """``path`` with a random part before its suffix, which no one could have planted."""
    suffix = SUFFIXES[fmt]
    return path.with_name(f"{path.name.removesuffix(suffix)}-{secrets.token_hex(4)}{suffix}")


def _import_parquet_writing() -> None:
    """In the thread that will fork the loader's workers, never in the writer thread (see the function)."""
    try:
        from loaderscope.traces.parquet import import_what_writing_imports
        import_what_writing_imports()
    except Exception as exc:  # the writer thread meets it again, and says it
        report("trace file", exc)


def _format(asked: str | None) -> str:
    """The trace format asked for (else ``$LOADERSCOPE_FORMAT``'s); a bad one is said once and JSON lines written."""
    try:
        return chosen_format(asked)
    except ValueError as exc:
        _say("format", f"loaderscope: {exc}; writing JSON lines")
        return "jsonl"


class Fanout:
    """One probe sink feeding a trace file and another sink (a dashboard stream, a user's callable).

    It takes frames when the other sink does; the file takes either.
    """

    def __init__(self, file: LogfileSink, other: Any) -> None:
        self.file = file
        self.other = other
        self.takes_frames = bool(getattr(other, "takes_frames", False))

    def frame(self, data: bytes, count: int) -> None:
        self.file.frame(data, count)
        self.other.frame(data, count)

    def __call__(self, events: list[Event]) -> None:
        self.file(events)
        self.other(events)
