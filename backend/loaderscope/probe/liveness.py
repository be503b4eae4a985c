"""Stuck fetches, a stuck consumer and dead workers, noticed on the probe thread.

Stuck checks run at every probe tick (every 50 ms), so a fetch that crosses the stuck threshold is
reported well within a second, with the worker's live stack; a worker killed by a signal is named
(signal, task, sample) within 200 ms of becoming a zombie, before or alongside torch's own RuntimeError.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderscope.probe.faults import report_remote
from loaderscope.probe.recorder import Recorder
from loaderscope.probe.stacks import ask_worker, describe_status, exit_status, main_thread_stack
from loaderscope.probe.worker import RingReader

MIN_STUCK_SECONDS = 10.0
STUCK_MEDIAN_FACTOR = 20.0
REFRESH_SECONDS = 5.0  # a worker that stays stuck gets a fresh stack this often
# The checks that cost a syscall per worker or pipe (dead workers in /proc, the workers' batch
# descriptions) run every 4th tick (200 ms): at every tick, under load, they were a third of the
# probe thread's CPU, which on a busy machine is taken from the training process.
SLOW_CHECK_TICKS = 4


@dataclass(frozen=True)
class StuckRule:
    """``after`` seconds if given, else the larger of 10 s and 20× the median fetch so far."""

    after: float | None = None

    @property
    def floor(self) -> float:
        """No fetch shorter than this can be stuck: checks below it need no median."""
        return self.after if self.after is not None else MIN_STUCK_SECONDS

    def threshold(self, recent: list[float]) -> float:
        if self.after is not None:
            return self.after
        median = statistics.median(recent) if recent else 0.0
        return max(MIN_STUCK_SECONDS, STUCK_MEDIAN_FACTOR * median)


class Liveness:
    """Watches one iterator's workers and its consumer; lives from iterator start to shutdown."""

    def __init__(self, recorder: Recorder, rule: StuckRule, head_of_line: Callable[[], dict[str, Any]],
                 readers: dict[int, RingReader] | None = None) -> None:
        self.recorder = recorder
        self.readers = readers if readers is not None else {}  # this iterator's workers (none in-process)
        self.rule = rule
        self.head_of_line = head_of_line  # which task the consumer waits for, and who holds it
        self.dead: set[int] = set()
        self._reported: dict[Any, float] = {}  # (who, task) -> when its stack was last sent
        self.consumer_thread = threading.get_ident()
        self.next_started: float | None = None  # set while the consumer is inside next()
        self.ticks = 0
        self.inspect: Any = None  # the workers' batch descriptions (a SimpleQueue), if any
        self._taking = threading.Lock()  # the probe thread's tick and the shutdown both read inspect

    def tick(self) -> None:
        """Every probe tick (50 ms): cheap checks first; the median only once something runs long."""
        self.ticks += 1
        if self.ticks % SLOW_CHECK_TICKS == 0:
            self.take_batch_info()
            self.check_deaths()  # torch's own failure path also asks, synchronously
        doing = {r.worker: d for r in list(self.readers.values()) if r.worker not in self.dead and (d := r.current())}
        started = self.next_started
        longest = max([d["elapsed"] for d in doing.values()] + [time.monotonic() - started if started else 0.0])
        if longest < self.rule.floor:
            return
        threshold = self.rule.threshold([dt for r in self.readers.values() for dt in r.recent])
        for worker, current in doing.items():
            self._check_worker(self.readers[worker], current, threshold)
        self._check_consumer(threshold)

    def take_batch_info(self) -> None:
        """Batch descriptions from the workers, and the failures of their taps (reported once)."""
        inspect = self.inspect
        try:
            # empty() then get() is one step: two readers could both see the last item, and one would block for good
            with self._taking:
                self._take_from(inspect)
        except OSError:  # the queue was closed under us (interpreter exit): descriptions are extras
            self.inspect = None

    def _take_from(self, inspect: Any) -> None:
        while inspect is not None and not inspect.empty():
            item = inspect.get()
            if "fault" in item:
                report_remote(item["fault"], item["type"], item["message"], self.recorder.note)
            else:
                self.recorder.note("batch_info", **item)

    def _due(self, key: Any, now: float) -> bool:
        last = self._reported.get(key)
        if last is not None and now - last < REFRESH_SECONDS:
            return False
        self._reported[key] = now
        return True

    def _check_worker(self, reader: RingReader, doing: dict[str, Any], threshold: float) -> None:
        if doing["elapsed"] < threshold or not self._due((reader.worker, doing["idx"]), time.monotonic()):
            return
        stack = ask_worker(reader.pid, reader.dump_path, reader.main_thread)
        self.recorder.note("worker_stuck", worker=reader.worker, pid=reader.pid, threshold=round(threshold, 3),
                           stack=stack, **doing)

    def _check_consumer(self, threshold: float) -> None:
        started = self.next_started
        if started is None:
            return
        elapsed = time.monotonic() - started
        if elapsed < threshold or not self._due(("consumer", started), time.monotonic()):
            return
        self.recorder.note("consumer_stuck", elapsed=round(elapsed, 4), threshold=round(threshold, 3),
                           stack=main_thread_stack(self.consumer_thread), **self.head_of_line())

    def check_deaths(self) -> None:
        """Name every worker that died (by a signal or a non-zero exit) since the last check."""
        for reader in list(self.readers.values()):
            if reader.worker in self.dead:
                continue
            status = exit_status(reader.pid)
            if status is None:
                continue
            exitcode, signal_name = describe_status(status[1])
            if exitcode == 0 and signal_name is None:
                continue  # a clean exit: an exhausted iterable shard, or shutdown
            self.dead.add(reader.worker)
            self.recorder.drain_reader(reader)
            self.recorder.note("worker_died", worker=reader.worker, pid=reader.pid, exitcode=exitcode,
                               signal=signal_name, **(reader.current() or {"idx": None}))

    def activity(self) -> list[dict[str, Any]]:
        """What every worker was doing right now (for timeouts): idle ones have no ``idx``."""
        return [{"worker": worker, **(reader.current() or {})} for worker, reader in sorted(self.readers.items())]
