"""What ``loaderscope record`` costs a training command: the same command run plain and recorded.

    .venv/bin/python bench/record_overhead.py            # full: 12 alternating rounds
    .venv/bin/python bench/record_overhead.py --quick    # a smoke run: 2 rounds, fewer batches

The command is a real script (it never imports loaderscope): a DataLoader with 2 workers over
3x64x64 float samples, batch_size 16, a few hundred batches, with a little compute per batch as a
training step has. Each round runs it once plain and once under ``record`` (who goes first
alternates: shared machines drift, so each round compares runs seconds apart) and gives two
ratios, recorded / plain: the whole command (interpreter start, imports, the probe's start-up, the
trace written and closed, record's own process) and the training loop alone, as the script times
it. It reports the median ratio of each with a bootstrap 95% interval, and the trace's size.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

SCRIPT = '''
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Images(Dataset):
    def __len__(self):
        return int(sys.argv[1]) * 16

    def __getitem__(self, index):
        return torch.full((3, 64, 64), float(index)), index % 10

if __name__ == "__main__":
    loader = DataLoader(Images(), batch_size=16, num_workers=2)
    weight = torch.randn(3 * 64 * 64, 10)
    started = time.perf_counter()
    for images, labels in loader:
        (images.flatten(1) @ weight).sum()  # a small step, so the loader is not all there is
    print(f"loop {time.perf_counter() - started:.6f}", flush=True)
'''
LOOP = re.compile(r"loop (\d+\.\d+)")


def bootstrap_median(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples)]


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds of the whole command, seconds of its training loop)."""
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - started
    found = LOOP.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return wall, float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 60 batches: a smoke run")
    parser.add_argument("--rounds", type=int, default=12, help="alternating plain/recorded pairs")
    parser.add_argument("--batches", type=int, default=400, help="batches per run")
    args = parser.parse_args()
    rounds, batches = (2, 60) if args.quick else (args.rounds, args.batches)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {"OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="loaderscope-record-bench-") as name:
        tmp = Path(name)
        (tmp / "train.py").write_text(SCRIPT)
        plain = [sys.executable, "train.py", str(batches)]
        recorded = [sys.executable, "-m", "loaderscope.record", "--logdir", str(tmp / "runs"), "--", *plain]
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "recorded": []}
        for i in range(rounds):
            for side in ("plain", "recorded") if i % 2 == 0 else ("recorded", "plain"):
                times[side].append(timed(plain if side == "plain" else recorded, tmp, env))
        traces = list((tmp / "runs").rglob("*.trace.jsonl"))
        trace_bytes = statistics.median(path.stat().st_size for path in traces)
    table = Table("what", "plain (median s)", "recorded (median s)", "ratio recorded/plain (median, 95% CI)")
    for column, what in ((0, "whole command"), (1, "training loop")):
        p = [t[column] for t in times["plain"]]
        r = [t[column] for t in times["recorded"]]
        ratios = [b / a for a, b in zip(p, r, strict=True)]
        low, high = bootstrap_median(ratios)
        table.add_row(what, f"{statistics.median(p):.3f}", f"{statistics.median(r):.3f}",
                      f"{statistics.median(ratios):.3f} ({low:.3f}–{high:.3f})")
    console = Console(width=max(Console().width, 120))
    console.print(table)
    console.print(f"{batches} batches of 16x3x64x64 floats, 2 workers; {rounds} alternating rounds; "
                  f"trace {trace_bytes / 1e3:.0f} kB per run ({len(traces)} runs); {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
