"""The worker side of the probe: what each worker process is doing, in shared memory.

Each worker gets a small ``RawArray`` of doubles: a status slot (what it fetches right now, since
when) and a ring of fixed-size records (fetch start/end). Writing costs well under a microsecond,
needs no lock or syscall, passes through ``Process`` arguments under fork, spawn and forkserver, and
stays readable after the worker dies, so the main process can say which task it died on.

The worker loop itself is torch's ``_worker_loop``, unchanged: only the index queue and the result
queue it is handed are wrapped, because a task starts when ``get`` returns it and ends at ``put``.
"""

from __future__ import annotations

import inspect
import os
import queue
import struct
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.sharedctypes import RawArray
from time import monotonic
from typing import Any, NamedTuple

from torch import Tensor

from loaderscope.probe.batchinfo import sizes, transfer
from loaderscope.probe.faults import report
from loaderscope.probe.stacks import install_in_worker

# Status slot layout (indices into the shared array). The current task's five slots are adjacent,
# STATE last, so one struct write fills them in order and a reader that sees FETCHING sees the rest.
WRITES, PID, MAIN_THREAD, WORKER, INSPECT, CUR_IDX, CUR_START, CUR_POS, CUR_SAMPLE, STATE = range(10)
HEADER = 10  # INSPECT: set by the main process to ask for the next batch's values
INSPECT_BATCHES = 3  # batches per worker described in full for the inspector
RECORD = 5  # code, idx, time, value, value2
# records per worker (160 KB): the probe thread drains the rings every tick (50 ms), so this fills only
# past 40,000 batches a second per worker, or a probe thread held off for 0.5 s at 4,000
CAPACITY = 4096
IDLE, FETCHING, EXHAUSTED = 0.0, 1.0, 2.0  # EXHAUSTED: an iterable shard ran out this epoch
CODE_START, CODE_END = 1.0, 2.0
DOUBLE = 8

_pack_task = struct.Struct("5d").pack_into  # CUR_IDX, CUR_START, CUR_POS, CUR_SAMPLE, STATE
_pack_progress = struct.Struct("2d").pack_into  # CUR_POS, CUR_SAMPLE
_pack_record = struct.Struct(f"{RECORD}d").pack_into
_iter_records = struct.Struct(f"{RECORD}d").iter_unpack
RECORD_BYTES = RECORD * DOUBLE


class Ring:
    """A worker's status slot and ring of records: doubles in a ``RawArray``, with memoryviews over it.

    Item access through a memoryview, and whole records through ``struct``, cost a fraction of
    ctypes indexing: the worker pays for this on every batch.
    """

    def __init__(self, raw: Any = None) -> None:
        self.raw = raw if raw is not None else RawArray("d", HEADER + CAPACITY * RECORD)
        self.bytes = memoryview(self.raw).cast("B")
        self.slots = self.bytes.cast("d")
        self.records = self.bytes[HEADER * DOUBLE:]  # the ring itself, after the header
        self.writes = int(self.slots[WRITES])  # only the worker writes records: it keeps the count

    def __reduce__(self) -> Any:  # into a spawned worker: the shared array, views rebuilt there
        return (Ring, (self.raw,))

    def write(self, code: float, idx: int, t: float, value: float, value2: float = 0.0) -> None:
        count = self.writes
        _pack_record(self.bytes, (HEADER + (count % CAPACITY) * RECORD) * DOUBLE, code, idx, t, value, value2)
        self.writes = self.slots[WRITES] = count + 1  # published last: a reader never sees a half-written record


_ring: Ring | None = None  # in a worker process: its own ring, for _Progress
_faults: Any = None  # in a worker process: the queue to the main process's probe thread


def worker_fault(where: str, exc: Exception) -> None:
    """A tap failed inside a worker: the main process reports it (once for all workers)."""
    try:
        if _faults is not None:
            _faults.put({"fault": where, "type": type(exc).__name__, "message": str(exc)[:500]})
            return
    except Exception:
        pass
    report(where, exc)


class _Progress(list):  # type: ignore[type-arg]
    """A task's sample indices that note, as torch's fetcher iterates them, which one is being read.

    That is what lets a stuck or dead worker be named down to "sample 3 of 8 (index 1234)".
    """

    __slots__ = ()

    def __iter__(self) -> Any:
        view = _ring.bytes  # type: ignore[union-attr]
        offset = CUR_POS * DOUBLE
        for pos, index in enumerate(list.__iter__(self)):
            _pack_progress(view, offset, pos, index if type(index) is int else -1)
            yield index

    def __reduce__(self) -> Any:  # pickles (e.g. inside an exception) as the plain list it stands for
        return (list, (list(self),))


class _IndexQueueTap:
    """Wraps the worker's index queue: a task returned by ``get`` is a fetch that starts now.

    It also ends a worker whose parent died while it was setting up. torch's watchdog
    (``ManagerWatchdog`` in torch/utils/data/_utils/worker.py) takes the parent's pid only after the
    set-up (``worker_init_fn``, the fetcher, and the probe's own): a parent killed before then leaves
    it init's pid, and the worker waits on its queue for ever, holding its memory and its parent's
    pipes. The tap took the parent's pid first thing, and looks where torch's watchdog would: at each
    empty wait."""

    def __init__(self, queue: Any, ring: Ring, parent: int) -> None:
        self._queue = queue
        self._ring: Ring | None = ring
        self._parent = parent

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        try:
            task = self._queue.get(block, timeout)
        except queue.Empty:
            if os.getppid() != self._parent:  # no one is left to send a task, or to read a result
                os._exit(0)
            raise
        if self._ring is None:  # the tap failed once: the worker goes on unobserved
            return task
        try:
            return self._started(task)
        except Exception as exc:
            self._ring = None
            worker_fault("worker index tap", exc)
            return task

    def _started(self, task: Any) -> Any:
        ring = self._ring
        assert ring is not None
        if type(task) is not tuple:  # a _ResumeIteration starts a new epoch; None ends the worker
            ring.slots[STATE] = IDLE
        elif ring.slots[STATE] != EXHAUSTED:  # an exhausted worker drops its remaining tasks unseen
            idx, payload = task
            # torch sends (idx, indices); torchdata's stateful workers (idx, (indices, snapshot))
            index, rest = (payload[0], payload[1:]) if type(payload) is tuple else (payload, None)
            now = monotonic()
            if type(index) is not list:
                _pack_task(ring.bytes, CUR_IDX * DOUBLE, idx, now, 0, -1, FETCHING)
                ring.write(CODE_START, idx, now, 1)
            elif len(index) == 1:  # batch_size=1: its one sample is known now, and torch's task goes on as it is
                sample = index[0]
                _pack_task(ring.bytes, CUR_IDX * DOUBLE, idx, now, 0, sample if type(sample) is int else -1, FETCHING)
                ring.write(CODE_START, idx, now, 1)
            else:
                _pack_task(ring.bytes, CUR_IDX * DOUBLE, idx, now, 0, -1, FETCHING)
                ring.write(CODE_START, idx, now, len(index))
                progress = _Progress(index)
                return idx, progress if rest is None else (progress, *rest)
        return task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class _ResultQueueTap:
    """Wraps the shared result queue: a result handed to ``put`` is a fetch that ended.

    The first few batches of each worker are also described in full (structure, pickled size and
    time) for the batch inspector, through ``inspect`` (a SimpleQueue the probe thread drains).
    """

    def __init__(self, queue: Any, ring: Ring, inspect: Any, stateful: bool) -> None:
        self._queue = queue
        self._ring: Ring | None = ring
        self._inspect = inspect
        self._sampled = 0
        self._stateful = stateful  # the loop sends (batch, worker_id, state) as its payload

    def put(self, item: Any, *args: Any, **kwargs: Any) -> None:
        if self._ring is not None:
            try:
                self._ended(item)
            except Exception as exc:  # never the worker's problem: it goes on unobserved
                self._ring = None
                worker_fault("worker result tap", exc)
        self._queue.put(item, *args, **kwargs)

    def _ended(self, item: Any) -> None:
        idx, data = item
        if type(idx) is not int:
            return
        ring = self._ring
        assert ring is not None
        if type(data) is tuple and len(data) == 3 and self._stateful:
            data = data[0]  # torchdata's (batch, worker_id, state_dict)
        total, pickled = (data.nbytes, 0) if type(data) is Tensor else sizes(data)
        ring.write(CODE_END, idx, monotonic(), total, pickled)
        slots = ring.slots
        if slots[INSPECT]:  # asked for (the page's "sample values" button): this batch, with values
            slots[INSPECT] = 0.0
            self._describe(idx, data, values=True)
        elif self._sampled < INSPECT_BATCHES and total:
            self._sampled += 1
            self._describe(idx, data, values=False)
        slots[STATE] = EXHAUSTED if is_stop(data) else IDLE

    def _describe(self, idx: int, data: Any, values: bool) -> None:
        ring = self._ring
        if self._inspect is None or ring is None:
            return
        try:
            self._inspect.put({"idx": idx, "worker": int(ring.slots[WORKER]), **transfer(data, values)})
        except Exception:  # the inspector must never take the user's worker down
            self._inspect = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def is_stop(payload: Any) -> bool:
    """Whether a result says "this worker's iterable shard ran out" (torch's or torchdata's form)."""
    if type(payload) is tuple and payload:
        payload = payload[0]
    return type(payload).__name__ == "_IterableDatasetStopIteration"


class LoopArgs(NamedTuple):
    """Where a worker loop takes its index queue, result queue and worker id, by position."""

    index_queue: int
    result_queue: int
    worker_id: int
    stateful: bool  # it also takes a ``worker_state`` and sends (batch, worker_id, state) back


_loop_args: dict[Any, LoopArgs | None] = {}


def worker_loop_args(target: Any) -> LoopArgs | None:
    """The argument positions of a DataLoader worker loop (torch's ``_worker_loop`` in
    ``torch/utils/data/_utils/worker.py``, or a library's loop of the same shape), else None."""
    if target not in _loop_args:
        _loop_args[target] = _read_loop_args(target)
    return _loop_args[target]


def _read_loop_args(target: Any) -> LoopArgs | None:
    if getattr(target, "__name__", None) != "_worker_loop":
        return None
    try:
        names = list(inspect.signature(target).parameters)
        return LoopArgs(names.index("index_queue"), names.index("data_queue"), names.index("worker_id"),
                        "worker_state" in names)
    except (TypeError, ValueError):
        return None


def probed_worker_loop(ring: Ring, dump_path: str, inspect_queue: Any, worker_loop: Callable[..., None],
                       where: LoopArgs, *args: Any) -> None:
    """Process target for a worker: the loader's own loop, with its two queues tapped."""
    parent = os.getppid()  # first: before any set-up the parent could die in (_IndexQueueTap)
    try:
        tapped = _tap(ring, dump_path, inspect_queue, where, args, parent)
    except Exception as exc:  # the worker runs unobserved rather than not at all
        worker_fault("worker setup", exc)
        tapped = list(args)
    worker_loop(*tapped)


def _tap(ring: Ring, dump_path: str, inspect_queue: Any, where: LoopArgs, args: tuple[Any, ...],
         parent: int) -> list[Any]:
    global _ring, _faults
    _faults = inspect_queue
    _ring = ring
    ring.slots[PID] = os.getpid()
    ring.slots[WORKER] = args[where.worker_id]
    ring.slots[MAIN_THREAD] = threading.get_ident()
    install_in_worker(dump_path)
    tapped = list(args)
    tapped[where.index_queue] = _IndexQueueTap(args[where.index_queue], ring, parent)
    tapped[where.result_queue] = _ResultQueueTap(args[where.result_queue], ring, inspect_queue, where.stateful)
    return tapped


class RingReader:
    """Main-process side: turns new ring records into (kind, time, fields...) probe records."""

    def __init__(self, worker: int, ring: Ring, dump_path: str) -> None:
        self.worker = worker
        self.ring = ring
        self.dump_path = dump_path
        self.read = 0
        self.lost = 0
        self._starts: dict[int, float] = {}
        self.recent: deque[float] = deque(maxlen=256)  # recent fetch times, for the stuck threshold

    def take(self) -> bytes | None:
        """The records written since the last take, copied as they lie in the ring (None: no new one).

        The probe thread takes them at every tick (one copy) and ``decode`` makes them rows; taking
        them every tick is what keeps the ring from filling."""
        read, written = self.read, int(self.ring.slots[WRITES])
        if read == written:
            return None
        if written - read > CAPACITY:  # the probe thread was held off too long: counted, never silent
            self.lost += written - CAPACITY - read
            read = written - CAPACITY
        self.read = written
        first, last = read % CAPACITY * RECORD_BYTES, written % CAPACITY * RECORD_BYTES
        records = self.ring.records
        if first < last:
            return records[first:last].tobytes()
        return records[first:].tobytes() + records[:last].tobytes()  # it wrapped around the ring's end

    def decode(self, taken: bytes, out: Callable[[tuple[Any, ...]], None]) -> None:
        """Rows of records ``take`` copied, in the order they were written."""
        worker, starts, recent = self.worker, self._starts, self.recent
        for code, idx, t, value, value2 in _iter_records(taken):
            idx = int(idx)
            if code == CODE_START:
                starts[idx] = t
                out(("fetch_start", t, worker, idx, int(value)))
            else:
                took = t - starts.pop(idx, t)
                recent.append(took)
                out(("fetch_end", t, worker, idx, took, int(value), int(value2)))

    def current(self) -> dict[str, Any] | None:
        """What the worker fetches right now (task, sample position and index, elapsed), else None."""
        slots = self.ring.slots
        if slots[STATE] != FETCHING:
            return None
        sample = int(slots[CUR_SAMPLE])
        return {"idx": int(slots[CUR_IDX]), "pos": int(slots[CUR_POS]), "sample": None if sample < 0 else sample,
                "elapsed": round(monotonic() - slots[CUR_START], 4)}

    def ask_values(self) -> None:
        """The worker describes its next batch with a few values of each leaf."""
        self.ring.slots[INSPECT] = 1.0

    @property
    def pid(self) -> int:
        return int(self.ring.slots[PID])

    @property
    def main_thread(self) -> int:
        return int(self.ring.slots[MAIN_THREAD])
