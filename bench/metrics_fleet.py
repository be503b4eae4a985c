"""A real dashboard following a logdir of many live ranks of one job, scraped as Prometheus scrapes it.

    .venv/bin/python bench/metrics_fleet.py [--ranks 1024] [--every 2] [--history 500] [--windows 3] [--window 10]
                                            [--scrapes 5]
    .venv/bin/python bench/metrics_fleet.py --baseline /tmp/base   # the same against another checkout

RANKS simulated ranks (tests/fleet.py, one process: each rank's trace written as the probe writes it,
one batch's events every EVERY seconds after HISTORY at once, rank 0's worker 1 stuck) are followed by
``loaderscope serve --logdir``; no page is open. Once every rank is listed running, prints the server's CPU
(share of one core) and RSS over WINDOWS windows of WINDOW seconds without a scrape, then SCRAPES scrapes of
/metrics back to back (Prometheus's Accept header, OpenMetrics): each one's wall time and the server's
CPU during it, the series and bytes, how many ranks and whether the stuck rank 0 has series. The
server's RSS before the ranks came is printed too: the difference is what following them costs.
``--baseline``: the server of another checkout (``git archive COMMIT backend | tar -x -C /tmp/base``),
run after this one. CPU and wall times on a shared box measure the neighbours too: the load average
is printed with them. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline import Server  # bench/pipeline.py: a dashboard in a child process

ROOT = Path(__file__).resolve().parents[1]
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # what Prometheus 2.42 sends


def rss_mib(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) / 1024 if found else 0.0


def summary(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):.2f} {unit} [{min(values):.2f}–{max(values):.2f}]"


def measure(root: Path | None, args: argparse.Namespace) -> None:
    logdir = Path(tempfile.mkdtemp(prefix="loaderscope-fleet-"))
    server = Server(root, logdir=logdir)
    empty = rss_mib(server.process.pid)
    producer = subprocess.Popen([sys.executable, "-m", "tests.fleet", str(logdir), "--ranks", str(args.ranks),
                                 "--every", str(args.every), "--history", str(args.history), "--stuck", "0"],
                                cwd=ROOT)
    try:
        began = time.monotonic()
        while sum(r["status"] == "running" for r in server.http.get("/api/runs").json()) < args.ranks:
            time.sleep(1)
        print(f"{root or 'this checkout'}: {args.ranks} ranks, {args.history} batches then one every {args.every} s "
              f"each; all running "
              f"{time.monotonic() - began:.0f} s after the producer started; RSS {empty:.0f} MiB before them")
        time.sleep(args.window)  # every rank's file read to its end once
        shares, sizes = [], []
        for _ in range(args.windows):
            cpu, wall = server.cpu_seconds(), time.monotonic()
            time.sleep(args.window)
            shares.append(100 * (server.cpu_seconds() - cpu) / (time.monotonic() - wall))
            sizes.append(rss_mib(server.process.pid))
        print(f"  between scrapes: server CPU {summary(shares, '% of a core')}, RSS {summary(sizes, 'MiB')} "
              f"(+{statistics.median(sizes) - empty:.0f} MiB for the ranks); load {os.getloadavg()[0]:.1f}")
        walls, cpus = [], []
        for _ in range(args.scrapes):
            cpu, wall = server.cpu_seconds(), time.monotonic()
            body = server.http.get("/metrics", headers={"Accept": ACCEPT}).text
            walls.append(time.monotonic() - wall)
            cpus.append(server.cpu_seconds() - cpu)
        lines = [line for line in body.splitlines() if line and not line.startswith("#")]
        ranks = {m.group(1) for line in lines if (m := re.match(r'loaderscope_run_info\{.*rank="(\d+)"', line))}
        stuck = any(line.startswith("loaderscope_worker_state{") and 'rank="0"' in line for line in lines)
        print(f"  a scrape: {summary(walls, 's')} wall, server CPU {summary(cpus, 's')} (with its other work); "
              f"{len(lines):,} series, {len(body) / 1e6:.1f} MB; {len(ranks)} ranks exported, the stuck rank 0 "
              f"{'named' if stuck else 'MISSING'}; load {os.getloadavg()[0]:.1f}")
    finally:
        producer.terminate()
        producer.wait()
        server.stop()
        shutil.rmtree(logdir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--history", type=int, default=500)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    measure(None, args)
    if args.baseline is not None:
        measure(args.baseline, args)


if __name__ == "__main__":
    main()
