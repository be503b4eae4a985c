"""The in-process iterator (``num_workers=0``), observed: torch's ``_SingleProcessDataLoaderIter``
(torch/utils/data/dataloader.py) fetches in ``next()`` itself, so worker 0 is the main process and the
probe's cost sits on every batch. It lives apart from ``iterators.py``'s multi-process mixin, whose
``_task_info`` watch it has no use for. The same guard holds: a probe failure is reported once
(``faults``) and the iterator goes on exactly as the unobserved one would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from loaderscope.events import BATCH_ROW
from loaderscope.probe.batchinfo import describe, is_pinned, sizes
from loaderscope.probe.faults import report, without_probe_frames
from loaderscope.probe.iterators import (
    IteratorProbe,
    complete,
    main_exception_fields,
    monotonic,
    pin_memory,
    watch_consumer,
)
from loaderscope.probe.loopclock import LOOP, loop_step


class _FetchTimer:
    """Stands in for an in-process iterator's dataset fetcher: times each fetch, keeps its index.

    ``last`` is ``[index, started, fetched]`` of the latest fetch (a list: item writes are the
    cheapest per batch). Other attribute reads and writes go to the real fetcher (torchdata's state
    handling reads and sets ``dataset_iter`` and ``ended`` on it).
    """

    __slots__ = ("fetcher", "last")

    def __init__(self, fetcher: Any) -> None:
        object.__setattr__(self, "fetcher", fetcher)
        object.__setattr__(self, "last", [None, 0.0, 0.0])

    def fetch(self, index: Any) -> Any:
        last = self.last
        last[0] = index
        last[1] = monotonic()
        data = self.fetcher.fetch(index)
        last[2] = monotonic()
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fetcher, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.fetcher, name, value)


class SingleProcessProbe:
    """Mixed in before an in-process iterator class (``num_workers=0``): worker 0 is the main process.

    Here the probe's cost sits directly on a batch that may take torch only ~10 µs, so a batch is
    one ``BATCH_ROW`` (five events, expanded by the consumer) and a few clock reads. This generic
    form calls the class's own ``_next_data`` and times the fetcher it assigns; torch's own class
    gets ``TorchSingleProcessProbe``, which does the same work with fewer calls.
    """

    _pin_memory: bool
    _pin_memory_device: str
    _probe_yields: int
    _probe_first: int

    def _probe_attach(self, given: IteratorProbe) -> None:
        self._probe = given.probe
        self._append = given.probe.pending.append
        self._epochs = given.epochs
        self._liveness = watch_consumer(self, given.probe, given.rule, {})
        self._probe_timer: _FetchTimer | None = None
        given.epochs.start(self)

    @property
    def _dataset_fetcher(self) -> Any:
        return self._probe_timer

    @_dataset_fetcher.setter
    def _dataset_fetcher(self, fetcher: Any) -> None:
        self._probe_timer = _FetchTimer(fetcher)

    def _head_of_line(self) -> dict[str, Any]:
        return {"waiting_for": self._probe_yields, "held_by": 0, "has_data": False}

    def __del__(self) -> None:
        try:
            self._probe.unwatch(self._liveness.tick)
            if self._epochs.owned_by(self):  # dropped mid-epoch (a `break`): its count is readable only now
                self._epochs.end(self, abandoned=not complete(self))
        except Exception:  # interpreter teardown: nothing left to report to
            pass

    def _next_data(self) -> Any:
        liveness, timer = self._liveness, self._probe_timer
        liveness.next_started = started = monotonic()
        before = LOOP.inside
        last: list[Any] = timer.last if timer is not None else [None, started, started]
        last[0] = None
        try:
            data = super()._next_data()  # type: ignore[misc]
        except StopIteration as stop:  # the sampler, or an iterable dataset, ran out
            self._stopped(stop, last)
            raise
        except BaseException as exc:
            self._failed(exc, last)
            raise
        finally:
            liveness.next_started = None
            loop_step(self._probe, before, started, monotonic())
        index, fetch_started, fetched = last
        if index is None:  # a subclass that fetched without its fetcher: the whole call is the fetch
            fetch_started, fetched = started, monotonic()
        self._record(data, index, started, fetch_started, fetched)
        return data

    def _record(self, data: Any, index: Any, started: float, fetch_started: float, fetched: float) -> None:
        """One yielded batch: a ``BATCH_ROW`` (or explicit rows around pinning)."""
        idx = self._probe_yields
        self._probe_yields = idx + 1
        try:
            total, pickled = (data.nbytes, 0) if type(data) is Tensor else sizes(data)
            if idx < 3 or self._probe.values_asked:
                self._describe(data, idx, fetched)
            if self._pin_memory:
                self._pinned(data, idx, index, started, fetch_started, fetched, total)
            else:
                self._append((BATCH_ROW, fetched, idx, started, fetch_started, total, pickled, index))
        except Exception as exc:
            report("batch record", exc, self._probe.note)

    def _describe(self, data: Any, idx: int, fetched: float) -> None:
        """Nothing crosses a process boundary in-process: the batch's structure (and values if asked)."""
        probe = self._probe
        asked, probe.values_asked = probe.values_asked, False
        probe.note_at("batch_info", fetched, idx=idx, worker=0, structure=describe(data, values=asked),
                      pickle_bytes=0, values=asked)

    def _stopped(self, stop: StopIteration, last: list[Any]) -> None:
        without_probe_frames(stop)
        try:
            if last[0] is not None:  # an iterable dataset ran out inside this task
                idx = self._probe_yields
                self._explicit(idx, last[0], last[1])
                self._append(("skip", monotonic(), idx, 0))
            self._epochs.end(self)
        except Exception as exc:
            report("epoch end", exc, self._probe.note)

    def _failed(self, exc: BaseException, last: list[Any]) -> None:
        """What ``next()`` raised (the user's dataset, sampler or collate_fn): recorded, and on its way to
        the loop without the probe's frames."""
        without_probe_frames(exc)
        if not isinstance(exc, Exception) or last[0] is None:
            return
        try:
            idx = self._probe_yields
            self._explicit(idx, last[0], last[1])
            self._probe.note("error", idx=idx, worker=0, **main_exception_fields(exc))
        except Exception as failure:
            report("error record", failure, self._probe.note)

    def _pinned(self, data: Any, idx: int, index: Any, started: float, fetch_started: float, fetched: float,
                total: int) -> None:
        """torch pinned the batch right after the fetch, inside ``_next_data``: the rest of its time."""
        self._explicit(idx, index, fetch_started)
        pinned = monotonic()
        self._append(("fetch_end", fetched, 0, idx, fetched - fetch_started, total, 0))
        self._probe.note_at("pin_start", fetched, idx=idx)
        self._probe.note_at("pin_end", pinned, idx=idx, dt=pinned - fetched, nbytes=total, pinned=is_pinned(data))
        self._append(("arrive", pinned, idx, 0))
        self._append(("yield", pinned, idx, pinned - started, False))

    def _explicit(self, idx: int, index: Any, fetch_started: float) -> None:
        """A batch's dispatch and fetch start one by one, where a ``BATCH_ROW`` does not cover it
        (pinning, a failed fetch)."""
        self._append(("dispatch", fetch_started, idx, 0, index))
        self._append(("fetch_start", fetch_started, 0, idx, len(index) if isinstance(index, (list, tuple)) else 1))



class TorchSingleProcessProbe(SingleProcessProbe):
    """torch's own ``_SingleProcessDataLoaderIter``: its four-line ``_next_data``
    (torch/utils/data/dataloader.py) done here with the probe's clock reads between the steps,
    so a batch costs the training thread two clock reads and one row instead of three extra calls.
    A plain tensor batch past the first few is recorded inline: on a ~10 µs batch, the call to
    ``_record`` and its second look at ``_pin_memory`` cost 0.15-0.3 µs of the probe's ~1.5 µs."""

    _dataset_fetcher: Any = None  # a plain attribute again: nothing wraps torch's fetcher here
    _next_index: Callable[[], Any]

    def _probe_attach(self, given: IteratorProbe) -> None:
        super()._probe_attach(given)
        del self._probe_timer

    def _next_data(self) -> Any:
        liveness = self._liveness
        liveness.next_started = started = monotonic()
        before = LOOP.inside
        index = None
        pinned = self._pin_memory
        try:
            index = self._next_index()
            data = self._dataset_fetcher.fetch(index)
            fetched = monotonic()
            if pinned:
                data = pin_memory(data, self._pin_memory_device)
        except StopIteration as stop:
            self._stopped(stop, [index, started, started])
            raise
        except BaseException as exc:
            self._failed(exc, [index, started, started])
            raise
        finally:
            liveness.next_started = None
            loop_step(self._probe, before, started, monotonic())
        idx = self._probe_yields
        if idx > 2 and type(data) is Tensor and not pinned and not self._probe.values_asked:
            self._probe_yields = idx + 1
            try:  # what _record does for this batch, without the call
                self._append((BATCH_ROW, fetched, idx, started, started, data.nbytes, 0, index))
            except Exception as exc:
                report("batch record", exc, self._probe.note)
            return data
        self._record(data, index, started, started, fetched)
        return data
