"""The worker side of the probe: what each worker process is doing, in shared memory.

Each worker gets a small ``RawArray`` of doubles: a status slot (what it fetches right now, since
when) and a ring of fixed-size records (fetch start/end). Writing costs well under a microsecond,
needs no lock or syscall, passes through ``Process`` arguments under fork, spawn and forkserver, and
stays readable after the worker dies, so the main process can say which task it died on.

The worker loop itself is torch's ``_worker_loop``, unchanged: only the index queue and the result
queue it is handed are wrapped, because a task starts when ``get`` returns it and ends at ``put``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.sharedctypes import RawArray
from typing import Any

from loaderscope.probe.batchinfo import sizes, transfer
from loaderscope.probe.stacks import install_in_worker

# Status slot layout (indices into the shared array).
WRITES, STATE, CUR_IDX, CUR_START, CUR_POS, PID, MAIN_THREAD, CUR_SAMPLE, WORKER, INSPECT = range(10)
HEADER = 10  # INSPECT: set by the main process to ask for the next batch's values
INSPECT_BATCHES = 3  # batches per worker described in full for the inspector
RECORD = 5  # code, idx, time, value, value2
CAPACITY = 512  # records per worker; the main process drains on every arrival, so this never fills
IDLE, FETCHING, EXHAUSTED = 0.0, 1.0, 2.0  # EXHAUSTED: an iterable shard ran out this epoch
CODE_START, CODE_END = 1.0, 2.0

Ring = Any  # a ctypes array of doubles


def new_ring() -> Ring:
    return RawArray("d", HEADER + CAPACITY * RECORD)


def _write(ring: Ring, code: float, idx: int, t: float, value: float, value2: float = 0.0) -> None:
    count = int(ring[WRITES])
    base = HEADER + (count % CAPACITY) * RECORD
    ring[base] = code
    ring[base + 1] = idx
    ring[base + 2] = t
    ring[base + 3] = value
    ring[base + 4] = value2
    ring[WRITES] = count + 1  # published last: a reader never sees a half-written record


class _Progress(list):  # type: ignore[type-arg]
    """A task's sample indices that note, as torch's fetcher iterates them, which one is being read.

    That is what lets a stuck or dead worker be named down to "sample 3 of 8 (index 1234)".
    """

    __slots__ = ("_ring",)

    def __init__(self, indices: list[Any], ring: Ring) -> None:
        super().__init__(indices)
        self._ring = ring

    def __iter__(self) -> Any:
        ring = self._ring
        for pos, index in enumerate(list.__iter__(self)):
            ring[CUR_POS] = pos
            ring[CUR_SAMPLE] = index if type(index) is int else -1
            yield index

    def __reduce__(self) -> Any:  # pickles (e.g. inside an exception) as the plain list it stands for
        return (list, (list(self),))


class _IndexQueueTap:
    """Wraps the worker's index queue: a task returned by ``get`` is a fetch that starts now."""

    def __init__(self, queue: Any, ring: Ring) -> None:
        self._queue = queue
        self._ring = ring

    def get(self, *args: Any, **kwargs: Any) -> Any:
        task = self._queue.get(*args, **kwargs)
        if type(task) is not tuple:  # a _ResumeIteration starts a new epoch; None ends the worker
            self._ring[STATE] = IDLE
        elif self._ring[STATE] != EXHAUSTED:  # an exhausted worker drops its remaining tasks unseen
            idx, index = task
            now = time.monotonic()
            ring = self._ring
            ring[CUR_IDX] = idx
            ring[CUR_START] = now
            ring[CUR_POS] = 0
            ring[CUR_SAMPLE] = -1
            ring[STATE] = FETCHING
            if type(index) is list:
                _write(ring, CODE_START, idx, now, len(index))
                return idx, _Progress(index, ring)
            _write(ring, CODE_START, idx, now, 1)
        return task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class _ResultQueueTap:
    """Wraps the shared result queue: a result handed to ``put`` is a fetch that ended.

    The first few batches of each worker are also described in full (structure, pickled size and
    time) for the batch inspector, through ``inspect`` (a SimpleQueue the probe thread drains).
    """

    def __init__(self, queue: Any, ring: Ring, inspect: Any) -> None:
        self._queue = queue
        self._ring = ring
        self._inspect = inspect
        self._sampled = 0

    def put(self, item: Any, *args: Any, **kwargs: Any) -> None:
        idx, data = item
        if type(idx) is int:
            ring = self._ring
            total, pickled = sizes(data)
            _write(ring, CODE_END, idx, time.monotonic(), total, pickled)
            if ring[INSPECT]:  # asked for (the page's "sample values" button): this batch, with values
                ring[INSPECT] = 0.0
                self._describe(idx, data, values=True)
            elif self._sampled < INSPECT_BATCHES and total:
                self._sampled += 1
                self._describe(idx, data, values=False)
            ring[STATE] = EXHAUSTED if type(data).__name__ == "_IterableDatasetStopIteration" else IDLE
        self._queue.put(item, *args, **kwargs)

    def _describe(self, idx: int, data: Any, values: bool) -> None:
        if self._inspect is None:
            return
        try:
            self._inspect.put({"idx": idx, "worker": int(self._ring[WORKER]), **transfer(data, values)})
        except Exception:  # the inspector must never take the user's worker down
            self._inspect = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


# Positions of the queues in torch's ``_worker_loop`` arguments (stable since torch 1.x).
INDEX_QUEUE_ARG, RESULT_QUEUE_ARG, WORKER_ID_ARG = 2, 3, 10


def probed_worker_loop(ring: Ring, dump_path: str, inspect: Any, worker_loop: Callable[..., None], *args: Any) -> None:
    """Process target for a worker: torch's own loop, with its two queues tapped."""
    ring[PID] = os.getpid()
    ring[WORKER] = args[WORKER_ID_ARG]
    ring[MAIN_THREAD] = threading.get_ident()
    install_in_worker(dump_path)
    tapped = list(args)
    tapped[INDEX_QUEUE_ARG] = _IndexQueueTap(args[INDEX_QUEUE_ARG], ring)
    tapped[RESULT_QUEUE_ARG] = _ResultQueueTap(args[RESULT_QUEUE_ARG], ring, inspect)
    worker_loop(*tapped)


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

    def drain(self, out: Callable[[tuple[Any, ...]], None]) -> None:
        ring = self.ring
        written = int(ring[WRITES])
        if written - self.read > CAPACITY:  # cannot happen in practice; counted, never silent
            self.lost += written - CAPACITY - self.read
            self.read = written - CAPACITY
        while self.read < written:
            base = HEADER + (self.read % CAPACITY) * RECORD
            code, idx, t, value = ring[base], int(ring[base + 1]), ring[base + 2], ring[base + 3]
            value2 = ring[base + 4]
            self.read += 1
            if code == CODE_START:
                self._starts[idx] = t
                out(("fetch_start", t, self.worker, idx, int(value)))
            else:
                start = self._starts.pop(idx, t)
                self.recent.append(t - start)
                out(("fetch_end", t, self.worker, idx, t - start, int(value), int(value2)))

    def current(self) -> dict[str, Any] | None:
        """What the worker fetches right now (task, sample position and index, elapsed), else None."""
        ring = self.ring
        if ring[STATE] != FETCHING:
            return None
        sample = int(ring[CUR_SAMPLE])
        return {"idx": int(ring[CUR_IDX]), "pos": int(ring[CUR_POS]), "sample": None if sample < 0 else sample,
                "elapsed": round(time.monotonic() - ring[CUR_START], 4)}

    def ask_values(self) -> None:
        """The worker describes its next batch with a few values of each leaf."""
        self.ring[INSPECT] = 1.0

    @property
    def pid(self) -> int:
        return int(self.ring[PID])

    @property
    def main_thread(self) -> int:
        return int(self.ring[MAIN_THREAD])
