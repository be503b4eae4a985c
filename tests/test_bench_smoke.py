"""The overhead bench still runs (its --quick mode): figures in the README come from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "overhead.py"


@pytest.mark.slow
def test_overhead_bench_quick_mode_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for case in ("tiny", "moderate", "in-process"):
        assert f"│ {case}" in done.stdout
    assert "alternating rounds per case" in done.stdout
