"""Another user on the same machine: they get neither a watch()ed training's token nor its events.

The other user is real: a listener running as uid 4242 (CI runs as root; the forked child calls
setgroups/setgid/setuid before exec, as ``setpriv --reuid 4242 --regid 4242 --clear-groups`` does), on the
port a dead dashboard left in the state file, on the default port, or relaying to our dashboard. It
records every byte it receives; the test then looks for the token and the run in them. Real
dashboards, real scripts in subprocesses; HOME and XDG_RUNTIME_DIR point into tmp_path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

import loaderscope
from loaderscope import discovery as dashboard
from loaderscope import proof
from loaderscope.cli.main import build_parser, token_values_joined
from loaderscope.probe.transport import StreamSink
from loaderscope.proof import new_token
from tests.conftest import LiveServer, wait_for
from tests.probe.dashboards import _free_port, _script, _state_file

OTHER_UID = 4242
# The other user's program: it takes every connection, records what arrives and answers every
# request as a dashboard with any token would (200, a health body), websocket upgrades included.
SQUATTER = r"""
import socket, sys, threading
server = socket.create_server(("127.0.0.1", int(sys.argv[1])), reuse_port=False)
print("listening", flush=True)
lock = threading.Lock()
def serve(conn):
    with conn:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            with lock:
                sys.stdout.write(repr(data) + "\n"); sys.stdout.flush()
            if b"upgrade: websocket" in data.lower():
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             b"Sec-WebSocket-Accept: x\r\n\r\n")
            elif b"\r\n\r\n" in data:
                body = b'{"status": "ok", "port": %d, "proof": "00"}' % int(sys.argv[1])
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % len(body) + body)
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def _can_be_another_user() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and Path(PYTHON).is_file()


PYTHON = "/usr/bin/python3"  # the system's: the other user need not read our virtual environment
pytestmark = pytest.mark.skipif(not _can_be_another_user(),
                                reason="playing another local user needs root (to setuid a child) and /usr/bin/python3")


class Squatter:
    """A listener of user 4242 on ``port``; ``received()``: every byte it got so far."""

    @staticmethod
    def uid(pid: int) -> int:
        return int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if line.startswith("Uid:")))

    def __init__(self, port: int, tmp_path: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.out = tmp_path / f"squatter-{port}.out"
        with self.out.open("wb") as out:
            self.process = subprocess.Popen(
                [PYTHON, "-I", "-c", SQUATTER, str(port)], user=OTHER_UID, group=OTHER_UID, extra_groups=[],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/")
        wait_for(lambda: "listening" in self.out.read_text() or self.process.poll() is not None,
                 what="the other user's listener")
        assert self.process.poll() is None, self.out.read_text()
        assert self.uid(self.process.pid) == OTHER_UID

    def received(self) -> str:
        return self.out.read_text()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def squat(tmp_path: Path) -> Iterator[Callable[[int], Squatter]]:
    started: list[Squatter] = []

    def start(port: int) -> Squatter:
        started.append(Squatter(port, tmp_path))
        return started[-1]

    yield start
    for squatter in started:
        squatter.stop()


def _serve(env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """``loaderscope serve --port 0`` as the user runs it; returns once it published itself."""
    process = subprocess.Popen([sys.executable, "-m", "loaderscope.cli", "serve", "--port", "0", "--no-browser",
                                "--logdir", str(cwd / "runs")], env=env, cwd=cwd,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = _state_file(env)
    wait_for(lambda: dashboard.read_state(state.parent) is not None or process.poll() is not None, timeout=60,
             what="serve to publish itself")
    assert process.poll() is None
    return process


# --- discovery --------------------------------------------------------------------------------------


def test_a_port_left_by_a_killed_dashboard_gets_neither_token_nor_events(
        user: dict[str, str], tmp_path: Path, squat: Callable[[int], Squatter]) -> None:
    served = _serve(user, tmp_path)
    published = dashboard.read_state(_state_file(user).parent)
    assert published is not None
    served.kill()  # kill -9: nothing can withdraw the entry
    served.wait()
    squatter = squat(int(published.url.rsplit(":", 1)[1]))
    assert dashboard.read_state(_state_file(user).parent) == published  # the stale entry names the squatted port

    result, err = _script(user, tmp_path, "train.py")
    received = squatter.received()
    assert published.token not in received and "Bearer" not in received and "/ws/ingest" not in received
    assert result["url"] != published.url and result["run"] is not None  # it streamed to a dashboard of its own
    assert "started a dashboard at" in err and published.url not in err
    assert result["token"] not in err


def test_the_default_port_is_never_trusted_with_the_env_token(
        user: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, squat: Callable[[int], Squatter],
        capsys: pytest.CaptureFixture[str]) -> None:
    squatter = squat(_free_port())
    monkeypatch.setattr(dashboard, "DEFAULT_URL", squatter.url)  # "nothing of ours on port 8000"
    token = new_token()
    monkeypatch.setenv("LOADERSCOPE_TOKEN", token)
    base, _ = dashboard.find_dashboard(None)
    assert base != squatter.url
    assert token not in squatter.received() and "Bearer" not in squatter.received()
    err = capsys.readouterr().err
    assert f"started a dashboard at {base}/" in err and token not in err


def test_a_named_url_gets_no_token_and_no_event_until_it_proves_it(
        squat: Callable[[int], Squatter], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``$LOADERSCOPE_URL`` or ``watch(url=...)`` naming a port that another user now holds."""
    squatter = squat(_free_port())
    token = new_token()
    sink = StreamSink(squatter.url, token)
    sink([{"type": "run_start", "seq": 0, "t": 0.0, "secret": "the-run-itself"}])
    wait_for(lambda: squatter.received().count("/api/proof") >= 2, what="two challenges")
    sink.close(timeout=0.2)
    received = squatter.received()
    assert token not in received and "Bearer" not in received and "the-run-itself" not in received
    assert sink.unproven is not None and sink.sent == 0
    err = capsys.readouterr().err
    assert err.count(f"what listens at {squatter.url} did not prove that it holds the token") == 1
    assert "1 of 1 events did not reach the dashboard" in err and "unreachable" not in err


def test_a_relay_to_our_dashboard_does_not_pass_the_challenge(start_server: Any) -> None:
    """Another user's listener that passes the challenge on to our real dashboard answers for its port."""
    live: LiveServer = start_server()
    target = int(live.url.rsplit(":", 1)[1])
    relay = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []
    opened: list[socket.socket] = [relay]

    def pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                seen.append(data)
                sink.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = relay.accept()
                upstream = socket.create_connection(("127.0.0.1", target))
                opened.extend((conn, upstream))
                threading.Thread(target=pipe, args=(conn, upstream), daemon=True).start()
                threading.Thread(target=pipe, args=(upstream, conn), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    relay_url = f"http://127.0.0.1:{relay.getsockname()[1]}"
    try:
        assert dashboard.accepts(live.url, live.token)
        assert not dashboard.accepts(relay_url, live.token)
        with pytest.raises(proof.Unproven, match=f"answered for port {target}"):
            proof.proven_socket(relay_url, live.token, 5.0, loopback=True)
        assert not any(live.token.encode() in data for data in seen)
    finally:
        for sock in opened:
            sock.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_withdraws_from_the_state_file_on_sigterm_and_sigint(
        user: dict[str, str], tmp_path: Path, sig: signal.Signals) -> None:
    served = _serve(user, tmp_path)
    served.send_signal(sig)
    served.wait(30)
    assert not _state_file(user).exists()


def test_the_proof_answers_without_a_token_and_gives_the_token_away_nowhere(start_server: Any) -> None:
    import httpx

    live: LiveServer = start_server()
    nonce = proof.new_nonce()
    answer = httpx.get(f"{live.url}{proof.PATH}", params={"nonce": nonce}, timeout=10)
    assert answer.status_code == 200 and live.token not in answer.text
    proof.check(answer.content, live.token, nonce, int(live.url.rsplit(":", 1)[1]))
    with pytest.raises(proof.Unproven, match="another token"):
        proof.check(answer.content, "another-token-of-sufficient-length", nonce, int(live.url.rsplit(":", 1)[1]))
    bad = httpx.get(f"{live.url}{proof.PATH}", params={"nonce": "short"}, timeout=10)
    assert bad.status_code == 422 and "nonce" in bad.json()["detail"]


# --- background dashboards without a private state directory ---------------------------------------


def test_a_background_dashboard_without_a_private_dir_leaves_nothing_in_tmp(
        user: dict[str, str], tmp_path: Path) -> None:
    runtime = Path(user["XDG_RUNTIME_DIR"]) / "loaderscope"
    runtime.mkdir(mode=0o700)
    os.chown(runtime, OTHER_UID, OTHER_UID)  # someone else's: nothing in it is trusted, nothing written
    assert dashboard.private_dir() is None
    before = set(Path(tempfile.gettempdir()).glob(f"{dashboard.LEGACY_DIR_PREFIX}*"))
    started = dashboard.start_dashboard(None)
    try:
        assert started.log == f"/proc/{started.pid}/fd/1"
        assert "loaderscope dashboard: http://" in Path(started.log).read_text()  # the log, while it runs
        assert set(Path(tempfile.gettempdir()).glob(f"{dashboard.LEGACY_DIR_PREFIX}*")) == before
    finally:
        assert started.pid is not None
        os.kill(started.pid, signal.SIGTERM)
        wait_for(lambda: not dashboard._running(started.pid), timeout=30, what="the dashboard to stop")


def test_dashboard_dirs_left_by_earlier_versions_are_removed_once_their_dashboard_is_gone(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = time.time() - 3600

    def legacy(pid: int, owner: int | None = None) -> Path:
        directory = Path(tempfile.mkdtemp(prefix=dashboard.LEGACY_DIR_PREFIX))
        (directory / "dashboard-x.log").write_text(f"INFO:     Started server process [{pid}]\n")
        os.utime(directory, (old, old))
        if owner is not None:
            os.chown(directory, owner, owner)
        return directory

    dead, running, theirs = legacy(gone.pid), legacy(os.getpid()), legacy(gone.pid, OTHER_UID)
    try:
        dashboard.remove_legacy_dirs()
        assert not dead.exists()
        assert running.exists() and theirs.exists()
    finally:
        for directory in (dead, running, theirs):
            shutil.rmtree(directory, ignore_errors=True)


# --- tokens on the command line ---------------------------------------------------------------------


def test_generated_tokens_never_start_with_a_dash() -> None:
    # one in 64 of token_urlsafe's does: among 2,000, one would with probability 1 - (63/64)**2000
    assert not any(new_token().startswith("-") for _ in range(2000))


@pytest.mark.parametrize("argv", [["serve", "--token", "-abcdefghijklmnopqrstu"],
                                  ["serve", "--token=-abcdefghijklmnopqrstu"]])
def test_a_token_starting_with_a_dash_is_taken(argv: list[str]) -> None:
    assert build_parser().parse_args(token_values_joined(argv)).token == "-abcdefghijklmnopqrstu"


def test_a_recorded_command_keeps_its_own_arguments() -> None:
    argv = ["record", "--", "python", "train.py", "--token", "-x"]
    assert token_values_joined(argv) == argv


def test_watch_says_where_it_streams_without_the_token(start_server: Any, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    live: LiveServer = start_server()
    monkeypatch.setattr(dashboard, "_said", set())
    monkeypatch.setenv("LOADERSCOPE_URL", f"{live.url}/?token={live.token}")
    loader = loaderscope.watch(DataLoader(list(range(8)), batch_size=4))
    for _ in loader:
        pass
    loader.close()
    err = capsys.readouterr().err
    assert f"streaming to the dashboard at {live.url}/ (from $LOADERSCOPE_URL" in err
    assert live.token not in err
    assert loader._probe_transport.sent > 0 and loader._probe_transport.unproven is None
