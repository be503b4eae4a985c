"""Parquet traces against JSON lines: bytes per event on disk, writer CPU per event, read time.

    .venv/bin/python bench/trace_size.py [--batches 3000] [--repeats 5]

1. a real recording: ``loaderscope record`` of a script iterating a 2-worker DataLoader for
   BATCHES batches (2 ms a sample, 4 ms a step: about 100 batches/s), once per format (the probe's
   writer thread writes the file), and again as Parquet with a part every 2 s
   (``$LOADERSCOPE_PART_SECONDS``): bytes per event, and the footers' share of them;
2. a simulated run (the ``uniform`` scenario, 2 workers, BATCHES batches) written in both formats;
3. for the simulated run's events, REPEATS times: the writer's CPU time (``time.process_time``, the
   writer thread's whole cost: encode, write, close) per event, and the read time of
   ``jsonl.read_trace`` per event, for both formats;
4. the real recording's events rewritten in 1,200-event parts (2 s of it) at zstd levels 1, 3
   (``columnar.COMPRESSION_LEVEL``), 9 and 19: bytes per event and the writer's CPU per event.

Sizes are exact; times print the median and [min–max] over the repeats. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaderscope.cli.main import execute
from loaderscope.scenarios.plan import resolve
from loaderscope.traces.jsonl import read_trace, write_trace

SCRIPT = textwrap.dedent('''
    import sys, time, torch
    from torch.utils.data import DataLoader, Dataset

    class Tiny(Dataset):
        def __len__(self):
            return int(sys.argv[1]) * 4

        def __getitem__(self, index):
            time.sleep(0.002)
            return torch.tensor([index])

    if __name__ == "__main__":
        for batch in DataLoader(Tiny(), batch_size=4, num_workers=2):
            time.sleep(0.004)
''')


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def recorded(directory: Path, fmt: str, batches: int, part_seconds: float = 10.0) -> Path:
    script = directory / "train.py"
    script.write_text(SCRIPT)
    logdir = directory / f"runs-{fmt}-{part_seconds:g}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {
        "OMP_NUM_THREADS": "1", "LOADERSCOPE_PART_SECONDS": str(part_seconds)}
    subprocess.run([sys.executable, "-m", "loaderscope.record", "--format", fmt, "--logdir", str(logdir), "--",
                    sys.executable, str(script), str(batches)], check=True, env=env, capture_output=True)
    (trace,) = logdir.rglob(f"*.trace.{fmt}")
    return trace


def simulated(batches: int) -> tuple[str, list[dict[str, Any]]]:
    plan = resolve("uniform", {"dataset_size": min(batches * 4, 100_000), "batch_size": 4, "num_workers": 2})
    events, state, _ = execute(plan, "sim")
    return state.run, [{k: getattr(v, "value", v) if k == "kind" else v for k, v in e.items()} for e in events]


def footer_bytes(path: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(part).metadata.serialized_size for part in sorted(path.glob("part-*.parquet")))


def levels(events: list[dict[str, Any]]) -> None:
    """The events in 1,200-event parts at each zstd level: bytes and the writer's CPU per event."""
    from loaderscope.traces import parquet as columnar

    meta = {columnar.METADATA_KEY: b"{}"}
    print(f"zstd levels, {len(events)} recorded events in parts of 1,200: bytes/event, writer CPU µs/event")
    default = columnar.COMPRESSION_LEVEL
    try:
        for level in (1, 3, 9, 19):
            columnar.COMPRESSION_LEVEL = level
            start = time.process_time()
            size = sum(len(columnar.part_bytes(events[i:i + 1200], meta, every_column=i == 0))
                       for i in range(0, len(events), 1200))
            cpu = time.process_time() - start
            print(f"  level {level:2}{' (default)' if level == default else '          '} {size / len(events):5.2f} B "
                  f"{cpu / len(events) * 1e6:6.2f} µs")
    finally:
        columnar.COMPRESSION_LEVEL = default


def timed(step: Callable[[], Any], clock: Callable[[], float], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = clock()
        step()
        times.append(clock() - start)
    return sorted(times)


def shown(values: list[float], per: int) -> str:
    us = [v / per * 1e6 for v in values]
    return f"{statistics.median(us):7.2f} µs/event [{us[0]:.2f}–{us[-1]:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loaderscope-bench-") as tmp:
        directory = Path(tmp)
        print(f"bytes per event on disk ({args.batches} batches, 2 workers)")
        real = {fmt: recorded(directory, fmt, args.batches) for fmt in ("jsonl", "parquet")}
        two = recorded(directory, "parquet", args.batches, part_seconds=2.0)
        count = len(read_trace(two)[1])
        print(f"  real recording, a part every 2 s: {count} events, parquet {size(two) / count:5.1f} B, of which "
              f"footers {footer_bytes(two) / count:.1f} B ({len(list(two.glob('part-*.parquet')))} parts)")
        for label, paths in (("real recording", real), ("simulated run", None)):
            if paths is None:
                run, events = simulated(args.batches)
                paths = {fmt: write_trace(directory / f"sim.trace.{fmt}", events, run, fmt=fmt)
                         for fmt in ("jsonl", "parquet")}
            count = len(read_trace(paths["jsonl"])[1])
            per = {fmt: size(path) / count for fmt, path in paths.items()}
            print(f"  {label:15} {count:7} events: jsonl {per['jsonl']:6.1f} B, parquet {per['parquet']:5.1f} B "
                  f"({per['jsonl'] / per['parquet']:.1f}x smaller)")
        levels(read_trace(real["parquet"])[1])
        run, events = simulated(args.batches)
        print(f"writer CPU and read time, {len(events)} simulated events, {args.repeats} repeats: median [min–max]")
        for fmt in ("jsonl", "parquet"):
            counter = iter(range(10**6))
            # timed() calls each step its repeats times and returns: all within the iteration
            write = timed(lambda: write_trace(directory / f"w{next(counter)}.trace.{fmt}", events, run,  # noqa: B023
                                              fmt=fmt),  # noqa: B023
                          time.process_time, args.repeats)
            read = timed(lambda: read_trace(directory / f"w0.trace.{fmt}"), time.perf_counter, args.repeats)  # noqa: B023
            print(f"  {fmt:8} write {shown(write, len(events))}   read {shown(read, len(events))}")


if __name__ == "__main__":
    main()
