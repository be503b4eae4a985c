"""Turns probe records into ◆ events, off the training thread.

The hot path (one call per protocol step of every batch) only appends a tuple to a deque: no dict,
no lock, no syscall. A background thread wakes every ``interval`` seconds, drains the workers'
shared-memory rings, numbers the records, builds the event dicts and hands them to the sink in one
list. A sink that raises or is slow never breaks the training loop: its errors are counted.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from loaderscope.events import Event, clip_indices
from loaderscope.probe.worker import RingReader

Sink = Callable[[list[Event]], None]

# Field names of the compact records appended on the hot path, by kind.
HOT_FIELDS: dict[str, tuple[str, ...]] = {
    "dispatch": ("idx", "worker", "indices"),
    "fetch_start": ("worker", "idx", "n"),
    "fetch_end": ("worker", "idx", "dt", "nbytes"),
    "arrive": ("idx", "worker"),
    "buffer": ("idx", "worker", "waiting_for"),
    "yield": ("idx", "wait", "from_buffer"),
    "skip": ("idx", "worker"),
}


class Recorder:
    """Collects records from the main thread, the worker rings and the probe's own thread."""

    def __init__(self, sink: Sink, *, run_id: str, rank: int = 0, interval: float = 0.05) -> None:
        self.sink = sink
        self.run_id = run_id
        self.rank = rank
        self.interval = interval
        self.t0 = time.monotonic()
        self.seq = 0
        self.sink_errors = 0
        self.pending: deque[tuple[Any, ...]] = deque()
        self.readers: dict[int, RingReader] = {}
        self._flush_lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchers: list[Callable[[], None]] = []

    # --- producing records ---------------------------------------------------------------------

    def record(self, *rec: Any) -> None:
        """Hot path: ``(kind, monotonic time, fields in HOT_FIELDS order)``."""
        self.pending.append(rec)

    def note(self, kind: str, **fields: Any) -> None:
        """Rare events, with named fields."""
        self.pending.append((kind, time.monotonic(), fields))

    def drain_worker(self, worker: int) -> None:
        """Move a worker's ring records into the stream now, so its fetch events precede the arrival."""
        reader = self.readers.get(worker)
        if reader is not None:
            with self._drain_lock:
                reader.drain(self.pending.append)

    def drain_all(self) -> None:
        with self._drain_lock:
            for reader in list(self.readers.values()):
                reader.drain(self.pending.append)

    def watch(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the probe thread at every tick (liveness checks)."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[], None]) -> None:
        if callback in self._watchers:
            self._watchers.remove(callback)

    # --- the probe thread ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="loaderscope-probe", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for callback in list(self._watchers):
                try:
                    callback()
                except Exception:  # a liveness check must never take the probe down
                    self.sink_errors += 1
            self.flush()

    def flush(self) -> None:
        """Drain rings and pending records into numbered events and hand them to the sink."""
        self.drain_all()
        with self._flush_lock:
            events = []
            pending = self.pending
            while pending:
                events.append(self._event(pending.popleft()))
            if not events:
                return
            try:
                self.sink(events)
            except Exception:
                self.sink_errors += 1

    def _event(self, rec: tuple[Any, ...]) -> Event:
        kind, t = rec[0], rec[1]
        event: Event = {"seq": self.seq, "t": round(t - self.t0, 7), "run": self.run_id, "rank": self.rank, "kind": kind}
        self.seq += 1
        names = HOT_FIELDS.get(kind)
        if names is None:
            event.update(rec[2])
        else:
            event.update(zip(names, rec[2:]))
            if kind == "dispatch":
                event["indices"], event["n"] = clip_indices(event["indices"])
        return event

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self.flush()
