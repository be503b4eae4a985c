"""The run list as the picker reads it: WS /ws/runs pushes it as runs start, change and
end; each brief says when the loader started and how many epochs it began.

A real dashboard on 127.0.0.1, real websocket clients, real run processes and real trace files.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from loaderscope.traces.jsonl import TraceWriter
from tests.conftest import wait_for
from tests.live import LiveServer
from tests.logdirs import real_run


def lists(ws: Any, until: Any, timeout: float = 60) -> list[dict[str, Any]]:
    """Read pushed lists until one satisfies ``until``; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, "no pushed run list showed what was awaited"
        message = orjson.loads(ws.recv(timeout=left))
        assert message["type"] == "runs"
        if until(message["runs"]):
            return message["runs"]


def test_a_new_run_is_pushed_as_it_starts_and_again_when_it_ends(start_server: Any) -> None:
    # A dashboard of its own: the shared one carries whatever earlier tests left streaming into it.
    server: LiveServer = start_server()
    with server.connect("/ws/runs") as ws:
        first = orjson.loads(ws.recv(timeout=10))
        assert first["type"] == "runs" and isinstance(first["runs"], list)
        before = time.time()
        run = server.start_run("uniform", mode="sim", num_workers=2, dataset_size=32)
        listed = lists(ws, lambda runs: any(r["id"] == run["id"] for r in runs))
        assert {r["id"] for r in first["runs"]} < {r["id"] for r in listed}
        ended = lists(ws, lambda runs: any(r["id"] == run["id"] and r["status"] == "done" for r in runs))
    brief = next(r for r in ended if r["id"] == run["id"])
    assert brief["epochs"] == 1 and brief["batches"] == 8
    assert before - 1 <= brief["started"] <= time.time()  # a sim run has no wall clock: when it was listed
    with server.client() as http:
        assert next(r for r in http.get("/api/runs").json() if r["id"] == run["id"])["epochs"] == 1


def test_the_list_needs_the_token(server: LiveServer) -> None:
    with pytest.raises((InvalidStatus, ConnectionClosed)):
        with server.connect("/ws/runs", auth=False) as ws:
            ws.recv(timeout=5)


def test_a_trace_written_into_the_logdir_is_pushed_with_its_loader_start(start_server: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    live = start_server(logdir=str(logs), logdir_poll=0.1)
    events = real_run(24, num_workers=0)
    first_t = 8.7  # the loader was made 8.7 s before its first iter(): its clock starts at construction
    for event in events:
        event["t"] += first_t
    events[0].update(wall_start=1_000_000.0, name="train_loader")
    with live.connect("/ws/runs") as ws:
        assert orjson.loads(ws.recv(timeout=10))["runs"] == []
        writer = TraceWriter(logs / "job" / "train.trace.jsonl", "producer", mode="real")
        writer.write(events[:3])
        writer.flush()
        runs = lists(ws, lambda runs: len(runs) == 1)
        assert runs[0]["name"] == "train_loader" and runs[0]["status"] == "running"
        writer.write(events[3:])
        writer.close()
        runs = lists(ws, lambda runs: runs[0]["status"] == "done")
    run_id = runs[0]["id"]
    with live.client() as http:
        wait_for(lambda: http.get(f"/api/runs/{run_id}").json()["batches"] == 6, what="the file read whole")
        brief = next(r for r in http.get("/api/runs").json() if r["id"] == run_id)
    assert brief["started"] == pytest.approx(1_000_000.0 + first_t) and brief["epochs"] == 1
