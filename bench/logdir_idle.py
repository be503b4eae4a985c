"""What an idle logdir costs ``serve --logdir``: CPU while nothing changes, polled against watched.

    .venv/bin/python bench/logdir_idle.py [--files 10000] [--seconds 5] [--windows 3] [--empty-dirs 0]
        [--modes polled,watched]

Writes FILES small ended traces (a real simulated run each, in directories of 100), starts the
dashboard on them twice, once polling the directory every 0.5 s (``logdir_watch=False``, what NFS
and remote stores get) and once with inotify (``logdir_watch=True``, a local filesystem's default),
waits until every file is listed, then reads the server process's CPU time (``/proc/PID/stat``)
over WINDOWS windows of SECONDS each while nothing changes. Prints each mode's share of one core
(mean and range over the windows) and the ratio. ``--empty-dirs N`` adds N empty directories (what
another user who can write the logdir may make), and prints the inotify watches the server holds
(``/proc/PID/fdinfo``). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
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

from loaderscope.scenarios.plan import resolve
from loaderscope.sim import simulate
from loaderscope.traces.jsonl import TraceWriter

TOKEN = "bench-logdir-idle-token-0123456789"
URL_LINE = re.compile(r"loaderscope dashboard: (http://[^/\s]+)/\?token=")
TICKS = os.sysconf("SC_CLK_TCK")


def write_logdir(root: Path, files: int) -> None:
    plan = resolve("uniform", {"num_workers": 2, "batch_size": 4, "dataset_size": 16, "sample_ms": 1})
    run = simulate(plan.build(), run_id="bench", scenario="uniform", params=plan.values())
    for n in range(files):
        with TraceWriter(root / f"d{n // 100}" / f"r{n}.trace.jsonl", f"r{n}", mode="sim") as writer:
            writer.write(run)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def inotify_watches(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == "anon_inode:inotify":
                info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
                count += sum(line.startswith("inotify wd:") for line in info.splitlines())
        except OSError:
            continue
    return count


def idle_share(root: Path, files: int, watch: bool, seconds: float, windows: int) -> list[float]:
    """The server's CPU share of one core in each idle window, once all ``files`` are listed."""
    options = {"port": 0, "logdir": str(root), "logdir_watch": watch, "open_browser": False}
    env = {**os.environ, "LOADERSCOPE_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", "XDG_RUNTIME_DIR": str(root.parent)}
    log = root.parent / f"server-{watch}.log"
    code = "import json, sys; from loaderscope.server.web.dashboard import serve; serve(**json.loads(sys.argv[1]))"
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-c", code, json.dumps(options)], stdout=out,
                                  stderr=subprocess.STDOUT, env=env)
    try:
        while not (found := URL_LINE.search(log.read_text())):
            if server.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.05)
        listed: list[dict[str, Any]] = []
        while len(listed) < files:
            listed = httpx.get(found.group(1) + "/api/runs", headers={"Authorization": f"Bearer {TOKEN}"},
                               timeout=60).json()
        time.sleep(1.0)  # the listing's own work (and its sidecars) settles
        print(f"  {inotify_watches(server.pid)} inotify watches")
        shares = []
        for _ in range(windows):
            before, began = cpu_seconds(server.pid), time.monotonic()
            time.sleep(seconds)
            shares.append((cpu_seconds(server.pid) - before) / (time.monotonic() - began))
        for line in log.read_text().splitlines():  # how far apart full scans are, what is polled
            if line.startswith("loaderscope: ") and ("scan" in line or "polled" in line):
                print(f"  {line}")
        return shares
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--empty-dirs", type=int, default=0)
    parser.add_argument("--modes", default="polled,watched")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="loaderscope-bench-"))
    root = base / "logdir"
    try:
        write_logdir(root, args.files)
        for n in range(args.empty_dirs):
            (root / "empty" / f"e{n // 1000}" / f"e{n}").mkdir(parents=True)
        print(f"logdir: {args.files} idle traces in {args.files // 100 + 1} directories, "
              f"{args.empty_dirs} empty directories")
        means = {}
        for watch in [mode == "watched" for mode in args.modes.split(",")]:
            shares = idle_share(root, args.files, watch, args.seconds, args.windows)
            means[watch] = sum(shares) / len(shares)
            label = "inotify (watched)" if watch else "polled every 0.5 s"
            print(f"{label:<20}: {100 * means[watch]:5.1f}% of a core idle "
                  f"(windows {100 * min(shares):.1f}–{100 * max(shares):.1f}%)")
        if len(means) == 2:
            print(f"polling costs {means[False] / max(means[True], 1e-4):.0f}x what watching does on an idle logdir")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
