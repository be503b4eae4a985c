"""What the dashboard-discovery tests share: a training script that streams to whatever dashboard
``find_dashboard()`` picks, run as a separate process, and the background dashboards such scripts start
(found by their logs, stopped at the end). The ``user`` fixture (tests/probe/conftest.py) uses them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from loaderscope import discovery as dashboard
from tests.conftest import wait_for

# A training script as users write it, streaming to whatever find_dashboard() picks.
SCRIPT = """
import json, sys
from torch.utils.data import DataLoader
import loaderscope
from loaderscope.discovery import find_dashboard
base, token = find_dashboard(None)
loader = loaderscope.watch(DataLoader(list(range(16)), batch_size=4), url=f"{base}/?token={token}", name=sys.argv[1])
for _ in loader:
    pass
loader.close()
print(json.dumps({"url": base, "token": token, "run": loader._probe_transport.run}))
"""
FIND = "from loaderscope.discovery import find_dashboard; print(find_dashboard(None)[0])"
SERVER_PID = re.compile(r"Started server process \[(\d+)\]")


def _kill_dashboards(directory: Path) -> None:
    """Every background dashboard whose log is in ``directory``: not our children, so poll until gone."""
    pids = {int(m) for log in directory.glob("dashboard-*.log") for m in SERVER_PID.findall(log.read_text())}
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    for pid in pids:
        try:
            wait_for(lambda: not dashboard._running(pid),  # noqa: B023 (called within the iteration)
                     timeout=15, what=f"dashboard {pid} to stop")
        except AssertionError:
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _script(env: dict[str, str], cwd: Path, name: str) -> tuple[dict[str, Any], str]:
    """Run SCRIPT as a separate training script, warnings about unclosed resources made errors."""
    done = subprocess.run([sys.executable, "-W", "error::ResourceWarning", "-c", SCRIPT, name], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _runs(url: str, token: str) -> list[dict[str, Any]]:
    return httpx.get(f"{url}/api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()


def _state_file(env: dict[str, str]) -> Path:
    return Path(env["XDG_RUNTIME_DIR"]) / "loaderscope" / dashboard.STATE_FILE
