"""Real runs through a real dashboard: run processes, real DataLoaders, websockets, controls, stops.

Each test starts at most a few small runs (2 workers) so the module stays light on a shared machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from typing import Any

import orjson
import pytest

from loaderscope.server.processes.process import group_pids
from tests.conftest import LiveServer, wait_for
from tests.processes import alive

FAST = {"num_workers": 2, "batch_size": 2, "dataset_size": 24, "sample_ms": 5.0}


def read_until_end(ws: Any, timeout: float = 60) -> tuple[list[dict], list[dict]]:
    """Frames and meta messages until the server says the run ended."""
    events: list[dict] = []
    metas: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = orjson.loads(ws.recv(timeout=deadline - time.monotonic()))
        if isinstance(message, list):
            events.extend(message)
        else:
            metas.append(message)
            if message["type"] == "end":
                return events, metas
    raise AssertionError("the run did not end in time")


def read_events(ws: Any, count: int, timeout: float = 60) -> list[dict]:
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(events) < count:
        message = orjson.loads(ws.recv(timeout=deadline - time.monotonic()))
        if isinstance(message, list):
            events.extend(message)
    return events


def worker_pids(server: LiveServer, run_id: str) -> list[int]:
    with server.client() as http:
        page = http.get(f"/api/runs/{run_id}/events", params={"limit": 10000}).json()
    return [e["pid"] for e in page["events"] if e["kind"] == "worker_start"]


def test_out_of_order_run_arrives_complete_and_in_seq_order(server: LiveServer) -> None:
    # 300 ms against 600 ms per task: later tasks finish first even when a loaded machine (two CPU
    # burners beside the suite) starts or runs the second worker a few hundred milliseconds late; at 80
    # against 160 ms, one run beside the burners saw every result arrive in order.
    run = server.start_run("out_of_order", **{**FAST, "sample_ms": 150.0})
    with server.connect(f"/ws/runs/{run['id']}?after=-1") as ws:
        hello = orjson.loads(ws.recv(timeout=10))
        events, metas = read_until_end(ws)
    assert hello["type"] == "hello" and hello["run"] == run["id"]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[0]["kind"] == "run_start" and events[-1]["kind"] == "run_end"
    assert events[-1]["reason"] == "done"
    assert {e["run"] for e in events} == {run["id"]}
    assert metas[-1] == {"type": "end", "status": "done", "last_seq": len(events) - 1}
    yielded = [e["idx"] for e in events if e["kind"] == "yield"]
    assert yielded == list(range(12))  # 24 samples / batch 2, released in order
    assert any(e["kind"] == "parked" for e in events), "out_of_order should park results in the reorder buffer"
    detail = server.run(run["id"])
    assert detail["status"] == "done" and detail["statistics"]["batches"] == 12
    assert detail["config"]["num_workers"] == 2 and detail["diagnosis"]
    with server.client() as http:  # the REST view and the trace file hold exactly the same events
        page = http.get(f"/api/runs/{run['id']}/events", params={"after": -1, "limit": 10000}).json()
        trace = http.get(f"/api/runs/{run['id']}/trace", params={"format": "jsonl"})
    assert page["events"] == events and page["gap"] is None
    lines = trace.content.splitlines()
    assert json.loads(lines[0])["format"] == "loaderscope-trace"
    assert [orjson.loads(line) for line in lines[1:]] == events
    with server.client() as http:
        chrome = http.get(f"/api/runs/{run['id']}/trace", params={"format": "chrome"})
    assert chrome.status_code == 200 and any(e["ph"] == "X" for e in chrome.json()["traceEvents"])


def test_reconnecting_with_after_resumes_without_gap_or_duplicate(server: LiveServer) -> None:
    run = server.start_run("out_of_order", **{**FAST, "dataset_size": 48, "sample_ms": 10.0})
    seen: list[dict] = []
    with server.connect(f"/ws/runs/{run['id']}") as ws:
        seen += read_events(ws, 15)  # cut the socket mid-run
    while not seen or seen[-1]["kind"] != "run_end":
        with server.connect(f"/ws/runs/{run['id']}?after={seen[-1]['seq']}") as ws:
            hello = orjson.loads(ws.recv(timeout=10))
            assert hello["after"] == seen[-1]["seq"]
            seen += read_events(ws, 1)
            if seen[-1]["kind"] != "run_end":
                more, _ = read_until_end(ws)
                seen += more
    assert [e["seq"] for e in seen] == list(range(len(seen)))


def test_bad_params_get_422_naming_the_field_and_range(server: LiveServer) -> None:
    with server.client() as http:
        answer = http.post("/api/runs", json={"scenario": "out_of_order", "params": {"num_workers": 99}})
        assert answer.status_code == 422
        assert "num_workers=99" in answer.json()["detail"] and "0 to 64" in answer.json()["detail"]
        assert [e["field"] for e in answer.json()["errors"]] == ["params.num_workers"]
        answer = http.post("/api/runs", json={"scenario": "out_of_order", "params": {"sample_ms": "fast"}})
        assert answer.status_code == 422 and "sample_ms='fast'" in answer.json()["detail"]
        answer = http.post("/api/runs", json={"scenario": "nope"})
        assert answer.status_code == 422 and "out_of_order" in answer.json()["detail"]
        answer = http.post("/api/runs", json={"scenario": "uniform", "mode": "warp"})
        assert answer.status_code == 422 and "mode" in answer.json()["detail"]
        answer = http.post("/api/runs", content=b"{not json", headers={"content-type": "application/json"})
        assert answer.status_code == 422
        answer = http.get("/api/runs/x/events", params={"limit": 10**9})
        assert answer.status_code == 422 and "limit" in answer.json()["detail"]
        answer = http.post("/api/runs/x/control", json={"action": "explode"})
        assert answer.status_code == 422 and "action" in answer.json()["detail"]
        assert http.get("/api/runs/nope").status_code == 404


def test_pause_step_resume_drive_the_real_consumer(server: LiveServer) -> None:
    # 100 batches: on a loaded box a 20-batch run had ended before the pause reached it (409)
    run = server.start_run("uniform", **{**FAST, "dataset_size": 200})
    with server.client() as http:
        http.post(f"/api/runs/{run['id']}/control", json={"action": "pause"}).raise_for_status()
        with server.connect(f"/ws/runs/{run['id']}") as ws:
            events = read_events(ws, 1)
            while not any(e["kind"] == "run_start" for e in events):
                events += read_events(ws, 1)
            def kinds(kind: str) -> list[dict[str, Any]]:
                page = http.get(f"/api/runs/{run['id']}/events", params={"limit": 10000}).json()
                return [e for e in page["events"] if e["kind"] == kind]

            # The run process may be attached already (a spare interpreter), so the pause can land a batch
            # or so after the start. Paused, the workers still fill the prefetch window (2 × 2 tasks past
            # the yielded batches); once every one is fetched, a running consumer would have taken a batch.
            def window_full() -> int | None:
                held = len(kinds("yield"))
                return held + 1 if len(kinds("fetch_end")) == held + 4 else None

            held = wait_for(window_full, what="the prefetch window fetched") - 1
            assert len(kinds("yield")) == held, "paused: nothing more may be yielded"
            http.post(f"/api/runs/{run['id']}/control", json={"action": "step"}).raise_for_status()
            wait_for(lambda: len(kinds("yield")) == held + 1, what="one stepped batch")
            wait_for(lambda: len(kinds("fetch_end")) == held + 5, what="the freed slot refilled and fetched")
            assert len(kinds("yield")) == held + 1 and server.run(run["id"])["status"] == "paused"
            answer = http.post(f"/api/runs/{run['id']}/control", json={"action": "resume", "delay": 0})
            assert answer.json()["status"] == "running"
    assert server.wait_status(run["id"])["statistics"]["batches"] == 100


def test_stop_of_a_hung_run_ends_every_worker(server: LiveServer) -> None:
    # 5 s per sample: the consumer sits inside next() and cannot see the stop; the group gets SIGTERM.
    run = server.start_run("uniform", num_workers=2, batch_size=1, dataset_size=8, sample_ms=5000.0)
    pids = wait_for(lambda: len(worker_pids(server, run["id"])) == 2 and worker_pids(server, run["id"]),
                    what="two workers")
    leader = server.run(run["id"])["pid"]
    assert set(pids) <= set(group_pids(leader))
    with server.client() as http:
        http.post(f"/api/runs/{run['id']}/control", json={"action": "stop"}).raise_for_status()
    ended = server.wait_status(run["id"], timeout=20)
    assert ended["status"] == "stopped"
    wait_for(lambda: not group_pids(leader), timeout=5, what="the run's process group to be empty")
    assert not any(alive(pid) for pid in pids)


def test_a_killed_run_process_leaves_the_server_serving_and_no_orphans(server: LiveServer) -> None:
    run = server.start_run("uniform", num_workers=2, batch_size=1, dataset_size=8, sample_ms=5000.0)
    pids = wait_for(lambda: len(worker_pids(server, run["id"])) == 2 and worker_pids(server, run["id"]),
                    what="two workers")
    leader = server.run(run["id"])["pid"]
    os.kill(leader, signal.SIGKILL)  # the leader only: its workers would be orphans
    ended = server.wait_status(run["id"], timeout=20)
    assert ended["status"] == "error" and "SIGKILL" in ended["error"]
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10, what="orphaned workers to be gone")
    assert server.alive() and server.start_run("uniform", **FAST)["status"] == "starting"


def test_a_run_that_fails_at_runtime_reports_why_and_the_server_goes_on(server: LiveServer) -> None:
    # Valid parameters, and a dataset that raises at runtime: the run process reports it and exits.
    run = server.start_run("raising_dataset", num_workers=0, sample_ms=0.0)
    ended = server.wait_status(run["id"])
    assert ended["status"] == "error"
    # the loader's run_end (the status) comes before the run process's own report of the exception
    # (its `failed` message, the brief's error): on a busy box a poll can fall between the two
    ended = wait_for(lambda: (r := server.run(run["id"]))["error"] and r, what="the run process's error")
    assert "sample 17" in ended["error"]
    with server.client() as http:
        last = http.get(f"/api/runs/{run['id']}/events", params={"limit": 10000}).json()["events"][-1]
    assert last["kind"] == "run_end" and last["reason"] == "error"
    assert server.alive()


def test_sim_mode_streams_the_simulator(server: LiveServer) -> None:
    run = server.start_run("out_of_order", mode="sim", **FAST)
    with server.connect(f"/ws/runs/{run['id']}") as ws:
        events, metas = read_until_end(ws)
    assert events[0]["kind"] == "run_start" and events[0]["mode"] == "sim"
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert metas[-1]["status"] == "done"


def test_sim_runs_take_a_cost_model_and_bad_costs_are_named(server: LiveServer) -> None:
    with server.client() as http:
        bad = http.post("/api/runs", json={"scenario": "uniform", "mode": "sim", "params": {},
                                           "costs": {"collate_ms": "slow"}})
        assert bad.status_code == 422 and "costs.collate_ms" in bad.text
        real = http.post("/api/runs", json={"scenario": "uniform", "mode": "real", "params": {},
                                            "costs": {"collate_ms": 1}})
        assert real.status_code == 422 and "only applies to simulated runs" in real.text
        answer = http.post("/api/runs", json={"scenario": "uniform", "mode": "sim", "params": {"num_workers": 2},
                                              "costs": {"worker_factor": {"1": 5}}})
    assert answer.status_code == 201, answer.text
    done = server.wait_status(answer.json()["id"])
    slow = [s["worker"] for s in done["statistics"]["stragglers"]]
    assert slow == [1], done["statistics"]["stragglers"]


@pytest.mark.parametrize("path", ["/api/runs", "/api/scenarios"])
def test_listings(server: LiveServer, path: str) -> None:
    with server.client() as http:
        answer = http.get(path)
    assert answer.status_code == 200 and isinstance(answer.json(), list)
    if path == "/api/scenarios":
        described = {s["name"]: s for s in answer.json()}
        assert described["out_of_order"]["params"]["num_workers"]["maximum"] == 64


def test_demo_starts_its_run_and_server_exit_ends_every_run_process(start_server: Any) -> None:
    server = start_server(use_launcher=False, demo="uniform", demo_delay=0.25,
                          demo_params={"num_workers": 2, "batch_size": 1, "dataset_size": 8, "sample_ms": 5000.0})
    run_id = re.search(r"loaderscope dashboard: http://\S+&run=(\w+)", server.output()).group(1)  # type: ignore[union-attr]
    pids = wait_for(lambda: len(worker_pids(server, run_id)) == 2 and worker_pids(server, run_id), what="workers")
    leader = server.run(run_id)["pid"]
    assert server.run(run_id)["delay"] == 0.25
    server.stop()
    assert server.process.returncode == 0, server.output()
    wait_for(lambda: not group_pids(leader) and not any(alive(pid) for pid in pids), timeout=5,
             what="no run process or worker to outlive the dashboard")


def test_a_killed_dashboard_leaves_no_run_process_behind(start_server: Any) -> None:
    """The dashboard dies hard (no shutdown): a run stuck in next() ends itself and its workers."""
    server = start_server(use_launcher=False, env={"LOADERSCOPE_ORPHAN_GRACE": "1"})
    run = server.start_run("uniform", num_workers=2, batch_size=1, dataset_size=8, sample_ms=5000.0)
    pids = wait_for(lambda: len(worker_pids(server, run["id"])) == 2 and worker_pids(server, run["id"]),
                    what="two workers")
    leader = server.run(run["id"])["pid"]
    server.process.kill()
    server.process.wait()
    wait_for(lambda: not group_pids(leader) and not any(alive(pid) for pid in pids), timeout=15,
             what="the orphaned run to end itself")


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def launcher_pid(server: LiveServer) -> int:
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if parent == server.process.pid and b"loaderscope.server.processes.launcher" in command:
            return int(entry)
    raise AssertionError("no launcher process under the dashboard")


def test_runs_still_start_and_end_when_the_launcher_dies(start_server: Any) -> None:
    server = start_server(stop_grace=0.5, kill_grace=0.5)
    first = server.start_run("uniform", **FAST)  # the launcher starts with the first run
    assert server.wait_status(first["id"])["status"] == "done"
    hung = server.start_run("uniform", num_workers=1, batch_size=1, dataset_size=4, sample_ms=5000.0)
    wait_for(lambda: worker_pids(server, hung["id"]), what="a worker")
    launcher = launcher_pid(server)
    assert parent_of(server.run(hung["id"])["pid"]) == launcher, "the second run should be forked by the launcher"
    os.kill(launcher, signal.SIGKILL)
    with server.client() as http:
        http.post(f"/api/runs/{hung['id']}/control", json={"action": "stop"}).raise_for_status()
    assert server.wait_status(hung["id"], timeout=15)["status"] == "stopped"  # seen without its parent
    after = server.start_run("uniform", **FAST)  # a fresh interpreter instead of a fork
    assert server.wait_status(after["id"])["status"] == "done"


def test_sweep_api_answers_what_if_and_bounds_the_grid(server: LiveServer) -> None:
    with server.client() as http:
        answer = http.post("/api/sweeps", json={"scenario": "uniform", "params": {"dataset_size": 96},
                                                "grid": {"num_workers": [1, 2, 4]}})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert [row["num_workers"] for row in body["rows"]] == [1, 2, 4]
        assert body["rows"][2]["batches_per_s"] > body["rows"][0]["batches_per_s"]
        assert "num_workers" in body["recommendation"]
        too_big = http.post("/api/sweeps", json={"scenario": "uniform", "grid": {"num_workers": [2, 99]}})
        assert too_big.status_code == 422 and "num_workers" in too_big.text
        many = http.post("/api/sweeps", json={"scenario": "uniform", "grid": {"num_workers": [1, 2, 3, 4, 5, 6, 7],
                                                                            "prefetch_factor": [1, 2, 3, 4, 5, 6]}})
        assert many.status_code == 422 and "combinations" in many.text


def test_a_simulated_stall_is_diagnosed_with_its_stack(server: LiveServer) -> None:
    with server.client() as http:
        answer = http.post("/api/runs", json={"scenario": "uniform", "mode": "sim", "params": {"num_workers": 2},
                                              "costs": {"stalls": [{"task": 5, "seconds": 30}]}})
    assert answer.status_code == 201, answer.text
    done = server.wait_status(answer.json()["id"])
    # the simulated stall ends after its 30 s, so the run says which worker was stuck, and that it recovered
    assert any(line.startswith("recovered: worker") and "simulated" in line for line in done["diagnosis"]), \
        done["diagnosis"]


def test_the_inspector_asks_a_live_run_for_batch_values(server: LiveServer) -> None:
    run = server.start_run("uniform", num_workers=2, dataset_size=400, sample_ms=5.0)
    with server.client() as http:
        answer = http.post(f"/api/runs/{run['id']}/control", json={"action": "inspect"})
        assert answer.status_code == 200, answer.text

        def asked() -> list[dict[str, Any]]:
            events = http.get(f"/api/runs/{run['id']}/events", params={"limit": 10000}).json()["events"]
            return [e for e in events if e["kind"] == "batch_info" and e.get("values")]

        wait_for(lambda: asked(), what="a batch described with its values")
        assert asked()[0]["structure"]["values"]
        http.post(f"/api/runs/{run['id']}/control", json={"action": "stop"})


# asyncio's default executor: the threads asyncio.to_thread shares (ThreadPoolExecutor's default size)
DEFAULT_EXECUTOR_THREADS = min(32, (os.cpu_count() or 1) + 4)


@pytest.mark.slow
@pytest.mark.skipif(DEFAULT_EXECUTOR_THREADS > 8, reason="as many live runs as this machine's default executor "
                    "has threads would be too many processes for a test")
def test_live_runs_past_the_default_executors_threads_leave_disk_reads_answering(start_server: Any) -> None:
    """Each live run's process is waited on in a thread of its own. In asyncio's default executor (cores
    + 4 threads) as many live runs took every thread, and every read that goes through it waited on them:
    a finished run's trace was never sent."""
    live = start_server(max_active_runs=DEFAULT_EXECUTOR_THREADS + 1)
    # 5 s a sample in the main process: each run stays alive past the test, inside next(), with no worker
    held = [live.start_run("uniform", num_workers=0, batch_size=1, dataset_size=64, sample_ms=5000.0)
            for _ in range(DEFAULT_EXECUTOR_THREADS)]
    for run in held:
        wait_for(lambda: live.run(run["id"])["status"] == "running", 120, "every held run to be running")  # noqa: B023
    done = live.start_run("uniform", **FAST)
    live.wait_status(done["id"])
    with live.client() as http:
        trace = http.get(f"/api/runs/{done['id']}/trace", timeout=30)
    assert trace.status_code == 200 and trace.text.count("\n") > 10
