"""What the tests of a logdir share: a real run's events, that run as a rank of a job, a trace written the
way a producer writes one, and what a dashboard lists and streams of it. The module-scoped ``recorded``
fixture (tests/server/conftest.py) is one such run."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from loaderscope.traces.jsonl import TraceWriter

if TYPE_CHECKING:
    from tests.live import LiveServer

BATCHES = 12


def real_run(samples: int, num_workers: int) -> list[dict[str, Any]]:
    """The events of one real run of batches of 4 (run_start .. run_end), through the probe's sink."""
    import torch

    from loaderscope import InstrumentedDataLoader

    events: list[dict[str, Any]] = []
    loader = InstrumentedDataLoader(torch.arange(float(samples)), batch_size=4, num_workers=num_workers,
                                    sink=events.extend)
    for _ in loader:
        pass
    loader.close()
    assert events[0]["kind"] == "run_start" and events[-1]["kind"] == "run_end"
    return events


def as_rank(events: list[dict[str, Any]], rank: int, job: str | None, world_size: int = 1) -> list[dict[str, Any]]:
    """The run as rank ``rank`` of ``job`` reported it."""
    out = copy.deepcopy(events)
    for event in out:
        event["rank"] = rank
    out[0].update(job=job, world_size=world_size, rank=rank)
    return out


def write(path: Path, events: list[dict[str, Any]], *, torn: bytes = b"") -> Path:
    with TraceWriter(path, "producer-run", mode="real") as writer:
        writer.write(events)
    if torn:
        with path.open("ab") as f:
            f.write(torn)
    return path


def runs(server: LiveServer) -> dict[str, dict[str, Any]]:
    """GET /api/runs by the file's path under the logdir (logdir runs only)."""
    with server.client() as http:
        listed = http.get("/api/runs").json()
    return {r["path"]: r for r in listed if r["origin"] == "logdir"}


def read_until(ws: Any, done: Callable[[list[dict[str, Any]], list[dict[str, Any]]], bool],
               timeout: float = 30) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    metas: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not done(events, metas):
        message = orjson.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        (events.extend if isinstance(message, list) else metas.append)(message)
    return events, metas


def trace_bytes(tmp_path: Path, events: list[dict[str, Any]]) -> bytes:
    return write(tmp_path / "made.trace.jsonl", events).read_bytes()
