"""One validation path for what producers send, work bounded before it starts, eviction
that cannot be pinned, header and ping limits, nothing dropped without a word, runs owned by their
producer. Real uvicorn on 127.0.0.1, real websocket clients.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from loaderscope.events import REQUIRED
from loaderscope.traces.jsonl import write_trace
from tests.conftest import LiveServer, launch, wait_for
from tests.server.producers import batches, closed_with, connection_of_another_user, frames, produce


@pytest.fixture(scope="module")
def hard(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = launch(tmp_path_factory.mktemp("hardening3"))
    yield server
    server.stop()


GOOD_NOTE = {"kind": "note", "t": 1}  # an unknown kind: kept and shown
HEADER = [{"kind": "run_start", "t": 0, "mode": "real", "config": {"num_workers": 2}},
          {"kind": "epoch_start", "t": 0, "epoch": 0}]


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


# Each of these once answered 500 on GET /api/runs/ID, cut the Chrome export off, made a status a
# list, or dropped the producer without a close frame.
OFF_SCHEMA = [
    *(pytest.param({"kind": kind, "t": 1, "worker": None, **fields}, "'worker' must not be null",
                   id=f"null-worker-{kind}")
      for kind, fields in {"worker_start": {"pid": 1}, "worker_exit": {}, "dispatch": {"idx": 0},
                           "fetch_start": {"idx": 0}, "fetch_end": {"idx": 0}, "arrive": {"idx": 0},
                           "skip": {"idx": 0}, "worker_stuck": {"idx": 0, "elapsed": 1}, "worker_died": {}}.items()),
    pytest.param({"kind": "error", "t": 1, "type": "ValueError", "message": {"text": "x"}},
                 "'message' must be a string",
                 id="error-message-object"),
    pytest.param({"kind": "dispatch", "t": 1, "idx": None, "worker": 0}, "'idx' must not be null", id="null-idx"),
    pytest.param({"kind": "epoch_end", "t": 1, "epoch": None}, "'epoch' must not be null", id="null-epoch"),
    pytest.param({"kind": "yield", "t": 1, "idx": 0, "wait": None}, "'wait' must not be null", id="null-wait"),
    pytest.param({"kind": "note", "t": 1, "rank": None}, "'rank' must not be null", id="null-rank"),
    pytest.param({"kind": "run_end", "t": 1, "reason": ["done"]}, "'reason' must be a string", id="reason-list"),
    pytest.param({"kind": "run_start", "t": 1, "mode": "real", "config": [1]}, "'config' must be a JSON object",
                 id="config-list"),
    pytest.param({"kind": "note", "t": 1, "deep": _deep(500)}, "nested more than", id="nested-500"),
]


@pytest.mark.parametrize(("bad", "reason"), OFF_SCHEMA)
def test_an_event_off_the_schema_closes_1007_naming_it_and_every_answer_stays_whole(
        hard: LiveServer, bad: dict[str, Any], reason: str, request: pytest.FixtureRequest) -> None:
    run_id = "off-" + request.node.callspec.id
    with hard.connect(f"/ws/ingest?run={run_id}") as ws:
        ws.recv(timeout=5)
        ws.send(orjson.dumps(HEADER))
        ws.send(json.dumps([GOOD_NOTE, bad]))  # the stdlib encoder: orjson's stops at 255 levels
        code, text = closed_with(ws)
    assert code == 1007 and reason in text, (code, text)
    with hard.client() as http:
        detail = http.get(f"/api/runs/{run_id}")
        assert detail.status_code == 200, detail.text
        assert detail.json()["events"] == len(HEADER) + 1  # the frame before, and the bad one's own good event, kept
        assert isinstance(detail.json()["status"], str)
        chrome = http.get(f"/api/runs/{run_id}/trace", params={"format": "chrome"})
        assert chrome.status_code == 200
        assert "traceEvents" in orjson.loads(chrome.content)  # whole: it parses


def test_the_probes_own_optional_nulls_still_pass(hard: LiveServer) -> None:
    # worker_died names the task its worker held, or idx null (probe/liveness.py): not a required field
    died = {"kind": "worker_died", "t": 1, "worker": 0, "pid": 7, "exitcode": -9, "signal": "SIGKILL", "idx": None}
    produce(hard, "optional-nulls", iter([orjson.dumps([*HEADER, died])]))
    run = hard.wait_status("optional-nulls")
    assert run["events"] == len(HEADER) + 2 and any("SIGKILL" in finding for finding in run["diagnosis"])


@pytest.mark.parametrize("factor", [{"0": 2.0}, {}], ids=["mapping", "empty-mapping"])
def test_a_mapping_cost_field_swept_with_num_workers_answers_rows(hard: LiveServer, factor: dict[str, float]) -> None:
    grid = {"num_workers": [1, 2], "worker_factor": [factor]}
    run_id = f"sweepable-{len(factor)}"
    counted = ({**e, "n": 2} if e["kind"] == "dispatch" else e for e in batches(40))  # as the probe sends them
    produce(hard, run_id, frames(counted, 100))
    hard.wait_status(run_id)
    with hard.client() as http:
        scenario = http.post("/api/sweeps", json={"scenario": "uniform", "params": {"dataset_size": 64}, "grid": grid})
        recorded = http.post(f"/api/runs/{run_id}/sweeps", json={"grid": grid})
    assert scenario.status_code == 200, scenario.text
    assert recorded.status_code == 200, recorded.text
    assert len(recorded.json()["rows"]) == 2 and "worker_factor=" in recorded.json()["recommendation"]


def test_a_sweep_over_budget_is_refused_from_the_index_before_any_event_is_read(start_server: Any,
                                                                                 tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    ended = [{"kind": "run_end", "t": 13.0, "reason": "done"}]
    events = [{**e, "seq": n} for n, e in enumerate([*batches(12_000), *ended])]  # 60,003 events
    write_trace(logdir / "big.trace.jsonl", events, run="big")
    server = start_server(logdir=str(logdir))
    with server.client() as http:
        run = wait_for(lambda: next((r for r in http.get("/api/runs").json() if r.get("path") == "big.trace.jsonl"
                                     and r["events"] == 60_003), None), what="the logdir run indexed")
        assert run["last_event_age"] is None  # listed from its index: no event read into the store yet
        answer = http.post(f"/api/runs/{run['id']}/sweeps", json={"grid": {"num_workers": list(range(36))}})
        assert answer.status_code == 413 and "60,003 events" in answer.json()["detail"]
        again = next(r for r in http.get("/api/runs").json() if r["id"] == run["id"])
    assert again["last_event_age"] is None, "the file was read to refuse a sweep its index already ruled out"


# --- eviction that cannot be pinned ----------------------------------------------------------------

def test_producers_that_send_one_event_and_leave_cannot_lock_the_dashboard(start_server: Any) -> None:
    server = start_server(max_runs=4, reconnect_grace=600)
    secrets = []
    for n in range(8):  # each connects, sends one event, and goes: disconnected, within reconnect_grace
        with server.connect(f"/ws/ingest?run=drive-by{n}") as ws:
            hello = orjson.loads(ws.recv(timeout=5))
            assert hello["type"] == "hello", f"producer {n} was refused"
            secrets.append(hello["secret"])
            ws.send(orjson.dumps(HEADER[:1]))
        wait_for(lambda n=n: server.run(f"drive-by{n}")["status"] == "disconnected", what=f"drive-by{n} gone")
    with server.client() as http:
        listed = {r["id"]: r["on_disk"] for r in http.get("/api/runs").json()}
    assert listed == {f"drive-by{n}": n < 4 for n in range(8)}  # the longest gone moved to disk, still listed
    evicted = server.data_dir / "drive-by0.trace.jsonl"
    assert evicted.read_bytes().count(b"\n") == 2  # its trace: header and its one event
    secret = {"X-Loaderscope-Run-Secret": secrets[0]}
    hello = wait_for(lambda: _hello_or_try_later(server, "/ws/ingest?run=drive-by0", secret, HEADER[1:]),
                     what="drive-by0 taken back")  # its producer comes back: the same run, the same trace
    assert hello["next_seq"] == 1
    wait_for(lambda: server.run("drive-by0")["events"] == 2, what="drive-by0's second event")
    assert wait_for(lambda: evicted.read_bytes().count(b"\n") == 3, what="the event in the same trace")
    assert not (server.data_dir / "drive-by0.2.trace.jsonl").exists()


def _hello_or_try_later(server: LiveServer, path: str, headers: dict[str, str], events: list[Any]) -> Any:
    """The hello of a producer that then sends ``events``, or None when told to try later (1013)."""
    with server.connect(path, additional_headers=headers) as ws:
        try:
            hello = orjson.loads(ws.recv(timeout=5))
        except ConnectionClosed as exc:
            assert exc.rcvd is not None and exc.rcvd.code == 1013, exc
            return None
        ws.send(orjson.dumps(events))
        return hello


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").is_file(),
                    reason="playing another local user needs root (to setuid a child) and /usr/bin/python3")
def test_one_user_driving_by_pushes_out_its_own_runs_before_anothers(start_server: Any) -> None:
    """On loopback every producer has the same address: the source is the uid owning the connection."""
    server = start_server(max_runs=4, reconnect_grace=600)
    elsewhere = connection_of_another_user(server.port)
    with connect(f"{server.ws_url}/ws/ingest?run=victim", sock=elsewhere, additional_headers=server.headers) as ws:
        ws.recv(timeout=5)
        ws.send(orjson.dumps(HEADER))
    wait_for(lambda: server.run("victim")["status"] == "disconnected", what="the victim's producer gone")
    for n in range(8):  # another user (this one): one event each, then gone
        produce(server, f"flood{n}", iter([orjson.dumps(HEADER[:1])]), end=False)
    with server.client() as http:
        held = {r["id"] for r in http.get("/api/runs").json() if not r["on_disk"]}
    assert "victim" in held and len(held) == 4  # the oldest of them, yet the flooding user's moved to disk


def test_live_producers_still_fill_the_dashboard_with_a_reason(start_server: Any) -> None:
    server = start_server(max_runs=2)
    with server.connect("/ws/ingest?run=live0") as a, server.connect("/ws/ingest?run=live1") as b:
        a.recv(timeout=5)
        b.recv(timeout=5)
        with server.connect("/ws/ingest?run=third") as c:
            code, reason = closed_with(c)
    assert code == 1013 and "all live" in reason


# --- request heads, pings and keepalive (server/security/protocols.py) ---------------------------------------

def _raw(server: LiveServer, head: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(head)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


HALF_HEAD = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def test_half_sent_request_heads_are_closed_after_the_head_timeout(start_server: Any) -> None:
    server = start_server(head_timeout=1.0)
    slow = [_raw(server, HALF_HEAD) for _ in range(20)]
    wait_for(lambda: all(_closed_by_server(sock) for sock in slow), what="half-sent heads closed")
    with server.client() as http:
        assert http.get("/api/health").status_code == 200
    for sock in slow:
        sock.close()


def test_past_max_heads_the_oldest_half_sent_head_goes_and_health_answers(start_server: Any) -> None:
    server = start_server(head_timeout=600.0, max_heads=8)
    slow = [_raw(server, HALF_HEAD) for _ in range(40)]
    wait_for(lambda: all(_closed_by_server(sock) for sock in slow[:30]), what="the oldest heads closed")
    with server.client() as http:  # its own head arrives whole: never one of those waiting
        for _ in range(10):
            assert http.get("/api/health").status_code == 200
    assert not any(_closed_by_server(sock) for sock in slow[-7:])  # the newest still wait for their heads
    for sock in slow:
        sock.close()


def _upgrade(server: LiveServer, path: str) -> socket.socket:
    key = base64.b64encode(os.urandom(16)).decode()
    sock = _raw(server, (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n"
                         f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                         f"Authorization: Bearer {server.token}\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return sock


def _frame(opcode: int, payload: bytes) -> bytes:
    """A client frame, masked with a zero key (RFC 6455 allows any key; zero leaves the payload as is)."""
    size = len(payload)
    length = bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + struct.pack("!H", size) \
        if size < 1 << 16 else bytes([0x80 | 127]) + struct.pack("!Q", size)
    return bytes([0x80 | opcode]) + length + b"\0\0\0\0" + payload


def test_a_ping_flood_whose_pongs_are_never_read_is_stopped_by_back_pressure(hard: LiveServer) -> None:
    sock = _upgrade(hard, "/ws/ingest?run=ping-flood")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
    sock.settimeout(3.0)
    burst, sent = _frame(0x9, b"p" * 125) * 500, 0
    with pytest.raises(TimeoutError):  # the server stops reading once its pongs pile up unread
        while sent < 256 << 20:
            sock.sendall(burst)
            sent += len(burst)
    assert sent < 64 << 20, f"the server took {sent >> 20} MiB of pings without its pongs being read"
    with hard.client() as http:
        assert http.get("/api/health").status_code == 200
    sock.close()


def test_a_producer_that_keeps_sending_is_not_closed_by_the_keepalive(start_server: Any) -> None:
    server = start_server(ping_interval=0.2, ping_timeout=0.2)
    sock = _upgrade(server, "/ws/ingest?run=busy")  # it never reads: the server's pings go unanswered
    events = list(batches(60))
    for start in range(0, len(events), 10):  # a producer busy for 15 keepalive periods
        sock.sendall(_frame(0x2, orjson.dumps(events[start:start + 10])))
        time.sleep(0.1)
    wait_for(lambda: server.run("busy")["events"] == len(events), what="every frame kept")
    sock.close()


# --- run ownership ---------------------------------------------------------------------------------

def test_a_run_belongs_to_its_producer_and_only_its_secret_brings_it_back(hard: LiveServer) -> None:
    with hard.connect("/ws/ingest?run=owned") as owner:
        secret = orjson.loads(owner.recv(timeout=5))["secret"]
        owner.send(orjson.dumps(HEADER))
    wait_for(lambda: hard.run("owned")["status"] == "disconnected", what="the owner gone")
    for guess in ({}, {"X-Loaderscope-Run-Secret": "not-the-secret"}):  # another token holder
        with hard.connect("/ws/ingest?run=owned", additional_headers=guess) as intruder:
            code, reason = closed_with(intruder)
        assert code == 4403 and "X-Loaderscope-Run-Secret" in reason
    assert hard.run("owned")["events"] == len(HEADER)  # nothing injected
    with hard.connect("/ws/ingest?run=owned", additional_headers={"X-Loaderscope-Run-Secret": secret}) as back:
        assert orjson.loads(back.recv(timeout=5))["next_seq"] == len(HEADER)
        back.send(orjson.dumps([{"kind": "run_end", "t": 1, "reason": "done"}]))
    assert hard.wait_status("owned")["status"] == "done"


def test_a_dashboard_run_cannot_be_taken_before_its_process_connects(start_server: Any) -> None:
    server = start_server()
    run = server.start_run("uniform", dataset_size=32, batch_size=4, num_workers=0)
    with server.connect(f"/ws/ingest?run={run['id']}") as intruder:
        code, _ = closed_with(intruder)
    assert code in (4403, 4409)  # another's run: refused whether or not its process got there first
    assert server.wait_status(run["id"])["status"] == "done"  # its own process streamed it to the end


def test_watch_keeps_its_runs_secret_for_coming_back(hard: LiveServer) -> None:
    from loaderscope.probe.transport import StreamSink

    sink = StreamSink(hard.url, hard.token)
    sink(HEADER)
    wait_for(lambda: sink.run is not None and hard.run(sink.run)["events"] == len(HEADER), what="streamed")
    sink.close()  # without run_end: the run waits, disconnected, for its producer
    url, headers = sink._address()  # what its next connection would send
    assert headers.get("X-Loaderscope-Run-Secret") and "secret" not in url  # a header: never in access logs
    with connect(url, additional_headers=headers, compression=None, open_timeout=60) as back:
        assert orjson.loads(back.recv(timeout=5))["next_seq"] == len(HEADER)


# --- property: no event a producer can send breaks an answer ---------------------------------------

ANY_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)
OPTIONAL = ("worker", "idx", "epoch", "rank", "n", "dt", "nbytes", "message", "error", "indices", "signal", "name")


@st.composite
def events_of_known_kinds(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(REQUIRED)))
    names = [*REQUIRED[kind], *draw(st.lists(st.sampled_from(OPTIONAL), max_size=3, unique=True))]
    return {"kind": kind, "t": draw(st.none() | st.floats(0, 10)), **{name: draw(ANY_VALUE) for name in names}}


def test_no_event_of_any_known_kind_gives_a_5xx_or_a_cut_export(hard: LiveServer) -> None:
    with hard.client() as http:

        @given(event=events_of_known_kinds())
        @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(event: dict[str, Any]) -> None:
            with hard.connect("/ws/ingest") as ws:
                run_id = orjson.loads(ws.recv(timeout=5))["run"]
                ws.send(orjson.dumps(HEADER))
                try:
                    ws.send(orjson.dumps([event]))
                    # The pong comes once the frame before it was read; an event the server refuses closes
                    # the connection instead, and a ping sent before that close came is never answered.
                    pong = ws.ping()
                    wait_for(lambda: pong.is_set() or ws.protocol.close_rcvd is not None, what="pong or close")
                    closed_by = ws.protocol.close_rcvd
                except ConnectionClosed as closed:
                    closed_by = closed.rcvd
                if closed_by is not None:
                    assert closed_by.code == 1007 and closed_by.reason, (event, closed_by)
            detail = http.get(f"/api/runs/{run_id}")
            assert detail.status_code == 200, (event, detail.text)
            assert isinstance(detail.json()["status"], str)
            chrome = http.get(f"/api/runs/{run_id}/trace", params={"format": "chrome"})
            assert chrome.status_code == 200 and "traceEvents" in orjson.loads(chrome.content), event

        check()
