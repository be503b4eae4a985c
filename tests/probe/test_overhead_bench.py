"""The overhead bench still runs (its --quick mode): figures in the README come from it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for

BENCH = Path(__file__).resolve().parents[2] / "bench" / "overhead.py"


@pytest.mark.slow
def test_overhead_bench_quick_mode_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for case in ("tiny", "moderate", "in-process"):
        assert f"│ {case}" in done.stdout
    assert "alternating rounds per case" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_job_table_bench_simulates_afresh_a_cache_without_shard_digests(tmp_path: Path) -> None:
    """bench/job_table.py reused whatever logdir it found: one simulated before the simulator wrote shard
    digests made a table without the shard check (2.9 s, against 63 s with it). A cache without them is
    simulated afresh, and the bench says whether the digests are there."""
    bench = BENCH.with_name("job_table.py")
    argv = [sys.executable, str(bench), "--ranks", "4", "--steps", "8", "--repeat", "1", "--dir", str(tmp_path / "job")]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "shard digests: every rank's epoch_end has one" in first.stdout, first.stdout
    for trace in (tmp_path / "job" / "jsonl").rglob("*.trace.jsonl"):  # as a cache from before the digests
        lines = trace.read_text().splitlines(keepends=True)
        trace.write_text("".join(line for line in lines if '"shard":' not in line))
    again = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "has no shard digests: simulated afresh" in again.stdout, again.stdout
    assert "shard digests: every rank's epoch_end has one" in again.stdout, again.stdout



def _thread_seconds(thread: threading.Thread) -> float:
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def test_the_bench_sums_the_threads_of_one_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sides' transports run a thread named "sender": the column kept the last one's CPU, the
    baseline's idle one (0.00 µs), and not the probe's."""
    spec = importlib.util.spec_from_file_location("overhead_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look their module up there
    spec.loader.exec_module(bench)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    busy = threading.Thread(target=spin, name="sender", daemon=True)
    idle = threading.Thread(target=stop.wait, name="sender", daemon=True)  # started last: enumerated last
    busy.start()
    idle.start()
    try:
        wait_for(lambda: _thread_seconds(busy) > 0.01, timeout=30)
        spent = _thread_seconds(busy)  # before the bench reads it: its CPU only grows
        assert bench.thread_cpu()["sender"] >= spent
    finally:
        stop.set()
        busy.join()
        idle.join()
