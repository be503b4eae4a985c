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
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Any, TypeVar

from torch.utils.data import DataLoader

from loaderscope.discovery import find_dashboard
from loaderscope.events import Event
from loaderscope.probe.faults import report, without_probe_frames
from loaderscope.probe.loader import ProbeMixin, failure
from loaderscope.probe.logfile import Fanout, LogfileSink
from loaderscope.probe.names import caller_frame, claim, loader_name, place, rebuilding
from loaderscope.probe.recorder import Recorder
from loaderscope.probe.transport import StreamSink
from loaderscope.traces.paths import running_command, this_job

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
                 meta: dict[str, Any], logdir: str | None = None, automatic: bool = False,
                 trace_format: str | None = None) -> None:
        self.dashboard = dashboard
        self.sink = sink
        self.meta = meta
        self.logdir = logdir
        self.trace_format = trace_format
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
        """Give ``loader`` a probe of its own (a new run) that reports here from its first ``iter()``."""
        loader._init_probe(None, run_id=None, rank=None, meta=self.meta)
        _open_loaders.add(loader)

    def open(self, loader: Any) -> None:
        """At the run's first ``iter()``: its outlets. A loader never iterated (one a library re-creates or
        rebuilds, then drops) connects to no dashboard and writes no file: it leaves no run at all."""
        stream = StreamSink(*self.dashboard) if self.dashboard is not None else None
        file = LogfileSink(self.logdir, trace_format=self.trace_format) if self.logdir is not None else None
        other = self.sink if self.sink is not None else stream
        loader._probe.sink = other if file is None else file if other is None else Fanout(file, other)
        transport: Any = Outlets(stream, file) if file is not None else stream
        if transport is not None:
            object.__setattr__(loader, "_probe_transport", transport)  # ProbeMixin.close() closes it
        # A loader dropped without close() (`for batch in DataLoader(...)`, one built per evaluation)
        # ended normally once it and its iterators are gone: its run must not read as a crash.
        loader._probe.on_abandoned = functools.partial(_end_dropped, loader._probe, transport)

    # A copied loader reports to the same place, not to a copy of the sink's list.
    def __copy__(self) -> Destination:
        return self

    def __deepcopy__(self, _memo: dict[int, Any]) -> Destination:
        return self

    def __reduce__(self) -> Any:
        return (_destination, (self.dashboard, self.sink, self.meta, self.logdir, self.automatic, self.trace_format))


def _destination(dashboard: tuple[str, str | None] | None, sink: Callable[[list[Event]], None] | None,
                 meta: dict[str, Any], logdir: str | None, automatic: bool,
                 trace_format: str | None = None) -> Destination:
    return Destination(dashboard=dashboard, sink=sink, meta=meta, logdir=logdir, automatic=automatic,
                       trace_format=trace_format)


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

    This runs on the run's probe thread soon after the collector freed the last of them (or at exit,
    if that comes first); exit waits for it (``recorder._stop_all``), so what is left reaches the
    dashboard and the trace file is finished.
    """
    if recorder.closed:  # ended by close() or `with loader:` already
        return
    if recorder.seq or recorder.pending:  # never iterated: nothing to end
        # Dropped while sys.exit() unwinds the stack (the script's own, or torch's spawn wrapper after
        # an exception): the run ends as the process does.
        reason, error, code = ending() if _exit["code"] is not None else ("done", None, None)
        extra = ({"error": error} if error else {}) | ({"exitcode": code} if code is not None else {})
        recorder.end(reason=reason, stats={}, **extra)
    recorder.close()
    if transport is not None:
        transport.close()


def watch(loader: L, *, url: str | None = None, sink: Callable[[list[Event]], None] | None = None,
          logdir: str | os.PathLike[str] | None = None, name: str | None = None,
          stuck_after: float | None = None, trace_format: str | None = None) -> L:
    """Instrument ``loader`` in place and stream its events to a dashboard; returns the same object.

    Args:
        loader: a ``torch.utils.data.DataLoader`` (or subclass, e.g. torchdata's
            ``StatefulDataLoader``), before iterating it; or an adapter or wrapper that holds
            DataLoaders (accelerate's ``DataLoaderShard``, webdataset's ``WebLoader``, Lightning's
            ``CombinedLoader``): those inside are watched, and that is said on stderr.
        url: the dashboard (``http://127.0.0.1:8000/?token=...``); default ``$LOADERSCOPE_URL``,
            else (without a logdir) the dashboard this user last started, else a new one started in
            the background.
        sink: instead of a dashboard, a callable that receives lists of event dicts (from a
            background thread; keep it quick).
        logdir: also write each run to a trace file of its own under this directory (default
            ``$LOADERSCOPE_LOGDIR``); with a logdir and no ``url``/``$LOADERSCOPE_URL``, no dashboard.
        name: the runs' name (default: ``$LOADERSCOPE_NAME``, else the name the caller's code gives
            the loader, else ``file:line``: ``probe/names.py``).
        stuck_after: seconds after which a fetch is reported stuck (default: max(10 s, 20× median)).
        trace_format: the logdir traces' format, ``"jsonl"`` or ``"parquet"`` (``loaderscope[columnar]``);
            default ``$LOADERSCOPE_FORMAT``, else JSON lines. A bad one is said once; JSON lines are written.

    The training loop never waits for the dashboard: events go to a bounded buffer, a thread sends
    them, reconnects after a restart, and counts what it had to drop. ``loader.close()`` (or leaving
    ``with loader:``) flushes and ends the run; interpreter exit does it too, with the exit status,
    and reason ``error`` and the exception if the process died of one (``ending``).
    """
    found: list[tuple[str, Any]] = [("", loader)] if _is_loader(loader) else _inner_loaders(loader)
    if not found:
        raise TypeError(f"watch() takes a torch.utils.data.DataLoader, or an object that holds one (accelerate's "
                        f"DataLoaderShard, webdataset's WebLoader, Lightning's CombinedLoader); "
                        f"{type(loader).__name__} holds none. Pass the DataLoader itself: watch(DataLoader(...)).")
    for _, inner in found:
        if getattr(inner, "_iterator", None) is not None:
            raise RuntimeError("watch() must be called before iterating the loader (its persistent workers "
                               "already run): call watch(loader) right after building it")
    fresh = [inner for _, inner in found if not isinstance(inner, ProbeMixin) or _automatic_and_unstarted(inner)]
    if fresh:
        name = name or os.environ.get(NAME_ENV) or _found(caller_frame(1), loader)
        watched = _instrument(fresh, _new_destination(url, sink, logdir, name, stuck_after, automatic=False,
                                                        trace_format=trace_format))
        if found[0][0] and watched:  # an adapter or a wrapper: say which loaders inside it are watched
            places = ", ".join(f"{type(loader).__name__}{path}" for path, inner in found
                               if any(inner is done for done in watched))
            _say(f"watch() watches the DataLoader{'s' if len(watched) > 1 else ''} inside the "
                 f"{type(loader).__name__}: {places}")
        try:
            for inner in watched:
                _rebuilds.remember(inner)
            _hook_dataloader_init()
        except Exception as exc:  # a rebuilt loader then runs unwatched; this one is watched all the same
            report("watching rebuilt loaders", exc)
    return loader


def auto_watch(loader: DataLoader[Any]) -> None:
    """Watch a DataLoader just built, unless it already is (``loaderscope record``, ``autowatch.py``).

    A loader a library rebuilt from one not iterated yet (accelerate's ``prepare()``, inside the
    ``Trainer`` too) takes that one's name."""
    if isinstance(loader, ProbeMixin):
        return
    frame = caller_frame(1)
    source = _rebuilds.source(loader, frame)
    name = os.environ.get(NAME_ENV) or \
        (source._probe_meta.get("name") if source is not None else _found(frame, loader, built=True))
    _instrument([loader], _new_destination(None, None, None, name, None, automatic=True))
    if source is None:
        _rebuilds.remember(loader)
    elif source._probe_destination.automatic:
        _rebuilds.forget(source)


def _found(frame: FrameType | None, loader: Any, *, built: bool = False) -> str | None:
    """The name the code gives the loader, told apart from another loader's (``probe/names.py``)."""
    try:
        found = loader_name(frame, loader, built=built)
        return claim(found) if found is not None else None
    except Exception as exc:  # the loader is watched all the same, named by the command that runs it
        report("naming the loader", exc)
        return None


def _new_destination(url: str | None, sink: Callable[[list[Event]], None] | None,
                     logdir: str | os.PathLike[str] | None, name: str | None, stuck_after: float | None, *,
                     automatic: bool, trace_format: str | None = None) -> Destination:
    logdir = logdir or os.environ.get(LOGDIR_ENV) or None
    # One rule for the job, where the runs go to a logdir (§18); a dashboard alone groups the ranks
    # by their launcher's id (probe/loader.py, job_id)
    job = this_job() if logdir or os.environ.get(JOB_ENV) else None
    meta = {"name": name or running_command(), "stuck_after": stuck_after, "job": job}
    # A logdir alone means no dashboard: on a cluster node there is none to find, and starting one
    # in the background there would serve nobody.
    wants_dashboard = sink is None and (logdir is None or bool(url or os.environ.get(URL_ENV)))
    return Destination(dashboard=find_dashboard(url) if wants_dashboard else None, sink=sink, meta=meta,
                       logdir=os.fspath(logdir) if logdir else None, automatic=automatic, trace_format=trace_format)


def _instrument(loaders: list[DataLoader[Any]], destination: Destination) -> list[DataLoader[Any]]:
    """Instrument what can be; the rest runs on untouched, said once per class. Returns those instrumented."""
    _install_exit_hooks()
    done = []
    for inner in loaders:
        base = getattr(inner, "_probe_base", None) or type(inner)
        try:
            inner.__class__ = destination.loader_class(base)
        except (TypeError, AttributeError) as exc:  # a layout or a __class__ of its own that refuses it
            _say(f"cannot watch the {base.__name__} ({exc}); it runs on as it is, unobserved")
            continue
        destination.attach(inner)
        done.append(inner)
    return done


def _automatic_and_unstarted(loader: ProbeMixin[Any]) -> bool:
    destination = loader._probe_destination
    return destination is not None and destination.automatic and not getattr(loader, "_probe_started", False)


def _is_loader(obj: Any) -> bool:
    """A DataLoader itself. ``type()``, not ``isinstance``: an adapter (accelerate's ``DataLoaderShard``)
    answers ``__class__`` with the class of the loader it wraps, and its own class cannot be switched."""
    return issubclass(type(obj), DataLoader)


def _inner_loaders(obj: Any) -> list[tuple[str, DataLoader[Any]]]:
    """The DataLoaders an adapter or wrapper holds in its attributes (lists, tuples and dicts of them
    too), each with where it was found (``.base_dataloader``, ``.pipeline[0]``)."""
    found: dict[int, tuple[str, DataLoader[Any]]] = {}
    for path, value in _attribute_values(obj, WRAPPER_DEPTH, ""):
        if _is_loader(value):
            found.setdefault(id(value), (path, value))
    return list(found.values())


def _attribute_values(obj: Any, depth: int, path: str) -> Iterator[tuple[str, Any]]:
    if depth == 0:
        return
    items: list[tuple[str, Any]] = []
    if isinstance(obj, Mapping):
        items = [(f"[{key!r}]", value) for key, value in obj.items()]
    elif isinstance(obj, (list, tuple)):
        items = [(f"[{index}]", value) for index, value in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = [(f".{key}", value) for key, value in vars(obj).items()]
    for key, value in items:
        yield path + key, value
        if not _is_loader(value):
            yield from _attribute_values(value, depth - 1, path + key)


def _say(message: str) -> None:
    if message:
        print(f"loaderscope: {message}", file=sys.stderr, flush=True)


class Rebuilds:
    """Watched loaders that a library may rebuild before iterating them.

    ``accelerator.prepare(loader)`` (accelerate's ``prepare_data_loader``) iterates not the loader it is
    given but a new ``DataLoader`` it builds from that one's dataset, sampler and arguments. A
    ``DataLoader`` that library code builds over the dataset of a watched loader not iterated yet, while
    it holds that loader in a local (``prepare_data_loader(dataloader)``), is its rebuild: it is watched
    in its place, to the same destination, and that is said once. A loader the user's own code builds
    over the same dataset is a loader of its own (``probe/names.py``, ``rebuilding``). (A subclass whose
    ``__init__`` never calls ``DataLoader.__init__``, such as torchdata's ``StatefulDataLoader``, is not
    seen being built.)
    """

    def __init__(self) -> None:
        self._waiting: dict[int, list[weakref.ref[Any]]] = {}  # id(dataset) -> the watched loaders over it
        self._lock = threading.Lock()

    def remember(self, loader: Any) -> None:
        with self._lock:
            refs = [ref for ref in self._waiting.get(id(loader.dataset), []) if ref() is not None]
            self._waiting[id(loader.dataset)] = [*refs, weakref.ref(loader)]

    def forget(self, loader: Any) -> None:
        key = id(loader.dataset)
        with self._lock:
            refs = [ref for ref in self._waiting.get(key, []) if ref() is not None and ref() is not loader]
            if refs:
                self._waiting[key] = refs
            else:
                self._waiting.pop(key, None)

    def source(self, loader: Any, frame: FrameType | None) -> Any:
        """The watched loader, never iterated, that the code building ``loader`` at ``frame`` rebuilds."""
        dataset = getattr(loader, "dataset", None)
        with self._lock:
            refs = list(self._waiting.get(id(dataset), []))
        waiting = [source for source in (ref() for ref in refs) if source is not None and source is not loader
                   and source.dataset is dataset and not getattr(source, "_probe_started", True)]
        return rebuilding(frame, waiting) if waiting else None

    def built(self, loader: Any) -> None:
        """After ``DataLoader.__init__``: watch ``loader`` where the loader it rebuilds was watched to."""
        source = self.source(loader, caller_frame(1))
        if source is None or source._probe_destination.automatic:
            return  # record watches every loader already (auto_watch)
        if isinstance(loader, ProbeMixin) and not _automatic_and_unstarted(loader):
            return
        self.forget(source)
        destination = source._probe_destination
        _instrument([loader], destination)
        _say(f"the watched DataLoader {destination.meta.get('name')!r} was rebuilt before it was iterated (a new "
             f"DataLoader over its dataset, built at {place(caller_frame(2))}, as accelerate's prepare() does): "
             "watching the new one")


_rebuilds = Rebuilds()


def _hook_dataloader_init() -> None:
    """Once: tell ``_rebuilds`` of every DataLoader built from now on."""
    original = DataLoader.__init__
    if getattr(original, "_loaderscope_rebuilds", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            original(self, *args, **kwargs)
        except BaseException as exc:
            without_probe_frames(exc)
            raise
        try:
            _rebuilds.built(self)
        except Exception as exc:  # the new loader runs unwatched rather than not at all
            report("watching a rebuilt loader", exc)

    __init__._loaderscope_rebuilds = True  # type: ignore[attr-defined]
    DataLoader.__init__ = __init__  # type: ignore[method-assign]


# --- the end of the script -------------------------------------------------------------------------

_open_loaders: weakref.WeakSet[Any] = weakref.WeakSet()
_exit: dict[str, Any] = {"code": None, "failure": None}  # what sys.exit() was called with, and while handling
_hooks_installed = False


def _install_exit_hooks() -> None:
    """Once: note what ``sys.exit()`` is called with, and end every open run at interpreter exit.

    ``sys.exit`` is where a run's end is decided whatever path the process takes: the script's own
    ``sys.exit(3)``, and torch's spawn wrapper (``torch/multiprocessing/spawn.py``, ``_wrap``), which
    catches a rank's exception and calls ``sys.exit(1)`` so that ``sys.excepthook`` never sees it.
    An exception that reaches the top is read at exit from ``sys.last_value``, which the interpreter
    sets before it calls any ``sys.excepthook``, the script's own included.
    """
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    sys.exit = _noting_exit(sys.exit)
    atexit.register(_close_all)


def _noting_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def exit(status: object = None, /) -> Any:
        try:
            _exit["code"] = status_code(status)
            handled = sys.exc_info()[1]
            if _exit["failure"] is None and _exit["code"] and isinstance(handled, Exception):
                _exit["failure"] = handled
        except Exception:  # exiting goes on whatever happens here
            pass
        return original(status)

    return exit


def status_code(status: object) -> int:
    """The process's exit status for ``sys.exit(status)``."""
    return 0 if status is None else status if isinstance(status, int) else 1


def ending() -> tuple[str, dict[str, str] | None, int]:
    """(reason, error, exit status) of a process that is exiting now."""
    uncaught = None if hasattr(sys, "ps1") or sys.flags.interactive else getattr(sys, "last_value", None)
    if isinstance(uncaught, KeyboardInterrupt):
        return "stopped", None, 128 + signal.SIGINT  # the interpreter ends itself with SIGINT
    if isinstance(uncaught, BaseException) and not isinstance(uncaught, SystemExit):
        return "error", failure(uncaught), 1
    code = _exit["code"] if _exit["code"] is not None else 0
    if _exit["failure"] is not None:
        return "error", failure(_exit["failure"]), code
    if code:
        return "error", {"type": "SystemExit", "message": f"exit status {code}"}, code
    return "done", None, 0


def _close_all() -> None:
    reason, error, code = ending()
    for loader in list(_open_loaders):
        try:
            loader.close(reason, error=error, exitcode=code)
        except Exception:  # interpreter exit: nothing left to break, nothing to report to
            pass
