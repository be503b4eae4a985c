"""The job table by SQL (``jobquery``) agrees with the Python definitions: ``stats.summary``,
``sim.job.rank_figures``, ``ranks.slowest_per_step``, ``ranks.shard_report`` and the page's
slowest worker; on simulated jobs, on a real torchrun job recorded into a logdir, as JSON lines
and as Parquet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from loaderscope.model.ranks import encode_shard, shard_report, slowest_per_step
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import summary
from loaderscope.scenarios.plan import resolve
from loaderscope.sim import CostModel
from loaderscope.sim.job import rank_figures
from loaderscope.sim.run import simulate_ranks
from loaderscope.traces.jobbudget import JobQueryError
from loaderscope.traces.jobfiles import trace_files
from loaderscope.traces.jobquery import job_table
from loaderscope.traces.jobtable import shard_text_of
from loaderscope.traces.jsonl import read_trace, write_trace
from loaderscope.traces.paths import trace_path
from tests.conftest import wait_for
from tests.jobs import simulated_job

duckdb = pytest.importorskip("duckdb")

PYTHON = sys.executable
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
DISTRIBUTED = '''
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
dist.init_process_group("gloo")
data = TensorDataset(torch.arange(91))
sampler = DistributedSampler(data, shuffle=True)
loader = DataLoader(data, batch_size=4, num_workers=2, sampler=sampler)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for _ in loader:
        pass
dist.destroy_process_group()
'''


def replayed(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A rank's figures the Python way: summary(), and the page's slowest worker (largest mean fetch)."""
    state = LoaderState()
    for event in events:
        state.apply(event)
    stats = summary(state)
    means = {w.id: w.busy / len(w.fetch_times) for w in state.workers.values() if w.fetch_times}
    slowest = sorted(means.items(), key=lambda item: item[1])[-1][0] if means else None
    p95 = next((w["fetch_p95"] for w in stats["workers"] if w["worker"] == slowest), None)
    return {"batches": stats["batches"], "batches_per_s": stats["batches_per_s"], "input_bound": stats["input_bound"],
            "slowest_worker": slowest, "slowest_worker_mean": means.get(slowest) if slowest is not None else None,
            "slowest_worker_p95": p95}


def assert_agrees(table: Any, runs: dict[int, list[dict[str, Any]]]) -> None:
    by_rank = {row["rank"]: row for row in table.ranks}
    assert sorted(by_rank) == sorted(runs)
    for rank, events in runs.items():
        want, got = replayed(events), by_rank[rank]
        assert got["batches"] == want["batches"]
        assert got["slowest_worker"] == want["slowest_worker"], rank
        for key in ("batches_per_s", "input_bound", "slowest_worker_mean", "slowest_worker_p95"):
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (rank, key)
    epochs = sorted({s["epoch"] for s in table.steps})
    assert epochs, "the job has steps"
    for epoch in epochs:
        want_steps = slowest_per_step(runs, epoch)
        got_steps = [s for s in table.steps if s["epoch"] == epoch]
        assert [s["rank"] for s in got_steps] == [s["rank"] for s in want_steps], epoch
        assert [s["lag"] for s in got_steps] == pytest.approx([s["lag"] for s in want_steps], abs=1e-9)


def test_a_simulated_job_agrees_with_rank_figures_and_slowest_per_step(tmp_path: Path) -> None:
    job = simulated_job(tmp_path, "straggler", 4, {2: 2.5}, {"epochs": 2})
    table = job_table(str(tmp_path))
    runs = {events[0]["rank"]: events for events in job.events}
    assert_agrees(table, runs)
    figures = {row["rank"]: row for row in rank_figures(job)}
    for row in table.ranks:
        want = figures[row["rank"]]
        assert row["batches_per_s"] == pytest.approx(want["batches_per_s"], rel=1e-9)
        assert row["input_bound"] == pytest.approx(want["input_bound"], rel=1e-9)
        assert row["slowest_steps"] == want["slowest_steps"]
        assert row["worst_lag"] == pytest.approx(want["worst_lag"], abs=1e-9)
    (loader,) = table.loaders()
    assert loader["slowest"] is not None and loader["slowest"]["rank"] == 2 and loader["ranks"] == 4
    assert [check["epoch"] for check in table.shards] == [0, 1]
    for check in table.shards:
        ends = {rank: next(e for e in events if e["kind"] == "epoch_end" and e["epoch"] == check["epoch"])
                for rank, events in runs.items()}
        assert check["report"] == shard_report(ends, ends[0]["shard_length"])
        assert check["report"]["disjoint"] and check["report"]["complete"], check


def test_a_simulated_ranks_digest_is_what_torchs_distributed_sampler_deals_it(tmp_path: Path) -> None:
    """97 samples over 4 ranks in batches of 5: DistributedSampler pads 3 (torch/utils/data/distributed.py)
    and the last batch of each rank is short; the digests hold the real sampler's indices."""
    from torch.utils.data import DistributedSampler

    job = simulated_job(tmp_path, "uniform", 4, {}, {"dataset_size": 97, "batch_size": 5, "epochs": 1,
                                                      "num_workers": 2})
    for rank, events in enumerate(job.events):
        end = next(e for e in events if e["kind"] == "epoch_end")
        real = list(DistributedSampler(range(97), num_replicas=4, rank=rank, shuffle=False))
        assert (end["shard"], end["shard_length"]) == (encode_shard(real, 97), 97), rank
    (check,) = job_table(str(tmp_path)).shards
    assert check["report"]["padding"] == 3 and check["report"]["overlap"] == 0 and check["report"]["complete"]
    assert "3 indices" in shard_text_of(check), shard_text_of(check)


def test_an_overlapping_split_is_flagged_in_the_job_table(tmp_path: Path) -> None:
    plan = resolve("uniform", {"dataset_size": 100, "batch_size": 4, "epochs": 1, "num_workers": 2})
    shards = [range(0, 52), range(44, 96)]  # 44-51 read twice, 96-99 by no rank (ranks of equal steps)
    job = simulate_ranks(plan.build(), job="overlap", scenario="uniform", params=plan.values(),
                         costs=[CostModel(), CostModel()], shards=shards)
    for events in job.events:
        write_trace(trace_path(tmp_path, events[0]), events, events[0]["run"], scenario="uniform", mode="sim")
    (check,) = job_table(str(tmp_path)).shards
    report = check["report"]
    assert (report["overlap"], report["overlap_sample"][:3], report["missing"]) == (8, [44, 45, 46], 4)
    assert not report["disjoint"] and not report["complete"]
    assert "OVERLAP: 8 indices" in shard_text_of(check) and "MISSING: 4 indices" in shard_text_of(check)


def test_parquet_traces_give_the_same_table(tmp_path: Path) -> None:
    simulated_job(tmp_path / "jsonl", "out_of_order", 3, {0: 3.0})
    as_json = job_table(str(tmp_path / "jsonl"))
    con = duckdb.connect()
    (tmp_path / "parquet").mkdir()
    for number, path in enumerate(sorted((tmp_path / "jsonl").rglob("*.trace.jsonl"))):
        target = tmp_path / "parquet" / f"rank{number}.trace.parquet"
        con.execute(f"COPY (SELECT * FROM read_json('{path}', format='newline_delimited') WHERE kind IS NOT NULL) "
                    f"TO '{target}' (FORMAT parquet)")
    as_parquet = job_table(str(tmp_path / "parquet"))
    strip = [{k: v for k, v in row.items() if k != "file"} for row in as_json.ranks]
    assert [{k: v for k, v in row.items() if k != "file"} for row in as_parquet.ranks] == strip
    assert as_parquet.steps == as_json.steps and as_parquet.shards == as_json.shards
    ours = as_loaderscope_parquet(tmp_path / "jsonl", tmp_path / "ours")
    assert [{k: v for k, v in row.items() if k != "file"} for row in ours.ranks] == strip
    assert ours.steps == as_json.steps and ours.shards == as_json.shards and len(as_json.shards) == 1


def test_a_job_of_mixed_files_torn_and_lacking_columns_gives_the_same_table(tmp_path: Path) -> None:
    """Each file is its own run whatever its source: a torn last line is skipped, a Parquet file of
    another writer without ``dt`` takes the fetch time from fetch_start (jobquery's ``fetches``), and
    a loaderscope Parquet trace's parts are one run."""
    simulated_job(tmp_path / "job", "straggler", 4, {3: 2.0}, {"epochs": 2})
    whole = job_table(str(tmp_path / "job"))
    files = sorted((tmp_path / "job").rglob("*.trace.jsonl"))
    with files[0].open("ab") as torn:
        torn.write(b'{"seq": 99999, "t": 1.5, "kind": "yie')  # a killed writer's last line
    duckdb.connect().execute(f"COPY (SELECT * EXCLUDE (dt) FROM read_json('{files[1]}', format='newline_delimited') "
                             f"WHERE kind IS NOT NULL) TO '{tmp_path / 'job' / 'other.parquet'}' (FORMAT parquet)")
    files[1].unlink()
    head, events = read_trace(files[2])
    write_trace(tmp_path / "job" / "ours.trace.parquet", events, head["run"], fmt="parquet")
    files[2].unlink()
    mixed = job_table(str(tmp_path / "job"))
    assert len(mixed.ranks) == 4
    for got, want in zip(mixed.ranks, whole.ranks, strict=True):  # a fetch's end minus its start: dt to the last bits
        assert {k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for k, v in got.items() if k != "file"} \
            == {k: v for k, v in want.items() if k != "file"}
    assert mixed.steps == whole.steps and mixed.shards == whole.shards and mixed.loaders()[0]["slowest"]["rank"] == 3


def as_loaderscope_parquet(source: Path, target: Path) -> Any:
    """The job table of ``source``'s traces written as loaderscope's Parquet traces (traces/parquet.py): a
    directory of parts per run, the loosely typed fields (``wall_start``, ``shard``) in ``extra``."""
    from loaderscope.traces.parquet import ParquetTraceWriter

    for number, path in enumerate(sorted(source.rglob("*.trace.jsonl"))):
        head, events = read_trace(path)
        with ParquetTraceWriter(target / f"rank{number}.trace.parquet", head["run"], row_group_events=16) as writer:
            writer.write(events)  # several parts per run
    assert len(list(target.rglob("part-000001.parquet"))) == number + 1
    table = job_table(str(target))
    assert len(table.ranks) == number + 1  # a run per directory, not per part
    return table


def test_fsspec_paths_give_the_same_table(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    simulated_job(tmp_path, "uniform", 2, {1: 2.0})
    local = job_table(str(tmp_path))
    remote = job_table(str(tmp_path), fsspec.filesystem("file"))
    assert [row["batches_per_s"] for row in remote.ranks] == [row["batches_per_s"] for row in local.ranks]
    assert remote.steps == local.steps


@pytest.mark.slow
def test_a_real_torchrun_job_agrees_and_checks_its_shards(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(DISTRIBUTED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([PYTHON, "-m", "loaderscope.record", "--logdir", str(tmp_path / "runs"), "--", TORCHRUN,
                           "--nproc-per-node", "2", "--standalone", str(script)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = {}
    for path in sorted((tmp_path / "runs").rglob("*.trace.jsonl")):
        head, events = read_trace(path)
        runs[head["rank"]] = events
    table = job_table(str(tmp_path / "runs"))
    assert_agrees(table, runs)
    assert [check["epoch"] for check in table.shards] == [0, 1]
    ours = as_loaderscope_parquet(tmp_path / "runs", tmp_path / "parquet")
    assert [{k: v for k, v in row.items() if k != "file"} for row in ours.ranks] == \
        [{k: v for k, v in row.items() if k != "file"} for row in table.ranks]
    assert ours.steps == table.steps and ours.shards == table.shards
    for check in table.shards:
        ends = {rank: next(e for e in events if e["kind"] == "epoch_end" and e["epoch"] == check["epoch"])
                for rank, events in runs.items()}
        assert check["report"] == shard_report(ends, 91)
        assert check["report"]["padding"] == 1 and check["report"]["complete"]  # 91 over 2 ranks of 46: 1 padded


def test_clear_errors_name_the_directory_or_the_file(tmp_path: Path) -> None:
    with pytest.raises(JobQueryError, match="not a directory"):
        job_table(str(tmp_path / "absent"))
    with pytest.raises(JobQueryError, match="no traces"):
        job_table(str(tmp_path))
    simulated_job(tmp_path, "uniform", 2, {})
    gone = tmp_path / "gone.trace.jsonl"
    gone.symlink_to(tmp_path / "deleted.trace.jsonl")  # a rank's trace removed under its link
    table = job_table(str(tmp_path))  # the other ranks are tabled; that one is named, and why
    assert sorted(row["rank"] for row in table.ranks) == [0, 1]
    assert [(d["trace"], d["problem"]) for d in table.damaged] == [(str(gone), "unreadable")]
    assert "cannot be read (No such file or directory)" in table.damaged[0]["detail"]


def test_the_job_command_names_the_slow_rank_and_sorts_by_it(tmp_path: Path) -> None:
    simulated_job(tmp_path / "job", "straggler", 4, {1: 3.0})
    printed = subprocess.run([PYTHON, "-m", "loaderscope.cli", "job", str(tmp_path / "job")], capture_output=True,
                             text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].startswith("rank 1 is the slowest: last to deliver")
    assert lines[1].split()[:2] == ["loader", "rank"]
    assert lines[2].split()[:2] == ["(unnamed)", "1"]  # the slowest first
    as_json = subprocess.run([PYTHON, "-m", "loaderscope.cli", "job", str(tmp_path / "job"), "--json"],
                             capture_output=True, text=True, timeout=120)
    parsed = json.loads(as_json.stdout)
    assert parsed["loaders"][0]["slowest"]["rank"] == 1 and [r["rank"] for r in parsed["ranks"]][0] == 1
    assert parsed["shards"] and all(c["report"]["disjoint"] and c["report"]["complete"] for c in parsed["shards"])
    assert "epoch 0 shards: disjoint ✓ · complete ✓" in printed.stdout, printed.stdout
    empty = subprocess.run([PYTHON, "-m", "loaderscope.cli", "job", str(tmp_path)], capture_output=True, text=True,
                           timeout=120)
    assert empty.returncode == 0  # the traces under it are the job's
    (tmp_path / "none").mkdir()
    missing = subprocess.run([PYTHON, "-m", "loaderscope.cli", "job", str(tmp_path / "none")], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and "no traces" in missing.stdout


def test_the_dashboard_serves_a_logdir_jobs_table(start_server: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    job = simulated_job(logs, "straggler", 3, {2: 3.0})
    server = start_server(logdir=str(logs), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == 3, what="the job's 3 traces listed")
        answer = http.get("/api/jobs/sim-straggler/table")
        assert answer.status_code == 200, answer.text
        table = answer.json()
        assert table["loaders"][0]["slowest"]["rank"] == 2
        figures = {row["rank"]: row for row in rank_figures(job)}
        assert {row["rank"]: row["slowest_steps"] for row in table["ranks"]} == \
            {rank: row["slowest_steps"] for rank, row in figures.items()}
        assert all("file" not in row for row in table["ranks"])  # no server path handed out
        missing = http.get("/api/jobs/nope/table")
        assert missing.status_code == 404 and "no trace of job 'nope'" in missing.json()["detail"]
    assert httpx.get(f"{server.url}/api/jobs/sim-straggler/table", timeout=30).status_code == 401  # no token


def test_the_dashboard_serves_a_parquet_logdir_jobs_table_naming_each_ranks_run(start_server: Any,
                                                                                tmp_path: Path) -> None:
    """A logdir of loaderscope's Parquet traces (``record --format parquet``): the run list names each
    trace's directory, whose parts the table reads; each row names its rank's run on the dashboard."""
    simulated_job(tmp_path / "src", "straggler", 3, {1: 3.0})
    for path in (tmp_path / "src").rglob("*.trace.jsonl"):
        head, events = read_trace(path)
        target = tmp_path / "logs" / path.relative_to(tmp_path / "src").parent / path.name.replace(".jsonl", ".parquet")
        write_trace(target, events, head["run"], fmt="parquet")
    server = start_server(logdir=str(tmp_path / "logs"), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == 3, what="the job's 3 traces listed")
        runs = {r["rank"]: r["id"] for r in http.get("/api/runs").json()}
        answer = http.get("/api/jobs/sim-straggler/table")
        assert answer.status_code == 200, answer.text
    table = answer.json()
    assert {row["rank"]: row["dashboard_run"] for row in table["ranks"]} == runs
    assert table["loaders"][0]["slowest"]["rank"] == 1 and len(table["shards"]) == 1


STREAMED_AND_WRITTEN = '''
import sys, torch
from torch.utils.data import DataLoader, TensorDataset
from loaderscope import watch
loader = watch(DataLoader(TensorDataset(torch.arange(64.)), batch_size=4, num_workers=2), url=sys.argv[1],
               logdir=sys.argv[2], name="train_loader")
for epoch in range(2):
    for batch in loader:
        pass
loader.close()
'''


def test_a_run_streamed_here_and_written_into_the_logdir_is_one_run(start_server: Any, tmp_path: Path) -> None:
    """``watch(loader, url=..., logdir=DIR)`` (or ``record --logdir DIR --url ...``) beside ``serve --logdir
    DIR``: the dashboard's copy of the stream and the script's own trace are one recording, listed once and
    counted as one rank, before and after the dashboard restarts."""
    logs = tmp_path / "logs"
    logs.mkdir()

    def one_run(server: Any, origin: str) -> None:
        with server.client() as http:
            # the job table reads logdir runs only: it answers once the script's own file is listed
            wait_for(lambda: http.get("/api/jobs/dup/table").status_code == 200, what="the job's traces indexed")
            wait_for(lambda: [r["status"] for r in http.get("/api/runs").json()] == ["done"], what="one run, ended")
            listed = http.get("/api/runs").json()
            assert [(r["origin"], r["name"], r["batches"]) for r in listed] == [(origin, "train_loader", 32)]
            table = http.get("/api/jobs/dup/table").json()
            assert [(r["rank"], r["batches"]) for r in table["ranks"]] == [(0, 32)]
            assert table["ranks"][0]["dashboard_run"] == listed[0]["id"]  # a click opens the run listed
            assert len(table["steps"]) == 32

    first = start_server(logdir=str(logs), logdir_poll=0.1)
    subprocess.run([PYTHON, "-c", STREAMED_AND_WRITTEN, first.page_url, str(logs)], check=True, timeout=240,
                   env={**os.environ, "LOADERSCOPE_JOB": "dup"})
    one_run(first, "external")  # the live one: it takes controls
    assert len(trace_files(str(logs))) == 2  # the dashboard's copy and the script's own
    ranks = job_table(str(logs)).ranks
    assert [(r["rank"], r["batches"]) for r in ranks] == [(0, 32)]  # `loaderscope job DIR`
    first.stop()
    one_run(start_server(logdir=str(logs), logdir_poll=0.1), "logdir")  # both files now: still one run
