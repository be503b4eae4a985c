"""WS /ws/ingest and WS /ws/runs with synthetic producers: hostile input, resync, gaps, drops, speed.

Synthetic producers are plain websocket clients sending schema-valid events, so these tests need
no torch and pin the protocol down exactly (counts, ranges, close codes).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from websockets.frames import Frame, Opcode

from loaderscope.events import MAX_FRAME_BYTES
from loaderscope.server.web.dashboard import checked_trace
from loaderscope.traces.jsonl import read_trace, write_trace
from tests.conftest import LiveServer, launch, wait_for
from tests.server.producers import SECRETS, batches, closed_with, frames, next_frame, produce, wait_events

HOSTILE = [
    pytest.param(b"{not json", 1007, "not valid JSON", id="malformed-json"),
    pytest.param(b"\xff\xfe garbage", 1007, "not valid JSON", id="binary-garbage"),
    pytest.param(b"5", 1007, "JSON array", id="not-an-array"),
    pytest.param(b'[{"kind": "dispatch", "t": 0, "idx": "x", "worker": 0}]', 1007, "'idx' must be an integer",
                 id="wrong-type"),
    pytest.param(b'[{"kind": "dispatch", "t": 0, "worker": 0}]', 1007, "missing its 'idx'", id="missing-field"),
    pytest.param(b'[{"t": 0}]', 1007, "'kind'", id="no-kind"),
    pytest.param(b'{"type": "takeover"}', 1007, "unknown meta", id="unknown-meta"),
    pytest.param(b'{"type": "dropped", "count": -4}', 1007, "non-negative", id="bad-meta"),
    pytest.param(b"[" + b" " * (MAX_FRAME_BYTES + 1) + b"]", 1009,
                 f"a frame of {MAX_FRAME_BYTES + 3:,} bytes is over this dashboard's limit of {MAX_FRAME_BYTES:,} "
                 "bytes; send smaller frames", id="oversized"),
]


@pytest.mark.parametrize(("payload", "code", "reason"), HOSTILE)
def test_hostile_producer_input_closes_that_connection_only(server: LiveServer, payload: bytes, code: int,
                                                            reason: str) -> None:
    with server.connect("/ws/ingest") as bystander, server.connect("/ws/ingest") as hostile:
        bystander_run = orjson.loads(bystander.recv(timeout=5))["run"]
        hostile.recv(timeout=5)
        hostile.send(payload)
        got_code, got_reason = closed_with(hostile)
        assert got_code == code and reason in got_reason
        bystander.send(orjson.dumps(list(batches(2))))  # the other producer goes on
        assert wait_events(server, bystander_run, 12)["events"] == 12
    assert httpx.get(f"{server.url}/api/health").status_code == 200


def test_a_producer_refused_for_a_frame_too_big_is_told_why_before_the_socket_closes(start_server: Any) -> None:
    """The server reads the rest of a refused frame before it closes: closed with that rest unread, the
    socket was reset, and the reset could reach the producer before the close frame (a fresh server's
    producers sending 8 MB saw no 1009 nor its reason 2 times in 6)."""
    live = start_server()
    size = 4 * MAX_FRAME_BYTES
    for _ in range(6):
        with live.connect("/ws/ingest") as producer:
            producer.recv(timeout=5)
            producer.send(b"[" + b" " * size + b"]")  # whole: the server reads what it refused
            assert closed_with(producer) == (1009, f"a frame of {size + 2:,} bytes is over this dashboard's limit "
                                                   f"of {MAX_FRAME_BYTES:,} bytes; send smaller frames")
    assert httpx.get(f"{live.url}/api/health").status_code == 200
    assert "Traceback" not in live.output()


def test_the_frames_read_with_the_header_of_a_refused_one_are_kept(server: LiveServer) -> None:
    """A frame and the head of one over the limit, in one read: websockets parses the first, then refuses the
    second by its header's length. The first was dropped with it (uvicorn handles no event of a read that
    ends in a parser error), so the producer, told by the next hello that the dashboard lacks it, took it
    for the refused frame: the frame it then dropped held a yield, and the run ended a batch short."""
    with server.connect("/ws/ingest") as producer:
        run_id = orjson.loads(producer.recv(timeout=5))["run"]
        kept = Frame(Opcode.BINARY, orjson.dumps(list(batches(2)))).serialize(mask=True)
        # a binary frame's head: FIN, 64-bit length, then the mask; its payload never needs to come
        head_of_too_big = bytes([0x82, 0x80 | 127]) + (MAX_FRAME_BYTES + 1).to_bytes(8, "big") + os.urandom(4)
        producer.socket.sendall(kept + head_of_too_big)  # a few hundred bytes: one segment, one read
        assert closed_with(producer)[0] == 1009
    run = wait_for(lambda: (r := server.run(run_id))["status"] == "disconnected" and r, what="the producer gone")
    assert run["events"] == 12 and run["batches"] == 2


def test_unknown_kinds_are_kept_not_refused(server: LiveServer) -> None:
    with server.connect("/ws/ingest") as ws:
        run_id = orjson.loads(ws.recv(timeout=5))["run"]
        ws.send(orjson.dumps([{"kind": "gpu_prefetch", "t": 0.5, "bytes": 10}]))
        assert wait_events(server, run_id, 1)["events"] == 1


def test_run_ids_are_checked_and_a_run_takes_one_producer(server: LiveServer) -> None:
    with server.connect("/ws/ingest?run=../../etc/passwd") as ws:
        assert closed_with(ws)[0] == 4400
    with server.connect("/ws/ingest?run=solo-1") as first:
        secret = orjson.loads(first.recv(timeout=5))["secret"]  # even its owner's second connection waits
        with server.connect("/ws/ingest?run=solo-1", additional_headers={"X-Loaderscope-Run-Secret": secret}) as second:
            code, reason = closed_with(second)
            assert code == 4409 and "already has a producer" in reason


def test_a_producer_reconnecting_continues_its_run_and_drops_are_counted(server: LiveServer) -> None:
    events = list(batches(4))
    for number, event in enumerate(events):
        event["seq"] = number  # the producer's own numbering; 3 events lost in between
    produce(server, "again-1", iter([orjson.dumps(events[:10])]), end=False)
    assert server.run("again-1")["status"] == "disconnected"
    produce(server, "again-1", iter([orjson.dumps(events[13:]), orjson.dumps({"type": "dropped", "count": 2})]))
    run = server.run("again-1")
    assert run["status"] == "done" and run["dropped"] == 5
    with server.client() as http:
        stored = http.get("/api/runs/again-1/events", params={"limit": 100}).json()["events"]
    assert [e["seq"] for e in stored] == list(range(len(events) - 3 + 1))  # the store's own numbering
    with server.connect("/ws/ingest?run=again-1") as ws:
        assert closed_with(ws)[0] == 4409  # an ended run takes no more events


# --- viewers -------------------------------------------------------------------------------------


def test_viewer_errors_have_clear_close_codes(server: LiveServer) -> None:
    with server.connect("/ws/runs/nope") as ws:
        code, reason = closed_with(ws)
        assert code == 4404 and "nope" in reason
    produce(server, "viewed-1", frames(batches(2), 100), end=False)
    with server.connect("/ws/runs/viewed-1?after=x") as ws:
        assert closed_with(ws)[0] == 4400
    with server.connect("/ws/runs/viewed-1?after=5") as ws:
        assert orjson.loads(ws.recv(timeout=5))["type"] == "hello"
        ws.send("not json at all")
        assert closed_with(ws)[0] == 1007


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A dashboard with little memory per run: 2000 events held, viewers resync past 1000 behind."""
    live = launch(tmp_path_factory.mktemp("small"), memory_events=2000, max_lag=1000)
    yield live
    live.stop()


def test_a_late_joiner_far_behind_is_told_to_resync_and_rest_has_it_all(small: LiveServer) -> None:
    server = small
    produce(server, "long-1", frames(batches(1000), 1000), end=False)  # 5002 events
    wait_events(server, "long-1", 5002)
    with server.connect("/ws/runs/long-1?after=99") as ws:
        assert orjson.loads(ws.recv(timeout=5))["type"] == "hello"
        resync = orjson.loads(ws.recv(timeout=5))
        assert resync == {"type": "resync", "from": 100, "to": 5001}
        produce(server, "long-1", frames(batches(2, start=1000), 100), end=False)
        fresh = next_frame(ws)
        assert [e["seq"] for e in fresh] == list(range(5002, 5012))
    got: list[int] = []
    with server.client() as http:  # the skipped range, from disk (old) and memory (new)
        while len(got) < 5002 - 100:
            page = http.get("/api/runs/long-1/events", params={"after": 99 + len(got), "limit": 1500}).json()
            assert page["gap"] is None
            got += [e["seq"] for e in page["events"]]
    assert got == list(range(100, 100 + len(got))) and got[-1] >= 5001


def test_without_recording_evicted_events_are_reported_as_a_gap(start_server: Any) -> None:
    server = start_server(record=False, memory_events=500)
    produce(server, "short-1", frames(batches(400), 1000))  # 2003 events
    with server.connect("/ws/runs/short-1?after=-1") as ws:
        messages = []
        while not messages or messages[-1] != {"type": "end", "status": "done", "last_seq": 2002}:
            messages.append(orjson.loads(ws.recv(timeout=5)))
    assert messages[1] == {"type": "gap", "from": 0, "to": 1502, "reason": "not held by the store (memory-only run)"}
    seqs = [e["seq"] for m in messages if isinstance(m, list) for e in m]
    assert seqs == list(range(1503, 2003))
    with server.client() as http:
        page = http.get("/api/runs/short-1/events", params={"after": 10}).json()
        assert page["gap"]["from"] == 11 and page["gap"]["to"] == 1502
        assert page["events"][0]["seq"] == 1503
        assert http.get("/api/runs/short-1/trace").status_code == 410


def test_a_stalled_viewer_never_blocks_the_producer_and_gets_everything_back(small: LiveServer) -> None:
    """The stalled viewer does not read for a while; afterwards frames + resync ranges cover every seq once."""
    server = small
    total = 5 * 40_000 + 3
    produce(server, "stall-1", frames(batches(0), 10), end=False)  # run_start, epoch_start
    with server.connect("/ws/runs/stall-1?after=-1") as viewer:  # not read until the producer is done
        with server.connect("/ws/ingest?run=stall-1",
                            additional_headers={"X-Loaderscope-Run-Secret": SECRETS[(server.url, "stall-1")]}) as ws:
            ws.recv(timeout=5)
            for payload in frames(batches(40_000, header=False), 1000):
                ws.send(payload)
            ws.send(orjson.dumps([{"kind": "run_end", "t": 1.0, "reason": "done"}]))
            wait_events(server, "stall-1", total)  # all stored while the viewer has read nothing
        covered: list[int] = []
        resyncs = 0
        while True:
            message = orjson.loads(viewer.recv(timeout=10))
            if isinstance(message, list):
                covered += [e["seq"] for e in message]
            elif message["type"] == "resync":
                resyncs += 1
                covered += list(range(message["from"], message["to"] + 1))
            elif message["type"] == "end":
                break
    assert resyncs >= 1, "the viewer fell behind and should have been told to resync"
    assert covered == list(range(total))


@pytest.mark.perf  # a rate to print, not a condition: as busy as the machine
def test_throughput_ingest_to_viewer(server: LiveServer, capsys: Any) -> None:
    """events/s from a producer through the store to a websocket viewer (LOADERSCOPE_BENCH_EVENTS to scale)."""
    batches_count = int(os.environ.get("LOADERSCOPE_BENCH_EVENTS", "50000")) // 5
    results = []
    for frame in (100, 1000):
        run_id = f"speed-{frame}"
        payloads = list(frames(batches(batches_count), frame))
        total = batches_count * 5 + 3
        subscribed, received = threading.Event(), threading.Event()

        def view(run_id: str = run_id, total: int = total, subscribed: threading.Event = subscribed,
                 received: threading.Event = received) -> None:
            count = 0
            with server.connect(f"/ws/runs/{run_id}?after=-1") as ws:
                assert orjson.loads(ws.recv(timeout=10))["type"] == "hello"
                subscribed.set()
                while count < total:
                    message = orjson.loads(ws.recv(timeout=60))
                    if isinstance(message, list):
                        count += len(message)
                    elif message["type"] == "resync":
                        count += message["to"] - message["from"] + 1
            received.set()

        with server.connect(f"/ws/ingest?run={run_id}") as ws:
            ws.recv(timeout=5)
            viewer = threading.Thread(target=view, daemon=True)
            viewer.start()
            assert subscribed.wait(10), "the viewer was greeted"
            started = time.monotonic()
            for payload in payloads:
                ws.send(payload)
            ws.send(orjson.dumps([{"kind": "run_end", "t": 1.0, "reason": "done"}]))
            assert received.wait(120)
            elapsed = time.monotonic() - started
        results.append((frame, total, total / elapsed))
    with capsys.disabled():
        for frame, total, rate in results:
            print(f"\n  ingest -> store -> viewer: {total} events in frames of {frame}: {rate:,.0f} events/s")


# --- replayed trace files --------------------------------------------------------------------------


def test_recorded_traces_open_as_replayed_runs(start_server: Any, tmp_path: Any) -> None:
    events = [*batches(30), {"kind": "run_end", "t": 1.0, "reason": "done"}]
    good = write_trace(tmp_path / "good.trace.jsonl", events, "rec-1", scenario="uniform", mode="real")
    damaged = tmp_path / "damaged.trace.jsonl"
    lines = good.read_bytes().splitlines()
    damaged.write_bytes(b"\n".join([*lines[:11], b"{cut here", *lines[11:]]) + b"\n")
    server = start_server(traces=[str(good), str(damaged)])
    opened = dict(re.findall(r"loaderscope: (\S+) opened as run (\w+)", server.output()))
    assert f"run={opened[str(good)]}" in server.output()  # the printed URL opens the first one
    replay = server.run(opened[str(good)])
    assert replay["status"] == "done" and replay["mode"] == "replay" and replay["statistics"]["batches"] == 30
    with server.connect(f"/ws/runs/{opened[str(good)]}") as ws:
        received = []
        while not received or received[-1] != "end":
            message = orjson.loads(ws.recv(timeout=5))
            received.append(message if isinstance(message, list) else message["type"])
    assert sum(len(m) for m in received if isinstance(m, list)) == len(events)
    broken = server.run(opened[str(damaged)])
    assert broken["status"] == "error" and "line 12" in broken["error"] and broken["events"] == 11


def test_a_file_that_is_not_a_trace_is_refused_before_serving(tmp_path: Any) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(ValueError, match="not a loaderscope trace"):
        checked_trace(other)
    with pytest.raises(ValueError, match="no such file"):
        checked_trace(tmp_path / "missing.jsonl")


# --- soak ----------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


class CheckingViewer:
    """Reads like the page does: frames in seq order; on resync, the skipped range over REST."""

    def __init__(self, server: LiveServer, run_id: str, *, events_per_s: float | None,
                 stalled: threading.Event | None = None) -> None:
        self.server, self.run_id, self.rate, self.stalled = server, run_id, events_per_s, stalled
        self.last, self.resyncs, self.fetched, self.error = -1, 0, 0, None
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        try:
            with self.server.connect(f"/ws/runs/{self.run_id}?after=-1") as ws, self.server.client() as http:
                self.connected.set()
                if self.stalled is not None:  # a tab in the background: the socket fills up meanwhile
                    self.stalled.wait(300)
                while True:
                    message = orjson.loads(ws.recv(timeout=60))
                    if isinstance(message, list):
                        assert message[0]["seq"] == self.last + 1, (message[0]["seq"], self.last)
                        self.last = message[-1]["seq"]
                        if self.rate:
                            time.sleep(len(message) / self.rate)
                    elif message["type"] == "resync":
                        assert message["from"] == self.last + 1
                        self.resyncs += 1
                        self._fetch(http, message["to"])
                    elif message["type"] == "end":
                        return
        except BaseException as exc:
            self.error = exc

    def _fetch(self, http: httpx.Client, to: int) -> None:
        while self.last < to:
            page = http.get(f"/api/runs/{self.run_id}/events",
                            params={"after": self.last, "limit": min(10_000, to - self.last)}).json()
            assert page["gap"] is None and page["events"][0]["seq"] == self.last + 1
            self.last = page["events"][-1]["seq"]
            self.fetched += len(page["events"])


def soak(server: LiveServer, run_id: str, count: int) -> tuple[int, int]:
    """``count`` batches streamed to a live and a stalled viewer, both checked to get every event once,
    and the trace checked complete. Returns the events and the server's RSS growth in KiB."""
    produce(server, run_id, frames(batches(0), 10), end=False)
    stored = threading.Event()  # the stalled viewer reads again only once the whole run is stored
    viewers = [CheckingViewer(server, run_id, events_per_s=200_000),
               CheckingViewer(server, run_id, events_per_s=None, stalled=stored)]
    for viewer in viewers:
        viewer.thread.start()
    for viewer in viewers:
        assert viewer.connected.wait(10), viewer.error
    rss_before = rss_kib(server.process.pid)
    produce(server, run_id, frames(batches(count, header=False), 1000))
    total = count * 5 + 3
    wait_events(server, run_id, total, timeout=300)
    stored.set()
    rss_after = rss_kib(server.process.pid)
    for viewer in viewers:
        viewer.thread.join(120)
        assert viewer.error is None, viewer.error
        assert viewer.last == total - 1
    assert viewers[1].resyncs >= 1, "the stalled viewer should have been told to resync"
    head, recorded = read_trace(server.data_dir / f"{run_id}.trace.jsonl")
    assert head["run"] == run_id and [e["seq"] for e in recorded] == list(range(total))
    return total, rss_after - rss_before


def test_soak_a_long_run_with_a_live_and_a_stalled_viewer(small: LiveServer) -> None:
    soak(small, "soak-1", 150_000 // 5)


@pytest.mark.perf
def test_soak_memory_stays_bounded(small: LiveServer, capsys: Any) -> None:
    """LOADERSCOPE_SOAK_EVENTS=1000000 for a long soak. Timed (RSS after a burst depends on the
    allocator and the machine's load), so -m perf runs it."""
    total, growth_kib = soak(small, "soak-rss", int(os.environ.get("LOADERSCOPE_SOAK_EVENTS", "150000")) // 5)
    growth_mib = growth_kib / 1024
    with capsys.disabled():
        print(f"\n  soak: {total} events; server RSS grew {growth_mib:.0f} MiB")
    # 2000 events in memory plus the reducer's per-batch statistics; holding every event would be ~100x that.
    assert growth_mib < 40 + total * 40 / 1024 / 1024


def test_an_older_probes_reorder_events_are_taken_and_shown_parked(server: LiveServer) -> None:
    """A probe from before the rename sends kind ``buffer`` and yield's ``from_buffer``, as whole events and
    as compact rows (contract/events.py RENAMED_KINDS, RENAMED_FIELDS): taken, kept and shown as ``parked``."""
    def pair(first: int, t: float) -> list[dict[str, Any]]:  # task first + 1 overtakes task first
        later = first + 1
        return [{"kind": "dispatch", "t": t, "idx": first, "worker": 0, "indices": [first]},
                {"kind": "dispatch", "t": t, "idx": later, "worker": 1, "indices": [later]},
                {"kind": "fetch_start", "t": t, "idx": first, "worker": 0},
                {"kind": "fetch_start", "t": t, "idx": later, "worker": 1},
                {"kind": "fetch_end", "t": t + 0.1, "idx": later, "worker": 1, "dt": 0.1, "nbytes": 8},
                {"kind": "arrive", "t": t + 0.1, "idx": later, "worker": 1},
                {"kind": "buffer", "t": t + 0.1, "idx": later, "worker": 1, "waiting_for": first},
                {"kind": "fetch_end", "t": t + 0.2, "idx": first, "worker": 0, "dt": 0.2, "nbytes": 8},
                {"kind": "arrive", "t": t + 0.2, "idx": first, "worker": 0},
                {"kind": "yield", "t": t + 0.2, "idx": first, "wait": 0.2, "from_buffer": False},
                {"kind": "yield", "t": t + 0.2, "idx": later, "wait": 0.0, "from_buffer": True}]

    start = [{"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": 2}},
             {"kind": "epoch_start", "t": 0.0, "epoch": 0}]
    whole = start + pair(0, 0.0)
    order = {"dispatch": ("idx", "worker", "indices"), "fetch_start": ("worker", "idx"),
             "fetch_end": ("worker", "idx", "dt", "nbytes"), "arrive": ("idx", "worker"),
             "buffer": ("idx", "worker", "waiting_for"), "yield": ("idx", "wait", "from_buffer")}
    rows = [[e["kind"], e["t"], *(e[name] for name in order[e["kind"]])] for e in pair(2, 1.0)]
    for row in rows:  # the older probe's rows carried every ROW_FIELDS value: fetch_start's n, fetch_end's pickled
        row.extend([1] if row[0] == "fetch_start" else [0] if row[0] == "fetch_end" else [])
    with server.connect("/ws/ingest") as ws:
        run_id = orjson.loads(ws.recv(timeout=5))["run"]
        ws.send(orjson.dumps(whole))
        ws.send(orjson.dumps({"rows": rows, "seq": len(whole), "t0": 0.0}))
        assert wait_events(server, run_id, len(whole) + len(rows))["events"] == len(whole) + len(rows)
    with server.client() as http:
        events = http.get(f"/api/runs/{run_id}/events").json()["events"]
    assert [e["idx"] for e in events if e["kind"] == "parked"] == [1, 3]
    assert not any(e["kind"] == "buffer" or "from_buffer" in e for e in events)
    assert [e["idx"] for e in events if e["kind"] == "yield" and e["from_parked"]] == [1, 3]
    statistics = server.run(run_id)["statistics"]
    assert (statistics["parked_high"], statistics["out_of_order"], statistics["violations"]) == (1, 2, [])
