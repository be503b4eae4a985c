"""The `loaderscope` command as a user types it (a real subprocess, a real DataLoader)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

from loaderscope.traces.jsonl import read_trace


def loaderscope(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loaderscope.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_run_out_of_order_explains_reordering_and_writes_the_trace(tmp_path: Path) -> None:
    result = loaderscope("run", "out_of_order", "--set", "dataset_size=48", "--out", "t.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "batches/s" in out and "arrival order:" in out and "parked in _task_info" in out
    assert "reorder buffer high-water" in out and "fetch p50" in out
    head, events = read_trace(tmp_path / "t.jsonl")
    assert head["scenario"] == "out_of_order"
    assert sum(e["kind"] == "yield" for e in events) == 12


def test_bad_parameter_names_the_field_and_the_range(tmp_path: Path) -> None:
    result = loaderscope("run", "uniform", "--set", "num_workers=99", cwd=tmp_path)
    assert result.returncode == 2
    assert "num_workers" in result.stdout and "0 to 64" in result.stdout
    result = loaderscope("run", "nosuch", cwd=tmp_path)
    assert result.returncode == 2 and "out_of_order" in result.stdout


def test_scenarios_lists_all_and_export_writes_chrome_json(tmp_path: Path) -> None:
    listing = loaderscope("scenarios", cwd=tmp_path).stdout
    for name in ("out_of_order", "uniform", "straggler", "iterable_shards", "group_sampler", "samplers",
                 "persistent_epochs", "slow_consumer"):
        assert name in listing
    assert loaderscope("run", "uniform", "--set", "num_workers=0", "--out", "u.jsonl", cwd=tmp_path).returncode == 0
    assert loaderscope("export", "u.jsonl", "-o", "u.json", cwd=tmp_path).returncode == 0
    chrome = json.loads((tmp_path / "u.json").read_text())
    assert any(e["ph"] == "X" for e in chrome["traceEvents"])


def test_loader_error_is_reported_and_the_trace_kept(tmp_path: Path) -> None:
    result = loaderscope("run", "uniform", "--set", "timeout=0.001", "--set", "sample_ms=200",
                         "--set", "num_workers=1", "--out", "x.jsonl", cwd=tmp_path)
    assert result.returncode == 1
    assert "timed out" in result.stdout and "timeout: no batch arrived" in result.stdout
    _, events = read_trace(tmp_path / "x.jsonl")
    assert events[-1]["kind"] == "run_end" and events[-1]["reason"] == "error"


def test_run_sim_ranks_writes_a_job_with_the_slow_rank_named(tmp_path: Path) -> None:
    result = loaderscope("run", "uniform", "--mode", "sim", "--ranks", "3", "--rank-factor", "1=4",
                         "--set", "dataset_size=240", "--set", "step_ms=5", "--logdir", "job", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    traces = sorted((tmp_path / "job").glob("*/*.trace.jsonl"))
    assert len(traces) == 3 and "serve --logdir job" in result.stdout
    starts = [read_trace(path)[1][0] for path in traces]
    assert sorted(s["rank"] for s in starts) == [0, 1, 2]
    assert {s["job"] for s in starts} == {starts[0]["job"]} and {s["world_size"] for s in starts} == {3}
    assert all(s["config"]["sampler"] == "DistributedSampler" for s in starts)
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line[:1].isdigit() and "steps" in line}
    assert "0 of" in rows["0"] and "0 of" not in rows["1"]  # rank 1, four times slower, delivers last


def test_run_ranks_needs_the_simulator_and_a_real_rank(tmp_path: Path) -> None:
    result = loaderscope("run", "uniform", "--ranks", "4", cwd=tmp_path)
    assert result.returncode == 2 and "--mode sim" in result.stdout and "torchrun" in result.stdout
    result = loaderscope("run", "uniform", "--mode", "sim", "--ranks", "4", "--rank-factor", "4=2", cwd=tmp_path)
    assert result.returncode == 2 and "rank from 0 to 3" in result.stdout


def piped(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """As a user's `loaderscope ... | less` runs it: stdout a pipe, no $COLUMNS."""
    return subprocess.run([sys.executable, "-m", "loaderscope.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin"})


SWEEP = ("sim", "uniform", "--sweep", "num_workers=1,2", "--sweep", "prefetch_factor=1,2", "--sweep", "sample_ms=1,3",
         "--set", "dataset_size=32")


def test_a_piped_sweep_keeps_each_row_on_one_line(tmp_path: Path) -> None:
    result = piped(*SWEEP, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "num_workers" in line and "batches/s" in line)
    assert "buffer high" in header and "status" in header  # not wrapped onto a second line at 80 columns
    rows = [line for line in lines if line.rstrip().endswith("done")]
    assert len(rows) == 8 and all(len(row.split("│")) == 9 for row in rows)
    assert any(len(line) > 80 for line in lines)
    assert not any(line.startswith("more workers") for line in lines)  # the recommendation is not wrapped either


def test_sim_prints_csv_and_json(tmp_path: Path) -> None:
    table = piped(*SWEEP, "--format", "csv", cwd=tmp_path)
    assert table.returncode == 0, table.stdout + table.stderr
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert len(rows) == 8 and {(r["num_workers"], r["prefetch_factor"], r["sample_ms"]) for r in rows} == {
        (w, p, s) for w in "12" for p in "12" for s in ("1.0", "3.0")}
    assert all(float(r["batches_per_s"]) > 0 and r["status"] == "done" for r in rows)
    data = json.loads(piped(*SWEEP, "--format", "json", cwd=tmp_path).stdout)
    assert len(data["rows"]) == 8 and "num_workers=" in data["recommendation"]
    assert [r["batches_per_s"] for r in data["rows"]] == [float(r["batches_per_s"]) for r in rows]


def test_compare_prints_csv_and_json(tmp_path: Path) -> None:
    from loaderscope import sim
    from loaderscope.scenarios.catalog import get
    from loaderscope.traces.jsonl import write_trace

    for workers, out in ((1, "a.jsonl"), (3, "b.jsonl")):
        params = {"num_workers": workers, "dataset_size": 24}
        events = sim.simulate(get("uniform").plan(params), run_id=out, scenario="uniform", params=params)
        write_trace(tmp_path / out, events, out, scenario="uniform", mode="sim", params=params)
    compared = list(csv.DictReader(io.StringIO(piped("compare", "a.jsonl", "b.jsonl", "--format", "csv",
                                                     cwd=tmp_path).stdout)))
    assert {"section": "setting", "name": "num_workers", "a": "1", "b": "3", "delta": "", "ratio": ""} in compared
    assert any(r["section"] == "metric" and r["name"] == "batches_per_s" for r in compared)
    full = json.loads(piped("compare", "a.jsonl", "b.jsonl", "--format", "json", cwd=tmp_path).stdout)
    assert [r["label"] for r in full["runs"]] == ["a.jsonl", "b.jsonl"] and full["histograms"]["a"]
