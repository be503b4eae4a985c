"""Two ranks under torchrun (gloo on CPU), each watch()ing its DataLoader into one dashboard."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.ranks import shard_report, slowest_per_step

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_cnn.py"


def _events(server: Any, run_id: str) -> list[dict[str, Any]]:
    with server.client() as http:
        return http.get(f"/api/runs/{run_id}/events", params={"after": -1, "limit": 10_000}).json()["events"]


@pytest.mark.timeout(300)  # torchrun's two ranks may take the subprocess's 180 s on a loaded box
@pytest.mark.slow
def test_two_ranks_report_disjoint_complete_shards(server: Any, tmp_path: Path) -> None:
    job = f"job-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "LOADERSCOPE_URL": server.page_url, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-id", job,
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", str(EXAMPLE),
               "--samples", "256", "--workers", "1", "--batch-size", "16"]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    with server.client() as http:
        runs = http.get("/api/runs").json()
    streams = {}
    for run in runs:
        events = _events(server, run["id"])
        start = events[0] if events and events[0]["kind"] == "run_start" else {}
        if start.get("job") == job:
            streams[start["rank"]] = events
    assert sorted(streams) == [0, 1], "both ranks reach the dashboard, each with its rank"
    ends = {rank: next(e for e in events if e["kind"] == "epoch_end") for rank, events in streams.items()}
    report = shard_report(ends, 256)
    assert report["disjoint"] and report["complete"], report
    assert report["per_rank"] == {0: 128, 1: 128}
    steps = slowest_per_step(streams)
    assert len(steps) == 8 and {s["rank"] for s in steps} - {None} <= {0, 1}  # None: both delivered within 1 µs
