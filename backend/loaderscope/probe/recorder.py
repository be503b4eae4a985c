"""Turns probe records into ◆ events, off the training thread.

The hot path (one call per protocol step of every batch) only appends a tuple to a deque: no dict,
no lock, no syscall. A background thread wakes every ``interval`` seconds, drains the workers'
shared-memory rings, puts their records among the others by time (``_take_pending``) and hands
everything to the sink in one go: to a transport as one compact
frame of rows (encoded by orjson, no Python dict per event: see ``events.ROW_FIELDS``), or to a
Python sink as a list of event dicts. A sink that raises or is slow never breaks the training loop:
its errors are counted.
"""

from __future__ import annotations

import atexit
import heapq
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from operator import itemgetter
from typing import Any, Protocol, TypeGuard

from loaderscope.events import MAX_FRAME_BYTES, Event, event_count, expand, to_json
from loaderscope.probe.faults import report
from loaderscope.probe.worker import RingReader


class FrameSink(Protocol):
    """A sink that takes the probe's compact frames encoded, as they are, when ``takes_frames`` is true:
    a dashboard stream (``probe/transport.py``), a logdir file (``probe/logfile.py``), a run process's
    uplink (``server/processes/runproc.py``)."""

    takes_frames: bool

    def frame(self, data: bytes, count: int) -> None: ...


EventSink = Callable[[list[Event]], None]  # a Python callable: the events as dicts
Sink = EventSink | FrameSink


def takes_frames(sink: object) -> TypeGuard[FrameSink]:
    return bool(getattr(sink, "takes_frames", False))

_running: weakref.WeakSet[Recorder] = weakref.WeakSet()
_ending: set[Recorder] = set()  # abandoned runs being ended on their probe thread: exit waits for them
ENDING_WAIT = 30.0  # seconds exit waits for one (its trace file and stream have timeouts of their own)
SEND_FRAME_BYTES = MAX_FRAME_BYTES // 2  # a flush bigger than this goes out as several frames
RING = "ring records"  # a pending record ``(RING, reader, bytes)``: a worker's ring records, not yet rows
_time = itemgetter(1)  # a record's monotonic time


@atexit.register
def _stop_all() -> None:
    """Flush and stop every probe thread before the interpreter tears down.

    A daemon thread still reading a worker's shared-memory ring while the interpreter frees it
    would crash the process at exit; and what was recorded should reach the sink anyway.
    """
    for recorder in list(_running):
        if recorder._abandoned:
            recorder._end_abandoned()  # its probe thread had no tick left to end it (run_end, then close)
        recorder.close()
    for recorder in list(_ending):  # its probe thread is ending it: a daemon, which exit would cut short
        if recorder._thread is not None:
            recorder._thread.join(ENDING_WAIT)


class Recorder:
    """Collects records from the main thread, the worker rings and the probe's own thread."""

    def __init__(self, sink: Sink | None, *, run_id: str, rank: int = 0, interval: float = 0.05) -> None:
        self.sink = sink  # None until the run starts (``watch()`` opens its outlets at the first iter())
        self.run_id = run_id
        self.rank = rank
        self.interval = interval
        self.t0 = time.monotonic()
        self.wall0 = time.time()  # the same instant on the wall clock: ranks' timelines line up by it
        self.seq = 0
        self.sink_errors = 0
        # The hot path appends rows ``(kind, monotonic time, the kind's ROW_FIELDS in order)`` here
        # directly (``pending.append``, bound once per iterator): deque appends need no lock.
        self.pending: deque[tuple[Any, ...]] = deque()
        self.readers: dict[int, RingReader] = {}  # the newest multi-process iterator's workers
        self.rings_taken = False  # ``RING`` records were ever pending: flush looks for them
        self._flush_lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchers: list[Callable[[], None]] = []
        self.values_asked = False  # in-process loaders: describe the next batch with values
        # the loop's clock after this loader's last next(), and its thread (probe/loopclock.py)
        self.loop_mark = 0.0
        self.loop_thread: int | None = None
        # The run lives while its loader or any of its iterators does (``for b in DataLoader(...)``
        # drops the loader as soon as the iterator exists); the last one gone calls ``on_abandoned``.
        self.on_abandoned: Callable[[], None] = self.close
        self._holders = 0
        self._abandoned = False  # its last holder is gone: the probe thread ends the run
        self._ending = threading.Lock()
        self._ended = False  # run_end is noted (``end``): flush sends nothing after it
        self._ended_sent = False

    # --- producing records ---------------------------------------------------------------------

    def note(self, kind: str, **fields: Any) -> None:
        """Rare events, with named fields."""
        self.pending.append((kind, time.monotonic(), fields))

    def note_at(self, kind: str, t: float, **fields: object) -> None:
        """A rare event that happened at monotonic time ``t``."""
        self.pending.append((kind, t, fields))

    def drain_reader(self, reader: RingReader) -> None:
        """Take a worker's new ring records into the stream now (as one ``RING`` row: ``flush`` decodes it,
        on the probe thread): a worker that died, before its ``worker_died``."""
        with self._drain_lock:
            self._take_ring(reader)

    def drain_all(self) -> None:
        with self._drain_lock:
            self._drain_rings()

    def _drain_rings(self) -> None:  # with _drain_lock held: what two threads take goes in in that order
        for reader in list(self.readers.values()):
            self._take_ring(reader)

    def _take_ring(self, reader: RingReader) -> None:
        lost = reader.lost
        taken = reader.take()
        if reader.lost != lost:  # said once, as every probe fault: the page knows its picture has a hole
            report("worker ring", RuntimeError(
                f"worker {reader.worker} wrote {reader.lost - lost} fetch records more than its ring holds before "
                "the probe thread read them (the thread was held off): those fetches are missing"), self.note)
        if taken is not None:
            self.rings_taken = True  # before the record: a flush that finds it must know to decode it
            self.pending.append((RING, reader, taken))

    def end(self, **fields: Any) -> None:
        """Note ``run_end`` after what the workers' rings hold now: the run's last event. A probe thread
        draining at the same moment drains before it (the lock), and whatever a stray worker or thread
        adds after it is left out by ``flush``: it no longer belongs to the run."""
        with self._drain_lock:
            self._drain_rings()
            self.pending.append(("run_end", time.monotonic(), fields))
            self._ended = True

    def watch(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the probe thread at every tick (liveness checks)."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[], None]) -> None:
        if callback in self._watchers:
            self._watchers.remove(callback)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def hold(self, owner: object) -> None:
        """Keep the run open while ``owner`` (the loader, or one of its iterators) lives."""
        self._holders += 1
        weakref.finalize(owner, self._release).atexit = False  # at exit, atexit hooks end runs

    def _release(self) -> None:
        self._holders -= 1
        if self._holders or self.closed:
            return
        # The collector runs this on whichever thread allocated last, perhaps one inside a lock that ending
        # the run takes (the probe thread mid-flush, the trace writer mid-queue): a started run is ended by
        # its probe thread at its next tick, holding nothing, or by _stop_all if the process exits first.
        if self._thread is None:
            self._end_abandoned()  # never started: no thread of this run's holds anything
        else:
            self._abandoned = True

    def _end_abandoned(self) -> None:
        _ending.add(self)  # before the claim: exit, failing to claim it, finds whom to wait for
        if not self._ending.acquire(blocking=False):  # the probe thread and exit may both come: once
            return
        try:
            self.on_abandoned()
        except Exception as exc:  # a finalizer's failure would only be printed by the collector
            report("run end", exc)
        finally:
            _ending.discard(self)

    # --- the probe thread ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="loaderscope-probe", daemon=True)
            self._thread.start()
            _running.add(self)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for callback in list(self._watchers):
                try:
                    callback()
                except Exception as exc:  # a liveness check must never take the probe down
                    report("liveness check", exc, self.note)
            try:
                self.flush()
            except Exception as exc:  # an unencodable record, a torn ring: the next tick tries again
                report("recorder flush", exc, self.note)
            if self._abandoned:
                self._end_abandoned()  # closes the run: the loop ends

    def flush(self, rings: bool = True) -> None:
        """Drain rings and pending records into numbered events and hand them to the sink."""
        if rings:
            self.drain_all()
        with self._flush_lock:
            if self.sink is None:  # not started: what waits is kept for the sink to come
                return
            records = self._take_pending()
            if not records:
                return
            sink = self.sink
            if takes_frames(sink):
                self._send_frames(sink, records)
                return
            frame = {"run": self.run_id, "rank": self.rank, "seq": self.seq, "t0": self.t0, "rows": records}
            self.seq += event_count(records)
            try:
                if not callable(sink):
                    raise TypeError(f"{type(sink).__name__} neither takes frames nor is callable")
                sink(expand(frame))
            except Exception as exc:  # the sink's problem, not training's: counted, said once
                self.sink_errors += 1
                report("event sink", exc)

    def _take_pending(self) -> list[tuple[Any, ...]]:
        """What waits, up to run_end once it is noted, with the workers' ring records decoded and put
        among the others by time.

        The rings are drained at each flush, not on the training thread at each arrival (5.2k of the
        probe's 28.7k instructions a batch there, callgrind). Order by time keeps the stream causal:
        a record's time is taken before it is appended, so a worker's fetch_start comes after the
        dispatch torch put on its queue and its fetch_end before the arrival of its result (the worker
        wrote it before putting the result; a ring is drained before ``pending`` is taken, so every
        arrival taken has its fetch_end in this flush or an earlier one). The other records keep their
        order (``heapq.merge`` takes each input in order, and them first on a tie). What was appended
        after run_end (a ring drained later, a note) is cut before, by the order of appending."""
        pending = self.pending
        taken = [pending.popleft() for _ in range(len(pending))]
        if self._ended:
            taken = self._through_run_end(taken)
        if not self.rings_taken:  # in-process: no ring records, and thousands of rows a tick
            return taken
        records: list[tuple[Any, ...]] = []
        rings: dict[RingReader, list[tuple[Any, ...]]] = {}
        for record in taken:
            if record[0] is RING:
                record[1].decode(record[2], rings.setdefault(record[1], []).append)
            else:
                records.append(record)
        if not rings:
            return records
        return list(heapq.merge(records, *rings.values(), key=_time))

    def _through_run_end(self, records: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The records up to ``run_end``, and none once it is sent."""
        if self._ended_sent:
            return []
        for position, record in enumerate(records):
            if record[0] == "run_end":
                self._ended_sent = True
                return records[:position + 1]
        return records

    def _send_frames(self, sink: FrameSink, records: list[tuple[Any, ...]]) -> None:
        """Encoded frames of at most SEND_FRAME_BYTES (halved until they fit): the dashboard parses a
        frame in one go, so a small frame keeps it answering everyone else meanwhile."""
        frame = {"run": self.run_id, "rank": self.rank, "seq": self.seq, "t0": self.t0, "rows": records}
        count = event_count(records)
        data = to_json(frame)
        if len(data) > SEND_FRAME_BYTES and len(records) > 1:
            half = len(records) // 2
            self._send_frames(sink, records[:half])
            self._send_frames(sink, records[half:])
            return
        self.seq += count
        try:
            sink.frame(data, count)
        except Exception as exc:  # the sink's problem, not training's: counted, said once
            self.sink_errors += 1
            report("event sink", exc)

    def close(self) -> None:
        _running.discard(self)
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        try:
            self.flush(rings=False)  # after run_end: nothing a stray worker writes now belongs to the run
        except Exception as exc:
            report("recorder flush", exc)
