"""/api/health while /metrics is scraped, on a real dashboard holding many runs of many workers.

    .venv/bin/python bench/metrics_health.py [--runs 128] [--workers 4096] [--scrapes 5]
    .venv/bin/python bench/metrics_health.py --baseline /tmp/base   # and the same against another checkout

RUNS producers stream over WS /ws/ingest a loader of WORKERS workers each (every worker fetches a
batch; a few are then fetching, stuck, dead, or have tasks queued; the first batches are yielded),
then SCRAPES scrapes of /metrics run back to back while another client asks /api/health again as
soon as it is answered. Prints each scrape's wall time and the health answers' latencies during the
scrapes (median, 99th percentile, most), with how many were answered. Wall times: they are what a
health check waits, and they measure the neighbours too on a shared box, so run the two checkouts
one after the other (``--baseline``: ``git archive COMMIT backend | tar -x -C /tmp/base``) and
compare. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from pipeline import Server  # bench/pipeline.py: a dashboard in a child process


def wide_run(workers: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": workers}},
        {"kind": "epoch_start", "t": 0.0, "epoch": 0}]
    for w in range(workers):
        dt = 0.0003 * (1 + w % 400)
        events += [{"kind": "dispatch", "t": 0.01, "idx": w, "worker": w},
                   {"kind": "fetch_start", "t": 0.01, "idx": w, "worker": w},
                   {"kind": "fetch_end", "t": 0.01 + dt, "idx": w, "worker": w, "dt": dt}]
    for idx in range(min(64, workers)):
        events += [{"kind": "arrive", "t": 1.0, "idx": idx, "worker": idx},
                   {"kind": "yield", "t": 1.0 + idx * 1e-3, "idx": idx, "wait": 1e-4}]
    idx = workers
    for w in range(0, workers, 97):
        events += [{"kind": "dispatch", "t": 2.0, "idx": idx, "worker": w},
                   {"kind": "fetch_start", "t": 2.0, "idx": idx, "worker": w},
                   {"kind": "worker_stuck", "t": 12.0, "idx": idx, "worker": w, "elapsed": 10.0}]
        idx += 1
    return events


def feed(server: Server, runs: int, workers: int) -> None:
    events = wide_run(workers)
    frames = [orjson.dumps(events[i:i + 2000]) for i in range(0, len(events), 2000)]
    for _ in range(runs):
        with server.producer() as ws:
            run = orjson.loads(ws.recv(timeout=60))["run"]
            for frame in frames:
                ws.send(frame)
        deadline = time.monotonic() + 600
        while server.held(run) < len(events) and time.monotonic() < deadline:
            time.sleep(0.1)


def measure(server: Server, scrapes: int) -> tuple[list[float], list[float]]:
    """Each scrape's wall time; the latency of every health answer sent while a scrape was in flight."""
    answers: list[tuple[float, float]] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=server.url, timeout=600) as http:
            while not stop.is_set():
                sent = time.monotonic()
                http.get("/api/health").raise_for_status()
                answers.append((sent, time.monotonic()))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    spans = []
    for _ in range(scrapes):
        started = time.monotonic()
        server.http.get("/metrics", timeout=600).raise_for_status()
        spans.append((started, time.monotonic()))
    stop.set()
    poller.join(600)
    during = [answered - sent for sent, answered in answers
              if any(start <= sent <= end for start, end in spans)]
    return [end - start for start, end in spans], during


def report(name: str, walls: list[float], during: list[float]) -> None:
    ordered = sorted(during)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")
    print(f"{name}: scrapes {', '.join(f'{w:.2f}' for w in walls)} s; /api/health during them: "
          f"{len(ordered)} answered, median {statistics.median(ordered) * 1000:.0f} ms, "
          f"p99 {p99 * 1000:.0f} ms, most {max(ordered) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=128)
    parser.add_argument("--workers", type=int, default=4096)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured after this one")
    args = parser.parse_args()
    print(f"{args.runs} runs of {args.workers} workers, {args.scrapes} scrapes back to back")
    for name, root in (("this checkout", None), (f"baseline {args.baseline}", args.baseline)):
        if name.startswith("baseline") and root is None:
            continue
        server = Server(root)
        try:
            feed(server, args.runs, args.workers)
            report(name, *measure(server, args.scrapes))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
