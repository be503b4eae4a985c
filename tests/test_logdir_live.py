"""``serve --logdir``: runs that are being written are live, and a run's identity is its file.

Real traces (``tests.test_server_logdir.real_run``: a real DataLoader's events through the
probe's sink) written the way producers write a logdir: line by line, flushed, while the dashboard
follows them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from loaderscope.trace import TraceWriter
from tests.conftest import wait_for
from tests.test_server_logdir import real_run, recorded, runs  # noqa: F401 (recorded is a fixture)

WRITERS = 6
FILES_PER_WRITER = 4
LONG_BATCHES = 300


@pytest.fixture(scope="module")
def long_run() -> list[dict[str, Any]]:
    """A real run long enough that a reader catches its writer in the middle of appending."""
    return real_run(4 * LONG_BATCHES, num_workers=0)


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
