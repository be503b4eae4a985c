"""Probe overhead: vanilla DataLoader vs InstrumentedDataLoader, interleaved A/B pairs, same run.

    .venv/bin/python bench/overhead.py            # full: >= 20,000 tiny batches, 7 pairs per case
    .venv/bin/python bench/overhead.py --quick    # a smoke run in seconds

The instrumented loader's sink is the production one: the probe's compact frames (encoded by orjson
on the probe thread) go to a bounded queue that a transport thread drains (here it discards the
bytes instead of writing a websocket). Reports the median throughput ratio instrumented / vanilla and the probe's
CPU time per batch (whole process, all threads: main, probe thread, transport thread).
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from torch.utils.data import DataLoader, Dataset

from loaderscope import InstrumentedDataLoader

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")


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
        self.thread = threading.Thread(target=self._send, daemon=True)
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


@dataclass
class Case:
    name: str
    make: Callable[[], Dataset[torch.Tensor]]
    kwargs: dict[str, Any]


def drain(iterator: Any) -> int:
    batches = 0
    for _ in iterator:
        batches += 1
    return batches


def measure(case: Case, instrumented: bool) -> tuple[float, float, int, int]:
    """(seconds, process CPU seconds, batches, events) for one full pass over a fresh loader."""
    transport = Transport() if instrumented else None
    if instrumented:
        loader: Any = InstrumentedDataLoader(case.make(), sink=transport, **case.kwargs)
    else:
        loader = DataLoader(case.make(), **case.kwargs)
    iterator = iter(loader)
    next(iterator)  # workers start outside the timed region (both sides alike): per-batch cost is measured
    cpu0, t0 = time.process_time(), time.perf_counter()
    batches = drain(iterator)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    events = 0
    del iterator
    if transport is not None:
        loader.close()
        transport.close()
        events = transport.events
    return elapsed, cpu, batches, events


def run_case(case: Case, pairs: int) -> dict[str, float]:
    ratios, cpu_deltas, per_batch_events = [], [], []
    rates = {"vanilla": [], "probe": []}
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)  # alternate who goes first
        results = {flag: measure(case, flag) for flag in order}
        (tv, cv, bv, _), (tp, cp, bp, ep) = results[False], results[True]
        rates["vanilla"].append(bv / tv)
        rates["probe"].append(bp / tp)
        ratios.append((bp / tp) / (bv / tv))
        cpu_deltas.append((cp / bp - cv / bv) * 1e6)
        per_batch_events.append(ep / bp)
    return {
        "vanilla": statistics.median(rates["vanilla"]),
        "probe": statistics.median(rates["probe"]),
        "ratio": statistics.median(ratios),
        "cpu_us": statistics.median(cpu_deltas),
        "events": statistics.median(per_batch_events),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 pairs: a smoke run")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--skip-in-process", action="store_true", help="leave out the num_workers=0 case")
    args = parser.parse_args()
    tiny_n = 2_000 if args.quick else 20_000
    pairs = 3 if args.quick else args.pairs
    cases = [
        Case("tiny (bs=1, 2 workers)", lambda: Tensors(tiny_n, (4,)), {"batch_size": 1, "num_workers": 2}),
        Case("moderate (bs=64 of 3x64x64, 2 workers)", lambda: Tensors(64 * (40 if args.quick else 300), (3, 64, 64)),
             {"batch_size": 64, "num_workers": 2}),
        Case("tiny in-process (bs=1, 0 workers)", lambda: Tensors(tiny_n, (4,)), {"batch_size": 1, "num_workers": 0}),
    ]
    if args.skip_in_process:
        cases = cases[:2]
    table = Table("case", "vanilla batches/s", "probe batches/s", "ratio (median)", "probe CPU/batch", "events/batch")
    for case in cases:
        r = run_case(case, pairs)
        table.add_row(case.name, f"{r['vanilla']:,.0f}", f"{r['probe']:,.0f}", f"{r['ratio']:.3f}",
                      f"{r['cpu_us']:.1f} µs", f"{r['events']:.1f}")
    console = Console()
    console.print(table)
    console.print(f"{pairs} interleaved pairs per case; torch {torch.__version__}; {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
