"""A job is ranks × loaders: a real 2-rank job (torchrun, gloo) whose ranks each iterate a train and a
val loader, both built by one helper under one name (as ignite's ``auto_dataloader`` builds them), is 2
ranks of 2 loaders in ``loaderscope job`` (its table and ``--json``) and ``GET /api/jobs/{job}/table``:
never 4 ranks, never two loaders' steps added together; and one process with two such loaders has no
slowest rank. (The page's view of the same job: tests/browser/test_job_table.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.jobs import EPOCHS, TRAIN, VAL, recorded_job

pytest.importorskip("duckdb")

PYTHON = sys.executable


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_job(tmp_path_factory.mktemp("two-ranks"), "ig", 2)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_job(tmp_path_factory.mktemp("one-process"), "solo", 1)


def job(directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "loaderscope.cli", "job", str(directory), *options], capture_output=True,
                          text=True, timeout=120)


def assert_two_by_two(answer: dict[str, Any]) -> None:
    """2 ranks of 2 loaders, each loader's batches and steps its own."""
    loaders = {entry["loader"]: entry for entry in answer["loaders"]}
    assert len(loaders) == 2 and all(name.startswith("auto_dataloader") for name in loaders), loaders
    train, val = sorted(loaders, key=lambda name: -loaders[name]["steps"])  # the train loader has more
    assert (loaders[train]["ranks"], loaders[val]["ranks"]) == (2, 2)
    assert (loaders[train]["steps"], loaders[val]["steps"]) == (EPOCHS * TRAIN // 8, EPOCHS * VAL // 8)
    rows = {(row["loader"], row["rank"]): row["batches"] for row in answer["ranks"]}
    assert rows == {(train, 0): EPOCHS * TRAIN // 8, (train, 1): EPOCHS * TRAIN // 8,
                    (val, 0): EPOCHS * VAL // 8, (val, 1): EPOCHS * VAL // 8}
    assert {step["loader"] for step in answer["steps"]} == {train, val}
    for entry in loaders.values():  # a slowest rank, if any, is one of this loader's two, over its own steps
        assert entry["slowest"] is None or (entry["slowest"]["rank"] in (0, 1)
                                            and entry["slowest"]["of"] == entry["steps"])
    checks = {(check["loader"], check["epoch"]) for check in answer["shards"]}
    assert checks == {(name, epoch) for name in (train, val) for epoch in range(EPOCHS)}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_two_rank_job_of_train_and_val_loaders_is_two_ranks_of_two_loaders(two_ranks: Path) -> None:
    as_json = job(two_ranks, "--json")
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    assert_two_by_two(json.loads(as_json.stdout))
    printed = job(two_ranks)
    assert printed.returncode == 0, printed.stdout
    lines = printed.stdout.splitlines()
    steps = {entry["loader"]: entry["steps"] for entry in json.loads(as_json.stdout)["loaders"]}
    assert [line.split(": ", 1)[0] for line in lines[:2]] == list(steps)  # a sentence per loader, named
    assert lines[2].split()[:2] == ["loader", "rank"]
    seen = []
    for line in lines[3:7]:  # the loader column, then the rank; a name may hold a space (`name #2`)
        loader = max((name for name in steps if line.startswith(name + " ")), key=len)
        seen.append((loader, int(line[len(loader):].split()[0])))
        assert f" {steps[loader]} steps" in line, line  # its own loader's steps
    assert sorted(seen) == sorted((name, rank) for name in steps for rank in (0, 1))
    assert f"of {EPOCHS * (TRAIN + VAL) // 8} steps" not in printed.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_dashboard_serves_the_same_two_ranks_of_two_loaders(two_ranks: Path, start_server: Any) -> None:
    server = start_server(logdir=str(two_ranks), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == 4, what="the 4 runs listed")
        answer = http.get("/api/jobs/ig/table")
        assert answer.status_code == 200, answer.text
        assert_two_by_two(answer.json())
        runs = {r["id"] for r in http.get("/api/runs").json()}
    assert {row["dashboard_run"] for row in answer.json()["ranks"]} == runs  # each row opens its own run


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_process_with_two_loaders_has_no_slowest_rank(one_process: Path) -> None:
    as_json = job(one_process, "--json")
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    answer = json.loads(as_json.stdout)
    assert [(entry["ranks"], entry["slowest"]) for entry in answer["loaders"]] == [(1, None), (1, None)]
    assert all(step["rank"] is None for step in answer["steps"])
    assert all(row["slowest_steps"] == 0 and row["worst_lag"] is None for row in answer["ranks"])
    printed = job(one_process)
    assert "slowest" not in printed.stdout.split("\n", 2)[0] + printed.stdout.split("\n", 2)[1]
    assert printed.stdout.count("1 rank, ") == 2 and "one rank waits for no other" in printed.stdout, printed.stdout
