"""Run processes: start one per dashboard run in its own session, end its whole process group.

``start_new_session=True`` makes the run process the leader of a new process group that its
DataLoader workers inherit, so one ``killpg`` ends the run and every worker it forked, and a
signal aimed at the server's terminal (Ctrl-C) does not reach the runs directly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

TOKEN_ENV = "LOADERSCOPE_TOKEN"
SECRET_ENV = "LOADERSCOPE_RUN_SECRET"  # the run's proof of ownership (server/runs/producers.py), for the run process
SECRET_HEADER = "X-Loaderscope-Run-Secret"  # how a producer shows it: a header, as access logs show queries


def runproc_argv(*, run_id: str, scenario: str, mode: str, params: dict[str, Any], ingest_url: str,
                 costs: dict[str, Any] | None = None) -> list[str]:
    """The arguments of ``python -m loaderscope.server.processes.runproc`` for one run (no secrets: see spawn)."""
    argv = ["--url", ingest_url, "--run", run_id, "--scenario", scenario, "--mode", mode,
            "--params", json.dumps(params)]
    return argv + ["--costs", json.dumps(costs)] if costs is not None else argv


def spawn(argv: list[str], *, token: str, log_path: Path | None, secret: str) -> subprocess.Popen[bytes]:
    """Start ``python -m loaderscope.server.processes.runproc ARGV`` for one run.

    The token and the run's secret travel in the environment, not on the command line, which other
    users can read in /proc. stdout and stderr go to the run's log file (never a pipe that nobody drains).
    """
    command = [sys.executable, "-m", "loaderscope.server.processes.runproc", *argv]
    env = {**os.environ, TOKEN_ENV: token, SECRET_ENV: secret}
    with open(log_path or os.devnull, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when nothing is left in it."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_pids(pgid: int) -> list[int]:
    """Live processes in group ``pgid``, read from /proc (no psutil needed). Zombies don't count."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _stat_fields(entry: Path) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    try:
        raw = (entry / "stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of a run's group (after its leader exited: orphaned workers)."""
    signal_group(pgid, signal.SIGKILL)
