"""Does the advice on num_workers hold up when the loop runs for real at the counts it compares?

    .venv/bin/python bench/advice_check.py                 # every loop (several minutes)
    .venv/bin/python bench/advice_check.py --loop starved  # the loops named
    .venv/bin/python bench/advice_check.py --repeat 3      # each real run three times (the median is shown)

Each loop is recorded at its own num_workers under ``loaderscope record`` and advised on
(``sim.advice.advise``: the simulator fitted to the recording). The same loop is then run for real,
side by side, at the count the advice names, at the count the old arithmetic named (the median fetch
over the step, rounded up: what the diagnosis said before the advice), and at the recorded count
again; the table shows the simulator's prediction for each count (its row of the advice) beside the
batches/s the real run measured (``stats.summary``'s, as for the recording). The load average is
printed before and after: the machine is shared, and a run's pace is as noisy as it is.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from loaderscope.model.advicetext import advice_text
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.sim.advice import advise
from loaderscope.traces.jsonl import read_trace

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CACHED = ROOT / "bench" / "cached_loop.py"
EXAMPLE = ROOT / "examples" / "train_cnn.py"


@dataclass(frozen=True)
class Loop:
    """A loop to record: ``command`` with ``{workers}`` where its worker count goes."""

    label: str
    command: tuple[str, ...]
    workers: int

    def argv(self, workers: int) -> list[str]:
        return [arg.replace("{workers}", str(workers)) for arg in self.command]


LOOPS = [
    # the shape: one worker, a batch's fetch nine times the step, two short epochs
    Loop("starved", (sys.executable, str(CACHED), "workers={workers}", "samples=48", "batch=4", "cold=0.009",
                     "step=0.004"), 1),
    # the same, long enough (8 epochs of 24 batches, persistent workers) that starting workers is paid once
    Loop("starved, long", (sys.executable, str(CACHED), "workers={workers}", "samples=96", "batch=4", "cold=0.009",
                           "step=0.004", "epochs=8", "persistent=yes"), 1),
    # CPU-bound samples (zlib, augmentation) and a model step: more workers than cores compete for them
    Loop("train_cnn.py", (sys.executable, str(EXAMPLE), "--workers", "{workers}", "--samples", "512", "--epochs",
                          "2"), 1),
]


def measured(loop: Loop, workers: int, folder: Path) -> list[dict[str, Any]]:
    """Record the loop at ``workers`` for real; the events of its (one) loader."""
    folder.mkdir(parents=True)
    command = [str(BIN / "loaderscope"), "record", "--logdir", str(folder), "--", *loop.argv(workers)]
    env = os.environ | {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{loop.label}: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    [trace] = sorted(folder.rglob("*.trace.jsonl"))
    return read_trace(trace)[1]


def old_arithmetic(stats: dict[str, Any]) -> int | None:
    """The count the diagnosis said before the advice: the median fetch over the step, rounded up."""
    step, task = stats["step_time"], stats["median_task"]
    return math.ceil(task / step) if step and task > 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", action="append", metavar="LABEL", help="only this loop (repeatable)")
    parser.add_argument("--repeat", type=int, default=1, help="real runs per count (the median is shown)")
    args = parser.parse_args()
    loops = [loop for loop in LOOPS if not args.loop or loop.label in args.loop]
    if not loops:
        parser.error(f"no loop is named {args.loop}; the loops: {', '.join(loop.label for loop in LOOPS)}")
    console = Console(width=160)
    before = os.getloadavg()
    table = Table(title="the advice, run for real", show_edge=False, header_style="bold")
    for title in ("loop", "num_workers", "named by", "simulated b/s", "real b/s", "real vs simulated"):
        table.add_column(title, justify="left" if title in ("loop", "named by") else "right")
    with tempfile.TemporaryDirectory() as scratch:
        for number, loop in enumerate(loops):
            events = measured(loop, loop.workers, Path(scratch) / f"{number}-recorded")
            advice = advise(events)
            console.print(f"{loop.label}: {advice_text(advice)}", soft_wrap=True)
            predicted = {row["num_workers"]: row["batches_per_s"] for row in advice["rows"]}
            roles: dict[int, list[str]] = {}
            for role, count in (("recorded", loop.workers), ("the advice", advice["workers"]),
                                ("old arithmetic", old_arithmetic(summary(reduce(events))))):
                if count is not None:
                    roles.setdefault(count, []).append(role)
            for count, named in sorted(roles.items()):
                runs = [measured(loop, count, Path(scratch) / f"{number}-{count}-{r}") for r in range(args.repeat)]
                rates = [summary(reduce(run))["batches_per_s"] for run in runs]
                real, simulated = statistics.median(rates), predicted.get(count)
                table.add_row(loop.label, str(count), ", ".join(named),
                              f"{simulated:.2f}" if simulated is not None else "–", f"{real:.2f}",
                              f"{real / simulated - 1:+.0%}" if simulated else "–")
    after = os.getloadavg()
    console.print(table)
    console.print(f"load average (1, 5, 15 min): before {before[0]:.1f} {before[1]:.1f} {before[2]:.1f}, "
                  f"after {after[0]:.1f} {after[1]:.1f} {after[2]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
