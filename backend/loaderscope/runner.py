"""Run a scenario end to end: build its loader, drive a training loop over it, stream its events.

Used by ``loaderscope run`` in the terminal and by the dashboard's run processes (server/processes/runproc.py).
A ``Control`` lets the dashboard pause, step, slow down or stop the consumer; the loader stays real.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from loaderscope.events import Event
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import summary
from loaderscope.scenarios.plan import Plan, resolve
from loaderscope.scenarios.workload import Workload

if TYPE_CHECKING:  # the probe imports torch; the runner imports it when a loader is built
    from loaderscope.probe.recorder import EventSink, Sink



class Control:
    """Pause / resume / step / stop / slow down the consumer loop, from another thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._paused = False
        self._steps = 0
        self.stopped = False
        self.delay = 0.0  # extra seconds per batch, so a human can follow a real run
        self.values_asked = False  # the inspector asked for a batch's values

    def pause(self) -> None:
        with self._cond:
            self._paused = True

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def step(self) -> None:
        """Let exactly one more ``next()`` through, then stay paused."""
        with self._cond:
            self._paused = True
            self._steps += 1
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self.stopped = True
            self._cond.notify_all()

    def inspect(self) -> None:
        """Ask for the next batches' values (the batch inspector)."""
        self.values_asked = True

    def set_delay(self, seconds: float) -> None:
        self.delay = max(0.0, float(seconds))

    @property
    def paused(self) -> bool:
        return self._paused

    def gate(self) -> bool:
        """Called before each ``next()``: blocks while paused; False once stopped."""
        with self._cond:
            while self._paused and self._steps == 0 and not self.stopped:
                self._cond.wait()
            if self._steps:
                self._steps -= 1
            return not self.stopped

    def sleep(self, seconds: float) -> None:
        """Sleep that a stop interrupts."""
        with self._cond:
            self._cond.wait_for(lambda: self.stopped, timeout=seconds)


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


class Collector:
    """A sink that keeps every event and a live reducer (for summaries and tests)."""

    def __init__(self, forward: EventSink | None = None) -> None:
        self.events: list[Event] = []
        self.state = LoaderState()
        self._forward = forward
        self._lock = threading.Lock()

    def __call__(self, events: list[Event]) -> None:
        with self._lock:
            self.events.extend(events)
            for event in events:
                self.state.apply(event)
        if self._forward is not None:
            self._forward(events)


def build_loader(workload: Workload, loader_class: type | None = None, **probe: Any) -> Any:
    """The workload's real DataLoader: instrumented, unless a ``loader_class`` (vanilla torch) is given."""
    if loader_class is None:
        from loaderscope.probe.loader import InstrumentedDataLoader

        loader_class = InstrumentedDataLoader

    dataset = workload.make_dataset()
    kwargs = workload.settings.kwargs()
    if workload.collate_fn is not None:
        kwargs["collate_fn"] = workload.collate_fn
    if workload.make_sampler is not None:
        kwargs["sampler"] = workload.make_sampler(dataset)
    if workload.make_batch_sampler is not None:
        kwargs["batch_sampler"] = workload.make_batch_sampler(dataset)
    return loader_class(dataset, **kwargs, **probe)


def consume(loader: Any, workload: Workload, control: Control) -> str:
    """The training loop: ``workload.epochs`` passes, each batch 'trained on' for ``workload.step_cost``
    seconds or by the workload's own step (whose timings become ``step`` events).

    Returns the run's end reason: "done" or "stopped". Exceptions from the loader propagate.
    """
    step = workload.make_step() if workload.make_step is not None else None
    for _ in range(workload.epochs):
        iterator = iter(loader)
        batches = 0
        while True:
            if not control.gate():
                return "stopped"
            if control.values_asked:
                control.values_asked = False
                loader.ask_values()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if step is not None:
                loader._probe.note("step", batch=batches, **step(batch))
            elif workload.step_cost:
                time.sleep(workload.step_cost)
            batches += 1
            if control.delay:
                control.sleep(control.delay)
        del iterator
    return "done"


def run_plan(plan: Plan, sink: Sink, *, control: Control | None = None, run_id: str | None = None) -> LoaderState:
    """Run ``plan`` with a real DataLoader; every event goes to ``sink``.

    Returns the reduced state (summary and diagnosis come from it; empty when ``sink`` is a
    transport taking frames: its receiver reduces). Loader exceptions are
    recorded (``error`` / ``run_end`` with reason "error") and re-raised, as torch raised them.
    """
    from loaderscope.probe.recorder import takes_frames

    workload = plan.build()
    # A transport takes the probe's frames as they are; Python sinks get dicts and a live reducer.
    collector: Collector | None = None
    if isinstance(sink, Collector):
        collector = sink
    elif not takes_frames(sink) and callable(sink):
        collector = Collector(sink)
    control = control or Control()
    loader = build_loader(
        workload,
        sink=collector or sink,
        run_id=run_id or new_run_id(),
        scenario=plan.name,
        params=plan.values(),
        describe=workload.describe,
        stuck_after=plan.params.stuck_after or None,
    )
    reason = "error"
    try:
        reason = consume(loader, workload, control)
    finally:
        loader._probe_shut_down()  # first: until the workers are gone, torch's SIGCHLD handler may raise anywhere
        loader.flush()  # so the summary in run_end sees every event before it
        loader.close(reason, summary(collector.state) if collector else {})
    return collector.state if collector else LoaderState()


def run_real(name: str, values: Mapping[str, Any] | None, sink: Sink, *, control: Control | None = None,
             run_id: str | None = None) -> LoaderState:
    """``run_plan`` for Python callers holding a scenario's name and raw values (raises ParamError)."""
    return run_plan(resolve(name, values), sink, control=control, run_id=run_id)
