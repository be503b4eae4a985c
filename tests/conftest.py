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

Every pytest process (each pytest-xdist worker too) runs with a HOME, XDG_RUNTIME_DIR, XDG_CACHE_HOME
and TMPDIR of its own and without the user's ``LOADERSCOPE_*`` settings: the per-user state file that
``watch()`` finds a dashboard by (``loaderscope.discovery``) and what the code under test leaves in the
temporary directory are then never shared with another worker, another suite on the same machine or
the user's own dashboard. ``chromium`` is one browser per process, shared by the browser tests (each
test opens a context of its own).
"""

from __future__ import annotations

import multiprocessing.util
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.live import LiveServer


# What torch raises when a worker dies: its RuntimeError, or, when the main process is unpickling
# that worker's last batch as it exits, the fd hand-over's ConnectionResetError or the pipe's EOFError
# (torch's _try_get_data re-raises those when the dying worker is not yet reaped: a race inside torch).
TORCH_DEATH_ERRORS = (RuntimeError, ConnectionResetError, EOFError)


def wait_for(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition", every: float = 0.05) -> Any:
    """Poll ``predicate`` every ``every`` seconds until it returns something truthy; returns that value.
    ``timeout`` caps a wait on state, generous because a busy machine is slow to get there: it is no
    pace to keep."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    """A port nothing listens on now, for what cannot take port 0 (a launcher's MASTER_PORT): never a
    fixed one, which two pytest workers or two suites on the machine would both pick."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first. scripts/test.sh has pytest-xdist hand tests out two at a time
    (``--maxschedchunk 2``) in this order, so the longest start while every worker is busy, and the run
    ends on short tests on every worker rather than on one long test on one."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def __getattr__(name: str) -> Any:
    # The dashboard's helpers live in tests/live.py (it needs httpx and websockets): imported on first
    # use, so that tests of the pure core collect without the server's packages.
    if name in ("LiveServer", "launch"):
        from tests import live

        return getattr(live, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# What discovery, the startup hook and watch() read from the environment (loaderscope/discovery.py,
# loaderscope_hook.py): a test that wants one sets it itself.
USER_SETTINGS = ("LOADERSCOPE_URL", "LOADERSCOPE_TOKEN", "LOADERSCOPE_LOGDIR", "LOADERSCOPE_RECORD", "LOADERSCOPE_NAME",
                 "LOADERSCOPE_JOB", "LOADERSCOPE_RECORD_JOB")


@pytest.fixture(scope="session", autouse=True)
def private_user_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A HOME, per-user state directories and a temporary directory of this process's own, for it
    and its subprocesses."""
    home = tmp_path_factory.mktemp("home")
    runtime = home / "run"
    runtime.mkdir(mode=0o700)
    # Outside pytest's private (0700) tmp and open to all like /tmp: tests play another local user too.
    # multiprocessing removes its own pymp- directory at exit, after this fixture's rmtree: made now, it
    # lies in the real TMPDIR rather than in the directory below.
    multiprocessing.util.get_temp_dir()
    tmp = Path(tempfile.mkdtemp(prefix="loaderscope-tests-"))
    tmp.chmod(0o1777)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_RUNTIME_DIR", str(runtime))
        patch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
        patch.setenv("TMPDIR", str(tmp))
        patch.setattr(tempfile, "tempdir", str(tmp))  # gettempdir() read $TMPDIR once, before this
        for name in USER_SETTINGS:
            patch.delenv(name, raising=False)
        yield home
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(autouse=True)
def fresh_loader_names() -> None:
    """Each test is a program of its own: a name that an earlier test's loaders took in this process
    (``probe/names.py``, ``claim``) does not rename this test's loaders to ``name@file:line``."""
    names = sys.modules.get("loaderscope.probe.names")
    if names is not None:
        names._claims.clear()


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
def hung(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``hung(SCRIPT, **options)`` starts a training script that hangs (tests/doctor/hangs.py's ``Hung``: the
    doctor's tests, and the browser's and the contract's that read a hang); each ends, with its workers,
    when the test ends."""
    from tests.doctor.hangs import Hung

    started: list[Hung] = []

    def start(source: str, **kw: Any) -> Hung:
        h = Hung(tmp_path, source, **kw)
        started.append(h)
        return h

    yield start
    for h in started:
        h.end()


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
