"""What a small Parquet part of many alike rows costs ``loaderscope serve --logdir`` when it is dropped in.

    .venv/bin/python bench/logdir_parquet_bomb.py [--rows 2000000]
    PYTHONPATH=OTHER_CHECKOUT/backend .venv/bin/python bench/logdir_parquet_bomb.py   # another version

Starts a dashboard on a logdir holding one real run, then copies in a Parquet trace whose one part
is ROWS copies of a real ``yield`` event (zstd: a few hundred KB), and reports the server's peak
resident memory (``VmHWM``) before and after, how long until the run list shows the trace, and what
it says of it. Not part of the test suite (tests/server/test_logdir_columnar.py checks the refusal).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

import loaderscope
from loaderscope.traces import parquet as columnar
from loaderscope.traces.header import header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.live import launch
from tests.logdirs import real_run, runs, write


def bomb(directory: Path, event: dict[str, Any], rows: int) -> Path:
    """A Parquet trace of one part: ``rows`` copies of ``event``, in one row group."""
    table = columnar.to_table([event]).take(pa.array([0] * rows))
    directory.mkdir(parents=True)
    with pq.ParquetWriter(directory / "part-000000.parquet", columnar.SCHEMA, compression="zstd",
                          store_schema=False) as writer:
        writer.write_table(table, row_group_size=rows)
        writer.add_key_value_metadata({columnar.METADATA_KEY: orjson.dumps(header("bomb", mode="real"))})
    return directory / "part-000000.parquet"


def peak_rss(pid: int) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    print(f"loaderscope from {Path(loaderscope.__file__).parent}")
    work = Path(tempfile.mkdtemp(prefix="loaderscope-bomb-"))
    try:
        logdir = work / "logs"
        events = real_run(48, num_workers=0)
        write(logdir / "mine.trace.jsonl", events)
        part = bomb(work / "made", next(e for e in events if e["kind"] == "yield"), args.rows)
        print(f"part: {args.rows:,} rows in {part.stat().st_size:,} bytes")
        server = launch(work / "server", logdir=str(logdir), logdir_poll=0.1)
        try:
            while "mine.trace.jsonl" not in runs(server):
                time.sleep(0.1)
            before = peak_rss(server.process.pid)
            shutil.copytree(part.parent, logdir / "dropped.trace.parquet")
            start = time.monotonic()
            while "dropped.trace.parquet" not in (listed := runs(server)):
                time.sleep(0.05)
            took = time.monotonic() - start
            after = peak_rss(server.process.pid)
        finally:
            server.stop()
        dropped = listed["dropped.trace.parquet"]
        print(f"server VmHWM {before / 2**20:.0f} MiB before, {after / 2**20:.0f} MiB after "
              f"(+{(after - before) / 2**20:.0f}); listed after {took:.1f} s as {dropped['status']}, "
              f"batches {dropped.get('batches')}")
        if dropped.get("problem"):
            print(f"problem: {dropped['problem']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
