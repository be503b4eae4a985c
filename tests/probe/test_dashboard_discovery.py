"""Which dashboard a script streams to: a token it lacks is said at once, a background dashboard is reused.

Real dashboards on 127.0.0.1, real websockets, real subprocesses for "scripts"; HOME and
XDG_RUNTIME_DIR point into tmp_path so the user's own state file is never read or written.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

import loaderscope
from loaderscope import discovery as dashboard
from loaderscope.probe.transport import StreamSink
from tests.conftest import LiveServer, wait_for
from tests.probe.dashboards import FIND, _free_port, _runs, _script, _state_file

# --- a token the dashboard does not take --------------------------------------------------------


def test_a_missing_token_is_refused_and_said_once_not_called_unreachable(
        start_server: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOADERSCOPE_TOKEN", raising=False)
    live: LiveServer = start_server()
    loader = loaderscope.watch(DataLoader(list(range(32)), batch_size=4), url=live.url)
    for _ in loader:
        pass
    sink = loader._probe_transport  # opened at the first iter()
    wait_for(lambda: sink.refused == 401, what="the refused handshake")
    # It keeps trying (the user may fix the token by restarting nothing); the message stays one.
    wait_for(lambda: live.output().count("/ws/ingest") >= 3, what="three refused handshakes")
    loader.close()
    err = capsys.readouterr().err
    assert err.count(f"the dashboard at {live.url} refused a missing token (401)") == 1, err
    assert "?token=" in err and "LOADERSCOPE_TOKEN" in err
    assert "did not reach the dashboard" in err and "it refused the token (401)" in err
    assert "unreachable" not in err
    assert sink.run is None and sink.sent == 0


def test_a_wrong_token_is_never_sent_and_said_once_not_called_unreachable(
        start_server: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard's proof is for its own token: ours stays here, and the fix is said."""
    monkeypatch.delenv("LOADERSCOPE_TOKEN", raising=False)
    live: LiveServer = start_server()
    wrong = "wrong-token-of-sufficient-length"
    loader = loaderscope.watch(DataLoader(list(range(32)), batch_size=4), url=f"{live.url}/?token={wrong}")
    for _ in loader:
        pass
    sink = loader._probe_transport  # opened at the first iter()
    wait_for(lambda: live.output().count("GET /api/proof") >= 3, what="three challenges")
    loader.close()
    err = capsys.readouterr().err
    assert err.count(f"what listens at {live.url} did not prove that it holds the token (it answered the "
                     "challenge for another token)") == 1, err
    assert "?token=" in err and "LOADERSCOPE_TOKEN" in err
    assert "did not reach the dashboard" in err and "for another token" in err
    assert "unreachable" not in err and "refused" not in err
    assert "/ws/ingest" not in live.output()  # not even a handshake carried the token
    assert sink.run is None and sink.sent == 0


def test_an_unreachable_dashboard_is_said_while_running_then_at_close(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    sink = StreamSink(url, "some-token-of-sufficient-length")
    sink([{"type": "run_start", "seq": 0, "t": 0.0}])
    seen: list[str] = []
    wait_for(lambda: seen.append(capsys.readouterr().err) or "is unreachable" in "".join(seen),
             what="the unreachable message")
    sink.close(timeout=0.2)
    err = "".join(seen) + capsys.readouterr().err
    assert err.count("is unreachable") == 1, err
    assert "1 of 1 events did not reach the dashboard" in err and "it was unreachable" in err
    assert "refused" not in err


# --- a background dashboard, shared by the scripts ----------------------------------------------


def test_consecutive_scripts_share_one_background_dashboard(user: dict[str, str], tmp_path: Path) -> None:
    first, first_err = _script(user, tmp_path, "first.py")
    second, second_err = _script(user, tmp_path, "second.py")
    assert second["url"] == first["url"] and second["token"] == first["token"]
    assert first_err.count("started a dashboard at") == 1
    assert "started a dashboard" not in second_err and f"streaming to the dashboard at {first['url']}" in second_err
    runs = wait_for(lambda: {r["id"]: r for r in _runs(first["url"], first["token"])
                             if r["id"] in (first["run"], second["run"]) and r["status"] == "done"}.values())
    assert sorted(r["name"] for r in runs) == ["first.py", "second.py"]
    assert sorted(r["batches"] for r in runs) == [4, 4]
    published = json.loads(_state_file(user).read_bytes())
    assert published["url"] == first["url"] and published["token"] == first["token"]


def test_concurrent_scripts_start_only_one(user: dict[str, str], tmp_path: Path) -> None:
    scripts = [subprocess.Popen([sys.executable, "-W", "error::ResourceWarning", "-c", FIND], env=user, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [script.communicate(timeout=120) for script in scripts]
    assert all(script.returncode == 0 for script in scripts), outputs
    assert len({out.strip() for out, _ in outputs}) == 1, outputs
    assert sum(err.count("started a dashboard") for _, err in outputs) == 1, outputs
    assert not any("ResourceWarning" in err for _, err in outputs)
    assert len(list(_state_file(user).parent.glob("dashboard-*.log"))) == 1


def test_the_state_file_is_private(user: dict[str, str]) -> None:
    base, token = dashboard.find_dashboard(None)
    path = _state_file(user)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    published = dashboard.read_state(path.parent)
    assert published is not None and (published.url, published.token) == (base, token)
    os.chmod(path, 0o644)  # readable by others: someone could have put it there, or read the token
    assert dashboard.read_state(path.parent) is None
    os.chmod(path.parent, 0o755)
    os.chmod(path, 0o600)
    assert dashboard.private_dir() == path.parent and stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_stale_state_file_is_replaced(user: dict[str, str]) -> None:
    directory = dashboard.private_dir()
    assert directory is not None
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale_log = directory / "dashboard-stale.log"
    stale_log.write_text("old")
    stale = dashboard.Published(f"http://127.0.0.1:{_free_port()}", "stale-token-of-sufficient-length", gone.pid,
                                str(stale_log))
    dashboard.write_state(directory, stale)
    base, token = dashboard.find_dashboard(None)
    assert (base, token) != (stale.url, stale.token)
    fresh = dashboard.read_state(directory)
    assert fresh is not None and (fresh.url, fresh.token) == (base, token) and fresh.pid != gone.pid
    assert not stale_log.exists()
    assert dashboard.accepts(base, token)


def test_a_published_dashboard_with_another_token_is_replaced(user: dict[str, str], server: LiveServer) -> None:
    live = server  # the session's: these tests only read its address and token
    directory = dashboard.private_dir()
    assert directory is not None
    dashboard.write_state(directory, dashboard.Published(live.url, "not-its-token-of-sufficient-length"))
    base, _ = dashboard.find_dashboard(None)
    assert base != live.url


def test_a_published_dashboard_is_used(user: dict[str, str], server: LiveServer,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    live = server
    assert dashboard.publish(live.url + "/", live.token)
    assert dashboard.find_dashboard(None) == (live.url, live.token)
    err = capsys.readouterr().err
    assert f"streaming to the dashboard at {live.url}/ (published in {_state_file(user)}, where it proved" in err
    assert live.token not in err  # script output is shared more than terminals are
    dashboard.unpublish("http://127.0.0.1:1")  # another dashboard's shutdown leaves ours published
    assert dashboard.read_state(dashboard.private_dir()) is not None
    dashboard.unpublish(live.url)
    assert not _state_file(user).exists()
    assert not dashboard.publish("http://192.0.2.1:8000", live.token)  # only loopback dashboards


def test_a_dashboard_whose_token_is_unknown_is_not_used(user: dict[str, str], server: LiveServer,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    live = server
    monkeypatch.setattr(dashboard, "DEFAULT_URL", live.url)  # "the dashboard on :8000", started by hand
    base, token = dashboard.find_dashboard(None)
    assert base != live.url and dashboard.accepts(base, token)
    err = capsys.readouterr().err
    assert err.count(f"a dashboard answers at {live.url} but its token is not known here") == 1
    monkeypatch.setenv("LOADERSCOPE_TOKEN", live.token)  # with its token, it is the one
    assert dashboard.find_dashboard(None) == (live.url, live.token)


def test_serve_publishes_itself_and_withdraws_at_shutdown(start_server: Any, tmp_path: Path) -> None:
    """`loaderscope serve` on loopback names itself in the state file, so watch() needs no URL."""
    live = start_server()
    state = tmp_path / "server0" / "loaderscope"  # conftest points XDG_RUNTIME_DIR at the server's directory
    published = wait_for(lambda: dashboard.read_state(state), what="the dashboard to publish itself")
    assert (published.url, published.token) == (live.url, live.token)
    live.stop()
    assert dashboard.read_state(state) is None
