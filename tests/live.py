"""A real dashboard for tests: uvicorn on a free loopback port, in its own process.

The server packages (httpx, websockets) are imported here and nowhere in conftest.py, so the pure
core's tests run in an environment without them. conftest.py's ``server`` and ``start_server``
fixtures start these; ``from tests.conftest import LiveServer, launch`` still works.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from loaderscope.events import ENDED

# A cap on waiting for a dashboard to print its address and answer /api/health, no pace: a dead one is
# seen at once (its exit). At load 18-20 on the 2-core box one took more than 30 s just to import FastAPI.
STARTUP_TIMEOUT = 120.0
URL_LINE = re.compile(r"loaderscope dashboard: (http://[^/\s]+)/\?token=(\S+)")


@dataclass
class LiveServer:
    url: str
    token: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):]

    @property
    def page_url(self) -> str:
        return f"{self.url}/?token={self.token}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=30, **kwargs)

    def connect(self, path: str, *, auth: bool = True, **kwargs: Any) -> ClientConnection:
        """A websocket client (websockets' sync API) to ``path``, with the token unless ``auth=False``.
        Its opening handshake may wait as long as any condition here (conftest.wait_for's 60 s): a
        freshly started server beside two CPU burners once took more than 10 s to answer it."""
        headers = {**(self.headers if auth else {}), **kwargs.pop("additional_headers", {})}
        return connect(self.ws_url + path, additional_headers=headers, compression=None, open_timeout=60,
                       max_size=None, **kwargs)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def start_run(self, scenario: str, mode: str = "real", **params: Any) -> dict[str, Any]:
        with self.client() as http:
            answer = http.post("/api/runs", json={"scenario": scenario, "mode": mode, "params": params})
        assert answer.status_code == 201, answer.text
        return answer.json()

    def run(self, run_id: str) -> dict[str, Any]:
        with self.client() as http:
            answer = http.get(f"/api/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        return answer.json()

    def wait_status(self, run_id: str, statuses: Collection[str] = ENDED, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if run["status"] in statuses:
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still {run['status']!r} after {timeout} s, wanted {statuses}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def launch(directory: Path, **options: Any) -> LiveServer:
    """Start ``serve(port=0, **options)`` in a new process; return once /api/health answers.

    ``env={...}`` adds environment variables for the server (and the run processes it starts);
    ``setup="import tests.remote_standin"`` runs a statement in the server's process first.
    """
    directory.mkdir(parents=True, exist_ok=True)
    token = options.pop("token", None) or secrets.token_urlsafe(24)
    extra_env = options.pop("env", {})
    setup = options.pop("setup", "pass")
    options = {"port": 0, "data_dir": str(directory / "data"), **options}
    log_path = directory / "server.log"
    code = (f"{setup}; import json, sys; from loaderscope.server.web.dashboard import serve; "
            "serve(**json.loads(sys.argv[1]))")
    # XDG_RUNTIME_DIR: a test dashboard publishes itself for watch() here, not in the user's own state file
    env = {**os.environ, "LOADERSCOPE_TOKEN": token, "PYTHONUNBUFFERED": "1", "XDG_RUNTIME_DIR": str(directory),
           **extra_env}
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-c", code, json.dumps(options)], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = LiveServer("", token, process, Path(options["data_dir"]), log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.url:
        match = URL_LINE.search(server.output())
        if match:
            server.url = match.group(1)
        elif process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the dashboard did not start:\n{server.output()}")
        else:
            time.sleep(0.05)
    _wait_healthy(server, deadline)
    return server


def _wait_healthy(server: LiveServer, deadline: float) -> None:
    while True:
        try:
            if httpx.get(f"{server.url}/api/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the dashboard does not answer /api/health:\n{server.output()}")
        time.sleep(0.05)
