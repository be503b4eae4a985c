"""Stack dump files: one directory per process, gone at exit, and gone after a kill -9 too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from loaderscope.probe.stacks import STACK_DIR_PREFIX, remove_stale_stack_dirs
from tests.conftest import wait_for

SCRIPT = """
import sys, time
from torch.utils.data import DataLoader
import loaderscope
loader = loaderscope.watch(DataLoader(list(range(64)), batch_size=4, num_workers=2), sink=lambda _: None)
it = iter(loader)
next(it)
print("ready", flush=True)
if sys.argv[1] == "hang":
    time.sleep(600)
"""


def stack_dirs(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"{STACK_DIR_PREFIX}{pid}-*"))


def start(mode: str) -> subprocess.Popen[str]:
    # a session of its own, to kill with its workers: a worker still setting up when its parent dies
    # takes init (pid 1) for its parent, and torch's watchdog then never sees the parent go
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def test_a_process_removes_its_stack_files_at_exit() -> None:
    with start("exit") as process:  # the context closes its stdout pipe
        assert process.wait(60) == 0
    assert stack_dirs(process.pid) == []


def test_the_stack_files_of_a_killed_process_are_removed_by_the_next_one() -> None:
    with start("hang") as process:
        assert len(stack_dirs(process.pid)) == 1 and len(list(stack_dirs(process.pid)[0].iterdir())) == 2
        os.killpg(process.pid, signal.SIGKILL)  # no atexit: the directory stays behind
        process.wait(30)
    assert len(stack_dirs(process.pid)) == 1
    remove_stale_stack_dirs()  # what the next process that starts workers does first
    assert stack_dirs(process.pid) == []


def test_the_dashboard_removes_the_stack_files_of_a_run_process_killed_by_sigkill(start_server: Any) -> None:
    server = start_server()
    run = server.start_run("stuck_worker", num_workers=2)
    start = wait_for(lambda: next((e for e in _events(server, run["id"]) if e["kind"] == "run_start"), None),
                     what="the run to start")
    pid = start["pid"]
    wait_for(lambda: stack_dirs(pid), what="the run's workers to make their stack files")
    os.kill(pid, signal.SIGKILL)
    server.wait_status(run["id"])
    wait_for(lambda: not stack_dirs(pid), what="the dashboard to remove the killed run's stack files")


def _events(server: Any, run_id: str) -> list[dict[str, Any]]:
    with server.client() as http:
        return http.get(f"/api/runs/{run_id}/events").json()["events"]
