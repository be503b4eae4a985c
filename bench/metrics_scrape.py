"""What one ``GET /metrics`` scrape costs the dashboard's event loop, with many runs held.

    .venv/bin/python bench/metrics_scrape.py [--runs 1024] [--workers 8] [--fetches 100] [--repeat 5]

Builds a RunManager holding RUNS runs (past MAX_RUNS, 2,048, the rest are only counted), each
fed through the store's own path (``Run.ingest``: numbered, reduced) with WORKERS workers and FETCHES
fetches per worker, then times the exporter as the route runs it, three ways: the first scrape, a
scrape with nothing new, and a scrape after every run got 10 more fetches per worker (the runs'
meters count fetches as they are ingested, so the three should cost the event loop alike). Prints,
for each, the time on the event loop (copying the runs' meters) and in the worker thread (building
and encoding the series), in ms of CPU, as median [min–max] over REPEAT scrapes, and the
exposition's size. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from loaderscope.server.config import ServerConfig
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.run import Run
from loaderscope.server.web import metrics


def feed(run: Run, workers: int, fetches: int, first: int) -> None:
    events: list[dict[str, Any]] = []
    if first == 0:
        events += [{"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": workers}},
                   {"kind": "epoch_start", "t": 0.0, "epoch": 0}]
    for n in range(first, first + fetches):
        for worker in range(workers):
            idx, t = n * workers + worker, n * 0.01
            events += [{"kind": "dispatch", "t": t, "idx": idx, "worker": worker},
                       {"kind": "fetch_start", "t": t, "idx": idx, "worker": worker},
                       {"kind": "fetch_end", "t": t, "idx": idx, "worker": worker, "dt": 0.001 * (1 + idx % 50)}]
    run.ingest(events)


def timed(exporter: metrics.Exporter) -> tuple[float, float, bytes]:
    """CPU ms on the event loop (copying the meters), CPU ms in the worker thread (series and encoding),
    bytes. CPU time, not wall time: on a shared box the wall time measures the neighbours."""
    started = time.process_time()
    snapshot = exporter.read()
    read = time.process_time()
    body = snapshot.text()
    return (read - started) * 1000, (time.process_time() - read) * 1000, body


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}–{max(values):.1f}] ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--fetches", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    manager = RunManager(ServerConfig(token="bench-metrics-token-0123456789", max_runs=args.runs))
    runs = [manager.create(scenario=None, mode="real", params={}, origin="external") for _ in range(args.runs)]
    for run in runs:
        feed(run, args.workers, args.fetches, 0)
    kinds = ("first scrape", "scrape, nothing new", "after 10 new fetches per worker")
    loop: dict[str, list[float]] = {kind: [] for kind in kinds}
    thread: dict[str, list[float]] = {kind: [] for kind in kinds}
    body = b""
    for round_ in range(args.repeat):
        exporter = metrics.Exporter(manager)
        for kind in kinds:
            if kind == kinds[2]:
                for run in runs:
                    feed(run, args.workers, 10, args.fetches + 10 * round_)
            on_loop, in_thread, body = timed(exporter)
            loop[kind].append(on_loop)
            thread[kind].append(in_thread)
    exported = min(args.runs, metrics.MAX_RUNS)
    size, series = len(body), sum(not line.startswith(b"#") for line in body.splitlines())
    print(f"{args.runs} runs held ({exported} exported), {args.workers} workers, {args.fetches}+ fetches per "
          f"worker; {series:,} series, {size / 1e6:.1f} MB of exposition; median [min-max] of {args.repeat}")
    for kind in kinds:
        print(f"{kind:34s} CPU on the event loop {summary(loop[kind])}, in the worker thread {summary(thread[kind])}")


if __name__ == "__main__":
    main()
