"""Shared fixtures: a real dashboard (uvicorn on a free loopback port, in its own process, from
tests/live.py, imported only by the tests that use one), and ``wait_for``.

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

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.live import LiveServer


def wait_for(predicate: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; returns that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def __getattr__(name: str) -> Any:
    # The dashboard's helpers live in tests/live.py (it needs httpx and websockets): imported on first
    # use, so that tests of the pure core collect without the server's packages.
    if name in ("LiveServer", "launch"):
        from tests import live

        return getattr(live, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One dashboard for the whole session (shared by server and browser tests).

    A stop escalates to SIGTERM after 1 s here (3 s by default) to keep the suite quick.
    """
    from tests.live import launch

    live = launch(tmp_path_factory.mktemp("server"), stop_grace=1.0, kill_grace=1.0)
    yield live
    live.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """A factory for private dashboards with other ``serve()`` options; stopped after the test."""
    from tests.live import launch

    started: list[LiveServer] = []

    def start(**options: Any) -> LiveServer:
        live = launch(tmp_path / f"server{len(started)}", **options)
        started.append(live)
        return live

    yield start
    for live in started:
        live.stop()
