"""How fast ``loaderscope serve --logdir`` lists a logdir of many large traces, cold and from sidecars.

    .venv/bin/python bench/logdir_open.py [--files 200] [--events 6000] [--dir DIR]

Writes FILES traces of about EVENTS events each (a simulated run, one file per rank of 8-rank
jobs, a quarter of them cut off without run_end), then:

1. parses every event of every file (``jsonl.read_trace`` + the reducer): what a dashboard that
   indexed by reading would pay;
2. starts ``loaderscope serve --logdir`` with no sidecars (cold) and times until ``GET /api/runs``
   lists every file, with the server's own index time;
3. starts it again (the sidecars now written) and times the same;
4. opens one run (``GET /api/runs/{id}/events``: its file read into the store).

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from loaderscope.model.state import LoaderState
from loaderscope.scenarios.plan import resolve
from loaderscope.sim import simulate
from loaderscope.traces.jsonl import TraceWriter, read_trace

TOKEN = "bench-logdir-token-0123456789"
URL_LINE = re.compile(r"loaderscope dashboard: (http://[^/\s]+)/\?token=")
INDEX_LINE = re.compile(r"loaderscope: logdir .*")


def one_run(events: int) -> list[dict[str, Any]]:
    """A simulated 4-worker run of about ``events`` events (five per batch)."""
    batches = max(1, events // 5)
    plan = resolve("uniform", {"num_workers": 4, "batch_size": 4, "dataset_size": batches * 4, "sample_ms": 1})
    return simulate(plan.build(), run_id="bench", scenario="uniform", params=plan.values())


def write_logdir(root: Path, files: int, events: int) -> int:
    run = one_run(events)
    total = 0
    for n in range(files):
        job, rank = divmod(n, 8)
        out = copy.deepcopy(run[:1])
        out[0].update(job=f"job-{job}", rank=rank, world_size=8)
        body = run[1:] if n % 4 else run[1:len(run) // 2]  # every 4th rank was killed half-way
        path = root / f"job-{job}" / f"DataLoader-rank{rank}-pid{1000 + n}-r{n}.trace.jsonl"
        with TraceWriter(path, f"r{n}", mode="sim") as writer:
            writer.write(out)
            writer.write(body)
        if not n % 4:  # killed an hour ago: truncated, not live (live files would be read at once)
            os.utime(path, (time.time() - 3600, time.time() - 3600))
        total += 1 + len(body)
    return total


def parse_everything(root: Path) -> float:
    began = time.perf_counter()
    for path in root.rglob("*.trace.jsonl"):
        state = LoaderState()
        for event in read_trace(path)[1]:
            state.apply(event)
    return time.perf_counter() - began


def serve_and_list(root: Path, files: int) -> tuple[float, str, str, dict[str, Any]]:
    """Seconds from starting the server to a listing of every file; its index line; the server URL."""
    env = {**os.environ, "LOADERSCOPE_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", "XDG_RUNTIME_DIR": str(root.parent)}
    log = root.parent / "server.log"
    began = time.perf_counter()
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "loaderscope.cli", "serve", "--port", "0", "--no-browser",
                                   "--logdir", str(root)], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        while not (found := URL_LINE.search(log.read_text())):
            if server.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.01)
        listed: list[dict[str, Any]] = []
        headers = {"Authorization": f"Bearer {TOKEN}"}
        while len(listed) < files:
            try:
                listed = httpx.get(found.group(1) + "/api/runs", headers=headers, timeout=30).json()
            except httpx.TransportError:
                time.sleep(0.01)
        wall = time.perf_counter() - began
        index = INDEX_LINE.search(log.read_text())
        opened = open_one(found.group(1), headers, listed)
        return wall, index.group(0) if index else "?", found.group(1), opened
    finally:
        server.terminate()
        server.wait(30)


def open_one(url: str, headers: dict[str, str], listed: list[dict[str, Any]]) -> dict[str, Any]:
    run = max(listed, key=lambda r: r["events"] or 0)
    began = time.perf_counter()
    page = httpx.get(f"{url}/api/runs/{run['id']}/events", params={"limit": 10}, headers=headers, timeout=120).json()
    return {"events": run["events"], "seconds": time.perf_counter() - began, "first": len(page["events"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--events", type=int, default=6000, help="events per file (about)")
    parser.add_argument("--dir", type=Path, help="where to write the logdir (default: a temporary directory)")
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="loaderscope-bench-"))
    root = base / "logdir"
    try:
        total = write_logdir(root, args.files, args.events)
        size = sum(p.stat().st_size for p in root.rglob("*.trace.jsonl"))
        print(f"logdir: {args.files} traces, {total:,} events, {size / 1e6:.0f} MB")
        print(f"parse every event of every file (read_trace + reducer): {parse_everything(root):.2f} s")
        for label in ("cold (no sidecars)", "restart (sidecars)"):
            wall, index_line, _, opened = serve_and_list(root, args.files)
            print(f"{label:<20}: listed all {args.files} in {wall:.2f} s from process start; server: {index_line}")
        print(f"open the largest run ({opened['events']:,} events) over REST: {opened['seconds']:.2f} s")
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
