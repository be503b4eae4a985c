"""How close ``loaderscope sim --from-trace`` comes to a recorded run, at the setting it recorded.

    .venv/bin/python bench/fit_accuracy.py            # every case (several minutes)
    .venv/bin/python bench/fit_accuracy.py --quick    # three cases, a smoke run
    .venv/bin/python bench/fit_accuracy.py --case pickle_heavy --case straggler   # the cases named
    .venv/bin/python bench/fit_accuracy.py --keep runs/   # keep the traces
    .venv/bin/python bench/fit_accuracy.py --refit runs/  # fit the kept traces again, recording nothing

Each case records a real run: a built-in scenario (``loaderscope run NAME --set ...``, defaults and
variants: 0/2/4 workers, a training step, persistent workers, iterable shards, pin_memory) or a
training loop with a model step under ``loaderscope record`` (examples/train_cnn.py with 0 and 2
workers, bench/train_eval.py with an eval loader between epochs, bench/train_accum.py stepping its
optimizer every 4 batches, bench/train_zip.py iterating two loaders zipped, train_cnn.py as a 2-rank
torchrun DDP job). Every loader a case recorded is then fitted and replayed at its recorded setting, exactly
as ``loaderscope sim --from-trace`` does (``sim.recorded_check``), and the table prints recorded and
predicted batches/s (``stats.summary``'s definition for both) with the error, and the advice on
num_workers the run gets (``sim.advice.advise``: its status and count). The load average
is printed before and after: the machine is shared, and the recordings are as noisy as it is;
the prediction is fitted from the same recording, so its error measures the model, not the noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loaderscope.cli.main import trace_plan
from loaderscope.sim import recorded_check
from loaderscope.sim.advice import advise
from loaderscope.traces.jsonl import read_trace

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EXAMPLE = ROOT / "examples" / "train_cnn.py"
EVAL_LOOP = ROOT / "bench" / "train_eval.py"
ACCUMULATE_LOOP = ROOT / "bench" / "train_accum.py"
ZIPPED_LOOP = ROOT / "bench" / "train_zip.py"
TOLERANCE = 0.10


@dataclass(frozen=True)
class Case:
    """A real run to record: ``scenario`` with ``sets``, or ``command`` under ``loaderscope record``."""

    label: str
    scenario: str | None = None
    sets: tuple[str, ...] = ()
    command: tuple[str, ...] = ()


def _loop(*args: str) -> tuple[str, ...]:
    return (sys.executable, *args)


CASES = [
    Case("uniform", "uniform"),
    Case("uniform, 0 workers", "uniform", ("num_workers=0",)),
    Case("uniform, 2 workers", "uniform", ("num_workers=2",)),
    Case("uniform, step 10 ms", "uniform", ("step_ms=10",)),
    Case("uniform, pin_memory", "uniform", ("pin_memory=true",)),
    Case("out_of_order", "out_of_order"),
    Case("straggler", "straggler"),
    Case("slow_consumer", "slow_consumer"),
    Case("persistent_epochs", "persistent_epochs"),
    Case("persistent_epochs, step 5 ms", "persistent_epochs", ("step_ms=5",)),
    Case("iterable_shards", "iterable_shards"),
    Case("iterable_shards, 0 workers", "iterable_shards", ("num_workers=0",)),
    Case("samplers", "samplers"),
    Case("group_sampler", "group_sampler"),
    Case("io_bound", "io_bound"),
    Case("pickle_heavy", "pickle_heavy"),
    Case("gpu_step", "gpu_step"),
    Case("train_cnn.py, 0 workers", command=_loop(str(EXAMPLE), "--workers", "0", "--samples", "512", "--epochs", "2")),
    Case("train_cnn.py, 2 workers", command=_loop(str(EXAMPLE), "--workers", "2", "--samples", "512", "--epochs", "2")),
    Case("train_eval.py (eval between epochs)", command=_loop(str(EVAL_LOOP), "--workers", "2")),
    Case("train_accum.py (optimizer step every 4 batches)", command=_loop(str(ACCUMULATE_LOOP), "--workers", "2")),
    Case("train_zip.py (train and val loaders zipped)", command=_loop(str(ZIPPED_LOOP), "--workers", "1")),
    Case("train_cnn.py, torchrun 2 ranks", command=(str(BIN / "torchrun"), "--nproc-per-node", "2", str(EXAMPLE),
                                                    "--workers", "1", "--samples", "512", "--epochs", "2")),
]
QUICK = ["uniform, 2 workers", "persistent_epochs", "train_cnn.py, 0 workers"]


def record(case: Case, folder: Path) -> list[Path]:
    """Run the case for real; the traces it left."""
    folder.mkdir(parents=True)
    if case.scenario is not None:
        sets = [arg for value in case.sets for arg in ("--set", value)]
        command = [str(BIN / "loaderscope"), "run", case.scenario, *sets, "--out", str(folder / "run.trace.jsonl")]
    else:
        command = [str(BIN / "loaderscope"), "record", "--logdir", str(folder), "--", *case.command]
    env = os.environ | {"PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{case.label}: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return sorted(folder.rglob("*.trace.jsonl"))


def check(path: Path) -> tuple[str, int, dict[str, float], str]:
    """The loader's name, its workers, the fit's check at the recorded setting and its advice on num_workers."""
    events = read_trace(path)[1]
    start = next(e for e in events if e["kind"] == "run_start")
    name = start.get("name") or start.get("scenario") or path.name
    if start.get("world_size", 1) > 1:
        name = f"{name} rank {start.get('rank', 0)}"
    advice = advise(events)
    advised = f"{advice['status']} {advice['workers']}" if advice["workers"] is not None else advice["status"]
    return name, start["config"].get("num_workers", 0), recorded_check(events, trace_plan(events)), advised


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="three cases only")
    parser.add_argument("--keep", metavar="DIR", help="record the traces here and keep them")
    parser.add_argument("--case", action="append", metavar="LABEL", help="only this case (repeatable)")
    parser.add_argument("--refit", metavar="DIR", help="fit the traces a --keep run left there, recording nothing")
    args = parser.parse_args()
    chosen = args.case or (QUICK if args.quick else None)
    cases = [c for c in CASES if chosen is None or c.label in chosen]
    if not cases:
        parser.error(f"no case is named {args.case}; the cases: {', '.join(c.label for c in CASES)}")
    console = Console(width=140)
    before = os.getloadavg()
    table = Table(title="sim --from-trace at the recorded setting", show_edge=False, header_style="bold")
    for title in ("case", "loader", "workers", "recorded b/s", "predicted b/s", "error", "advice"):
        table.add_column(title, justify="left" if title in ("case", "loader") else "right")
    errors = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.refit or args.keep or scratch)
        for case in cases:
            folder = root / f"{CASES.index(case):02d}"
            for path in sorted(folder.rglob("*.trace.jsonl")) if args.refit else record(case, folder):
                name, workers, result, advised = check(path)
                if result["error"] is None:
                    continue  # a loader that yielded no batch
                errors.append(abs(result["error"]))
                table.add_row(case.label, name, str(workers), f"{result['recorded_batches_per_s']:.2f}",
                              f"{result['predicted_batches_per_s']:.2f}", f"{result['error']:+.1%}", advised)
    after = os.getloadavg()
    console.print(table)
    within = sum(e <= TOLERANCE for e in errors)
    console.print(f"{len(errors)} loaders in {len(cases)} cases: |error| median {statistics.median(errors):.1%}, "
                  f"max {max(errors):.1%}; {within} of {len(errors)} within {TOLERANCE:.0%}")
    during = "fitting them again" if args.refit else "recording and fitting"
    console.print(f"load average (1, 5, 15 min) {during}: before {before[0]:.1f} {before[1]:.1f} {before[2]:.1f}, "
                  f"after {after[0]:.1f} {after[1]:.1f} {after[2]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
