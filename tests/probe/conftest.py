"""The probe tests' fixtures: ``user``, a private HOME and runtime directory for a script that looks for
a dashboard (tests/probe/dashboards.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loaderscope import discovery as dashboard
from tests.probe.dashboards import _free_port, _kill_dashboards


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A private HOME and XDG_RUNTIME_DIR (here and for subprocesses); kills every dashboard started there."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime), "PYTHONUNBUFFERED": "1"}
    for name in ("LOADERSCOPE_URL", "LOADERSCOPE_TOKEN", "XDG_CACHE_HOME"):
        env.pop(name, None)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", env["HOME"])
    monkeypatch.setenv("XDG_RUNTIME_DIR", env["XDG_RUNTIME_DIR"])
    monkeypatch.setattr(dashboard, "DEFAULT_URL", f"http://127.0.0.1:{_free_port()}")  # not the user's :8000
    monkeypatch.setattr(dashboard, "_ours", None)
    monkeypatch.setattr(dashboard, "_said", set())
    yield env
    _kill_dashboards(runtime / "loaderscope")
