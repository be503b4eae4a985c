"""Nothing dropped without a word (frames a dashboard never read are sent again, or counted on both
sides), who a producer is when eviction shares the run table out by source, and eviction that cannot
be pinned: disconnected runs move to disk, listed, readable and resumable into their
trace; one source holds at most its quota of producers; only a run's secret resumes it, after a logdir
dashboard's restart too. A second local user is real (uid 4242, a setuid child) where root allows."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from torch.utils.data import DataLoader
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import loaderscope
from loaderscope.server.web.ingest import loopback_uid
from tests.conftest import wait_for
from tests.server.producers import batches as loader_events
from tests.server.producers import closed_with, connection_of_another_user, frames, leave, runs_by_id
from tests.squares import Squares


def _run(server: Any, run_id: str) -> dict[str, Any] | None:
    with server.client() as http:
        return next((r for r in http.get("/api/runs").json() if r["id"] == run_id and r["status"] == "done"), None)


def _train_through_a_crash(start_server: Any, logdir: Path, resend_events: int | None) -> tuple[Any, Any]:
    """A watch()ed training whose dashboard stops reading (SIGSTOP) while frames are on their way, is
    killed with them unread, and comes back on the same logdir, port and token."""
    first = start_server(logdir=str(logdir))
    port, token = first.port, first.token
    loader = loaderscope.watch(DataLoader(Squares(60, delay=0.02), batch_size=2, num_workers=2), url=first.page_url)
    iterator = iter(loader)
    sink = loader._probe_transport
    if resend_events is not None:
        sink.resend_limit = resend_events
    second = None
    for batches, _ in enumerate(iterator, start=1):
        if batches == 5:
            wait_for(lambda: sink.sent > 0)
            os.kill(first.process.pid, signal.SIGSTOP)  # it reads nothing more...
            sent = sink.sent
            wait_for(lambda: sink.sent > sent,  # noqa: B023 (called within the iteration)
                     what="frames sent to the stopped dashboard")
        if batches == 10:
            os.kill(first.process.pid, signal.SIGKILL)  # ...and dies with them unread
            first.process.wait()
            second = start_server(logdir=str(logdir), port=port, token=token)
    loader.close()
    assert batches == 30 and second is not None
    return sink, second


def test_frames_a_dashboard_never_read_are_sent_again_when_the_producer_still_holds_them(
        start_server: Any, tmp_path: Path) -> None:
    sink, second = _train_through_a_crash(start_server, tmp_path / "logs", None)
    run = wait_for(lambda: _run(second, sink.run), what="the same run, ended")
    assert run["dropped"] == 0 and sink.unread == 0 and sink.dropped == 0
    assert run["events"] == sink.sent and run["batches"] == 30  # every event, once


def test_frames_no_longer_held_are_counted_the_same_on_both_sides(
        start_server: Any, tmp_path: Path, capfd: Any) -> None:
    sink, second = _train_through_a_crash(start_server, tmp_path / "logs", 0)
    run = wait_for(lambda: _run(second, sink.run), what="the same run, ended")
    assert sink.unread > 0 and run["dropped"] == sink.unread  # the same number, said on both sides
    assert run["events"] + run["dropped"] == sink.sent
    err = capfd.readouterr().err
    assert err.count(f"does not hold {sink.unread} events") == 1 and f"{sink.unread} of {sink.sent} events" in err


# --- who a producer is, for eviction's per-source share ---------------------------------------------

OTHER_UID = 4242
CONNECT = "import socket, sys, time; s = socket.create_connection(('127.0.0.1', int(sys.argv[1]))); time.sleep(30)"


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").is_file(),
                    reason="playing another local user needs root (to setuid a child) and /usr/bin/python3")
def test_a_loopback_producer_is_told_apart_by_the_uid_that_owns_its_connection() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        other = subprocess.Popen(["/usr/bin/python3", "-I", "-c", CONNECT, str(port)], user=OTHER_UID,
                                 group=OTHER_UID, extra_groups=[], cwd="/")
        try:
            theirs, their_address = server.accept()
            with socket.create_connection(("127.0.0.1", port)):
                mine, my_address = server.accept()
                assert loopback_uid(my_address, ("127.0.0.1", port)) == os.geteuid()
                assert loopback_uid(their_address, ("127.0.0.1", port)) == OTHER_UID
                assert loopback_uid(("127.0.0.1", 1), ("127.0.0.1", port)) is None  # no such connection
                mine.close()
            theirs.close()
        finally:
            other.kill()
            other.wait()


# --- eviction that cannot be pinned: disconnected runs move to disk, sources share the slots --------

SECRET = "X-Loaderscope-Run-Secret"


def _come_back(server: Any, run_id: str, secret: str, payloads: tuple[bytes, ...] = ()) -> dict[str, Any]:
    """The run's producer reconnects with its secret, retrying while the dashboard says try later
    (1013: its trace is being read back), and sends ``payloads``; returns its hello."""
    def attempt() -> dict[str, Any] | None:
        with server.connect(f"/ws/ingest?run={run_id}", additional_headers={SECRET: secret}) as ws:
            try:
                hello: dict[str, Any] = orjson.loads(ws.recv(timeout=5))
            except ConnectionClosed as exc:
                assert exc.rcvd is not None and exc.rcvd.code == 1013, exc
                return None
            for payload in payloads:
                ws.send(payload)
            return hello
    return wait_for(attempt, what=f"{run_id} taken back by its producer")


def test_a_disconnected_run_moved_to_disk_stays_listed_readable_and_resumes_into_its_trace(
        start_server: Any) -> None:
    server = start_server(max_runs=2, reconnect_grace=600)
    sent = list(loader_events(40))
    secret = leave(server, "away", list(frames(iter(sent), 50)))
    for n in range(2):  # the table is full: the longest gone moves to disk, it is not delisted
        leave(server, f"later{n}", [orjson.dumps(sent[:1])])
    away = wait_for(lambda: (r := runs_by_id(server).get("away")) and r["on_disk"] and r, what="away moved to disk")
    assert away["status"] == "disconnected" and away["events"] == len(sent) and away["batches"] == 40
    assert not runs_by_id(server)["later1"]["on_disk"]
    detail = server.run("away")
    assert detail["trace"] and detail["statistics"]["batches"] == 40 and detail["config"] == {"num_workers": 4}
    with server.client() as http:  # read from its trace file
        page = http.get("/api/runs/away/events", params={"after": -1, "limit": 10_000}).json()
        assert [e["seq"] for e in page["events"]] == list(range(len(sent))) and page["gap"] is None
        assert [e["kind"] for e in page["events"]] == [e["kind"] for e in sent]
        trace = http.get("/api/runs/away/trace")
        assert trace.status_code == 200 and trace.content == (server.data_dir / "away.trace.jsonl").read_bytes()
    with server.connect("/ws/runs/away") as viewer:  # the viewer is sent to its file, as for any old event
        assert orjson.loads(viewer.recv(timeout=5))["last_seq"] == len(sent) - 1
        assert orjson.loads(viewer.recv(timeout=5)) == {"type": "resync", "from": 0, "to": len(sent) - 1}
    more = list(loader_events(10, start=40)) + [{"kind": "run_end", "t": 1.0, "reason": "done"}]
    hello = _come_back(server, "away", secret, (orjson.dumps(more),))
    assert hello["run"] == "away" and hello["next_seq"] == len(sent)  # the same id, numbering on from there
    done = server.wait_status("away")
    assert done["status"] == "done" and not done["on_disk"] and done["events"] == len(sent) + 51
    assert done["statistics"]["batches"] == 50  # its state read back whole, then carried on
    assert (server.data_dir / "away.trace.jsonl").read_bytes().count(b"\n") == 1 + len(sent) + 51
    assert not list(server.data_dir.glob("away.*.trace.jsonl"))  # no second trace


def test_a_run_stopped_while_on_disk_ends_in_its_trace(start_server: Any) -> None:
    server = start_server(max_runs=1, reconnect_grace=600)
    leave(server, "away", [orjson.dumps(list(loader_events(3)))])
    leave(server, "later", [orjson.dumps(list(loader_events(1)))])
    assert runs_by_id(server)["away"]["on_disk"]
    with server.client() as http:
        assert http.post("/api/runs/away/control", json={"action": "stop"}).status_code == 200
    assert server.wait_status("away")["status"] == "stopped"
    last = (server.data_dir / "away.trace.jsonl").read_bytes().splitlines()[-1]
    assert orjson.loads(last)["kind"] == "run_end" and orjson.loads(last)["seq"] == 2 + 15


def test_a_run_whose_trace_is_gone_from_disk_starts_again_under_its_id(start_server: Any) -> None:
    server = start_server(max_runs=1, reconnect_grace=600)
    secret = leave(server, "away", [orjson.dumps(list(loader_events(3)))])
    leave(server, "later", [orjson.dumps(list(loader_events(1)))])
    assert runs_by_id(server)["away"]["on_disk"]
    (server.data_dir / "away.trace.jsonl").unlink()
    assert _come_back(server, "away", secret)["next_seq"] == 0  # it re-sends its first frame (§8)
    assert "cannot come back from its trace file" in server.output()


def test_a_memory_only_dashboard_forgets_disconnected_runs_rather_than_write_them(start_server: Any) -> None:
    server = start_server(max_runs=1, reconnect_grace=600, record=False)
    leave(server, "away", [orjson.dumps(list(loader_events(3)))])
    leave(server, "later", [orjson.dumps(list(loader_events(1)))])
    assert list(runs_by_id(server)) == ["later"]  # serve(record=False): nothing is written, so nothing moves to disk


def test_two_hundred_producers_that_send_one_event_and_leave_lock_nothing(start_server: Any) -> None:
    """Eviction at the scale that once pinned it, with the default limits: 200 drive-by producers held every
    slot for reconnect_grace (600 s); now the oldest move to disk, still listed."""
    server = start_server()
    for n in range(205):
        with server.connect(f"/ws/ingest?run=drive-by{n}") as ws:
            assert orjson.loads(ws.recv(timeout=5))["type"] == "hello", f"producer {n} was refused"
            ws.send(orjson.dumps(list(loader_events(0))))
    listed = wait_for(lambda: (r := runs_by_id(server))
                      and sum(x["status"] == "disconnected" for x in r.values()) == 205
                      and r, what="every drive-by producer gone")
    assert sum(r["on_disk"] for r in listed.values()) >= 5
    with server.connect("/ws/ingest?run=newcomer") as ws:
        assert orjson.loads(ws.recv(timeout=5))["run"] == "newcomer"
    with server.client() as http:
        answer = http.post("/api/runs", json={"scenario": "uniform", "mode": "sim", "params": {"dataset_size": 8}})
    assert answer.status_code == 201, answer.text


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").is_file(),
                    reason="playing another local user needs root (to setuid a child) and /usr/bin/python3")
def test_one_source_holds_at_most_its_quota_of_producers_and_another_user_still_gets_in(start_server: Any) -> None:
    server = start_server(max_producers=4, max_source_producers=2)
    with server.connect("/ws/ingest?run=mine0") as a, server.connect("/ws/ingest?run=mine1") as b:
        a.recv(timeout=5)
        b.recv(timeout=5)
        with server.connect("/ws/ingest?run=mine2") as c:
            code, reason = closed_with(c)
        assert code == 1013 and f"uid:{os.geteuid()} has 2 producers" in reason and "max_source_producers" in reason
        theirs = connection_of_another_user(server.port)
        with connect(f"{server.ws_url}/ws/ingest?run=theirs", sock=theirs, additional_headers=server.headers) as ws:
            assert orjson.loads(ws.recv(timeout=5))["run"] == "theirs"
    assert wait_for(lambda: server.run("mine1")["status"] == "disconnected")
    with server.connect("/ws/ingest?run=mine2") as c:  # a slot of its own is free again
        assert orjson.loads(c.recv(timeout=5))["run"] == "mine2"


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").is_file(),
                    reason="playing another local user needs root (to setuid a child) and /usr/bin/python3")
def test_one_users_drive_by_runs_on_disk_push_out_their_own_not_anothers(start_server: Any) -> None:
    server = start_server(max_runs=2, max_parked=2, reconnect_grace=600)
    theirs = connection_of_another_user(server.port)
    secret = leave(server, "victim", [orjson.dumps(list(loader_events(2)))], sock=theirs)
    for n in range(6):  # this user: one event each, then gone
        leave(server, f"flood{n}", [orjson.dumps(list(loader_events(0)))])
    listed = runs_by_id(server)
    assert len(listed) == 4 and listed["victim"]["on_disk"]  # 2 in memory, 2 on disk: the flood's oldest went
    assert sorted(r for r in listed if listed[r]["on_disk"]) == ["flood3", "victim"]
    assert _come_back(server, "victim", secret)["next_seq"] == 2 + 10


def test_after_a_logdir_dashboard_restarts_only_the_runs_secret_resumes_it(start_server: Any, tmp_path: Path) -> None:
    """The new dashboard holds no secret in memory: the trace's header keeps SHA-256 of it."""
    logdir = tmp_path / "logs"
    first = start_server(logdir=str(logdir))
    secret = leave(first, "kept", [orjson.dumps(list(loader_events(4)))])
    header = orjson.loads((logdir / "kept.trace.jsonl").read_bytes().split(b"\n", 1)[0])
    assert secret not in str(header) and len(header["owner"]) == 64
    first.stop()
    second = start_server(logdir=str(logdir), port=first.port, token=first.token)
    wait_for(lambda: "kept" in runs_by_id(second), what="the run listed again from its file")
    for guess in ({}, {SECRET: "not-the-secret"}):  # another token holder, in the producer's place
        with second.connect("/ws/ingest?run=kept", additional_headers=guess) as intruder:
            code, reason = closed_with(intruder)
        assert code == 4403 and SECRET in reason
    hello = _come_back(second, "kept", secret, (orjson.dumps([{"kind": "run_end", "t": 1.0, "reason": "done"}]),))
    assert hello["next_seq"] == 2 + 20 and hello["secret"] == secret  # the same secret: good for the next restart
    assert second.wait_status("kept")["status"] == "done"


def test_a_parked_store_holds_no_event_answers_from_its_file_and_comes_back_whole(tmp_path: Path) -> None:
    from loaderscope.server.runs.spill import TraceSpill
    from loaderscope.server.runs.store import EventLog
    from loaderscope.traces import jsonl as trace

    def fresh_log(spill: TraceSpill | None) -> EventLog:
        return EventLog("r", memory_events=100_000, spill=spill)

    sent = list(loader_events(600))
    log = fresh_log(TraceSpill(tmp_path / "r.trace.jsonl", trace.header("r")))
    log.append([dict(e) for e in sent])
    lines, before = log.read(0, len(sent))[0], log.summary()
    assert log.park() and log.parked
    assert log.read_memory(log.next_seq - 1, 1) == [] and log.state.tasks == {} and log.state.batches == 600
    assert log.read(0, len(sent))[0] == lines and log.summary() == before  # the file, and the frozen summary
    rebuilt = fresh_log(None)
    rebuilt.append([orjson.loads(line) for line in lines])
    assert isinstance(log.spill, TraceSpill)
    log.unpark(rebuilt, log.spill.reopened())
    log.append([dict(e) for e in loader_events(10, start=600)])
    log.flush()
    assert not log.parked and log.summary()[0]["batches"] == 610
    assert [e["seq"] for e in trace.read_trace(tmp_path / "r.trace.jsonl")[1]] == list(range(len(sent) + 50))
    log.close()


def test_controls_for_a_run_whose_producer_is_away_keep_only_the_newest(start_server: Any) -> None:
    server = start_server()
    secret = leave(server, "away", [orjson.dumps(list(loader_events(1)))])
    with server.client() as http:
        for n in range(40):
            assert http.post("/api/runs/away/control", json={"delay": n / 10}).status_code == 200
    with server.connect("/ws/ingest?run=away", additional_headers={SECRET: secret}) as ws:
        hello = orjson.loads(ws.recv(timeout=5))
    assert hello["type"] == "hello"
    # had all 40 been kept, the oldest came first
    assert hello["controls"] == [{"delay": n / 10} for n in range(24, 40)]
