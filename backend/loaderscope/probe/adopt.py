"""Putting the probe in front of whatever iterator a loader builds, before it dispatches anything.

A DataLoader subclass may build its own iterator classes (torchdata's ``StatefulDataLoader`` does,
with checkpointable state), so the probe cannot construct torch's iterators in their place. It
lets the loader's own ``_get_iterator`` run and adopts the iterator it builds, at the one moment
every iterator passes through: the end of ``_BaseDataLoaderIter.__init__`` in
``torch/utils/data/dataloader.py``, which each iterator's ``__init__`` calls first, before it
starts workers or dispatches a task. There the iterator's class becomes ``(Probe mixin, its class)``
and the probe attaches; the rest of its ``__init__`` then runs through the mixin.

The hook on ``_BaseDataLoaderIter.__init__`` is installed once and acts only for a loader that is
being adopted on this thread; every other iterator in the process passes through untouched.
Worker processes get their status rings through the multiprocessing context, which the adoption
lends the loader for the duration of ``_get_iterator``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch.multiprocessing

from loaderscope.probe.faults import report
from loaderscope.probe.iterators import EpochCounter, IteratorProbe, LengthWarningProbe, MultiProcessProbe, tap_dispatch
from loaderscope.probe.liveness import StuckRule
from loaderscope.probe.protocol import private
from loaderscope.probe.recorder import Recorder
from loaderscope.probe.singleprocess import SingleProcessProbe, TorchSingleProcessProbe
from loaderscope.probe.stacks import new_dump_path
from loaderscope.probe.worker import Ring, RingReader, probed_worker_loop, worker_loop_args

_BaseDataLoaderIter = private("torch.utils.data.dataloader:_BaseDataLoaderIter")
_SingleProcessDataLoaderIter = private("torch.utils.data.dataloader:_SingleProcessDataLoaderIter")
_MultiProcessIter = private("torch.utils.data.dataloader:_MultiProcessingDataLoaderIter")
CONTEXT_ATTR = "_DataLoader__multiprocessing_context"  # behind DataLoader.multiprocessing_context
# What a multi-process iterator must have for the probe to follow its protocol.
MULTI_PROCESS_PROTOCOL = ("_reset", "_try_put_index", "_get_data", "_process_data", "_shutdown_workers",
                          "_next_data")
_MISSING = object()
_current = threading.local()
_probed_classes: dict[tuple[type, bool], type | None] = {}


class _ProbedContext:
    """Stands in for the multiprocessing context so each worker is started with a status ring."""

    def __init__(self, context: Any, given: IteratorProbe, on_result_queue: Any, on_worker: Any) -> None:
        self._context = context
        self._given = given
        self._on_result_queue = on_result_queue  # called with the first Queue made: the result queue
        self._on_worker = on_worker  # called with each worker's index queue and id, before it starts

    def Queue(self, *args: Any, **kwargs: Any) -> Any:
        queue = self._context.Queue(*args, **kwargs)
        if self._on_result_queue is not None:
            callback, self._on_result_queue = self._on_result_queue, None
            callback(queue)
        return queue

    def Process(self, *, target: Any, args: tuple[Any, ...], **kwargs: Any) -> Any:
        where = worker_loop_args(target)
        if where is None:  # not a DataLoader worker: leave it alone
            return self._context.Process(target=target, args=args, **kwargs)
        worker = args[where.worker_id]
        try:  # before the worker starts: no task can be put before this
            self._on_worker(args[where.index_queue], worker)
        except Exception as exc:
            report("dispatch tap", exc, self._given.probe.note)
        try:
            ring = Ring()
            dump_path = new_dump_path(worker)
            self._given.readers[worker] = RingReader(worker, ring, dump_path)
        except Exception as exc:
            report("worker ring", exc)
            return self._context.Process(target=target, args=args, **kwargs)
        return self._context.Process(target=probed_worker_loop,
                                     args=(ring, dump_path, self._given.inspect, target, where, *args), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def probed_class(cls: type, multi: bool) -> type | None:
    """``cls`` with the probe mixed in front, or None when it does not follow torch's protocol."""
    key = (cls, multi)
    if key not in _probed_classes:
        _probed_classes[key] = _make_probed_class(cls, multi)
    return _probed_classes[key]


def _make_probed_class(cls: type, multi: bool) -> type | None:
    if issubclass(cls, (MultiProcessProbe, SingleProcessProbe)):
        return None
    if multi and not all(hasattr(cls, name) for name in MULTI_PROCESS_PROTOCOL):
        return None
    if not multi and not hasattr(cls, "_next_data"):
        return None
    if multi:
        return _multi_process_variants(cls)
    mixin = TorchSingleProcessProbe if cls is _SingleProcessDataLoaderIter else SingleProcessProbe
    return type(f"Probed{cls.__name__}", (mixin, cls), {"__module__": __name__})


def _multi_process_variants(cls: type) -> type:
    """The probed class, and its twin for epochs where torch may warn from ``__next__`` (``LengthWarningProbe``,
    whose ``__next__`` is ``cls``'s own): an iterator moves between them at each ``_reset``."""
    plain = type(f"Probed{cls.__name__}", (MultiProcessProbe, cls), {"__module__": __name__})
    own_next = cls.__next__  # type: ignore[attr-defined]
    quiet = type(f"Probed{cls.__name__}", (LengthWarningProbe, cls), {"__module__": __name__, "__next__": own_next})
    plain._probe_variants = quiet._probe_variants = (plain, quiet)  # type: ignore[attr-defined]
    return plain


class Adoption:
    """One ``_get_iterator`` call of an instrumented loader: lends the context, adopts the iterator."""

    def __init__(self, loader: Any, recorder: Recorder, epochs: EpochCounter, rule: StuckRule) -> None:
        self.loader = loader
        self.multi = loader.num_workers > 0
        self.readers: dict[int, RingReader] = {}
        self.inspect: Any = None
        self.given = IteratorProbe(recorder, epochs, rule, self.readers, None)
        self.iterator: Any = None
        self._saved_context: Any = _MISSING

    def __enter__(self) -> Adoption:
        if self.multi:
            try:
                self._lend_context()
            except Exception as exc:
                report("multiprocessing context", exc, self.given.probe.note)
        _current.adoption = self
        return self

    def __exit__(self, *_: Any) -> None:
        _current.adoption = None
        if self._saved_context is not _MISSING:
            vars(self.loader)[CONTEXT_ATTR] = self._saved_context

    def _lend_context(self) -> None:
        context = self.loader.multiprocessing_context or torch.multiprocessing  # torch's default
        self.given.inspect = context.SimpleQueue()
        probed = _ProbedContext(context, self.given, self._result_queue_made, self._worker_made)
        self._saved_context = vars(self.loader).get(CONTEXT_ATTR)
        vars(self.loader)[CONTEXT_ATTR] = probed

    def _result_queue_made(self, queue: Any) -> None:
        if self.iterator is not None and isinstance(self.iterator, MultiProcessProbe):
            self.iterator._tap_result_queue(queue)

    def _worker_made(self, index_queue: Any, worker: int) -> None:
        if isinstance(self.iterator, MultiProcessProbe):  # an iterator left unobserved dispatches unrecorded
            # torch's _try_put_index puts (send_idx, index); torchdata's own (send_idx, (index, snapshot))
            torchs = getattr(type(self.iterator), "_try_put_index", None) is _MultiProcessIter._try_put_index
            tap_dispatch(index_queue, worker, self.given, unwrap=not torchs)

    def adopt(self, iterator: Any) -> None:
        """Called at the end of ``_BaseDataLoaderIter.__init__``, before workers or tasks exist."""
        if self.iterator is not None:
            return
        self.iterator = iterator
        original = type(iterator)
        try:
            probed = probed_class(original, self.multi)
            if probed is None:
                return
            iterator.__class__ = probed
            iterator._probe_attach(self.given)
            self.given.probe.hold(iterator)
        except Exception as exc:
            iterator.__class__ = original  # as it was: torch's iterator, unobserved
            report(f"adopting {original.__name__}", exc, self.given.probe.note)

    def finish(self, iterator: Any) -> None:
        """After the loader's ``_get_iterator``: say what could not be followed, note a resume."""
        try:
            if not isinstance(iterator, (MultiProcessProbe, SingleProcessProbe)):
                if self.iterator is None or self.iterator is iterator:
                    raise TypeError(f"{type(iterator).__qualname__} does not follow torch's DataLoader iterator "
                                    "protocol; this loader runs unobserved")
                return  # an iterator built earlier (StatefulDataLoader.state_dict() builds one ahead)
            self._note_resume(iterator)
        except Exception as exc:
            report(f"observing {type(iterator).__qualname__}", exc, self.given.probe.note)

    def _note_resume(self, iterator: Any) -> None:
        """A checkpointed iterator (torchdata's ``load_state_dict``) starts part-way into its epoch."""
        resumed = iterator._num_yielded - iterator._probe_yields
        if resumed > 0:
            iterator._probe_first = resumed
            self.given.probe.note("epoch_resume", epoch=iterator._probe_epoch, batch=resumed,
                                  replayed=iterator._probe_yields)


def install_hook() -> None:
    """Wrap ``_BaseDataLoaderIter.__init__`` once, so adoptions see each iterator being built (at the
    first adoption: only once ``protocol.followable()`` has found the class).

    torch warns from that ``__init__`` with ``stacklevel=2`` (pin_memory without an accelerator), which
    names its caller: the wrapper must read as torch's own frame, or ``-W ignore::UserWarning:torch.utils.
    data.dataloader`` would no longer match. So it is compiled as part of ``torch/utils/data/dataloader.py``
    (its file, its module's ``__name__``, the line of the ``__init__`` it wraps): warnings and tracebacks
    name torch, as they do without loaderscope.
    """
    original = _BaseDataLoaderIter.__init__
    if getattr(original, "_loaderscope_hook", False):
        return
    __init__ = torch_frame(original, _built)
    __init__._loaderscope_hook = True  # type: ignore[attr-defined]
    _BaseDataLoaderIter.__init__ = __init__


def torch_frame(original: Callable[..., None], after: Callable[[Any, Any], None]) -> Callable[..., None]:
    """``original(self, loader, ...)`` then ``after(self, loader)``, in a frame of ``original``'s own file,
    module and first line."""
    code = original.__code__
    source = "\n" * (code.co_firstlineno - 1) + (
        "def __init__(self, loader, *args, **kwargs): original(self, loader, *args, **kwargs); after(self, loader)")
    namespace: dict[str, Any] = {"__name__": original.__module__, "original": original, "after": after}
    exec(compile(source, code.co_filename, "exec"), namespace)  # our own fixed source
    return functools.wraps(original)(namespace["__init__"])


def _built(iterator: Any, loader: Any) -> None:
    adoption = getattr(_current, "adoption", None)
    if adoption is not None and adoption.loader is loader:
        adoption.adopt(iterator)

