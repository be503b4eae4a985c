"""◆ ``loaderscope.watch(loader)``: instrument a DataLoader someone else built, stream it to a dashboard.

Libraries (Lightning, Hugging Face, mmengine) build the DataLoader for you; ``watch`` changes the
object's class to a subclass of its own class with the probe mixed in, so it keeps every method and
attribute it had and yields exactly what it yielded.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from torch.utils.data import DataLoader

from loaderscope.probe.loader import ProbeMixin
from loaderscope.probe.transport import StreamSink, reachable

L = TypeVar("L", bound=DataLoader)  # type: ignore[type-arg]
DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV, TOKEN_ENV = "LOADERSCOPE_URL", "LOADERSCOPE_TOKEN"
_watched_classes: dict[type, type] = {}
_started_dashboard: tuple[str, str] | None = None
dashboard_process: subprocess.Popen[bytes] | None = None  # the dashboard watch() started, if any


def watched_class(cls: type) -> type:
    if issubclass(cls, ProbeMixin):
        return cls
    if cls not in _watched_classes:
        _watched_classes[cls] = type(f"Watched{cls.__name__}", (ProbeMixin, cls), {"__module__": cls.__module__})
    return _watched_classes[cls]


def dashboard_address(url: str | None) -> tuple[str, str | None]:
    """(base URL, token) from ``url``, ``$LOADERSCOPE_URL`` and ``$LOADERSCOPE_TOKEN``."""
    url = url or os.environ.get(URL_ENV)
    if not url:
        return "", os.environ.get(TOKEN_ENV)
    parts = urlsplit(url)
    token = parse_qs(parts.query).get("token", [os.environ.get(TOKEN_ENV)])[0]
    return f"{parts.scheme or 'http'}://{parts.netloc}", token


def start_dashboard() -> tuple[str, str]:
    """A dashboard of our own on a free loopback port, in the background; its URL is printed once."""
    global _started_dashboard, dashboard_process
    if _started_dashboard is not None:
        return _started_dashboard
    token = secrets.token_urlsafe(32)
    # Its output goes to a file: a pipe nobody reads would fill up and freeze the dashboard.
    log = Path(tempfile.mkdtemp(prefix="loaderscope-dashboard-")) / "dashboard.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "loaderscope.cli", "serve", "--port", "0", "--no-browser"],
            env={**os.environ, TOKEN_ENV: token}, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the training script does not take the dashboard down
        )
    dashboard_process = process
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        match = re.search(r"(http://[\d.]+:\d+)/", log.read_text(errors="replace"))
        if match:
            _started_dashboard = (match.group(1), token)
            print(f"loaderscope: dashboard at {match.group(1)}/?token={token} (log: {log})", file=sys.stderr, flush=True)
            return _started_dashboard
        time.sleep(0.05)
    raise RuntimeError("loaderscope: could not start a dashboard; start one with `loaderscope serve` and pass its URL")


def watch(loader: L, *, url: str | None = None, name: str | None = None, stuck_after: float | None = None) -> L:
    """Instrument ``loader`` in place and stream its events to a dashboard; returns the same loader.

    Args:
        loader: any ``torch.utils.data.DataLoader`` (or subclass), before iterating it.
        url: the dashboard (``http://127.0.0.1:8000/?token=...``); default ``$LOADERSCOPE_URL``, else
            ``http://127.0.0.1:8000`` if one answers there, else a new one started in the background.
        name: shown on the dashboard (default: the script's name).
        stuck_after: seconds after which a fetch is reported stuck (default: max(10 s, 20× median)).

    The training loop never waits for the dashboard: events go to a bounded buffer, a thread sends
    them, reconnects after a restart, and counts what it had to drop. ``loader.close()`` (or leaving
    ``with loader:``) flushes and ends the run; interpreter exit does it too.
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(f"watch() takes a torch.utils.data.DataLoader, got {type(loader).__name__}")
    if getattr(loader, "_iterator", None) is not None:
        raise RuntimeError("watch() must be called before iterating the loader (its persistent workers already run)")
    if isinstance(loader, ProbeMixin):
        return loader
    base, token = dashboard_address(url)
    if not base:
        base, token = (DEFAULT_URL, token) if reachable(DEFAULT_URL) else start_dashboard()
    sink = StreamSink(base, token)
    loader.__class__ = watched_class(type(loader))
    meta = {"name": name or os.path.basename(sys.argv[0] or "python"), "stuck_after": stuck_after,
            "job": os.environ.get("TORCHELASTIC_RUN_ID")}
    loader._init_probe(sink, run_id=None, rank=None, meta=meta)  # type: ignore[attr-defined]
    loader._probe_transport = sink  # type: ignore[attr-defined]
    atexit.register(_close_at_exit, loader)
    return loader


def _close_at_exit(loader: Any) -> None:
    if not getattr(loader, "_probe_closed", False):
        loader.close()
