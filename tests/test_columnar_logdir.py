"""``serve --logdir`` with Parquet traces (columnar.py): listed beside JSON-lines ones, opened, followed
part by part as a producer writes them, and shown truncated when the producer was killed. Real server,
real websocket client, real events of a real DataLoader (tests/test_server_logdir.py's ``recorded``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

from loaderscope.columnar import ParquetTraceWriter
from tests.conftest import wait_for
from tests.test_server_logdir import BATCHES, read_until, recorded, runs, write  # noqa: F401 (a fixture)


def parquet(path: Path, events: list[dict[str, Any]], *, per_part: int = 7) -> Path:
    """A finished Parquet trace of several parts (a part every ``per_part`` events)."""
    with ParquetTraceWriter(path, "producer-run", row_group_events=per_part, mode="real") as writer:
        writer.write(events)
    return path


def test_a_parquet_trace_is_listed_and_opened_like_a_jsonl_one(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:  # noqa: F811
    logdir = tmp_path / "logs"
    parquet(logdir / "job" / "DataLoader-rank0-pid1-a.trace.parquet", recorded)
    write(logdir / "job" / "DataLoader-rank0-pid2-b.trace.jsonl", recorded)
    server = start_server(logdir=str(logdir))
    listed = runs(server)
    assert set(listed) == {"job/DataLoader-rank0-pid1-a.trace.parquet", "job/DataLoader-rank0-pid2-b.trace.jsonl"}
    columnar, lines = listed["job/DataLoader-rank0-pid1-a.trace.parquet"], listed["job/DataLoader-rank0-pid2-b.trace.jsonl"]
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
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:  # noqa: F811
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
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:  # noqa: F811
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
                                            recorded: list[dict[str, Any]]) -> None:  # noqa: F811
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
