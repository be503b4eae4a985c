"""Hardening II: a client holding the token cannot stall, bloat or destroy what others see.

Each test reproduces one such attack against a real dashboard (or the store alone) and asserts on
conditions, never on wall-clock thresholds.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from loaderscope.events import MAX_FRAME_BYTES
from loaderscope.server.budgets import MAX_EVENT_BYTES, MAX_OPEN_TASKS, PAGE_BYTES, VIEWER_FRAME_BYTES
from loaderscope.server.runs import store
from loaderscope.server.runs.store import SUMMARY_SHARE, EventLog
from loaderscope.server.security.logs import redact
from tests.conftest import LiveServer, launch, wait_for
from tests.server.producers import batches, closed_with, frames, produce, wait_events

START = [{"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": 1}},
         {"kind": "epoch_start", "t": 0.0, "epoch": 0}]


@pytest.fixture(scope="module")
def hard(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A dashboard with small caps, so each is reached by a few connections."""
    server = launch(tmp_path_factory.mktemp("hard"), max_producers=6, max_run_viewers=2, silent_after=0.5)
    yield server
    server.stop()


@contextmanager
def ingest(server: LiveServer, path: str = "/ws/ingest") -> Iterator[tuple[Any, str]]:
    """A producer's connection and the run the dashboard gave it, closed when the block ends (websockets
    17.1 deprecates a connection used outside its ``with``)."""
    with server.connect(path) as ws:
        yield ws, orjson.loads(ws.recv(timeout=5))["run"]


# --- one frame must not freeze everyone -----------------------------------------------------------

def test_a_frame_at_the_cap_is_applied_in_slices_while_health_answers(hard: LiveServer) -> None:
    """A frame is parsed in one go, so its size is capped (MAX_FRAME_BYTES); what it expands to (here
    300,000 events) is applied a slice at a time while the health route and the run keep answering."""
    rows = [["batch", 1, i, 1, 1, 0, 0, None] for i in range(60_000)]
    frame = orjson.dumps({"rows": rows, "seq": 0, "t0": 0.0})
    assert 1_500_000 < len(frame) <= MAX_FRAME_BYTES
    seen: list[int] = []
    with hard.client() as http:
        with ingest(hard) as (ws, run_id):
            ws.send(orjson.dumps(START))
            ws.send(frame)
            while not seen or seen[-1] < 300_002:  # the health route and the run answer mid-frame
                assert http.get("/api/health").status_code == 200
                seen.append(http.get(f"/api/runs/{run_id}").json()["events"])
    assert any(2 < n < 300_002 for n in seen), "the frame was applied in one step"
    # one past the cap is refused with 1009: tests/server/test_ingest.py, HOSTILE "oversized"


# --- bytes, not events -----------------------------------------------------------------------------

def test_large_fields_are_cut_and_the_cut_recorded_while_100kb_events_stay_whole(hard: LiveServer) -> None:
    # 1.5 MB of frames: inside a frame, far past an event's budget
    big = [{"file": "deep.py", "line": n, "function": "f" * 60} for n in range(16_000)]
    medium = "y" * 100_000
    with ingest(hard) as (ws, run_id):
        ws.send(orjson.dumps([*START, {"kind": "worker_stuck", "t": 1, "worker": 0, "idx": 0, "elapsed": 9,
                                       "stack": big},
                              {"kind": "note", "t": 1, "text": medium}]))
        wait_events(hard, run_id, 4)
    with hard.client() as http:
        events = http.get(f"/api/runs/{run_id}/events").json()["events"]
        detail = http.get(f"/api/runs/{run_id}").json()
    stuck, note = events[2], events[3]
    assert len(orjson.dumps(stuck)) <= MAX_EVENT_BYTES and stuck["cut"] == {"stack": len(orjson.dumps(big))}
    assert stuck["stack"] == big[-len(stuck["stack"]):] and stuck["stack"]  # still frames: the innermost
    assert note["text"] == medium and "cut" not in note
    assert detail["cut_events"] == 1


def test_memory_per_run_is_bounded_in_bytes_and_open_tasks_are_capped() -> None:
    log = EventLog("r", memory_events=1_000_000, memory_bytes=1 << 20)
    log.append([dict(e) for e in START])
    log.append([{"kind": "x", "t": 0, "blob": "z" * 100_000} for _ in range(30)])
    assert sum(map(len, log.read_memory(log.first_held, 100))) <= 1 << 20
    assert log.first_held > 0  # a memory-only run says where its events start
    log.append([{"kind": "dispatch", "t": 0, "idx": i, "worker": 0} for i in range(MAX_OPEN_TASKS + 10)])
    assert len(log.state.tasks) <= MAX_OPEN_TASKS and log.forgotten_tasks > 0


def test_the_reducer_keeps_cut_copies_of_large_events() -> None:
    log = EventLog("r", memory_events=100)
    log.append([{"kind": "mystery", "t": 0, "blob": "q" * 200_000} for _ in range(5)])
    assert all(len(orjson.dumps(note)) < 10_000 for note in log.state.notes)
    assert len(log.read_memory(0, 1)[0]) > 200_000  # what is served stays whole


def test_summary_is_cached_while_events_come() -> None:
    log = EventLog("r", memory_events=100)
    log.append([dict(e) for e in START])
    first = log.summary()
    log.append([{"kind": "epoch_end", "t": 1, "epoch": 0}])
    assert log.summary() is first  # within SUMMARY_EVERY: the same object, no recomputation
    log.append([{"kind": "run_end", "t": 2, "reason": "done"}])
    assert log.summary() is not first and log.summary()[0]["status"] == "done"


def test_a_loop_of_long_steps_is_not_called_silent_between_them(hard: LiveServer) -> None:
    """A large model's step of minutes sends one batch's events a step: inside an epoch, the run is
    silent only after three of its recent steps, when they are longer than ``silent_after`` (0.5 s here)."""
    step = 3.0
    batches = [e for i in range(5) for e in (
        {"kind": "dispatch", "t": i * step, "idx": i, "worker": 0},
        {"kind": "fetch_start", "t": i * step, "idx": i, "worker": 0},
        {"kind": "fetch_end", "t": i * step + 0.01, "idx": i, "worker": 0, "dt": 0.01},
        {"kind": "arrive", "t": i * step + 0.01, "idx": i, "worker": 0},
        {"kind": "yield", "t": i * step + 0.02, "idx": i, "wait": 0.01})]
    with hard.connect("/ws/ingest") as producer, hard.client() as http:
        run_id = orjson.loads(producer.recv(timeout=5))["run"]
        producer.send(orjson.dumps(START + batches))  # then quiet, as between two steps

        def brief() -> dict[str, Any]:
            return next(r for r in http.get("/api/runs").json() if r["id"] == run_id)

        def quiet_past_silent_after() -> bool:
            seen = brief()
            age = seen["last_event_age"]
            assert age is None or age > 2 * step or not seen["silent"], f"silent after {age:.1f} s of a {step} s step"
            return age is not None and age > 4 * 0.5
        wait_for(quiet_past_silent_after, what="the loop quiet for four times silent_after")
        wait_for(lambda: brief()["silent"], what="silent past three of its steps")
        assert brief()["last_event_age"] > 3 * step - 0.1


def test_a_costly_summary_is_brought_up_to_date_within_its_share_of_a_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """An update copies the run's sorted fetch times: on a run of tens of millions of batches it costs a
    tenth of a second or more, and is then made less often than once a second. The clocks are the test's."""
    clock = SimpleNamespace(wall=100.0, cpu=0.0)
    summarise = store.summary

    def costly(*args: Any) -> Any:  # what an update costs on a very long run
        clock.cpu += 0.5
        return summarise(*args)

    monkeypatch.setattr(store, "summary", costly)
    monkeypatch.setattr(store, "time", SimpleNamespace(monotonic=lambda: clock.wall, thread_time=lambda: clock.cpu))
    log = EventLog("r", memory_events=100)
    log.append([dict(e) for e in START])
    first = log.summary()
    log.append([{"kind": "epoch_end", "t": 1, "epoch": 0}])
    clock.wall += 0.5 / SUMMARY_SHARE - 1  # past a second, not yet past 0.5 s of CPU over its share
    assert log.summary() is first
    clock.wall += 2
    assert log.summary() is not first and log.summary()[0]["epochs"] == 1


# --- replies are bounded in bytes, with a cursor -------------------------------------------------

def test_pages_and_viewer_frames_are_cut_by_bytes_and_continue_by_cursor(hard: LiveServer) -> None:
    blob = "b" * 200_000
    with ingest(hard) as (ws, run_id):
        ws.send(orjson.dumps(START))
        for _ in range(4):
            ws.send(orjson.dumps([{"kind": "blob", "t": 1, "data": blob} for _ in range(10)]))
        wait_events(hard, run_id, 42)
    got, after, pages = [], -1, 0
    with hard.client() as http:
        while True:
            page = http.get(f"/api/runs/{run_id}/events", params={"after": after, "limit": 10_000})
            assert len(page.content) <= PAGE_BYTES + MAX_EVENT_BYTES
            body = page.json()
            got += body["events"]
            after, pages = body["next_after"], pages + 1
            if not body["more"]:
                break
    assert [e["seq"] for e in got] == list(range(42)) and pages > 1
    with hard.connect(f"/ws/runs/{run_id}") as viewer:
        seqs: list[int] = []
        while len(seqs) < 42:
            message = viewer.recv(timeout=10)
            assert len(message) <= VIEWER_FRAME_BYTES + MAX_EVENT_BYTES
            decoded = orjson.loads(message)
            if isinstance(decoded, list):
                seqs += [e["seq"] for e in decoded]
        assert seqs == list(range(42))


# --- numbers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("payload", [
    [{"kind": "step", "t": 1.7e308, "batch": 0}],
    [{"kind": "step", "t": -1.7e308, "batch": 0}],
    [{"kind": "step", "t": 0, "batch": 0, "seq": 2**64 - 1}],
    {"type": "dropped", "count": 2**64 - 1},
    {"rows": [["yield", 1e308, 0, 0.0, False]], "seq": 0, "t0": -1e308},
])
def test_out_of_range_numbers_close_with_1007_and_the_run_keeps_answering(hard: LiveServer, payload: Any) -> None:
    with ingest(hard) as (ws, run_id), hard.connect(f"/ws/runs/{run_id}") as viewer:
        viewer.recv(timeout=5)
        ws.send(orjson.dumps(START))
        ws.send(orjson.dumps(payload))
        assert closed_with(ws)[0] == 1007
        assert hard.run(run_id)["events"] == 2
        viewer.recv(timeout=5)  # still served
    with hard.client() as http:
        assert http.get(f"/api/runs/{run_id}").status_code == 200
        assert http.get("/api/runs").status_code == 200


def test_huge_cursors_are_refused_not_500(hard: LiveServer) -> None:
    with ingest(hard) as (ws, run_id):
        with hard.client() as http:
            for after in ("99999999999999999999", str(2**53 + 1), "-2"):
                answer = http.get(f"/api/runs/{run_id}/events", params={"after": after})
                assert answer.status_code == 422 and "after" in answer.text
        with hard.connect(f"/ws/runs/{run_id}?after=99999999999999999999999999") as viewer:
            assert closed_with(viewer)[0] == 4400


# --- requests: typed, sized, bounded ---------------------------------------------------------------

@pytest.mark.parametrize(("body", "field"), [
    ({"scenario": "uniform", "grid": {"worker_factor": ["abc"]}}, "grid.worker_factor"),
    ({"scenario": "uniform", "grid": {"num_workers": ["4"]}}, "grid.num_workers"),
    ({"scenario": "uniform", "grid": {"num_workers": [True]}}, "grid.num_workers"),
    ({"scenario": "uniform", "grid": {"num_workers": [1]}, "costs": {"collate_ms": -1}}, "costs.collate_ms"),
    ({"scenario": "uniform", "grid": {"num_workers": [1]}, "costs": {"worker_factor": {"0": -5}}},
     "costs.worker_factor"),
    ({"scenario": "uniform", "params": {"num_workers": "4"}, "grid": {"batch_size": [1]}}, "params.num_workers"),
])
def test_sweep_values_are_strictly_typed_and_named(hard: LiveServer, body: dict[str, Any], field: str) -> None:
    with hard.client() as http:
        answer = http.post("/api/sweeps", json=body)
    assert answer.status_code == 422, answer.text
    assert any(p["field"].startswith(field) for p in answer.json()["errors"]), answer.text


def test_run_parameters_are_strictly_typed(hard: LiveServer) -> None:
    with hard.client() as http:
        for value in ("4", True):
            answer = http.post("/api/runs", json={"scenario": "uniform", "params": {"num_workers": value}})
            assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "params.num_workers"


def test_oversized_bodies_and_sweeps_are_refused_early(hard: LiveServer) -> None:
    huge = b'{"scenario":"uniform","grid":{"seed":[' + b",".join([b"1"] * 3_000_000) + b"]}}"
    with hard.client() as http:
        answer = http.post("/api/sweeps", content=huge, headers={"content-type": "application/json"})
        assert answer.status_code == 413 and "limit" in answer.json()["detail"]
        chunked = http.post("/api/sweeps", content=iter([huge[:200_000], huge[200_000:400_000]]),
                            headers={"content-type": "application/json"})
        assert chunked.status_code == 413
        big = http.post("/api/sweeps", json={"scenario": "uniform",
                                             "params": {"dataset_size": 100_000, "batch_size": 1},
                                             "grid": {"num_workers": [1, 2, 3, 4, 5]}})
        assert big.status_code == 413 and "events" in big.json()["detail"]


def test_chrome_exports_stream_and_several_can_run(hard: LiveServer) -> None:
    with ingest(hard) as (ws, run_id):
        for payload in frames(batches(2000), 1000):
            ws.send(payload)
        ws.send(orjson.dumps([{"kind": "run_end", "t": 3, "reason": "done"}]))
    wait_for(lambda: hard.run(run_id)["status"] == "done")
    answers: list[httpx.Response] = []

    def export() -> None:
        with hard.client() as http:
            answers.append(http.get(f"/api/runs/{run_id}/trace", params={"format": "chrome"}))

    threads = [threading.Thread(target=export) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [a for a in answers if a.status_code == 200]
    assert done and all(a.status_code in (200, 429) for a in answers)
    assert len(orjson.loads(done[0].content)["traceEvents"]) > 8000


# --- connections -----------------------------------------------------------------------------------

def test_connection_caps_close_with_1013_and_a_reason(hard: LiveServer) -> None:
    with ExitStack() as idle:
        for _ in range(6):  # max_producers
            idle.enter_context(ingest(hard))
        with hard.connect("/ws/ingest") as refused:
            code, reason = closed_with(refused)
            assert code == 1013 and "producers" in reason
    with ingest(hard) as (ws, run_id):  # room again once they left
        with ExitStack() as viewers:
            for _ in range(2):
                viewers.enter_context(hard.connect(f"/ws/runs/{run_id}"))
            with hard.connect(f"/ws/runs/{run_id}") as third:
                code, reason = closed_with(third)
                assert code == 1013 and "viewers" in reason


def test_a_silent_producer_shows_as_silent_with_its_age(hard: LiveServer) -> None:
    with ingest(hard) as (ws, run_id):
        ws.send(orjson.dumps(START))
        run = wait_for(lambda: (r := hard.run(run_id))["silent"] and r, what="silent")
        assert run["status"] == "running" and run["last_event_age"] >= 0.5
        ws.send(orjson.dumps([{"kind": "epoch_end", "t": 1, "epoch": 0}]))
        assert not wait_for(lambda: not (r := hard.run(run_id))["silent"] and r)["silent"]


def test_a_loader_between_epochs_is_not_called_silent(hard: LiveServer) -> None:
    """Between epochs a loader sends nothing (the script evaluates, checkpoints): that is no hang."""
    with ingest(hard) as (ws, run_id):
        ws.send(orjson.dumps(START + [{"kind": "epoch_end", "t": 1, "epoch": 0}]))
        quiet = wait_for(lambda: (r := hard.run(run_id))["last_event_age"] and r["last_event_age"] > 1.0 and r,
                         what="a second of quiet after the epoch")
        assert quiet["status"] == "running" and not quiet["silent"]
        ws.send(orjson.dumps([{"kind": "epoch_start", "t": 2, "epoch": 1}]))  # the next epoch, then a hang
        run = wait_for(lambda: (r := hard.run(run_id))["silent"] and r, what="silent inside the epoch")
        assert run["last_event_age"] >= 0.5


# --- traces are never destroyed --------------------------------------------------------------------

def test_reusing_an_evicted_id_never_truncates_its_trace(start_server: Any) -> None:
    server = start_server(max_runs=2)
    produce(server, "keeper", frames(batches(50), 100))
    kept = server.data_dir / "keeper.trace.jsonl"
    server.wait_status("keeper")
    size = kept.stat().st_size
    for n in range(3):  # push it out of the listing
        produce(server, f"other{n}", frames(batches(1), 10))
    with server.client() as http:
        assert "keeper" not in {r["id"] for r in http.get("/api/runs").json()}
    produce(server, "keeper", frames(batches(1), 10))
    assert kept.stat().st_size == size
    assert (server.data_dir / "keeper.2.trace.jsonl").exists()


def test_a_disconnected_external_run_is_kept_while_it_may_come_back(start_server: Any) -> None:
    server = start_server(max_runs=2)
    produce(server, "away", frames(batches(3), 100), end=False)  # watch() lost its connection
    produce(server, "done1", frames(batches(1), 10))
    produce(server, "done2", frames(batches(1), 10))
    with server.client() as http:
        listed = {r["id"] for r in http.get("/api/runs").json()}
    assert "away" in listed and "done1" not in listed
    produce(server, "away", iter([orjson.dumps([{"kind": "epoch_end", "t": 2, "epoch": 0}])]))
    assert server.run("away")["events"] == 2 + 15 + 1 + 1


# --- disk and temporary files ----------------------------------------------------------------------

def test_a_temporary_data_directory_keeps_few_forgotten_traces_and_goes_at_sigterm(tmp_path: Path) -> None:
    server = _temporary_dashboard(tmp_path, max_runs=2, keep_forgotten=1)
    try:
        directory = Path(wait_for(lambda: _data_dir(server.output())))
        for n in range(6):
            produce(server, f"t{n}", frames(batches(2), 10))
        assert len(list(directory.glob("*.trace.jsonl"))) == 2 + 1
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(15)
    assert not directory.exists()


def _temporary_dashboard(directory: Path, **options: Any) -> LiveServer:
    """serve() with its default data directory (tests/live.py's launch always names one)."""
    import json
    import subprocess
    import sys

    from tests.live import URL_LINE

    token, log_path = "t" * 32, directory / "server.log"
    code = "import json, sys; from loaderscope.server.web.dashboard import serve; serve(**json.loads(sys.argv[1]))"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-c", code, json.dumps({"port": 0, **options})], stdout=log,
                                   stderr=subprocess.STDOUT, env={**os.environ, "LOADERSCOPE_TOKEN": token,
                                                                  "XDG_RUNTIME_DIR": str(directory)})
    server = LiveServer("", token, process, directory, log_path)
    server.url = wait_for(lambda: (m := URL_LINE.search(server.output())) and m.group(1), what="the URL")
    return server


def _data_dir(output: str) -> str | None:
    marker = "traces and run logs go to "
    return output.split(marker, 1)[1].split(";", 1)[0] if marker in output else None


def test_stack_dirs_of_an_ended_run_process_are_removed() -> None:
    from loaderscope.server.runs.manager import remove_stack_dirs

    pid = 2**22 + 12345  # no such process
    directory = Path(tempfile.gettempdir()) / f"loaderscope-stacks-{pid}-x"
    directory.mkdir()
    (directory / "worker-0.txt").write_text("stack")
    remove_stack_dirs(pid)
    assert not directory.exists()


# --- logs ------------------------------------------------------------------------------------------

def test_the_token_is_redacted_in_any_spelling() -> None:
    token = "s3cret-token-value-123"
    for line in (f"GET /api/runs?%74oken={token} HTTP/1.1", f"GET /x?a=1&TOKEN={token}",
                 f"GET /x?t={token.replace('-', '%2D')}", f"raw {token}"):
        assert "[redacted]" in redact(line, token) and "value" not in redact(line, token)


def test_refused_requests_and_handshakes_log_no_token_and_no_asgi_error(hard: LiveServer) -> None:
    encoded = "".join(f"%{ord(c):02X}" for c in hard.token)
    rejected = hard.output().count("connection rejected")  # the module's dashboard: other tests were refused too
    assert httpx.get(f"{hard.url}/api/runs?%74oken={hard.token}").status_code == 200
    assert httpx.get(f"{hard.url}/api/runs?x={encoded}", headers={"host": "evil.example"}).status_code == 403
    with pytest.raises(Exception):  # noqa: B017 (refused before the handshake: any client error)
        with hard.connect(f"/ws/ingest?token=wrong-{encoded}", auth=False):
            pass
    # the refusal's last line: anything the handshake's handling logs comes before it
    wait_for(lambda: hard.output().count("connection rejected") > rejected, what="the refused handshake's log")
    log = hard.output()
    assert log.count(hard.token) == 1 and encoded not in log  # printed once, in the URL
    assert "without completing handshake" not in log
