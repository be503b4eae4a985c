"""Memory per run held in memory against per run moved to disk (issue 26: eviction that cannot be pinned).

    .venv/bin/python bench/parked.py              # 300 runs of 2,000 batches (10,003 events) each
    .venv/bin/python bench/parked.py --runs 100 --batches 500

Two dashboards take the same runs, each from a producer that sends its events and leaves without
``run_end`` (a watch()ed training that lost its connection): one with ``max_runs`` above the count
(every run stays in memory), one with ``max_runs=2`` (all but two move to disk). Reported: each
server's RSS growth per run, and their ratio, over ``--repeats`` pairs (min-max).
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.live import URL_LINE


def rss_kib(pid: int) -> int:
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:"))


def events(batches: int) -> list[bytes]:
    out = [{"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": 4}},
           {"kind": "epoch_start", "t": 0.0, "epoch": 0}]
    for i in range(batches):
        t, w = i * 1e-3, i % 4
        out += [{"kind": "dispatch", "t": t, "idx": i, "worker": w, "indices": [2 * i, 2 * i + 1]},
                {"kind": "fetch_start", "t": t, "idx": i, "worker": w},
                {"kind": "fetch_end", "t": t, "idx": i, "worker": w, "dt": 5e-4, "nbytes": 64},
                {"kind": "arrive", "t": t, "idx": i, "worker": w}, {"kind": "yield", "t": t, "idx": i, "wait": 0.0}]
    return [orjson.dumps(out[i:i + 1000]) for i in range(0, len(out), 1000)]


def growth_per_run(max_runs: int, runs: int, frames: list[bytes], directory: Path) -> float:
    token = secrets.token_urlsafe(24)
    code = "import json, sys; from loaderscope.server.web.dashboard import serve; serve(**json.loads(sys.argv[1]))"
    options = {"port": 0, "data_dir": str(directory), "max_runs": max_runs, "reconnect_grace": 3600}
    log = directory.with_suffix(".log")
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-c", code, orjson.dumps(options).decode()], stdout=out,
                                  stderr=subprocess.STDOUT, env={"LOADERSCOPE_TOKEN": token, "PATH": "/usr/bin:/bin"})
    try:
        while not (match := URL_LINE.search(log.read_text())):
            time.sleep(0.1)
        url, headers = match.group(1), {"Authorization": f"Bearer {token}"}
        before = rss_kib(server.pid)
        for n in range(runs):
            with connect(f"ws{url[4:]}/ws/ingest?run=r{n}", additional_headers=headers, max_size=None) as ws:
                ws.recv(timeout=10)
                for frame in frames:
                    ws.send(frame)
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            while sum(r["status"] == "disconnected" for r in http.get("/api/runs").json()) < runs:
                time.sleep(0.2)
        return (rss_kib(server.pid) - before) / runs
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    frames = events(args.batches)
    held, parked = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            held.append(growth_per_run(args.runs + 10, args.runs, frames, Path(tmp) / f"held{repeat}"))
            parked.append(growth_per_run(2, args.runs, frames, Path(tmp) / f"parked{repeat}"))
    ratios = [h / p for h, p in zip(held, parked, strict=True)]
    print(f"{args.runs} runs of {args.batches * 5 + 2} events, {args.repeats} repeats (min-max):")
    print(f"  held in memory: {min(held):,.0f}-{max(held):,.0f} KiB of server RSS per run")
    print(f"  moved to disk:  {min(parked):,.0f}-{max(parked):,.0f} KiB of server RSS per run")
    print(f"  ratio:          {min(ratios):.0f}-{max(ratios):.0f}x")


if __name__ == "__main__":
    main()
