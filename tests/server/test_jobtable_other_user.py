"""The job table (``loaderscope job DIR``, ``GET /api/jobs/{job}/table``) over a logdir another local user
can write: what they put there never makes it read a file the scan refused or one outside the
directory, block, decode a digest past its length, or read, hold or take more than its budget; each
refusal names the file, the budget and the variable that raises it.

The other user is real: as root (CI), ``setpriv --reuid 4242`` runs their commands
(tests/server/test_logdir_other_user.py).
The victim's job is two ranks of a real DataLoader's events (``recorded``, tests/server/conftest.py).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.ranks import MAX_SHARD_LENGTH
from loaderscope.traces.jobbudget import JobBudget, JobQueryError
from loaderscope.traces.jobquery import job_table
from tests.conftest import wait_for
from tests.logdirs import as_rank, runs, trace_bytes, write
from tests.other_user import REQUEST_LIMIT, as_other_user, needs_root

pytest.importorskip("duckdb")

JOB = "team-job"


@pytest.fixture
def victims_job(team_logdir: Path, recorded: list[dict[str, Any]]) -> Path:
    """The victim's own two ranks, in the team logdir."""
    for rank in (0, 1):
        write(team_logdir / JOB / f"rank{rank}.trace.jsonl", as_rank(recorded, rank, JOB, world_size=2))
    return team_logdir / JOB


@pytest.fixture
def secret(tmp_path: Path, recorded: list[dict[str, Any]]) -> Path:
    """The victim's private trace (0600 in a 0700 directory), outside the logdir: rank 7 of the job."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = write(private / "secret.trace.jsonl", as_rank(recorded, 7, JOB, world_size=2))
    path.chmod(0o600)
    return path


def plant(tmp_path: Path, target: Path, events: list[dict[str, Any]]) -> None:
    """The other user writes a trace of these events at ``target`` (its directory made as theirs)."""
    as_other_user("mkdir", "-p", str(target.parent))
    as_other_user("sh", "-c", 'cat > "$0"', str(target), stdin=trace_bytes(tmp_path, events))


def table(server: Any) -> Any:
    with server.client() as http:
        return http.get(f"/api/jobs/{JOB}/table", timeout=REQUEST_LIMIT)


@needs_root
def test_a_directory_named_like_a_glob_never_makes_the_table_read_what_the_scan_refused(
        start_server: Any, tmp_path: Path, team_logdir: Path, victims_job: Path, secret: Path,
        recorded: list[dict[str, Any]]) -> None:
    # a trace of the victim's job in a directory named `**`, and beside it a link to her private trace
    # under the same file name: DuckDB's reader took `**/x.trace.jsonl` for a glob matching both
    plant(tmp_path, team_logdir / "**" / "x.trace.jsonl", as_rank(recorded, 5, JOB, world_size=2))
    as_other_user("mkdir", str(team_logdir / "evil"))
    as_other_user("ln", "-s", str(secret), str(team_logdir / "evil" / "x.trace.jsonl"))
    server = start_server(logdir=str(team_logdir), logdir_poll=0.1)
    listed = wait_for(lambda: len(runs(server)) == 4 and runs(server), what="the 4 files listed")
    assert listed["evil/x.trace.jsonl"]["status"] == "unreadable"  # the scan refused the link
    answer = table(server)
    assert answer.status_code == 200, answer.text
    # the victim's ranks, and the one the other user wrote into the logdir (theirs to add); never rank 7
    assert sorted(row["rank"] for row in answer.json()["ranks"]) == [0, 1, 5]
    printed = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", str(team_logdir)], capture_output=True,
                             text=True, timeout=120)
    assert printed.returncode == 2, printed.stdout  # the CLI names the link and reads nothing of it
    assert "evil/x.trace.jsonl: it resolves to" in printed.stdout and "outside" in printed.stdout, printed.stdout
    assert server.alive()


@needs_root
def test_a_trace_changed_after_it_was_listed_is_checked_again_when_the_table_reads_it(
        start_server: Any, tmp_path: Path, team_logdir: Path, victims_job: Path, secret: Path,
        recorded: list[dict[str, Any]]) -> None:
    theirs = team_logdir / "theirs" / "a.trace.jsonl"
    plant(tmp_path, theirs, as_rank(recorded, 5, JOB, world_size=2))
    # the listing never looks again: the file keeps the index it had, as the job's rank 5
    server = start_server(logdir=str(team_logdir), logdir_poll=3600, logdir_watch=False)
    wait_for(lambda: len(runs(server)) == 3, what="the 3 traces listed")
    assert sorted(row["rank"] for row in table(server).json()["ranks"]) == [0, 1, 5]

    as_other_user("sh", "-c", 'rm "$0" && mkfifo -m 666 "$0"', str(theirs))  # a blocking open() would hold the slot
    for _ in range(2):  # and again: the slot was freed
        answer = table(server)
        assert answer.status_code == 422, answer.text
        assert "a.trace.jsonl: a FIFO, not a regular file: refused, never read" in answer.json()["detail"]

    as_other_user("sh", "-c", 'rm "$0" && ln -s "$1" "$0"', str(theirs), str(secret))
    answer = table(server)
    assert answer.status_code == 422 and "outside" in answer.json()["detail"], answer.text

    as_other_user("sh", "-c", 'rm "$0"', str(theirs))
    plant(tmp_path, theirs, as_rank(recorded, 5, "another-job", world_size=2))  # no longer the job's
    answer = table(server)
    assert answer.status_code == 200 and sorted(row["rank"] for row in answer.json()["ranks"]) == [0, 1], answer.text
    assert server.alive()


@needs_root
def test_a_trace_that_repeats_its_events_is_one_run_of_the_job(
        tmp_path: Path, team_logdir: Path, victims_job: Path, recorded: list[dict[str, Any]]) -> None:
    plant(tmp_path, team_logdir / "theirs" / "again.trace.jsonl", as_rank(recorded * 3, 5, JOB, world_size=2))
    ranks = job_table(str(team_logdir)).ranks  # its seq repeats: its first event was three rows
    assert sorted(row["rank"] for row in ranks) == [0, 1, 5], [row["rank"] for row in ranks]
    yields = len([e for e in recorded if e["kind"] == "yield"])
    assert [row["batches"] for row in ranks if row["rank"] == 5] == [3 * yields]


def digest_of(counts: bytes) -> str:
    return base64.b64encode(zlib.compress(counts, 9)).decode()


def with_digest(events: list[dict[str, Any]], name: str, shard: str, length: int) -> list[dict[str, Any]]:
    """A one-rank run of loader ``name`` of the job whose epoch_end carries this digest."""
    out = as_rank(events, 0, JOB)
    out[0]["name"] = name
    end = next(e for e in out if e["kind"] == "epoch_end")
    end.update(shard=shard, shard_length=length)
    return out


@needs_root
def test_hostile_shard_digests_are_decoded_within_their_length_and_a_byte_per_index(
        tmp_path: Path, team_logdir: Path, recorded: list[dict[str, Any]]) -> None:
    length = 8_000_000
    planted = {  # each about 10 KB on disk
        "wide": digest_of(bytes(length)),  # a dataset of 8M samples, as it claims: checked, a byte per index
        "bomb": digest_of(bytes(50_000_000)),  # claims 100 counts, inflates to 50 MB
        "huge": digest_of(bytes(100)),  # claims a dataset of 2^40 samples
    }
    lengths = {"wide": length, "bomb": 100, "huge": 1 << 40}
    for name, digest in planted.items():
        plant(tmp_path, team_logdir / JOB / f"{name}.trace.jsonl", with_digest(recorded, name, digest, lengths[name]))
    tracemalloc.start()
    try:
        checks = {check["loader"]: check["report"] for check in job_table(str(team_logdir)).shards}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert checks["wide"].get("missing") == length, checks["wide"]
    assert checks["wide"]["missing_sample"] == list(range(10))
    assert "holds more than 100 counts" in checks["bomb"]["error"]
    assert f"at most {MAX_SHARD_LENGTH:,} are checked" in checks["huge"]["error"]
    # the sum and one rank's counts: a byte per index each (a list of ints per index held 8 bytes an index
    # and took 100 s here; the bomb inflated whole)
    assert peak < 4 * length, f"{peak / length:.1f} bytes an index"


@needs_root
def test_the_shard_budget_says_which_checks_it_left_out_and_how_to_raise_it(
        tmp_path: Path, team_logdir: Path, recorded: list[dict[str, Any]]) -> None:
    for name in ("a", "b"):
        plant(tmp_path, team_logdir / JOB / f"{name}.trace.jsonl",
              with_digest(recorded, name, digest_of(bytes(600_000)), 600_000))
    printed = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", str(team_logdir), "--json"],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "LOADERSCOPE_JOB_TABLE_SHARD_BYTES": "1MiB"})
    assert printed.returncode == 0, printed.stdout + printed.stderr
    checks = {check["loader"]: check["report"] for check in json.loads(printed.stdout)["shards"]}
    assert checks["a"]["missing"] == 600_000  # the first fits in 1 MiB
    assert "over the job table's budget of 1 MiB; LOADERSCOPE_JOB_TABLE_SHARD_BYTES raises it" in checks["b"]["error"]


@needs_root
def test_a_trace_over_the_budget_is_refused_by_name_before_it_is_read(
        start_server: Any, tmp_path: Path, team_logdir: Path, victims_job: Path,
        recorded: list[dict[str, Any]]) -> None:
    plant(tmp_path, team_logdir / "theirs" / "big.trace.jsonl", as_rank(recorded * 40, 5, JOB, world_size=2))
    server = start_server(logdir=str(team_logdir), logdir_poll=0.1,
                          env={"LOADERSCOPE_JOB_TABLE_TRACE_BYTES": "64KiB"})
    wait_for(lambda: len(runs(server)) == 3, what="the 3 traces listed")
    answer = table(server)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert "theirs/big.trace.jsonl: " in detail, detail
    assert "of trace, over the job table's budget of 64 KiB; LOADERSCOPE_JOB_TABLE_TRACE_BYTES raises it" in detail
    assert server.alive()


def test_a_table_past_its_time_or_memory_is_stopped_and_says_which_budget(
        tmp_path: Path, recorded: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    for rank in (0, 1):
        write(tmp_path / JOB / f"rank{rank}.trace.jsonl", as_rank(recorded * 400, rank, JOB, world_size=2))
    monkeypatch.setenv("LOADERSCOPE_JOB_TABLE_SECONDS", "0.001")
    printed = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", str(tmp_path / JOB)],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 2 and "the job table took longer, over the job table's budget of 0.001 s; " \
        "LOADERSCOPE_JOB_TABLE_SECONDS raises it" in printed.stdout, printed.stdout
    monkeypatch.setenv("LOADERSCOPE_JOB_TABLE_SECONDS", "600")
    monkeypatch.setenv("LOADERSCOPE_JOB_TABLE_MEMORY", "4MiB")
    printed = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", str(tmp_path / JOB)],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 2 and "LOADERSCOPE_JOB_TABLE_MEMORY raises it" in printed.stdout, printed.stdout
    monkeypatch.setenv("LOADERSCOPE_JOB_TABLE_MEMORY", "lots")
    with pytest.raises(JobQueryError, match="LOADERSCOPE_JOB_TABLE_MEMORY='lots': not a size"):
        JobBudget().from_environment()


def test_a_url_without_its_filesystems_package_is_said_without_a_traceback() -> None:
    printed = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", "s3://team-bucket/job"],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 2 and "Traceback" not in printed.stdout + printed.stderr
    assert "s3://team-bucket/job: " in printed.stdout and "s3fs" in printed.stdout, printed.stdout
