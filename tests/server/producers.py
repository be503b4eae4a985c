"""Synthetic producers for the server tests: schema-valid loader events, cut into frames, sent over
WS /ws/ingest as a plain websocket client; and what a viewer or a closed connection then says."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from websockets.exceptions import ConnectionClosed

if TYPE_CHECKING:
    from tests.live import LiveServer


def batches(count: int, *, start: int = 0, workers: int = 4, header: bool | None = None) -> Iterator[dict[str, Any]]:
    """A well-formed stream: run_start (at 0), then 5 events per batch, like a real in-order loader."""
    if header if header is not None else start == 0:
        yield {"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": workers}}
        yield {"kind": "epoch_start", "t": 0.0, "epoch": 0}
    for i in range(start, start + count):
        t, w = i * 1e-3, i % workers
        yield {"kind": "dispatch", "t": t, "idx": i, "worker": w, "indices": [2 * i, 2 * i + 1]}
        yield {"kind": "fetch_start", "t": t, "idx": i, "worker": w}
        yield {"kind": "fetch_end", "t": t, "idx": i, "worker": w, "dt": 5e-4, "nbytes": 64}
        yield {"kind": "arrive", "t": t, "idx": i, "worker": w}
        yield {"kind": "yield", "t": t, "idx": i, "wait": 0.0}


def frames(events: Iterator[dict[str, Any]], size: int) -> Iterator[bytes]:
    chunk: list[dict[str, Any]] = []
    for event in events:
        chunk.append(event)
        if len(chunk) == size:
            yield orjson.dumps(chunk)
            chunk = []
    if chunk:
        yield orjson.dumps(chunk)


SECRETS: dict[tuple[str, str], str] = {}  # (dashboard, run id) -> the secret its hello gave


def produce(server: LiveServer, run_id: str, payloads: Iterator[bytes], *, end: bool = True) -> None:
    """Send ``payloads`` as the producer of ``run_id``: coming back to a run it created, with its secret."""
    known = SECRETS.get((server.url, run_id))
    headers = {"X-Loaderscope-Run-Secret": known} if known else {}
    with server.connect(f"/ws/ingest?run={run_id}", additional_headers=headers) as ws:
        hello = orjson.loads(ws.recv(timeout=5))
        assert hello["run"] == run_id
        SECRETS[(server.url, run_id)] = hello["secret"]
        for payload in payloads:
            ws.send(payload)
        if end:
            ws.send(orjson.dumps([{"kind": "run_end", "t": 1.0, "reason": "done"}]))


def closed_with(ws: Any, timeout: float = 10) -> tuple[int, str]:
    """The close code and reason the server ended this connection with."""
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=timeout)
    assert closed.value.rcvd is not None, "the server closed without a close frame"
    return closed.value.rcvd.code, closed.value.rcvd.reason


def next_frame(ws: Any) -> list[dict[str, Any]]:
    """The next array of events, past any meta messages (status changes)."""
    while True:
        message = orjson.loads(ws.recv(timeout=10))
        if isinstance(message, list):
            return message


def wait_events(server: LiveServer, run_id: str, count: int, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = server.run(run_id)
        if run["events"] >= count or time.monotonic() > deadline:
            return run
        time.sleep(0.02)


# --- hostile producers ---------------------------------------------------------------------------
