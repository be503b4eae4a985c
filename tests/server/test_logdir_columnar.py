"""``serve --logdir`` with Parquet traces (traces/parquet.py): listed beside JSON-lines ones, opened, followed
part by part as a producer writes them, and shown truncated when the producer was killed; a part over
the server's budgets, dropped by another local user, refused from its footer. Real server, real
websocket client, real events of a real DataLoader (tests/server/test_logdir.py's ``recorded``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from loaderscope.server.budgets import PARQUET_PART_ROWS
from loaderscope.traces import parquet as columnar
from loaderscope.traces.header import header
from loaderscope.traces.parquet import ParquetTraceWriter
from tests.conftest import wait_for
from tests.logdirs import BATCHES, read_until, runs, write
from tests.other_user import as_other_user, needs_root


def parquet(path: Path, events: list[dict[str, Any]], *, per_part: int = 7) -> Path:
    """A finished Parquet trace of several parts (a part every ``per_part`` events)."""
    with ParquetTraceWriter(path, "producer-run", row_group_events=per_part, mode="real") as writer:
        writer.write(events)
    return path


def test_a_parquet_trace_is_listed_and_opened_like_a_jsonl_one(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    parquet(logdir / "job" / "DataLoader-rank0-pid1-a.trace.parquet", recorded)
    write(logdir / "job" / "DataLoader-rank0-pid2-b.trace.jsonl", recorded)
    server = start_server(logdir=str(logdir))
    listed = runs(server)
    assert set(listed) == {"job/DataLoader-rank0-pid1-a.trace.parquet", "job/DataLoader-rank0-pid2-b.trace.jsonl"}
    columnar = listed["job/DataLoader-rank0-pid1-a.trace.parquet"]
    lines = listed["job/DataLoader-rank0-pid2-b.trace.jsonl"]
    assert columnar["status"] == lines["status"] == "done"
    assert columnar["batches"] == lines["batches"] == BATCHES and columnar["events"] == len(recorded)
    with server.client() as http:
        page = http.get(f"/api/runs/{columnar['id']}/events", params={"limit": 10000}).json()
        other = http.get(f"/api/runs/{lines['id']}/events", params={"limit": 10000}).json()
        middle = http.get(f"/api/runs/{columnar['id']}/events", params={"after": 9, "limit": 5}).json()
        download = http.get(f"/api/runs/{columnar['id']}/trace").content.splitlines()
        chrome = http.get(f"/api/runs/{columnar['id']}/trace", params={"format": "chrome"})
    strip = [{k: v for k, v in e.items() if k != "run"} for e in page["events"]]
    assert strip == [{k: v for k, v in e.items() if k != "run"} for e in other["events"]]
    assert [e["seq"] for e in middle["events"]] == [10, 11, 12, 13, 14]  # across a part's edge
    assert len(download) == len(recorded) + 1 and b'"loaderscope-trace"' in download[0]
    assert chrome.status_code == 200 and any(e["ph"] == "X" for e in chrome.json()["traceEvents"])
    assert server.run(columnar["id"])["statistics"]["batches"] == BATCHES


def test_a_growing_parquet_trace_reaches_a_viewer_part_by_part_then_ends(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    path = logdir / "node3" / "DataLoader-rank0-pid9-c.trace.parquet"
    server = start_server(logdir=str(logdir), logdir_poll=0.1)
    writer = ParquetTraceWriter(path, "producer-run", part_seconds=0, mode="real")  # a part per write
    head, rest = recorded[:8], recorded[8:]
    writer.write(head)
    entry = wait_for(lambda: runs(server).get("node3/DataLoader-rank0-pid9-c.trace.parquet"), what="the trace listed")
    assert entry["status"] == "running"
    with server.connect(f"/ws/runs/{entry['id']}?after=-1") as ws:
        seen, _ = read_until(ws, lambda e, m: len(e) >= len(head))
        for start in range(0, len(rest), 5):
            writer.write(rest[start:start + 5])
        more, metas = read_until(ws, lambda e, m: any(x["type"] == "end" for x in m))
    writer.close()
    assert [e["seq"] for e in seen + more] == list(range(len(recorded)))
    assert [e["kind"] for e in seen + more] == [e["kind"] for e in recorded]
    assert metas[-1] == {"type": "end", "status": "done", "last_seq": len(recorded) - 1}


def test_a_killed_parquet_writer_leaves_a_truncated_run(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    path = parquet(logdir / "killed.trace.parquet", recorded[:20])  # no run_end
    (path / ".part-000003.parquet.tmp").write_bytes(b"PAR1 and no footer")  # the part it was writing
    an_hour_ago = time.time() - 3600
    for part in path.iterdir():
        os.utime(part, (an_hour_ago, an_hour_ago))
    server = start_server(logdir=str(logdir), silent_after=1.0, logdir_poll=0.1)
    killed = runs(server)["killed.trace.parquet"]
    assert killed["status"] == "truncated"
    with server.client() as http:
        page = http.get(f"/api/runs/{killed['id']}/events", params={"limit": 10000}).json()
    assert len(page["events"]) == 20 and page["status"] == "truncated" and server.alive()


def test_serve_open_replays_a_parquet_trace(start_server: Any, tmp_path: Path,
                                            recorded: list[dict[str, Any]]) -> None:
    path = parquet(tmp_path / "replay.trace.parquet", recorded)
    server = start_server(traces=[str(path)])

    def replayed() -> list[dict[str, Any]]:
        with server.client() as http:
            return [r for r in http.get("/api/runs").json() if r["mode"] == "replay"]

    run = server.wait_status(wait_for(replayed, what="the replayed run")[0]["id"])
    assert run["status"] == "done" and run["statistics"]["batches"] == BATCHES
    with server.client() as http:
        page = http.get(f"/api/runs/{run['id']}/events", params={"limit": 10000}).json()
    assert [e["kind"] for e in page["events"]] == [e["kind"] for e in recorded]
    assert f"{path} opened as run {run['id']}" in server.output()


def bomb(directory: Path, event: dict[str, Any], rows: int) -> Path:
    """A Parquet trace whose one part is a few hundred KB: ``rows`` copies of ``event``."""
    table = columnar.to_table([event]).take(pa.array([0] * rows))
    directory.mkdir(parents=True)
    with pq.ParquetWriter(directory / "part-000000.parquet", columnar.SCHEMA, compression="zstd",
                          store_schema=False) as writer:
        writer.write_table(table, row_group_size=rows)
        writer.add_key_value_metadata({columnar.METADATA_KEY: orjson.dumps(header("bomb", mode="real"))})
    return directory / "part-000000.parquet"


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (``VmHWM``), in bytes."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


@needs_root
def test_a_parquet_part_of_millions_of_rows_is_refused_at_indexing_with_its_reason(
        start_server: Any, tmp_path: Path, team_logdir: Path, recorded: list[dict[str, Any]]) -> None:
    """A 170 KB part of 2M rows was decoded whole at indexing (1.4 GB, 19 s); its footer says the row
    count first. Refused from it, listed with the reason; the dashboard serves the other runs."""
    write(team_logdir / "mine.trace.jsonl", recorded)
    part = bomb(tmp_path / "made", next(e for e in recorded if e["kind"] == "yield"), 2_000_000)
    assert part.stat().st_size < 512 * 1024  # a column per declared scalar field: about 6 KB each at 2M nulls
    server = start_server(logdir=str(team_logdir), logdir_poll=0.1)
    assert runs(server)["mine.trace.jsonl"]["status"] == "done"
    before = peak_rss(server.process.pid)
    dropped = team_logdir / "evil.trace.parquet"
    as_other_user("sh", "-c", f"mkdir {dropped} && cat > {dropped / part.name}", stdin=part.read_bytes())
    evil = wait_for(lambda: runs(server).get("evil.trace.parquet"), what="the dropped trace listed")
    assert evil["status"] == "unreadable", evil
    assert f"holds 2,000,000 events, more than the {PARQUET_PART_ROWS:,} a part may hold" in evil["problem"]
    assert "loaderscope export" in evil["problem"]  # and the fix, for a real trace of such parts
    grew = peak_rss(server.process.pid) - before
    assert grew < 200 * 1024 * 1024, f"the server's peak memory grew {grew / 2**20:.0f} MiB"
    mine = runs(server)["mine.trace.jsonl"]
    with server.client() as http:
        page = http.get(f"/api/runs/{mine['id']}/events", params={"limit": 10000}).json()
    assert len(page["events"]) == len(recorded) and mine["batches"] == BATCHES and server.alive()
