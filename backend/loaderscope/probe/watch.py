"""◆ ``loaderscope.watch(loader)``: instrument a DataLoader someone else built, stream it to a dashboard.

Libraries (Lightning, Hugging Face, mmengine) build the DataLoader for you; ``watch`` changes the
object's class to a subclass of its own class with the probe mixed in, so it keeps every method and
attribute it had and yields exactly what it yielded. Loaders re-created from that class (Lightning
rebuilds them as ``type(loader)(*args, **kwargs)``), copied or unpickled report to the same place,
each as a run of its own.

With a logdir (``logdir=`` or ``$LOADERSCOPE_LOGDIR``) each run is also written to a trace file of its
own there (``probe/logfile.py``); then a dashboard is used only if one is named (``url=`` or
``$LOADERSCOPE_URL``). ``loaderscope record`` watches every DataLoader a command builds through
``auto_watch`` (``loaderscope/autowatch.py``).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

from torch.utils.data import DataLoader

from loaderscope.events import Event
from loaderscope.discovery import find_dashboard
from loaderscope.probe.faults import report
from loaderscope.probe.logfile import Fanout, LogfileSink
from loaderscope.probe.loader import ProbeMixin
from loaderscope.probe.recorder import Recorder
from loaderscope.probe.transport import StreamSink

L = TypeVar("L")
WRAPPER_DEPTH = 2  # how far inside a wrapper's attributes watch() looks for DataLoaders
LOGDIR_ENV, NAME_ENV, JOB_ENV = "LOADERSCOPE_LOGDIR", "LOADERSCOPE_NAME", "LOADERSCOPE_JOB"
URL_ENV = "LOADERSCOPE_URL"


class Destination:
    """Where a watched loader's runs go, and the loader classes instrumented to go there.

    ``automatic``: made by ``auto_watch`` (``loaderscope record``), not by the user; an explicit
    ``watch()`` of such a loader, before its first ``iter()``, sends it where the user says instead.
    """

    def __init__(self, *, dashboard: tuple[str, str | None] | None, sink: Callable[[list[Event]], None] | None,
                 meta: dict[str, Any], logdir: str | None = None, automatic: bool = False) -> None:
        self.dashboard = dashboard
        self.sink = sink
        self.meta = meta
        self.logdir = logdir
        self.automatic = automatic
        self._classes: dict[type, type] = {}
        self._lock = threading.Lock()

    def loader_class(self, base: type) -> type:
        """``(ProbeMixin, base)``, made once per destination and loader class."""
        with self._lock:
            if base not in self._classes:
                self._classes[base] = type(f"Watched{base.__name__}", (ProbeMixin, base), {
                    "__module__": base.__module__, "_probe_destination": self, "_probe_base": base})
            return self._classes[base]

    def attach(self, loader: Any) -> None:
        """Give ``loader`` a probe of its own (a new run) that reports here."""
        stream = StreamSink(*self.dashboard) if self.dashboard is not None else None
        file = LogfileSink(self.logdir) if self.logdir is not None else None
        other = self.sink if self.sink is not None else stream
        sink: Any = other if file is None else file if other is None else Fanout(file, other)
        loader._init_probe(sink, run_id=None, rank=None, meta=self.meta)
        transport: Any = Outlets(stream, file) if file is not None else stream
        if transport is not None:
            object.__setattr__(loader, "_probe_transport", transport)  # ProbeMixin.close() closes it
        # A loader dropped without close() (`for batch in DataLoader(...)`, one built per evaluation)
        # ended normally once it and its iterators are gone: its run must not read as a crash.
        loader._probe.on_abandoned = functools.partial(_end_dropped, loader._probe, transport)
        _open_loaders.add(loader)

    # A copied loader reports to the same place, not to a copy of the sink's list.
    def __copy__(self) -> Destination:
        return self

    def __deepcopy__(self, _memo: dict[int, Any]) -> Destination:
        return self

    def __reduce__(self) -> Any:
        return (_destination, (self.dashboard, self.sink, self.meta, self.logdir, self.automatic))


def _destination(dashboard: tuple[str, str | None] | None, sink: Callable[[list[Event]], None] | None,
                 meta: dict[str, Any], logdir: str | None, automatic: bool) -> Destination:
    return Destination(dashboard=dashboard, sink=sink, meta=meta, logdir=logdir, automatic=automatic)


class Outlets:
    """A run's trace file and, if any, its dashboard stream: closed with the run.
    (A user's own sink is not ours to close.)"""

    def __init__(self, stream: StreamSink | None, file: LogfileSink) -> None:
        self.stream = stream
        self.file = file
        self.closed = False

    def close(self) -> None:
        self.closed = True
        if self.stream is not None:
            self.stream.close()
        self.file.close()


def _end_dropped(recorder: Recorder, transport: Any) -> None:
    """The run of a loader that is gone with all its iterators: ``run_end``, then close quietly.

    This runs inside the garbage collector, on the training thread: sending what is left (up to a
    few seconds for a slow dashboard) happens on a thread of its own, which exit waits for.
    """
    if recorder.closed:  # ended by close() or `with loader:` already
        return
    if recorder.seq or recorder.pending:  # never iterated: nothing to end
        recorder.note("run_end", reason="done", stats={})
    recorder.close()
    if transport is not None:
        threading.Thread(target=transport.close, name="loaderscope-close").start()


def watch(loader: L, *, url: str | None = None, sink: Callable[[list[Event]], None] | None = None,
          logdir: str | os.PathLike[str] | None = None, name: str | None = None,
          stuck_after: float | None = None) -> L:
    """Instrument ``loader`` in place and stream its events to a dashboard; returns the same object.

    Args:
        loader: a ``torch.utils.data.DataLoader`` (or subclass, e.g. torchdata's
            ``StatefulDataLoader``), before iterating it; or a wrapper that holds DataLoaders
            (webdataset's ``WebLoader``, Lightning's ``CombinedLoader``): those inside are watched.
        url: the dashboard (``http://127.0.0.1:8000/?token=...``); default ``$LOADERSCOPE_URL``,
            else (without a logdir) the dashboard this user last started, else a new one started in
            the background.
        sink: instead of a dashboard, a callable that receives lists of event dicts (from a
            background thread; keep it quick).
        logdir: also write each run to a trace file of its own under this directory (default
            ``$LOADERSCOPE_LOGDIR``); with a logdir and no ``url``/``$LOADERSCOPE_URL``, no dashboard.
        name: shown on the dashboard (default: ``$LOADERSCOPE_NAME``, else the script's name).
        stuck_after: seconds after which a fetch is reported stuck (default: max(10 s, 20× median)).

    The training loop never waits for the dashboard: events go to a bounded buffer, a thread sends
    them, reconnects after a restart, and counts what it had to drop. ``loader.close()`` (or leaving
    ``with loader:``) flushes and ends the run; interpreter exit does it too, with reason ``error``
    if the script died of an exception.
    """
    loaders = [loader] if isinstance(loader, DataLoader) else _inner_loaders(loader)
    if not loaders:
        raise TypeError(f"watch() takes a torch.utils.data.DataLoader, or an object that holds one (webdataset's "
                        f"WebLoader, Lightning's CombinedLoader); {type(loader).__name__} holds none. "
                        f"Pass the DataLoader itself: watch(DataLoader(...)).")
    for inner in loaders:
        if getattr(inner, "_iterator", None) is not None:
            raise RuntimeError("watch() must be called before iterating the loader (its persistent workers "
                               "already run): call watch(loader) right after building it")
    fresh = [inner for inner in loaders if not isinstance(inner, ProbeMixin) or _automatic_and_unstarted(inner)]
    if fresh:
        _instrument(fresh, _new_destination(url, sink, logdir, name, stuck_after, automatic=False))
    return loader


def auto_watch(loader: DataLoader[Any]) -> None:
    """Watch a DataLoader just built, unless it already is (``loaderscope record``, ``autowatch.py``)."""
    if not isinstance(loader, ProbeMixin):
        _instrument([loader], _new_destination(None, None, None, None, None, automatic=True))


def _new_destination(url: str | None, sink: Callable[[list[Event]], None] | None,
                     logdir: str | os.PathLike[str] | None, name: str | None, stuck_after: float | None, *,
                     automatic: bool) -> Destination:
    logdir = logdir or os.environ.get(LOGDIR_ENV) or None
    meta = {"name": name or os.environ.get(NAME_ENV) or os.path.basename(sys.argv[0] or "python"),
            "stuck_after": stuck_after, "job": os.environ.get(JOB_ENV) or None}
    # A logdir alone means no dashboard: on a cluster node there is none to find, and starting one
    # in the background there would serve nobody.
    wants_dashboard = sink is None and (logdir is None or bool(url or os.environ.get(URL_ENV)))
    return Destination(dashboard=find_dashboard(url) if wants_dashboard else None, sink=sink, meta=meta,
                       logdir=os.fspath(logdir) if logdir else None, automatic=automatic)


def _instrument(loaders: list[DataLoader[Any]], destination: Destination) -> None:
    _install_exit_hooks()
    for inner in loaders:
        previous = getattr(inner, "_probe_transport", None)
        if previous is not None:  # an automatic probe that never started: its outlets hold nothing yet
            previous.close()
        inner.__class__ = destination.loader_class(getattr(inner, "_probe_base", None) or type(inner))
        destination.attach(inner)


def _automatic_and_unstarted(loader: ProbeMixin[Any]) -> bool:
    destination = loader._probe_destination
    return destination is not None and destination.automatic and not getattr(loader, "_probe_started", False)


def _inner_loaders(obj: Any) -> list[DataLoader[Any]]:
    """The DataLoaders a wrapper holds in its attributes (lists, tuples and dicts of them too)."""
    found: dict[int, DataLoader[Any]] = {}
    for value in _attribute_values(obj, WRAPPER_DEPTH):
        if isinstance(value, DataLoader):
            found.setdefault(id(value), value)
    return list(found.values())


def _attribute_values(obj: Any, depth: int) -> Iterator[Any]:
    if depth == 0:
        return
    values: list[Any] = []
    if isinstance(obj, Mapping):
        values = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        values = list(obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        values = list(vars(obj).values())
    for value in values:
        yield value
        if not isinstance(value, DataLoader):
            yield from _attribute_values(value, depth - 1)


# --- the end of the script -------------------------------------------------------------------------

_open_loaders: weakref.WeakSet[Any] = weakref.WeakSet()
_failure: dict[str, str] | None = None  # the exception the script died of, if any
_hooks_installed = False


def _install_exit_hooks() -> None:
    """Once: remember an uncaught exception, and end every open run at interpreter exit."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous = sys.excepthook

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        global _failure
        _failure = {"type": exc_type.__name__, "message": str(exc)[:1000]}
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    atexit.register(_close_all)


def _close_all() -> None:
    interrupted = _failure is not None and _failure["type"] == "KeyboardInterrupt"
    reason = "done" if _failure is None else "stopped" if interrupted else "error"
    for loader in list(_open_loaders):
        try:
            loader.close(reason, error=None if interrupted else _failure)
        except Exception:  # interpreter exit: nothing left to break, nothing to report to
            pass
