"""torch's own DataLoader iterators, observed.

The subclasses below call torch's code for every decision and only record what happened. The key
observation: every protocol transition of a task in ``_MultiProcessingDataLoaderIter`` is a change
to ``_task_info`` — set to ``(worker,)`` at dispatch, grown to ``(worker, data)`` when a result is
parked out of order, popped when released to the consumer, deleted when skipped (its worker
exhausted an iterable dataset). A dict subclass that watches those changes sees them all, including
``in_order=False`` and persistent-worker resets, without copying torch's control flow.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
import weakref
from typing import Any

from torch import Tensor
from torch._utils import ExceptionWrapper
from torch.utils.data._utils.pin_memory import pin_memory
from torch.utils.data._utils.worker import _worker_loop
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter, _SingleProcessDataLoaderIter

from loaderscope.probe.liveness import Liveness, StuckRule
from loaderscope.probe.batchinfo import describe, is_pinned, sizes
from loaderscope.probe.pinning import PinTap
from loaderscope.probe.recorder import Recorder
from loaderscope.ranks import encode_shard
from loaderscope.events import BATCH_ROW
from loaderscope.probe.worker import WORKER_ID_ARG, Ring, RingReader, probed_worker_loop

monotonic = time.monotonic
DEATH_GRACE = 1.0  # seconds a worker whose pipe broke may take to become a zombie


class EpochCounter:
    """Epoch numbering shared by every iterator of one loader (persistent or not).

    With a distributed sampler it also keeps the epoch's sample indices (``indices`` is a list
    then, else None), so the dashboard can check that the ranks' shards neither overlap nor miss.
    An epoch's batch count is read from its iterator's own ``_num_yielded`` (torch counts anyway).
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.epoch = -1
        self.open = False
        self.shard_length: int | None = None  # set to the dataset's length to track shards
        self.indices: list[Any] | None = None
        self._iterator: weakref.ref[Any] | None = None  # weak: torch shuts workers down on its collection

    def start(self, iterator: Any) -> None:
        if self.open:  # the previous epoch was abandoned mid-way (a `break`, a new iter())
            self.end(abandoned=True)
        self.epoch += 1
        self.open = True
        self._iterator = weakref.ref(iterator)
        self.indices = [] if self.shard_length is not None else None
        self.recorder.note("epoch_start", epoch=self.epoch)

    def owned_by(self, iterator: Any) -> bool:
        return self.open and self._iterator is not None and self._iterator() is iterator

    def dispatched(self, index: Any) -> None:
        if self.indices is not None:
            self.indices.extend(index if isinstance(index, list) else [index])

    def end(self, abandoned: bool = False) -> None:
        if self.open:
            self.open = False
            iterator = self._iterator() if self._iterator is not None else None
            batches = getattr(iterator, "_num_yielded", 0)
            shard = {}
            if self.indices is not None and self.shard_length is not None:
                shard = {"shard": encode_shard(self.indices, self.shard_length), "shard_length": self.shard_length}
            self.recorder.note("epoch_end", epoch=self.epoch, batches=batches, abandoned=abandoned, **shard)


class _TaskInfo(dict):
    """``_task_info`` that reports parking, release and skipping of tasks to the probe."""

    __slots__ = ("owner",)

    def __setitem__(self, idx: int, info: tuple[Any, ...]) -> None:
        dict.__setitem__(self, idx, info)
        if len(info) == 2:  # `_task_info[idx] += (data,)`: arrived out of order, parked
            it = self.owner()
            if it is not None:
                it._append(("buffer", monotonic(), idx, info[0], it._rcvd_idx))

    def pop(self, idx: int, *default: Any) -> Any:
        info = dict.pop(self, idx, *default)
        it = self.owner()
        if it is not None:
            it._released = (idx, info[0], len(info) == 2)
        return info

    def __delitem__(self, idx: int) -> None:
        worker = self[idx][0]
        dict.__delitem__(self, idx)
        it = self.owner()
        if it is not None:
            it._append(("skip", monotonic(), idx, worker))


class _ProbedContext:
    """Stands in for the multiprocessing context so each worker is started with a status ring."""

    def __init__(self, context: Any, readers: dict[int, RingReader], inspect: Any,
                 on_result_queue: Any) -> None:
        self._context = context
        self._readers = readers
        self._inspect = inspect
        self._on_result_queue = on_result_queue  # called with the first Queue made: the result queue

    def Queue(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        queue = self._context.Queue(*args, **kwargs)
        if self._on_result_queue is not None:
            self._on_result_queue(queue)
            self._on_result_queue = None
        return queue

    def Process(self, *, target: Any, args: tuple[Any, ...], **kwargs: Any) -> Any:  # noqa: N802
        if target is not _worker_loop:  # not a DataLoader worker: leave it alone
            return self._context.Process(target=target, args=args, **kwargs)
        ring = Ring()
        fd, dump_path = tempfile.mkstemp(prefix="loaderscope-stack-", suffix=".txt")
        os.close(fd)
        self._readers[args[WORKER_ID_ARG]] = RingReader(args[WORKER_ID_ARG], ring, dump_path)
        return self._context.Process(target=probed_worker_loop, args=(ring, dump_path, self._inspect, target, *args),
                                     **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class _LoaderView:
    """The loader as torch's iterator sees it, with the probed multiprocessing context."""

    def __init__(self, loader: Any, context: _ProbedContext) -> None:
        self._loader = loader
        self.multiprocessing_context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _exception_fields(wrapper: Any) -> dict[str, Any]:
    """type / message / traceback of a worker's ExceptionWrapper, as torch will re-raise it."""
    text = wrapper.exc_msg or ""
    last = text.strip().splitlines()[-1] if text.strip() else ""
    return {"type": wrapper.exc_type.__name__, "message": last, "traceback": text, "where": wrapper.where}


def signal_name(exitcode: int | None) -> str | None:
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def _watch_consumer(iterator: Any, probe: Recorder, rule: StuckRule) -> Liveness:
    """Liveness checks for this iterator on the probe thread, holding it only weakly.

    A strong reference from the probe thread would keep the iterator alive after the training
    loop drops it, and torch shuts workers down when the iterator is garbage-collected.
    """
    ref = weakref.ref(iterator)

    def head_of_line() -> dict[str, Any]:
        it = ref()
        return it._head_of_line() if it is not None else {}

    liveness = Liveness(probe, rule, head_of_line)
    probe.watch(liveness.tick)
    return liveness


class ProbedMultiProcessIter(_MultiProcessingDataLoaderIter):
    def __init__(self, loader: Any, probe: Recorder, epochs: EpochCounter, rule: StuckRule) -> None:
        # torch dispatches the first prefetch_factor × num_workers tasks inside __init__ (_reset),
        # so the probe must be ready before super().__init__.
        self._probe = probe
        self._append = probe.pending.append  # the hot path: rows of ``events.ROW_FIELDS``
        self._epochs = epochs
        self._liveness = _watch_consumer(self, probe, rule)
        self._released: tuple[int, int, bool] | None = None
        self._last_index: Any = None
        self._exited = False
        context = loader.multiprocessing_context
        if context is None:
            import torch.multiprocessing as context  # what torch uses by default
        self._inspect = context.SimpleQueue()
        self._liveness.inspect = self._inspect
        self._pin_tap = PinTap(probe)
        probed = _ProbedContext(context, probe.readers, self._inspect, self._tap_result_queue)
        super().__init__(_LoaderView(loader, probed))

    def _tap_result_queue(self, queue: Any) -> None:
        if self._pin_memory:  # decided by torch's base __init__, before any queue is made
            self._pin_tap.tap_get(queue)

    # `_task_info` is reassigned in every _reset; a property swaps in the observing dict.
    @property
    def _task_info(self) -> _TaskInfo:
        return self.__task_info

    @_task_info.setter
    def _task_info(self, value: dict[int, Any]) -> None:
        observed = _TaskInfo(value)
        observed.owner = weakref.ref(self)  # weak: a cycle would delay torch's worker shutdown
        self.__task_info = observed

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        if first_iter:
            for worker_id, process in enumerate(self._workers):
                self._probe.note("worker_start", worker=worker_id, pid=process.pid)
            if self._pin_memory:  # no task is dispatched yet, so nothing can be put before this
                self._pin_tap.tap_put(self._data_queue)
        self._epochs.start(self)
        super()._reset(loader, first_iter)

    def _next_index(self) -> Any:
        self._last_index = index = super()._next_index()
        return index

    def _try_put_index(self) -> None:
        sent = self._send_idx
        super()._try_put_index()
        if self._send_idx != sent:
            self._append(("dispatch", monotonic(), sent, self._task_info[sent][0], self._last_index))
            if self._epochs.indices is not None:
                self._epochs.dispatched(self._last_index)

    def _get_data(self) -> Any:
        try:
            result = super()._get_data()
        except Exception as exc:  # torch's RuntimeError, or a broken pipe from a worker that is exiting
            self._record_failure(exc)
            raise
        idx = result[0]
        info = self._task_info.get(idx) if type(idx) is int else None
        if info is not None:  # None: a resume marker or a stale result of an abandoned epoch
            self._probe.drain_worker(info[0])
            self._append(("arrive", monotonic(), idx, info[0]))
        return result

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        if isinstance(data, ExceptionWrapper):
            idx = self._released[0] if self._released else None
            self._probe.note("error", idx=idx, worker=worker_idx, **_exception_fields(data))
        return super()._process_data(data, worker_idx)

    def __next__(self) -> Any:
        self._liveness.next_started = start = monotonic()
        try:
            data = super().__next__()
        except StopIteration:
            self._epochs.end()
            raise
        finally:
            self._liveness.next_started = None
        now = monotonic()
        idx, _, from_buffer = self._released  # type: ignore[misc]
        self._append(("yield", now, idx, now - start, from_buffer))
        return data

    def _record_failure(self, exc: Exception) -> None:
        """Name what torch's exception is about, with what every worker was doing."""
        self._probe.drain_all()
        if "timed out" in str(exc):
            self._probe.note("timeout", seconds=self._timeout, workers=self._liveness.activity())
            return
        # A broken pipe or a failed fd hand-over (OSError, EOFError) means a worker is exiting right now.
        self._note_deaths(grace=DEATH_GRACE if isinstance(exc, (OSError, EOFError)) else 0.0)

    def _note_deaths(self, grace: float = 0.0) -> None:
        """Report workers that died (waiting up to ``grace`` s for one whose pipe already broke)."""
        deadline = monotonic() + grace
        self._liveness.check_deaths()
        while not self._liveness.dead and monotonic() < deadline:
            time.sleep(0.01)
            self._liveness.check_deaths()
        for worker_id, process in enumerate(self._workers):  # reaped by torch before the probe saw it
            if process.exitcode not in (None, 0) and worker_id not in self._liveness.dead:
                self._liveness.dead.add(worker_id)
                doing = self._probe.readers[worker_id].current() or {"idx": None}
                self._probe.note("worker_died", worker=worker_id, pid=process.pid, exitcode=process.exitcode,
                                 signal=signal_name(process.exitcode), **doing)

    def _head_of_line(self) -> dict[str, Any]:
        """The task the consumer waits for, and the worker that holds it."""
        idx = self._rcvd_idx
        info = self._task_info.get(idx)
        return {"waiting_for": idx, "held_by": info[0] if info else None, "has_data": bool(info and len(info) == 2)}

    def _shutdown_workers(self) -> None:
        self._probe.unwatch(self._liveness.tick)  # from here on, workers exiting is expected
        if not self._exited and getattr(self, "_workers", None) is not None:
            self._note_deaths()  # a death torch raised about outside _get_data
        super()._shutdown_workers()
        if not self._exited and getattr(self, "_workers", None) is not None:
            self._exited = True
            self._liveness.take_batch_info()
            self._inspect.close()
            for reader in self._probe.readers.values():
                _remove(reader.dump_path)
            # torch shuts workers down before raising StopIteration: an epoch is abandoned only
            # if tasks are still in flight (a `break`, an error, the iterator dropped mid-epoch).
            self._epochs.end(abandoned=bool(self._task_info))
            for worker_id, process in enumerate(self._workers):
                self._probe.note("worker_exit", worker=worker_id, pid=process.pid, exitcode=process.exitcode)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class ProbedSingleProcessIter(_SingleProcessDataLoaderIter):
    """num_workers=0: dispatch, fetch and release all happen in the main process (worker 0).

    Here the probe's cost sits directly on a batch that may take torch only ~10 µs, so a batch is
    one ``BATCH_ROW`` (five events, expanded by the consumer) and three clock reads.
    """

    def __init__(self, loader: Any, probe: Recorder, epochs: EpochCounter, rule: StuckRule) -> None:
        super().__init__(loader)
        self._probe = probe
        self._append = probe.pending.append
        self._epochs = epochs
        self._liveness = _watch_consumer(self, probe, rule)
        epochs.start(self)

    def _head_of_line(self) -> dict[str, Any]:
        return {"waiting_for": self._num_yielded, "held_by": 0, "has_data": False}

    def __del__(self) -> None:
        self._probe.unwatch(self._liveness.tick)
        if self._epochs.owned_by(self):  # dropped mid-epoch (a `break`): its count is readable only now
            self._epochs.end(abandoned=True)

    def _next_data(self) -> Any:
        liveness = self._liveness
        liveness.next_started = started = monotonic()
        try:
            index = self._next_index()
            idx = self._num_yielded  # in-process, task ids are the batches yielded so far
            fetch_started = monotonic()
            if self._epochs.indices is not None:
                self._epochs.dispatched(index)
            try:
                data = self._dataset_fetcher.fetch(index)
            except BaseException as exc:
                self._failed(exc, idx, index, fetch_started)
                raise
            fetched = monotonic()
            total, pickled = (data.nbytes, 0) if type(data) is Tensor else sizes(data)
            probe = self._probe
            if idx < 3 or probe.values_asked:  # nothing crosses a process boundary: structure (and values if asked)
                asked, probe.values_asked = probe.values_asked, False
                probe.note_at("batch_info", fetched, idx=idx, worker=0, structure=describe(data, values=asked),
                              pickle_bytes=0, values=asked)
            if self._pin_memory:
                return self._pin(data, idx, index, started, fetch_started, fetched, total, pickled)
            self._append((BATCH_ROW, fetched, idx, started, fetch_started, total, pickled, index))
            return data
        except StopIteration:  # the sampler, or an iterable dataset, ran out
            self._epochs.end()
            raise
        finally:
            liveness.next_started = None

    def _failed(self, exc: BaseException, idx: int, index: Any, fetch_started: float) -> None:
        self._explicit(idx, index, fetch_started)
        if isinstance(exc, StopIteration):  # an iterable dataset ran out inside this task
            self._append(("skip", monotonic(), idx, 0))
        elif isinstance(exc, Exception):
            self._probe.note("error", idx=idx, worker=0, **_main_exception_fields(exc))

    def _pin(self, data: Any, idx: int, index: Any, started: float, fetch_started: float, fetched: float,
             total: int, pickled: int) -> Any:
        self._explicit(idx, index, fetch_started)
        self._append(("fetch_end", fetched, 0, idx, fetched - fetch_started, total, pickled))
        self._probe.note_at("pin_start", fetched, idx=idx)
        data = pin_memory(data, self._pin_memory_device)
        pinned = monotonic()
        self._probe.note_at("pin_end", pinned, idx=idx, dt=pinned - fetched, nbytes=total, pinned=is_pinned(data))
        self._append(("arrive", pinned, idx, 0))
        self._append(("yield", pinned, idx, pinned - started, False))
        return data

    def _explicit(self, idx: int, index: Any, fetch_started: float) -> None:
        """A batch's dispatch and fetch start one by one, where a ``BATCH_ROW`` does not cover it
        (pinning, a failed fetch)."""
        self._append(("dispatch", fetch_started, idx, 0, index))
        self._append(("fetch_start", fetch_started, 0, idx, len(index) if isinstance(index, (list, tuple)) else 1))


def _main_exception_fields(exc: BaseException) -> dict[str, Any]:
    import traceback

    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "where": "in the main process",
    }
