"""``serve --logdir DIR``: every trace under DIR listed, growing ones followed live, kept across restarts.

The traces are real: events of a real (in-process) DataLoader recorded once per module through
``InstrumentedDataLoader(sink=...)``, written with ``jsonl.TraceWriter`` the way a producer on
another node appends to a shared filesystem: line by line, flushed, possibly cut off mid-line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loaderscope.traces.jsonl import TraceWriter
from tests.conftest import wait_for
from tests.live import LiveServer, _wait_healthy, launch
from tests.logdirs import BATCHES, as_rank, read_until, runs, write

STANDIN = "import tests.remote_standin"  # registers standin://, a remote store for the server process


def test_lists_every_trace_recursively_with_ranks_grouped_and_bad_files_named(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    for rank in (0, 1):
        write(logdir / "job-7" / f"DataLoader-rank{rank}-pid{100 + rank}-a.trace.jsonl",
              as_rank(recorded, rank, "job-7", 2))
    write(logdir / "solo" / "deep" / "DataLoader-rank0-pid5-b.trace.jsonl", recorded)
    (logdir / "junk").mkdir()
    (logdir / "junk" / "notes.trace.jsonl").write_text("just some notes\n")
    (logdir / "junk" / "readme.txt").write_text("not a trace, not listed\n")
    server = start_server(logdir=str(logdir))
    listed = runs(server)
    assert set(listed) == {"job-7/DataLoader-rank0-pid100-a.trace.jsonl", "job-7/DataLoader-rank1-pid101-a.trace.jsonl",
                           "solo/deep/DataLoader-rank0-pid5-b.trace.jsonl", "junk/notes.trace.jsonl"}
    ranks = sorted((r["rank"], r["world_size"]) for r in listed.values() if r["job"] == "job-7")
    assert ranks == [(0, 2), (1, 2)]
    solo = listed["solo/deep/DataLoader-rank0-pid5-b.trace.jsonl"]
    assert solo["status"] == "done" and solo["batches"] == BATCHES and solo["events"] == len(recorded)
    bad = listed["junk/notes.trace.jsonl"]
    assert bad["status"] == "unreadable" and "not a loaderscope trace" in bad["problem"]
    assert "not a loaderscope trace" in server.output()
    with server.client() as http:  # opening a run reads its file: the events, renumbered as the store's
        page = http.get(f"/api/runs/{solo['id']}/events", params={"limit": 10000}).json()
        assert http.get(f"/api/runs/{bad['id']}").json()["status"] == "unreadable"
        jsonl = http.get(f"/api/runs/{solo['id']}/trace").content
        chrome = http.get(f"/api/runs/{solo['id']}/trace", params={"format": "chrome"})
    assert jsonl == (logdir / "solo" / "deep" / "DataLoader-rank0-pid5-b.trace.jsonl").read_bytes()  # as written
    assert chrome.status_code == 200 and any(e["ph"] == "X" for e in chrome.json()["traceEvents"])
    assert [e["kind"] for e in page["events"]] == [e["kind"] for e in recorded]
    assert [e["seq"] for e in page["events"]] == list(range(len(recorded)))
    assert {e["run"] for e in page["events"]} == {solo["id"]}
    assert server.alive()


def test_unreadable_files_are_named_and_the_server_goes_on(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / "gone.trace.jsonl").symlink_to(tmp_path / "deleted-since.trace.jsonl")
    locked = write(logdir / "locked.trace.jsonl", recorded)
    locked.chmod(0)
    server = start_server(logdir=str(logdir))
    listed = runs(server)
    assert listed["gone.trace.jsonl"]["status"] == "unreadable"
    assert "No such file" in listed["gone.trace.jsonl"]["problem"]
    if os.geteuid() != 0:  # root reads files whatever their mode
        assert listed["locked.trace.jsonl"]["status"] == "unreadable"
        assert "ermission denied" in listed["locked.trace.jsonl"]["problem"]
    assert server.run(listed["gone.trace.jsonl"]["id"])["status"] == "unreadable" and server.alive()


def test_a_growing_file_reaches_a_connected_viewer_then_ends(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    path = logdir / "node3" / "DataLoader-rank0-pid9-c.trace.jsonl"
    head, rest = recorded[:8], recorded[8:]
    server = start_server(logdir=str(logdir), logdir_poll=0.1)
    writer = TraceWriter(path, "producer-run", mode="real")  # a job on another node starts writing
    writer.write(head)
    writer.flush()
    entry = wait_for(lambda: runs(server).get("node3/DataLoader-rank0-pid9-c.trace.jsonl"), what="the new file listed")
    assert entry["status"] == "running"
    with server.connect(f"/ws/runs/{entry['id']}?after=-1") as ws:
        seen, metas = read_until(ws, lambda e, m: len(e) >= len(head))
        assert metas[0]["type"] == "hello" and [e["kind"] for e in seen] == [e["kind"] for e in head]
        for event in rest:  # the producer goes on, one flushed line at a time
            writer.write([event])
            writer.flush()
        more, metas = read_until(ws, lambda e, m: any(x["type"] == "end" for x in m))
    writer.close()
    assert [e["seq"] for e in seen + more] == list(range(len(recorded)))
    assert more[-1]["kind"] == "run_end"
    assert metas[-1] == {"type": "end", "status": "done", "last_seq": len(recorded) - 1}
    assert server.run(entry["id"])["statistics"]["batches"] == BATCHES


def test_a_killed_producer_leaves_a_truncated_run_not_a_parse_error(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    cut = recorded[:20]  # no run_end, and half a line after the last whole one
    old = write(logdir / "killed.trace.jsonl", cut, torn=orjson.dumps(recorded[20])[:17])
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    fresh = write(logdir / "silenced.trace.jsonl", cut)  # written just now, then the writer stops
    server = start_server(logdir=str(logdir), silent_after=1.0, logdir_poll=0.1)
    killed = runs(server)["killed.trace.jsonl"]
    assert killed["status"] == "truncated" and "incomplete" in killed["problem"]
    with server.client() as http:  # /events waits until the file is read: the detail is then the file's
        page = http.get(f"/api/runs/{killed['id']}/events", params={"limit": 10000}).json()
    detail = server.run(killed["id"])
    assert len(page["events"]) == len(cut) and page["status"] == "truncated"
    assert detail["status"] == "truncated" and detail["statistics"] is not None
    wait_for(lambda: runs(server)["silenced.trace.jsonl"]["status"] == "truncated", timeout=15,
             what="a file that stopped growing shown as truncated")
    assert fresh.exists() and server.alive()


def test_restart_keeps_every_run_from_the_sidecars_and_page_runs_land_in_the_logdir(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    write(logdir / "a" / "r0.trace.jsonl", as_rank(recorded, 0, "j", 2))
    write(logdir / "a" / "r1.trace.jsonl", as_rank(recorded, 1, "j", 2))
    old = write(logdir / "b" / "cut.trace.jsonl", recorded[:10])
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    first = start_server(logdir=str(logdir), use_launcher=False)
    assert "3 runs (0 from their index, 3 indexed)" in first.output()
    started = first.start_run("uniform", mode="sim", num_workers=2, dataset_size=16)
    finished = first.wait_status(started["id"])
    assert (logdir / f"{started['id']}.trace.jsonl").is_file()  # a run from the page is written into the logdir
    before = {path: (r["id"], r["status"], r["batches"], r["events"]) for path, r in runs(first).items()}
    first.stop()
    assert sorted(p.name for p in logdir.rglob("*.idx.json")) == sorted(
        ["r0.trace.jsonl.idx.json", "r1.trace.jsonl.idx.json", "cut.trace.jsonl.idx.json",
         f"{started['id']}.trace.jsonl.idx.json"])

    second = start_server(logdir=str(logdir))
    assert "4 runs (4 from their index, 0 indexed)" in second.output()  # no trace was read to list them
    after = runs(second)
    assert {path: before[path] for path in before} == {path: (r["id"], r["status"], r["batches"], r["events"])
                                                       for path, r in after.items() if path in before}
    mine = after[f"{started['id']}.trace.jsonl"]
    assert mine["status"] == "done" and mine["mode"] == "sim" and mine["batches"] == finished["batches"]
    with second.client() as http:
        page = http.get(f"/api/runs/{mine['id']}/events", params={"limit": 10000}).json()
    assert page["events"][-1]["kind"] == "run_end" and len(page["events"]) == mine["events"]


def launch_without_data_dir(directory: Path) -> tuple[LiveServer, Path]:
    """``serve()`` with neither data_dir nor logdir (conftest's launch always gives a data_dir)."""
    directory.mkdir(parents=True, exist_ok=True)
    token = "t" * 24
    log_path = directory / "server.log"
    code = "from loaderscope.server.web.dashboard import serve; serve(port=0, use_launcher=False)"
    env = {**os.environ, "LOADERSCOPE_TOKEN": token, "PYTHONUNBUFFERED": "1", "XDG_RUNTIME_DIR": str(directory),
           "TMPDIR": str(directory)}
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
    server = LiveServer("", token, process, directory, log_path)
    try:
        found = wait_for(lambda: re.search(r"dashboard: (http://\S+)/\?token=.*\n.*traces and run logs go to (\S+);",
                                           server.output()), timeout=30, what="the URL and the data directory")
    except AssertionError:
        server.stop()
        raise
    server.url = found.group(1)
    _wait_healthy(server, time.monotonic() + 30)
    return server, Path(found.group(2))


@pytest.fixture
def bare_server(tmp_path: Path) -> Iterator[Callable[[], tuple[LiveServer, Path]]]:
    started: list[LiveServer] = []

    def start() -> tuple[LiveServer, Path]:
        server, data = launch_without_data_dir(tmp_path / "bare")
        started.append(server)
        return server, data

    yield start
    for server in started:
        server.stop()


def test_the_temporary_data_dir_is_removed_at_sigterm(bare_server: Any) -> None:
    server, data = bare_server()
    run = server.start_run("uniform", mode="sim", num_workers=2, dataset_size=16)
    server.wait_status(run["id"])
    assert (data / f"{run['id']}.trace.jsonl").is_file()
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(20)
    assert not data.exists(), server.output()


def test_the_logdir_is_never_deleted(tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    logdir = tmp_path / "logs"
    kept = write(logdir / "kept.trace.jsonl", recorded)
    server = launch(tmp_path / "server", logdir=str(logdir), use_launcher=False)
    try:
        run = server.start_run("uniform", mode="sim", num_workers=2, dataset_size=16)
        server.wait_status(run["id"])
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(20)
    assert kept.is_file() and (logdir / f"{run['id']}.trace.jsonl").is_file()
    assert json.loads(kept.read_bytes().splitlines()[0])["format"] == "loaderscope-trace"


def test_an_fsspec_logdir_lists_follows_and_keeps_page_runs(
        start_server: Any, tmp_path: Path, recorded: list[dict[str, Any]]) -> None:
    """A remote store goes through fsspec as ``s3://`` would (listing, ranged reads, sidecars, uploads):
    ``standin://`` is a local directory that only fsspec reads and writes (``tests/remote_standin.py``)."""
    pytest.importorskip("fsspec")
    logdir = tmp_path / "bucket"
    write(logdir / "job" / "r0.trace.jsonl", as_rank(recorded, 0, "job", 2))
    write(logdir / "job" / "r1.trace.jsonl", as_rank(recorded, 1, "job", 2))
    server = start_server(logdir=f"standin://{logdir}", logdir_poll=0.1, use_launcher=False, setup=STANDIN)
    listed = runs(server)
    assert sorted((r["path"], r["rank"], r["status"]) for r in listed.values()) == [
        ("job/r0.trace.jsonl", 0, "done"), ("job/r1.trace.jsonl", 1, "done")]
    writer = TraceWriter(logdir / "job" / "live.trace.jsonl", "producer-run", mode="real")
    writer.write(recorded[:5])
    writer.flush()
    live = wait_for(lambda: runs(server).get("job/live.trace.jsonl"), what="the new file listed")
    with server.connect(f"/ws/runs/{live['id']}?after=-1") as ws:
        read_until(ws, lambda e, m: len(e) >= 5)
        writer.write(recorded[5:])
        writer.close()
        events, metas = read_until(ws, lambda e, m: any(x["type"] == "end" for x in m))
    assert events[-1]["kind"] == "run_end" and metas[-1]["status"] == "done"
    run = server.start_run("uniform", mode="sim", num_workers=2, dataset_size=16)
    server.wait_status(run["id"])  # written to a temporary directory, uploaded into the logdir at its end
    wait_for(lambda: (logdir / "dashboard" / f"{run['id']}.trace.jsonl.idx.json").is_file(), what="the upload")
    server.stop()
    again = start_server(logdir=f"standin://{logdir}", setup=STANDIN)
    assert "4 runs (4 from their index, 0 indexed)" in again.output()
    assert runs(again)[f"dashboard/{run['id']}.trace.jsonl"]["status"] == "done"


def test_a_store_without_mtimes_is_indexed_and_tailed(recorded: list[dict[str, Any]]) -> None:
    """fsspec's memory:// keeps no modification time (like some object stores): sizes tell growth."""
    fsspec = pytest.importorskip("fsspec")
    from loaderscope.server.logdir.index import quick_index
    from loaderscope.server.logdir.storage import storage_for
    from loaderscope.server.logdir.tracefile import TraceFile

    storage = storage_for("memory://loaderscope-test-logdir")
    lines = [orjson.dumps({"format": "loaderscope-trace", "version": 1, "run": "r"})]
    lines += [orjson.dumps(e) for e in recorded]
    path = f"{storage.root}/job/r0.trace.jsonl"
    fs = fsspec.filesystem("memory")
    fs.pipe_file(path, b"\n".join(lines[:6]) + b"\n" + lines[6][:10])  # a torn line: a partial upload
    entries = storage.walk(lambda problem: None)
    assert [(e.path, e.size, e.mtime_ns > 0) for e in entries] == [(path, fs.size(path), True)]
    index = quick_index(storage, path)
    assert index.torn and index.reason is None and index.events == 5 and storage.relative(path) == "job/r0.trace.jsonl"
    tail = TraceFile(storage, path, "log-x")
    assert [e["kind"] for e in tail.poll(1 << 20)] == [e["kind"] for e in recorded[:5]] and tail.torn == 10
    fs.pipe_file(path, b"\n".join(lines) + b"\n")  # the whole object, uploaded again
    assert len(tail.poll(1 << 20)) == len(recorded) - 5 and tail.torn == 0
    assert [orjson.loads(line)["seq"] for line in tail.read(3, 4)] == [3, 4, 5, 6]
    fs.rm(storage.root, recursive=True)
