"""DataLoader iterators, observed: mixins put in front of whatever iterator class a loader builds.

torch's ``_SingleProcessDataLoaderIter`` and ``_MultiProcessingDataLoaderIter`` (in
``torch/utils/data/dataloader.py``) and the iterators of DataLoader subclasses that follow the same
protocol (torchdata's ``StatefulDataLoader`` forks them) all make their decisions in their own
code; the mixins below only record what happened and call ``super()`` for everything.

The key observation: every protocol transition of a task in a multi-process iterator is a change
to ``_task_info`` — set to ``(worker,)`` at dispatch (``_try_put_index``), grown to
``(worker, data)`` when a result is parked out of order, popped (or deleted) when released to the
consumer, deleted when skipped (its worker exhausted an iterable dataset). A dict subclass that
watches those changes sees them all, including ``in_order=False`` and persistent-worker resets.

Every line of probe bookkeeping is guarded: a failure is reported once (``faults``) and the
iterator goes on exactly as the unobserved one would. torch's own exceptions pass through untouched.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loaderscope.model.ranks import MAX_SHARD_LENGTH, encode_shard
from loaderscope.probe.faults import report, without_probe_frames
from loaderscope.probe.liveness import Liveness, StuckRule
from loaderscope.probe.loopclock import LOOP, loop_step
from loaderscope.probe.pinning import PinTap
from loaderscope.probe.protocol import private
from loaderscope.probe.recorder import Recorder
from loaderscope.probe.worker import RingReader, is_stop

ExceptionWrapper = private("torch._utils:ExceptionWrapper")
pin_memory = private("torch.utils.data._utils.pin_memory:pin_memory")
monotonic = time.monotonic
DEATH_GRACE = 1.0  # seconds a worker whose pipe broke may take to become a zombie


def complete(iterator: Any) -> bool:
    """Whether an iterator yielded its whole epoch (an iterable dataset without length: unknown)."""
    try:
        expected = len(iterator)  # torch's __len__: the index sampler's length, in batches
    except TypeError:
        return False
    return bool(iterator._probe_first + iterator._probe_yields >= expected)


class EpochCounter:
    """Epoch numbering shared by every iterator of one loader (persistent or not).

    An epoch belongs to the iterator that started it, and only that iterator can end it: an old
    iterator that torch shuts down after the next ``iter()`` (Lightning never asks for the
    StopIteration) leaves the new epoch alone. Its count is the yields the probe saw.

    With a distributed sampler it also keeps the epoch's sample indices (``indices`` is a list
    then, else None), so the dashboard can check that the ranks' shards neither overlap nor miss.
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.epoch = -1
        self.shard_length: int | None = None  # set to the dataset's length to track shards
        self.indices: list[Any] | None = None
        self._owner: weakref.ref[Any] | None = None  # weak: torch shuts workers down on collection
        self._latest: weakref.ref[Any] | None = None

    def start(self, iterator: Any) -> None:
        owner = self._owner() if self._owner is not None else None
        if owner is not None:  # the last epoch was still open: a `break`, or all yielded without StopIteration
            self.end(owner, abandoned=not complete(owner))
        self.epoch += 1
        iterator._probe_epoch, iterator._probe_yields, iterator._probe_first = self.epoch, 0, 0
        self._owner = self._latest = weakref.ref(iterator)
        # past MAX_SHARD_LENGTH no job table would read the digest: its index list and counts are not built
        tracked = self.shard_length is not None and self.shard_length <= MAX_SHARD_LENGTH
        self.indices = [] if tracked else None
        self.recorder.note("epoch_start", epoch=self.epoch)

    def owned_by(self, iterator: Any) -> bool:
        return self._owner is not None and self._owner() is iterator

    def superseded(self, iterator: Any) -> bool:
        """A newer iterator of this loader has started: this one's workers no longer matter."""
        return self._latest is not None and self._latest() is not iterator

    def dispatched(self, index: Any) -> None:
        if self.indices is not None:
            self.indices.extend(index if isinstance(index, list) else [index])

    def end(self, iterator: Any, abandoned: bool = False) -> None:
        if not self.owned_by(iterator):
            return
        self._owner = None
        shard = {}
        if self.indices is not None and self.shard_length is not None:
            shard = {"shard": encode_shard(self.indices, self.shard_length), "shard_length": self.shard_length}
        self.recorder.note("epoch_end", epoch=self.epoch, batches=iterator._probe_yields, abandoned=abandoned,
                           **shard)

    def end_open(self) -> None:
        """The run ends: an epoch still open was left early."""
        owner = self._owner() if self._owner is not None else None
        if owner is not None:
            self.end(owner, abandoned=not complete(owner))


class _TaskInfo(dict):  # type: ignore[type-arg]
    """``_task_info`` that reports parking, release and skipping of tasks to the probe."""

    __slots__ = ("owner",)
    owner: weakref.ref[Any]

    def __setitem__(self, idx: int, info: tuple[Any, ...]) -> None:
        dict.__setitem__(self, idx, info)
        if len(info) == 2:  # `_task_info[idx] += (data,)`: arrived out of order, parked
            it = self.owner()
            if it is not None:
                try:
                    it._append(("parked", monotonic(), idx, info[0], it._rcvd_idx))
                except Exception as exc:
                    report("parked record", exc)

    def pop(self, idx: int, *default: Any) -> Any:
        info = dict.pop(self, idx, *default)
        it = self.owner()
        if it is not None and type(info) is tuple:
            it._released = (idx, info[0], len(info) == 2)
        return info

    def __delitem__(self, idx: int) -> None:
        info = self[idx]
        dict.__delitem__(self, idx)
        it = self.owner()
        if it is None:
            return
        if idx == it._arrived:  # torchdata releases the result that just arrived with `del`
            it._released = (idx, info[0], False)
            return
        try:
            it._append(("skip", monotonic(), idx, info[0]))
        except Exception as exc:
            report("skip record", exc)


class _ObservedTaskInfo:
    """``_task_info`` on a multi-process probe's class: torch assigns a fresh dict in every ``_reset``,
    and this puts a ``_TaskInfo`` of it in its place, in the iterator's own ``__dict__``.

    It defines ``__set__`` and no ``__get__``: Python then looks up every read in the instance's
    ``__dict__`` (torch reads ``_task_info`` six times a batch), where a property's getter was a
    Python call for each, 2.3x the cost of this plain lookup."""

    def __set__(self, iterator: Any, value: dict[int, Any]) -> None:
        observed = _TaskInfo(value)
        observed.owner = weakref.ref(iterator)  # weak: a cycle would delay torch's worker shutdown
        iterator.__dict__["_task_info"] = observed

    if TYPE_CHECKING:  # what a read finds in the instance's __dict__ (no __get__ at run time: see above)
        def __get__(self, iterator: Any, owner: type | None = None) -> _TaskInfo: ...


# What an error event keeps of a message and a traceback: an exception's text can hold the repr of a
# whole batch (megabytes), past a frame's 2 MiB and a trace line's 1 MiB; its head and tail say what failed.
MESSAGE_CHARS = 4_096
TRACEBACK_CHARS = 64 * 1024


def clipped(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its head and tail, with what was left out said between."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}\n[... {len(text) - 2 * keep:,} characters left out by loaderscope ...]\n{text[-keep:]}"


def _exception_fields(wrapper: Any) -> dict[str, Any]:
    """type / message / traceback of a worker's ExceptionWrapper, as torch will re-raise it."""
    text = wrapper.exc_msg or ""
    last = text.strip().splitlines()[-1] if text.strip() else ""
    return {"type": wrapper.exc_type.__name__, "message": clipped(last, MESSAGE_CHARS),
            "traceback": clipped(text, TRACEBACK_CHARS), "where": wrapper.where}


def main_exception_fields(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": clipped(str(exc), MESSAGE_CHARS), "where": "in the main process",
            "traceback": clipped("".join(traceback.format_exception(exc)), TRACEBACK_CHARS)}


def signal_name(exitcode: int | None) -> str | None:
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def watch_consumer(iterator: Any, probe: Recorder, rule: StuckRule, readers: dict[int, RingReader]) -> Liveness:
    """Liveness checks for this iterator on the probe thread, holding it only weakly.

    A strong reference from the probe thread would keep the iterator alive after the training
    loop drops it, and torch shuts workers down when the iterator is garbage-collected.
    """
    ref = weakref.ref(iterator)

    def head_of_line() -> dict[str, Any]:
        it = ref()
        return it._head_of_line() if it is not None else {}

    liveness = Liveness(probe, rule, head_of_line, readers)
    probe.watch(liveness.tick)
    return liveness


class IteratorProbe:
    """What an adoption hands an iterator: the loader's recorder and epochs, this iterator's workers."""

    def __init__(self, probe: Recorder, epochs: EpochCounter, rule: StuckRule,
                 readers: dict[int, RingReader], inspect: Any) -> None:
        self.probe, self.epochs, self.rule, self.readers, self.inspect = probe, epochs, rule, readers, inspect


def tap_dispatch(index_queue: Any, worker: int, given: IteratorProbe, *, unwrap: bool) -> None:
    """Record every task torch sends to ``worker``: ``_try_put_index`` puts ``(send_idx, index)`` on the
    worker's index queue, then sets ``_task_info[send_idx]``; ``unwrap``: the iterator's own
    ``_try_put_index`` (torchdata's) puts ``(send_idx, (index, snapshot))``.

    An instance attribute on the queue, as the pin tap's: one call a task, where wrapping
    ``_try_put_index`` and ``_next_index`` took two and two ``super()`` look-ups. ``_ResumeIteration``,
    torchdata's ``_AckStartup`` and the final ``None`` are not tasks: they pass unrecorded."""
    put, append, epochs, note = index_queue.put, given.probe.pending.append, given.epochs, given.probe.note

    def tapped_put(obj: Any, block: bool = True, timeout: float | None = None) -> None:
        if type(obj) is tuple:
            try:
                idx, index = obj
                if unwrap:
                    index = index[0]
                append(("dispatch", monotonic(), idx, worker, index))
                if epochs.indices is not None:
                    epochs.dispatched(index)
            except Exception as exc:
                report("dispatch record", exc, note)
        put(obj, block, timeout)

    index_queue.put = tapped_put


class MultiProcessProbe:
    """Mixed in before a multi-process iterator class; attached before it dispatches anything."""

    _rcvd_idx: int
    _send_idx: int
    _pin_memory: bool
    _workers: list[Any]
    _data_queue: Any
    _timeout: float

    def _probe_attach(self, given: IteratorProbe) -> None:
        self._probe = given.probe
        self._probe_pid = os.getpid()
        self._append = given.probe.pending.append  # the hot path: rows of ``events.ROW_FIELDS``
        self._epochs = given.epochs
        self._readers = given.readers
        self._liveness = watch_consumer(self, given.probe, given.rule, given.readers)
        self._liveness.inspect = self._inspect = given.inspect
        self._pin_tap = PinTap(given.probe)
        self._released: tuple[int, int, bool] | None = None
        self._arrived: int | None = None
        self._exited = False
        self._probe_yields = self._probe_first = 0
        given.probe.readers = given.readers  # liveness, ask_values and drains follow the newest iterator

    def _tap_result_queue(self, queue: Any) -> None:
        if self._pin_memory:  # decided by torch's base __init__, before any queue is made
            self._pin_tap.tap_get(queue)

    _task_info = _ObservedTaskInfo()

    def _reset(self, loader: Any, first_iter: bool = False, *args: Any, **kwargs: Any) -> None:
        try:
            if first_iter:
                for worker_id, process in enumerate(self._workers):
                    self._probe.note("worker_start", worker=worker_id, pid=process.pid)
                if self._pin_memory:  # no task is dispatched yet, so nothing can be put before this
                    self._pin_tap.tap_put(self._data_queue)
            self._epochs.start(self)
        except Exception as exc:
            report("epoch start", exc, self._probe.note)
        try:
            super()._reset(loader, first_iter, *args, **kwargs)  # type: ignore[misc]
        except BaseException as exc:  # the user's sampler, or a worker that died at once
            without_probe_frames(exc)
            raise
        self._follow_length_warning()  # torch's _reset reads the loader's len() afresh each epoch

    def _get_data(self) -> Any:
        try:
            result = super()._get_data()  # type: ignore[misc]
        except Exception as exc:  # torch's RuntimeError, or a broken pipe from a worker that is exiting
            self._record_failure(exc)
            raise
        try:
            idx = result[0]
            info = self._task_info.get(idx) if type(idx) is int else None
            if info is not None:  # None: a resume marker or a stale result of an abandoned epoch
                self._append(("arrive", monotonic(), idx, info[0]))
                self._arrived = None if is_stop(result[1]) else idx
        except Exception as exc:
            report("arrival record", exc, self._probe.note)
        return result

    def _process_data(self, data: Any, *args: Any) -> Any:
        """torch 2.13 passes ``(data, worker_idx)``, torch 2.4 ``(data)`` alone (``_process_data`` in
        ``torch/utils/data/dataloader.py``): the worker is the one of the task just released."""
        if isinstance(data, ExceptionWrapper):
            try:
                released = self._released
                worker = args[0] if args else released[1] if released else None
                self._probe.note("error", idx=released[0] if released else None, worker=worker,
                                 **_exception_fields(data))
            except Exception as exc:
                report("error record", exc)
        return super()._process_data(data, *args)  # type: ignore[misc]

    def __next__(self) -> Any:
        try:
            return self._observed(super().__next__, monotonic())  # type: ignore[misc]
        except BaseException as exc:  # StopIteration included: the outermost of the probe's frames cuts them
            without_probe_frames(exc)
            raise

    def _observed(self, step: Callable[[], Any], start: float) -> Any:
        """One ``next()``: ``step()`` (torch's ``__next__``, or its ``_next_data``), begun at ``start``."""
        self._liveness.next_started = start
        before = LOOP.inside
        try:
            data = step()
        except StopIteration:
            self._end_epoch(abandoned=False)
            raise
        finally:
            self._liveness.next_started = None
            now = monotonic()
            loop_step(self._probe, before, start, now)
        released = self._released
        if released is not None:
            self._append(("yield", now, released[0], now - start, released[2]))
        self._probe_yields += 1
        return data

    def _follow_length_warning(self) -> None:
        """Be the class whose ``__next__`` is the iterator's own while torch may warn from it (this epoch)."""
        try:
            plain, quiet = type(self)._probe_variants  # type: ignore[attr-defined]
            wanted = quiet if getattr(self, "_IterableDataset_len_called", None) is not None else plain
            if type(self) is not wanted:
                self.__class__ = wanted
        except Exception as exc:
            report("length warning", exc, self._probe.note)

    def _end_epoch(self, abandoned: bool) -> None:
        try:
            self._epochs.end(self, abandoned)
        except Exception as exc:
            report("epoch end", exc, self._probe.note)

    def _record_failure(self, exc: Exception) -> None:
        """Name what torch's exception is about, with what every worker was doing."""
        try:
            self._probe.drain_all()
            if "timed out" in str(exc):
                self._probe.note("timeout", seconds=self._timeout, workers=self._liveness.activity())
                return
            # A broken pipe or a failed fd hand-over (OSError, EOFError) means a worker is exiting right now.
            self._note_deaths(grace=DEATH_GRACE if isinstance(exc, (OSError, EOFError)) else 0.0)
        except Exception as failure:
            report("failure record", failure, self._probe.note)

    def _note_deaths(self, grace: float = 0.0) -> None:
        """Report workers that died (waiting up to ``grace`` s for one whose pipe already broke)."""
        deadline = monotonic() + grace
        self._liveness.check_deaths()
        while not self._liveness.dead and monotonic() < deadline:
            time.sleep(0.01)
            self._liveness.check_deaths()
        self._note_reaped()

    def _note_reaped(self, *, shut_down: bool = False) -> None:
        """Report workers that died and were reaped before the probe saw them: by torch's ``is_alive``,
        or, ``shut_down``, by the ``join`` of torch's ``_shutdown_workers`` (a worker killed while its
        pipe was already broken may become a zombie only after the shutdown began, on a busy machine).
        After the shutdown a SIGTERM is torch's own ``terminate()`` of a worker that did not stop in
        time, not a death."""
        for worker_id, process in enumerate(self._workers):
            code = process.exitcode
            if code in (None, 0) or worker_id in self._liveness.dead or (shut_down and code == -signal.SIGTERM):
                continue
            self._liveness.dead.add(worker_id)
            reader = self._readers.get(worker_id)
            doing = (reader.current() if reader is not None else None) or {"idx": None}
            self._probe.note("worker_died", worker=worker_id, pid=process.pid, exitcode=code,
                             signal=signal_name(code), **doing)

    def _head_of_line(self) -> dict[str, Any]:
        """The task the consumer waits for, and the worker that holds it."""
        idx = self._rcvd_idx
        info = self._task_info.get(idx)
        return {"waiting_for": idx, "held_by": info[0] if info else None, "has_data": bool(info and len(info) == 2)}

    def _shutdown_workers(self) -> None:
        # An iterator still alive at interpreter exit is shut down by the collector after the run
        # has ended (the atexit hook closed its recorder) and while module globals are torn down:
        # there is nothing left to record, and the bookkeeping would only fail.
        # torch's SIGCHLD handler may raise inside the shutdown's join (a worker that died just then):
        # what the workers did is recorded all the same, and torch's exception goes on as it raised it.
        # A worker forked while this iterator was garbage in a cycle (torch's reraise leaves one) may collect
        # it first, and torch's __del__ then runs this in the worker: the bookkeeping is the parent's (its
        # queues, its stack files), and the worker read the parent's description queue and blocked for good.
        first = not self._exited and getattr(self, "_workers", None) is not None and not sys.is_finalizing() \
            and os.getpid() == self._probe_pid
        if first:
            self._before_shutdown()
        try:
            super()._shutdown_workers()  # type: ignore[misc]
        except BaseException as exc:
            without_probe_frames(exc)
            raise
        finally:
            if first:
                self._exited = True
                self._after_shutdown()

    def _before_shutdown(self) -> None:
        try:
            self._probe.unwatch(self._liveness.tick)  # from here on, workers exiting is expected
            if not self._epochs.superseded(self):
                self._note_deaths()  # a death torch raised about outside _get_data
        except Exception as exc:
            report("shutdown record", exc, self._probe.note)

    def _after_shutdown(self) -> None:
        try:
            self._liveness.take_batch_info()
            _close(self._inspect)
            for reader in self._readers.values():
                _remove(reader.dump_path)
            if not self._epochs.superseded(self):  # before its epoch ends: an epoch cut by a death is no peek
                self._note_reaped(shut_down=True)
            # torch shuts workers down before raising StopIteration: an epoch is abandoned only
            # if tasks are still in flight (a `break`, an error, the iterator dropped mid-epoch).
            self._epochs.end(self, abandoned=bool(self._task_info))
            for worker_id, process in enumerate(self._workers):
                self._probe.note("worker_exit", worker=worker_id, pid=process.pid, exitcode=process.exitcode)
        except Exception as exc:
            report("shutdown record", exc, self._probe.note)


def _close(queue: Any) -> None:
    """Close the workers' description queue; at interpreter exit its pipes may be gone already."""
    try:
        if queue is not None:
            queue.close()
    except OSError:
        pass


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class LengthWarningProbe(MultiProcessProbe):
    """A multi-process iterator in an epoch where torch may warn from its ``__next__``: ``len()`` was asked of a
    loader over an IterableDataset, and torch warns (``stacklevel=2``) once the yields pass it. Its ``__next__``
    is the iterator class's own (``adopt``), so that warning names the user's loop as without loaderscope. A
    ``next()`` then runs from torch's first read in ``__next__`` (``record_function(self._profile_name)``) to
    the end of its ``_next_data``: the profiler's exit after it, a few µs, is the loop's."""

    @property
    def _profile_name(self) -> str:
        self._liveness.next_started = self.__dict__["_probe_began"] = monotonic()
        try:
            return self.__dict__["_profile_name"]  # type: ignore[no-any-return]
        except KeyError:  # as torch's iterator without it would say
            raise AttributeError("_profile_name") from None

    @_profile_name.setter
    def _profile_name(self, name: str) -> None:
        self.__dict__["_profile_name"] = name

    def _next_data(self) -> Any:
        began = self.__dict__.pop("_probe_began", None)
        try:
            return self._observed(super()._next_data, monotonic() if began is None else began)  # type: ignore[misc]
        except BaseException as exc:
            without_probe_frames(exc)
            raise
