"""Nothing dropped without a word (frames a dashboard never read are sent again, or counted on both
sides), and who a producer is when eviction shares the run table out by source."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

import loaderscope
from loaderscope.server.web.ingest import loopback_uid
from tests.conftest import wait_for
from tests.test_watch import Squares


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
            wait_for(lambda: sink.sent > sent, what="frames sent to the stopped dashboard")
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
