"""A job whose traces are damaged is still tabled: ``loaderscope job`` and ``GET /api/jobs/{job}/table``
table every readable rank and name each trace that is unreadable, empty, cut short or has lines
skipped, and the ranks the job's world size expects that are missing. Before, one Parquet part cut in
half refused the whole job (exit 2), and a missing rank or a skipped line went unsaid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loaderscope.scenarios.plan import resolve
from loaderscope.sim import CostModel
from loaderscope.sim.run import simulate_ranks
from loaderscope.traces.jsonl import write_trace
from loaderscope.traces.parquet import ParquetTraceWriter
from loaderscope.traces.paths import trace_path
from tests.conftest import wait_for

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

RANKS = 6
JOB = "sim-uniform"


def damaged_job(logdir: Path) -> dict[int, Path]:
    """A simulated 6-rank job (``loaderscope run --ranks``'s traces), ranks 0-2 as Parquet traces of
    several parts, 3-5 as JSON lines, then damaged as disks and killed writers damage them."""
    plan = resolve("uniform", {"dataset_size": 2400, "batch_size": 4, "num_workers": 2, "epochs": 1})
    job = simulate_ranks(plan.build(), job=JOB, scenario="uniform", params=plan.values(),
                         costs=[CostModel() for _ in range(RANKS)])
    paths = {}
    for rank, events in enumerate(job.events):
        path = trace_path(logdir, events[0])
        if rank < 3:
            path = path.with_name(path.name.replace(".trace.jsonl", ".trace.parquet"))
            with ParquetTraceWriter(path, events[0]["run"], row_group_events=100, part_seconds=3600) as writer:
                writer.write(events)
        else:
            write_trace(path, events, events[0]["run"], scenario="uniform", mode="sim")
        paths[rank] = path
    part = paths[1] / "part-000002.parquet"  # rank 1: a part cut in half (a disk that filled)
    part.write_bytes(part.read_bytes()[:part.stat().st_size // 2])
    for each in paths[2].iterdir():  # rank 2: a Parquet trace whose writer died before its first part
        each.unlink()
    lines = paths[3].read_text().splitlines(keepends=True)  # rank 3: a line in the middle damaged
    lines[40] = '{"seq": 39, "t": 0.1, "kind": "yiel\n'
    paths[3].write_text("".join(lines))
    paths[4].unlink()  # rank 4: its trace never reached the logdir
    lines = paths[5].read_text().splitlines(keepends=True)  # rank 5: its writer killed mid-line
    paths[5].write_text("".join(lines[:-30]) + lines[-30][:20])
    return paths


def problems(answer: dict[str, Any]) -> dict[int, str]:
    return {entry["rank"]: entry["problem"] for entry in answer["damaged"]}


def test_the_job_command_tables_every_readable_rank_and_names_the_rest(tmp_path: Path) -> None:
    damaged_job(tmp_path / "runs")
    printed = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", str(tmp_path / "runs"), "--json"],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stdout + printed.stderr
    answer = json.loads(printed.stdout)
    assert sorted(row["rank"] for row in answer["ranks"]) == [0, 1, 3, 5]
    assert problems(answer) == {1: "unreadable", 2: "empty", 3: "events missing", 5: "no run_end"}
    cut = next(entry for entry in answer["damaged"] if entry["rank"] == 1)
    assert cut["detail"].startswith("part-000002.parquet and the ") and "left out: not readable (" in cut["detail"]
    (loader,) = answer["loaders"]
    assert loader["world_size"] == RANKS and loader["missing_ranks"] == [2, 4]
    assert answer["notices"][0] == "4 of 6 ranks tabled (world_size 6); missing: 2 ranks 2, 4"
    text = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stdout + text.stderr
    flat = " ".join(text.stdout.split())
    assert "4 of 6 ranks tabled (world_size 6); missing: 2 ranks 2, 4" in flat
    assert "1 trace empty: rank 2 (by its name), " in flat and "1 trace with events missing: rank 3, " in flat


def test_the_job_view_answer_names_the_damage_by_the_logdirs_paths(start_server: Any, tmp_path: Path) -> None:
    paths = damaged_job(tmp_path / "runs")
    server = start_server(logdir=str(tmp_path / "runs"), logdir_poll=0.1)

    def answer() -> dict[str, Any] | None:
        with server.client() as http:
            got = http.get(f"/api/jobs/{JOB}/table", timeout=60)
        return got.json() if got.status_code == 200 and len(got.json()["ranks"]) >= 3 else None

    table = wait_for(answer, timeout=120, what="the job's table")
    tabled = sorted(row["rank"] for row in table["ranks"])
    assert 4 not in tabled and 2 not in tabled and {0, 3} <= set(tabled), tabled
    assert table["loaders"][0]["world_size"] == RANKS and 4 in table["loaders"][0]["missing_ranks"]
    assert any(notice.startswith(f"{len(tabled)} of 6 ranks tabled (world_size 6); missing:")
               for notice in table["notices"]), table["notices"]
    assert all(not Path(entry["trace"]).is_absolute() for entry in table["damaged"]), table["damaged"]
    named = {entry["trace"] for entry in table["damaged"]}
    assert str(paths[3].relative_to(tmp_path / "runs")) in named or 3 not in tabled
