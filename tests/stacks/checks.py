"""Shared checks for the tests against real training stacks (tests/stacks/test_*.py).

Each stack test runs a real library twice, vanilla and watched (``loaderscope.watch(loader,
sink=events)``), and asserts the watched run is the vanilla run plus a trace:

- ``assert_same`` — the same batches in the same order (``torch.equal`` on every tensor leaf,
  exact equality on everything else);
- ``assert_trace`` — a conformant trace, the right rank in every event, and each epoch's
  ``epoch_end`` counting the batches the loop consumed (``abandoned`` only where it stopped early);
- ``Children`` — no worker process left over once the loop is done and the loader closed;
- ``Warnings`` — no warning the vanilla run did not give too.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

import loaderscope
from loaderscope.model import conformance
from loaderscope.probe.loader import ProbeMixin

try:
    import psutil
except ImportError:  # /proc is enough on Linux
    psutil = None


class Events:
    """A ``sink=`` for ``watch()``: keeps every event it is handed (a list of dicts, or one dict)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[dict[str, Any]] = []

    def __call__(self, events: Any) -> None:
        with self._lock:
            if isinstance(events, Mapping):
                self.items.append(dict(events))
            else:
                self.items.extend(events)

    def __len__(self) -> int:
        return len(self.items)

    def runs(self) -> dict[str, list[dict[str, Any]]]:
        """Events by run id, each run's in seq order (the order the probe numbered them)."""
        with self._lock:
            items = list(self.items)
        runs: dict[str, list[dict[str, Any]]] = {}
        for event in items:
            runs.setdefault(event["run"], []).append(event)
        return {run: sorted(events, key=lambda e: e["seq"]) for run, events in runs.items()}

    def only_run(self) -> list[dict[str, Any]]:
        runs = self.runs()
        assert len(runs) == 1, f"expected one run, got {len(runs)}: {sorted(runs)}"
        return next(iter(runs.values()))


def iterated_runs(events: Events) -> list[list[dict[str, Any]]]:
    """The runs of ``events`` that iterated at least once (a loader a library copied and never
    iterated may report a run with no epoch)."""
    return [run for run in events.runs().values() if any(e["kind"] == "epoch_start" for e in run)]


def only_iterated(events: Events) -> list[dict[str, Any]]:
    runs = iterated_runs(events)
    assert len(runs) == 1, f"expected one iterated run, got {len(runs)} (of {len(events.runs())} runs)"
    return runs[0]


def watch(loader: Any, events: Events, **kwargs: Any) -> Any:
    """``loaderscope.watch(loader, sink=events)``; checks it hands back the same object."""
    watched = loaderscope.watch(loader, sink=events, **kwargs)
    assert watched is loader
    return watched


def probed_loaders(obj: Any) -> list[ProbeMixin]:
    """The instrumented DataLoaders in ``obj``: itself, or those inside a wrapper's ``pipeline``
    (webdataset's WebLoader keeps its DataLoader as ``pipeline[0]``)."""
    if isinstance(obj, ProbeMixin):
        return [obj]
    return [stage for stage in getattr(obj, "pipeline", []) if isinstance(stage, ProbeMixin)]


def close(obj: Any) -> None:
    """End a watched loader's run (flushes its events); idempotent."""
    closer = getattr(obj, "close", None)
    if callable(closer):
        closer()
    for loader in probed_loaders(obj):
        loader.close()


# ---------------------------------------------------------------- batches


def clone(batch: Any) -> Any:
    """A deep copy of a batch's tensors (a batch from workers may sit in shared memory)."""
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, Mapping):
        return {key: clone(value) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(clone(value) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(clone(value) for value in batch)
    return batch


def collect(loader: Iterable[Any], limit: int | None = None) -> list[Any]:
    """The loader's batches (cloned), all of them or the first ``limit``."""
    batches = []
    for batch in loader:
        batches.append(clone(batch))
        if limit is not None and len(batches) == limit:
            break
    return batches


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def assert_same(got: list[Any], expected: list[Any]) -> None:
    """The same batches in the same order (torch.equal on tensors, == on the rest)."""
    assert len(got) == len(expected), f"{len(got)} batches, vanilla gave {len(expected)}"
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert same(a, b), f"batch {i} differs from vanilla's:\n{_short(a)}\nvs\n{_short(b)}"


def _short(batch: Any) -> str:
    text = repr(batch)
    return text if len(text) < 600 else text[:600] + " ..."


# ---------------------------------------------------------------- traces


def epoch_ends(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "epoch_end"]


def assert_trace(events: list[dict[str, Any]], *, consumed: list[int], rank: int = 0,
                 complete: list[bool] | None = None) -> None:
    """A conformant trace, ``rank`` in every event, and one ``epoch_end`` per epoch of ``consumed``
    counting the batches the loop took; ``complete[i]``: epoch i ran to its end (default: all did),
    so it must not be ``abandoned`` (and one that stopped early must be)."""
    assert events, "the sink got no events"
    problems = conformance.check(events)
    assert problems == [], f"trace not conformant: {problems[:10]}"
    ranks = {e.get("rank") for e in events}
    assert ranks == {rank}, f"events carry ranks {ranks}, expected {rank}"
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_start" and kinds.count("run_start") == 1, kinds[:5]
    assert kinds[-1] == "run_end", f"the run did not end: last events {kinds[-5:]}"
    ends = epoch_ends(events)
    assert [e["batches"] for e in ends] == consumed, \
        f"epoch_end batches {[e['batches'] for e in ends]}, the loop consumed {consumed}"
    complete = complete if complete is not None else [True] * len(consumed)
    assert [e["abandoned"] for e in ends] == [not c for c in complete], \
        f"epoch_end abandoned {[e['abandoned'] for e in ends]}, expected {[not c for c in complete]}"
    yields = [e for e in events if e["kind"] == "yield"]
    assert len(yields) == sum(consumed), f"{len(yields)} yield events for {sum(consumed)} batches consumed"


def yielded_per_epoch(events: list[dict[str, Any]]) -> list[int]:
    """How many ``yield`` events each epoch has (epochs in order of ``epoch_start``)."""
    counts: list[int] = []
    for event in events:
        if event["kind"] == "epoch_start":
            counts.append(0)
        elif event["kind"] == "yield" and counts:
            counts[-1] += 1
    return counts


# ---------------------------------------------------------------- processes and warnings


def children() -> set[int]:
    """Live (not yet reaped) descendants of this process."""
    if psutil is not None:
        pids = set()
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    pids.add(child.pid)
            except psutil.NoSuchProcess:
                pass
        return pids
    me = os.getpid()
    pids = set()
    for task in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            pass
    return pids


def assert_no_leftovers(before: set[int], timeout: float = 15.0) -> None:
    """Every process started since ``before`` is gone (waits, collecting garbage, up to ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        left = children() - before
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"worker processes left over after the loop: {sorted(left)}")
        time.sleep(0.05)


@contextmanager
def no_leftover_processes(timeout: float = 15.0) -> Iterator[None]:
    before = children()
    yield
    assert_no_leftovers(before, timeout)


class Warnings:
    """Records every warning of a block (``always``: none hides behind an earlier one)."""

    def __init__(self) -> None:
        self.messages: set[str] = set()

    @contextmanager
    def record(self) -> Iterator[None]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            finally:
                self.messages |= {f"{w.category.__name__}: {w.message}" for w in caught}


def assert_no_new_warnings(vanilla: Warnings, watched: Warnings) -> None:
    new = watched.messages - vanilla.messages
    assert not new, f"watching added warnings: {sorted(new)}"


def compare(run_vanilla: Callable[[], Any], run_watched: Callable[[], Any]) -> tuple[Any, Any]:
    """Run vanilla, then watched (vanilla first: a warning given once per process goes to vanilla),
    each under its own warning recorder, with no process left over after either; returns both
    results and checks the watched run warned nothing new."""
    vanilla_warnings, watched_warnings = Warnings(), Warnings()
    with no_leftover_processes(), vanilla_warnings.record():
        expected = run_vanilla()
    with no_leftover_processes(), watched_warnings.record():
        got = run_watched()
    assert_no_new_warnings(vanilla_warnings, watched_warnings)
    return expected, got
