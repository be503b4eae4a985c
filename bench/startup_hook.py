"""What ``loaderscope_auto.pth`` adds to an interpreter's start when ``$LOADERSCOPE_LOGDIR`` is set.

    .venv/bin/python bench/startup_hook.py [--against REV] [--runs 40]

Three setups start ``python -S -c "import site; site.addsitedir(D)"`` in turn, ``--runs`` rounds
of each, alternating so that a loaded machine slows them alike; ``D`` holds only the setup's
``.pth`` (so the environment's own, installed one plays no part):

- ``none``: no ``.pth``: the interpreter and ``site`` alone;
- ``before``: the ``.pth`` and package of ``--against`` (default ``fe9b070``: they imported
  ``loaderscope.autowatch`` at every start), from ``git archive``;
- ``after``: this checkout's ``.pth`` and ``loaderscope_hook.py``.

It prints each setup's median wall time, and the cost of ``before`` and ``after`` over ``none``
with a bootstrap 95% interval of the median difference. No DataLoader is imported: this is the
price of a process that never uses one (a CLI tool, a compiler worker) in a recorded environment.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tree(directory: Path, rev: str | None) -> Path:
    """``backend/`` of ``rev`` (git archive) or of this checkout, copied to ``directory`` and byte-compiled
    (as an install is: without .pyc files each start would time the compiler)."""
    if rev is None:
        shutil.copytree(ROOT / "backend", directory / "backend", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "backend"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(directory / "backend")], check=True)
    return directory / "backend"


def site_dir(directory: Path, backend: Path | None) -> Path:
    directory.mkdir()
    if backend is not None:
        shutil.copy(backend / "loaderscope_auto.pth", directory / "loaderscope_auto.pth")
    return directory


def start(site: Path, backend: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(backend), "LOADERSCOPE_LOGDIR": str(site / "runs")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    began = time.perf_counter()
    subprocess.run([sys.executable, "-S", "-c", f"import site; site.addsitedir({str(site)!r})"], env=env, check=True)
    return time.perf_counter() - began


def interval(a: list[float], b: list[float], rounds: int = 2000) -> tuple[float, float]:
    """Bootstrap 95% interval of median(a) - median(b)."""
    diffs = sorted(statistics.median(random.choices(a, k=len(a))) - statistics.median(random.choices(b, k=len(b)))
                   for _ in range(rounds))
    return diffs[int(0.025 * rounds)], diffs[int(0.975 * rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="fe9b070", help="the revision whose .pth is 'before'")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "old").mkdir()
        (root / "new").mkdir()
        old, new = tree(root / "old", args.against), tree(root / "new", None)
        setups = {"none": (site_dir(root / "s-none", None), new), "before": (site_dir(root / "s-before", old), old),
                  "after": (site_dir(root / "s-after", new), new)}
        times: dict[str, list[float]] = {name: [] for name in setups}
        for _ in range(args.runs):
            for name, (site, backend) in setups.items():
                times[name].append(start(site, backend))
    medians = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    print(json.dumps({"median_ms": {k: round(v, 2) for k, v in medians.items()}, "runs": args.runs}))
    for name in ("before", "after"):
        low, high = interval(times[name], times["none"])
        print(json.dumps({"setup": name, "extra_ms": round(medians[name] - medians["none"], 2),
                          "ci95_ms": [round(low * 1e3, 2), round(high * 1e3, 2)]}))
    low, high = interval(times["after"], times["before"])
    print(json.dumps({"after_minus_before_ms": round(medians["after"] - medians["before"], 2),
                      "ci95_ms": [round(low * 1e3, 2), round(high * 1e3, 2)],
                      "ratio_after_over_before": round(medians["after"] / medians["before"], 3)}))


if __name__ == "__main__":
    main()
