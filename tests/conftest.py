"""Shared fixtures: a real dashboard (uvicorn on a free loopback port, in its own process).

Use ``server`` (one per test session, shared: don't rely on the run list being empty) or
``start_server(**options)`` for a private one with other options (any ``serve()`` keyword, e.g.
``memory_events=100``); private servers stop when the test ends. Both give a ``LiveServer``::

    def test_page(server):
        server.url          # "http://127.0.0.1:PORT"
        server.ws_url       # "ws://127.0.0.1:PORT"
        server.token        # the access token
        server.page_url     # "http://127.0.0.1:PORT/?token=..." (what `loaderscope serve` prints)
        server.headers      # {"Authorization": "Bearer ..."}
        with server.client() as http:     # httpx.Client with the token
            run = server.start_run("out_of_order", num_workers=2)   # POST /api/runs -> run dict
            server.wait_status(run["id"])  # until the run ends; returns GET /api/runs/{id}
        with server.connect(f"/ws/runs/{run['id']}?after=-1") as ws:   # websocket client
            ws.recv(timeout=5)
        server.output()     # what the server printed so far (logs)
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

STARTUP_TIMEOUT = 30.0
URL_LINE = re.compile(r"loaderscope dashboard: (http://[^/\s]+)/\?token=(\S+)")
ENDED = ("done", "stopped", "error")


def wait_for(predicate: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; returns that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


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
        """A websocket client (websockets' sync API) to ``path``, with the token unless ``auth=False``."""
        headers = {**(self.headers if auth else {}), **kwargs.pop("additional_headers", {})}
        return connect(self.ws_url + path, additional_headers=headers, compression=None, open_timeout=10,
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

    def wait_status(self, run_id: str, statuses: tuple[str, ...] = ENDED, timeout: float = 60) -> dict[str, Any]:
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

    ``env={...}`` adds environment variables for the server (and the run processes it starts).
    """
    directory.mkdir(parents=True, exist_ok=True)
    token = options.pop("token", None) or secrets.token_urlsafe(24)
    extra_env = options.pop("env", {})
    options = {"port": 0, "data_dir": str(directory / "data"), **options}
    log_path = directory / "server.log"
    code = "import json, sys; from loaderscope.server import serve; serve(**json.loads(sys.argv[1]))"
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


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One dashboard for the whole session (shared by server and browser tests).

    A stop escalates to SIGTERM after 1 s here (3 s by default) to keep the suite quick.
    """
    live = launch(tmp_path_factory.mktemp("server"), stop_grace=1.0, kill_grace=1.0)
    yield live
    live.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """A factory for private dashboards with other ``serve()`` options; stopped after the test."""
    started: list[LiveServer] = []

    def start(**options: Any) -> LiveServer:
        live = launch(tmp_path / f"server{len(started)}", **options)
        started.append(live)
        return live

    yield start
    for live in started:
        live.stop()
