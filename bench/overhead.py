"""Probe overhead: vanilla DataLoader vs InstrumentedDataLoader, interleaved in time, same run.

    .venv/bin/python bench/overhead.py            # full: >= 20,000 tiny batches per side, 40 rounds per case
    .venv/bin/python bench/overhead.py --quick    # a smoke run in seconds
    .venv/bin/python bench/overhead.py --baseline memory-off   # the memory sampling's own cost

``--baseline memory-off`` puts an instrumented loader without memory sampling (``LOADERSCOPE_MEMORY=0``)
where vanilla torch was: the ratio is then what sampling costs the probe. Both sides' probe threads
share a name, so the thread columns count both.

Shared machines drift by tens of percent between runs of a few seconds (here, vanilla alone varied
1,500-3,000 batches/s between consecutive runs), so whole-run A/B pairs need many repeats to say
anything. This bench keeps one vanilla and one instrumented iterator alive side by side and
alternates short segments between them (a fraction of a second each, who goes first alternating):
both sides see the same machine within milliseconds, and each round gives one ratio. It reports the
median ratio with a bootstrap 95% interval, and the CPU each side spends per batch, thread by
thread, so the probe's cost is visible apart from the noise: the training thread (the one calling
``next``), the main process's background threads (the probe's own thread, the transport's sender)
and the worker processes. Each is read from the kernel's per-thread and per-process CPU clocks
(``pthread_getcpuclockid``, ``clock_getcpuclockid``: nanoseconds, where /proc's stat counts 10 ms ticks).

The instrumented loader's sink is the production one: the probe's compact frames (encoded by orjson
on the probe thread) go to a bounded queue that a transport thread drains (here it discards the
bytes instead of writing a websocket). At the end of each of its segments the probe is flushed, so
the events recorded in a segment are encoded and handed over inside it, on its side of the ledger.
That flush runs on the thread calling ``next`` here, but on the probe thread in a real run: its CPU is
counted in the probe thread's column, not the training thread's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import queue
import random
import statistics
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from rich.console import Console
from rich.table import Table
from torch.utils.data import DataLoader, Dataset

from loaderscope import InstrumentedDataLoader
from loaderscope.probe.memory import ENV as MEMORY_ENV

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
_libc = ctypes.CDLL(None, use_errno=True)


def process_cpu(pid: int) -> float:
    """CPU seconds a process (all its threads) has used so far, from its kernel CPU clock."""
    clock = ctypes.c_int()
    if _libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
        raise OSError(ctypes.get_errno(), f"no CPU clock for process {pid}")
    return time.clock_gettime(clock.value)


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's Python threads but the main one, summed by name: both
    sides' transports have a thread named "sender", and with ``--baseline memory-off`` both have a probe
    thread, so a dict keyed by name alone kept whichever came last (an idle one: 0.00 µs)."""
    main = threading.main_thread()
    seconds: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread is not main and thread.ident is not None:
            cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            seconds[thread.name] = seconds.get(thread.name, 0.0) + cpu
    return seconds


class Tensors(Dataset[torch.Tensor]):
    def __init__(self, length: int, shape: tuple[int, ...]) -> None:
        self.length = length
        self.sample = torch.zeros(shape)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.sample + index


class Transport:
    """Takes the probe's encoded frames and hands them to a sender thread through a bounded queue,
    as watch() does (the sender here discards them instead of writing a websocket)."""

    takes_frames = True

    def __init__(self) -> None:
        self.queue: queue.Queue[bytes | None] = queue.Queue(maxsize=1024)
        self.events = 0
        self.dropped = 0
        self.thread = threading.Thread(target=self._send, name="sender", daemon=True)
        self.thread.start()

    def frame(self, data: bytes, count: int) -> None:
        self.events += count
        try:
            self.queue.put_nowait(data)
        except queue.Full:
            self.dropped += count

    def _send(self) -> None:
        while self.queue.get() is not None:
            pass

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


class Step(Protocol):
    """A training step run on each batch of a segment (bench/gpu_train.py); ``settle`` ends the segment
    once the work it queued is done (a GPU's queue), so that the segment's time holds it."""

    def train(self, batch: Any) -> None: ...

    def settle(self) -> None: ...


@dataclass
class Case:
    name: str
    shape: tuple[int, ...]
    batch_size: int
    num_workers: int
    segment: int  # batches per side per round


@dataclass
class Side:
    """One loader, its live iterator, and what its segments cost."""

    loader: Any
    iterator: Iterator[Any]
    seconds: list[float] = field(default_factory=list)
    cpu: float = 0.0  # the main process, all threads, during this side's segments
    training: float = 0.0  # the thread calling next(), during this side's segments, flushes left out
    flushes: float = 0.0  # that thread's CPU in the flush at each segment's end: the probe thread's work
    batches: int = 0
    waiting: float = 0.0  # seconds inside next(), with a training step only (bench/gpu_train.py)

    def segment(self, batches: int, step: Step | None = None) -> None:
        flush = getattr(self.loader, "flush", None)
        cpu0, training0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
        if step is None:
            for _ in range(batches):
                next(self.iterator)
        else:
            for _ in range(batches):
                asked = time.perf_counter()
                batch = next(self.iterator)
                self.waiting += time.perf_counter() - asked
                step.train(batch)
            step.settle()
        flushed = time.thread_time()
        if flush is not None:
            flush()
        self.seconds.append(time.perf_counter() - t0)
        self.training += flushed - training0
        self.flushes += time.thread_time() - flushed
        self.cpu += time.process_time() - cpu0
        self.batches += batches

    def worker_seconds(self) -> float:
        """CPU seconds the iterator's worker processes have used so far (0 for num_workers=0)."""
        return sum(process_cpu(process.pid) for process in getattr(self.iterator, "_workers", []))


def bootstrap_median(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples)]


@dataclass
class Alternated:
    """Two loaders measured in alternating segments: per side time, CPU and worker CPU, and the ratios."""

    vanilla: Side
    probe: Side
    worker_cpu: dict[str, float]  # seconds of worker CPU per side over the rounds
    ratios: list[float]  # vanilla seconds / probe seconds, one per round
    threads: dict[str, float]  # seconds of CPU of the main process's other threads over the rounds, by name

    @property
    def interval(self) -> tuple[float, float]:
        return bootstrap_median(self.ratios)


def alternate(vanilla: Any, probe: Any, *, rounds: int, segment: int, warmup: int = 4,
              step: Step | None = None) -> Alternated:
    """Keep both iterators alive and alternate ``rounds`` segments of ``segment`` batches (who goes
    first alternating), after ``warmup`` batches each so workers run and pipelines are full; ``step``
    trains on each batch."""
    sides = {"vanilla": Side(vanilla, iter(vanilla)), "probe": Side(probe, iter(probe))}
    for side in sides.values():
        for _ in range(warmup):
            batch = next(side.iterator)
            if step is not None:
                step.train(batch)
    workers0 = {name: side.worker_seconds() for name, side in sides.items()}
    threads0 = thread_cpu()
    for i in range(rounds):
        for name in ("vanilla", "probe") if i % 2 == 0 else ("probe", "vanilla"):
            sides[name].segment(segment, step)
    threads = {name: seconds - threads0.get(name, 0.0) for name, seconds in thread_cpu().items()}
    worker_cpu = {name: side.worker_seconds() - workers0[name] for name, side in sides.items()}
    v, p = sides["vanilla"], sides["probe"]
    for side in sides.values():
        del side.iterator
    return Alternated(v, p, worker_cpu, [tv / tp for tv, tp in zip(v.seconds, p.seconds, strict=True)], threads)


class MemoryOff(InstrumentedDataLoader[Any]):
    """An instrumented loader whose probe, started by its first ``iter()``, samples no memory."""

    def __iter__(self) -> Any:
        os.environ[MEMORY_ENV] = "0"
        try:
            return super().__iter__()
        finally:
            del os.environ[MEMORY_ENV]


def run_case(case: Case, rounds: int, baseline: str = "vanilla") -> dict[str, Any]:
    length = (rounds * case.segment + 16) * case.batch_size  # one epoch covers every round
    kwargs = {"batch_size": case.batch_size, "num_workers": case.num_workers}
    transport = Transport()
    base_transport = Transport()
    vanilla = DataLoader(Tensors(length, case.shape), **kwargs) if baseline == "vanilla" else \
        MemoryOff(Tensors(length, case.shape), sink=base_transport, **kwargs)
    probe = InstrumentedDataLoader(Tensors(length, case.shape), sink=transport, **kwargs)
    run = alternate(vanilla, probe, rounds=rounds, segment=case.segment)
    for loader in (probe, vanilla):
        getattr(loader, "close", lambda: None)()
    transport.close()
    base_transport.close()
    v, p, worker_cpu = run.vanilla, run.probe, run.worker_cpu

    def per_batch(seconds: float, side: Side) -> float:
        return seconds / side.batches * 1e6

    return {
        "vanilla": v.batches / sum(v.seconds),
        "probe": p.batches / sum(p.seconds),
        "ratio": statistics.median(run.ratios),
        "interval": run.interval,
        # µs of CPU per batch, (vanilla, probe) where both sides have it; the probe's threads are its own
        "training": (per_batch(v.training, v), per_batch(p.training, p)),
        "probe_thread": per_batch(run.threads.get("loaderscope-probe", 0.0) + p.flushes, p),
        "sender": per_batch(run.threads.get("sender", 0.0), p),
        "workers": (per_batch(worker_cpu["vanilla"], v), per_batch(worker_cpu["probe"], p)),
        "vanilla_us": per_batch(v.cpu + worker_cpu["vanilla"], v),
        "events": transport.events / (p.batches + 4),
        "batches": p.batches,
    }


def _pair(pair: tuple[float, float]) -> str:
    vanilla, probe = pair
    return f"{vanilla:.1f} → {probe:.1f} ({probe - vanilla:+.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a few small rounds: a smoke run")
    parser.add_argument("--rounds", type=int, default=40, help="alternating segment pairs per case")
    parser.add_argument("--only", choices=["tiny", "moderate", "in-process"], action="append",
                        help="run only this case (repeatable)")
    parser.add_argument("--baseline", choices=["vanilla", "memory-off"], default="vanilla",
                        help="what the probe is measured against: vanilla torch, or the probe without memory sampling")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    rounds = 6 if args.quick else args.rounds
    cases = {
        "tiny": Case("tiny", (4,), 1, 2, 500 // scale),
        "moderate": Case("moderate", (3, 64, 64), 64, 2, 100 // scale),
        "in-process": Case("in-process", (4,), 1, 0, 2000 // scale),
    }
    table = Table("case", "batches per side", "vanilla batches/s", "probe batches/s", "ratio (median, 95% CI)",
                  "training thread µs/batch: vanilla → probe", "probe thread", "sender",
                  "workers µs/batch: vanilla → probe", "vanilla CPU/batch", "events/batch")
    for key in args.only or list(cases):
        r = run_case(cases[key], rounds, args.baseline)
        low, high = r["interval"]
        table.add_row(cases[key].name, f"{r['batches']:,}", f"{r['vanilla']:,.0f}", f"{r['probe']:,.0f}",
                      f"{r['ratio']:.3f} ({low:.3f}–{high:.3f})", _pair(r["training"]),
                      f"{r['probe_thread']:.2f} µs", f"{r['sender']:.2f} µs",
                      _pair(r["workers"]) if cases[key].num_workers else "–", f"{r['vanilla_us']:.0f} µs",
                      f"{r['events']:.1f}")
    console = Console(width=max(Console().width, 180))
    console.print(table)
    console.print("tiny: batch_size=1 of 4 floats, 2 workers; moderate: batch_size=64 of 3x64x64 floats, 2 workers; "
                  "in-process: tiny with num_workers=0")
    console.print("CPU per batch from the kernel's thread and process CPU clocks: the training thread during each "
                  "side's segments, but for the flush at a segment's end (the probe thread's work in a real run: "
                  "counted there); the probe's thread and the transport's sender thread (the probe's alone) over "
                  "all rounds; the workers (all their threads)")
    console.print(f"{rounds} alternating rounds per case; torch {torch.__version__}; {os.cpu_count()} CPUs; "
                  f"{torch.get_num_threads()} torch threads; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
