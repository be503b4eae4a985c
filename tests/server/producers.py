"""Synthetic producers for the server tests: schema-valid loader events, cut into frames, sent over
WS /ws/ingest as a plain websocket client; and what a viewer or a closed connection then says. Also a
producer that leaves without run_end, another local user's connection, and the runs listed by id."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.conftest import wait_for

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


OTHER_UID = 4242
# Run as the other user: connect to the dashboard, hand the connected socket back over a Unix socket.
CONNECT_AS = ("import socket, sys; back = socket.socket(fileno=int(sys.argv[1])); "
              "conn = socket.create_connection(('127.0.0.1', int(sys.argv[2]))); "
              "socket.send_fds(back, [b'x'], [conn.fileno()])")


def connection_of_another_user(port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:``port`` that uid 4242 opened: the kernel lists it as theirs."""
    import subprocess

    ours, theirs = socket.socketpair()
    with ours, theirs:
        child = subprocess.Popen(["/usr/bin/python3", "-I", "-c", CONNECT_AS, str(theirs.fileno()), str(port)],
                                 user=OTHER_UID, group=OTHER_UID, extra_groups=[], pass_fds=[theirs.fileno()],
                                 cwd="/")
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        child.wait()
    return socket.socket(fileno=fds[0])


def leave(server: Any, run_id: str, payloads: list[bytes], sock: socket.socket | None = None) -> str:
    """A producer that sends ``payloads`` on a new run and goes without run_end; returns its secret."""
    with connect(f"{server.ws_url}/ws/ingest?run={run_id}", sock=sock, additional_headers=server.headers,
                 open_timeout=60) as ws:
        secret = orjson.loads(ws.recv(timeout=5))["secret"]
        for payload in payloads:
            ws.send(payload)
    wait_for(lambda: server.run(run_id)["status"] == "disconnected", what=f"{run_id}'s producer gone")
    return secret


def runs_by_id(server: Any) -> dict[str, dict[str, Any]]:
    with server.client() as http:
        return {r["id"]: r for r in http.get("/api/runs").json()}
