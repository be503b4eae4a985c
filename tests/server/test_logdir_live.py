"""``serve --logdir``: runs that are being written are live, and a run's identity is its file.

Real traces (``tests.server.test_logdir.real_run``: a real DataLoader's events through the
probe's sink) written the way producers write a logdir: line by line, flushed, while the dashboard
follows them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from torch.utils.data import DataLoader

import loaderscope
from loaderscope.traces.jsonl import HEARTBEAT_EVERY, TraceWriter
from tests.conftest import wait_for
from tests.logdirs import BATCHES, real_run, runs, write
from tests.squares import Squares

WRITERS = 6
FILES_PER_WRITER = 4
LONG_BATCHES = 300


@pytest.fixture(scope="module")
def long_run() -> list[dict[str, Any]]:
    """A real run long enough that a reader catches its writer in the middle of appending."""
    return real_run(4 * LONG_BATCHES, num_workers=0)


def _all(server: Any) -> list[dict[str, Any]]:
    with server.client() as http:
        return list(http.get("/api/runs").json())


def write_slowly(paths: list[Path], events: list[dict[str, Any]], started: threading.Event) -> None:
    """A producer appending one flushed line at a time to each of its files in turn."""
    writers = [TraceWriter(path, "producer-run", mode="real") for path in paths]
    for writer in writers:
        writer.write(events[:1])
        writer.flush()
    started.wait()
    for writer in writers:
        for event in events[1:]:
            writer.write([event])
            writer.flush()
        writer.close()


def test_files_written_line_by_line_while_followed_end_done_with_every_event(
        start_server: Any, tmp_path: Path, long_run: list[dict[str, Any]]) -> None:
    recorded = long_run
    logdir = tmp_path / "logs"
    paths = [[logdir / f"w{w}" / f"r{f}.trace.jsonl" for f in range(FILES_PER_WRITER)] for w in range(WRITERS)]
    for group in paths:
        group[0].parent.mkdir(parents=True)
    server = start_server(logdir=str(logdir), logdir_poll=0.02)
    started = threading.Event()
    threads = [threading.Thread(target=write_slowly, args=(group, recorded, started)) for group in paths]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(runs(server)) == WRITERS * FILES_PER_WRITER, what="every file listed")
    listed = runs(server)
    assert {r["status"] for r in listed.values()} == {"running"}  # being written: live, never frozen
    started.set()
    for thread in threads:
        thread.join()
    every = WRITERS * FILES_PER_WRITER
    wait_for(lambda: sum(r["status"] == "done" for r in runs(server).values()) == every, timeout=60,
             what="every file read to its run_end")
    for path, run in runs(server).items():
        assert run["problem"] is None, path
        assert (run["events"], run["batches"]) == (len(recorded), LONG_BATCHES), path
        detail = server.run(run["id"])
        assert detail["status"] == "done" and detail["statistics"]["batches"] == LONG_BATCHES
    with server.client() as http:
        one = runs(server)["w0/r0.trace.jsonl"]
        page = http.get(f"/api/runs/{one['id']}/events", params={"limit": 10000}).json()
    assert [e["kind"] for e in page["events"]] == [e["kind"] for e in recorded]
    assert orjson.loads((logdir / "w0" / "r0.trace.jsonl").read_bytes().split(b"\n")[-2])["kind"] == "run_end"


def test_a_local_logdir_lists_new_files_when_the_kernel_says_not_when_polled(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    server = start_server(logdir=str(logdir), logdir_poll=3600)  # polling alone would list nothing new for an hour
    write(logdir / "new" / "deep" / "r.trace.jsonl", recorded)
    (logdir / "later.trace.jsonl").write_bytes((logdir / "new" / "deep" / "r.trace.jsonl").read_bytes())
    listed = wait_for(lambda: {"new/deep/r.trace.jsonl", "later.trace.jsonl"} <= set(runs(server)) and runs(server),
                      what="new files listed from inotify's events")
    assert {listed[p]["status"] for p in ("new/deep/r.trace.jsonl", "later.trace.jsonl")} == {"done"}
    assert listed["later.trace.jsonl"]["batches"] == BATCHES


def test_the_first_detail_of_a_logdir_run_is_pending_or_its_real_figures(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    write(logdir / "a.trace.jsonl", recorded)
    server = start_server(logdir=str(logdir))
    run = runs(server)["a.trace.jsonl"]
    first = server.run(run["id"])
    real = first["status"] == "done" and first["config"] and first["statistics"]["batches"] == BATCHES
    assert first["status"] == "pending" or real, first  # never "done" with an empty config and 0 batches
    final = wait_for(lambda: (d := server.run(run["id"]))["status"] == "done" and d, what="the file read")
    assert final["config"]["batch_size"] == 4 and final["statistics"]["batches"] == BATCHES


def test_a_streaming_run_resumes_into_the_same_run_and_file_after_a_dashboard_restart(
        start_server: Any, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    first = start_server(logdir=str(logdir))
    port, token = first.port, first.token
    loader = loaderscope.watch(DataLoader(Squares(60, delay=0.02), batch_size=2, num_workers=2), url=first.page_url)
    iterator = iter(loader)
    sink = loader._probe_transport  # opened at the first iter()
    second = None
    for batches, _ in enumerate(iterator, start=1):
        if batches == 5:
            wait_for(lambda: sink.sent > 0)
            run_id = sink.run
            first.stop()  # the dashboard restarts (an upgrade, a crash) while the training goes on
            second = start_server(logdir=str(logdir), port=port, token=token)
    loader.close()
    assert batches == 30 and second is not None
    run = wait_for(lambda: next((r for r in _all(second) if r["id"] == run_id and r["status"] == "done"), None),
                   what="the same run, ended")
    assert sink.run == run_id and run["origin"] == "external"
    assert [p.name for p in logdir.rglob("*.trace.jsonl")] == [f"{run_id}.trace.jsonl"]  # one run, one file
    assert run["events"] + run["dropped"] == sink.sent and sink.dropped == 0  # anything lost is counted
    assert run["batches"] + run["dropped"] >= 30
    detail = second.run(run_id)  # an old link /?run=ID still works
    assert detail["config"]["num_workers"] == 2 and detail["status"] == "done"
    with second.client() as http:
        page = http.get(f"/api/runs/{run_id}/events", params={"limit": 10000}).json()
    kinds = [e["kind"] for e in page["events"]]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and kinds.count("run_start") == 1
    assert [e["seq"] for e in page["events"]] == list(range(run["events"]))
    second.stop()
    third = start_server(logdir=str(logdir))  # and once more: listed under its id, from the file
    assert third.output().count("1 runs (1 from their index") == 1
    wait_for(lambda: third.run(run_id)["status"] == "done", what="the run read back under its id")


QUIET_BETWEEN_EPOCHS = '''
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
from loaderscope import watch
loader = watch(DataLoader(TensorDataset(torch.arange(64.)), batch_size=4, num_workers=2), logdir=sys.argv[1])
for batch in loader:
    pass
print("evaluating", flush=True)
time.sleep(600)  # an evaluation between epochs, which the test ends by killing the process
'''


def test_a_run_quiet_between_epochs_is_running_and_a_killed_one_truncated(start_server: Any, tmp_path: Path) -> None:
    """A training script evaluating between epochs writes no event for minutes; the probe's heartbeat
    (``trace.HEARTBEAT_EVERY``) keeps its trace's mtime fresh, so the dashboard does not call it
    truncated. Killed, the heartbeat stops, and it is truncated ``silent_after`` later."""
    logs = tmp_path / "logs"
    logs.mkdir()
    silent_after = 15.0  # past the 5 s heartbeat, with room for a loaded machine
    server = start_server(logdir=str(logs), logdir_poll=0.1, silent_after=silent_after)
    # memory samples go on between epochs (they are events): off here, where the heartbeat is what is tested
    script = subprocess.Popen([sys.executable, "-c", QUIET_BETWEEN_EPOCHS, str(logs)], stdout=subprocess.PIPE,
                              text=True,
                              env={**os.environ, "LOADERSCOPE_MEMORY": "0"})
    try:
        assert script.stdout is not None and script.stdout.readline() == "evaluating\n"
        with server.client() as http:
            wait_for(lambda: [r["batches"] for r in http.get("/api/runs").json()] == [16], what="the epoch read")
            trace = next(logs.rglob("*.trace.jsonl"))
            # the epoch's last events (its end, both workers' exits) follow the batches by a flush or two
            wait_for(lambda: trace.read_text().count('"kind":"worker_exit"') == 2, what="the workers' exits written")
            size, quiet_since = trace.stat().st_size, time.monotonic()

            def quiet_past_silent_after() -> bool:
                statuses = [r["status"] for r in http.get("/api/runs").json()]
                quiet = time.monotonic() - quiet_since
                assert statuses == ["running"], f"a live run, quiet for {quiet:.1f} s: {statuses}"
                return time.monotonic() - quiet_since > silent_after + HEARTBEAT_EVERY

            wait_for(quiet_past_silent_after, timeout=120, what="the run quiet past silent_after")
            assert trace.stat().st_size == size  # no event came: the heartbeat alone kept it running
            script.kill()
            wait_for(lambda: [r["status"] for r in http.get("/api/runs").json()] == ["truncated"], timeout=120,
                     what="the killed run truncated")
    finally:
        script.kill()
        script.communicate()  # and closes its stdout: wait() left the pipe to warn when collected, in any test
