"""``serve()``: bind, print the URL once, open a browser, run uvicorn until Ctrl-C.

Used by ``loaderscope serve`` and ``loaderscope demo`` (cli/main.py) and by the test fixture.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import webbrowser
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import uvicorn

from loaderscope.discovery import publish, unpublish
from loaderscope.events import MAX_FRAME_BYTES
from loaderscope.proof import is_loopback, new_token
from loaderscope.scenarios.catalog import hub_scenario, register
from loaderscope.scenarios.hub import HubEntry
from loaderscope.scenarios.plan import resolve
from loaderscope.server.config import ServerConfig
from loaderscope.server.logdir.storage import is_url, local_path, storage_for
from loaderscope.server.processes.process import TOKEN_ENV
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.security import logs
from loaderscope.server.security.guard import checked_token
from loaderscope.server.security.protocols import WebSocketProtocol, http_protocol
from loaderscope.server.web.app import create_app


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    token: str | None = None,
    open_browser: bool = False,
    demo: str | None = None,
    demo_params: dict[str, Any] | None = None,
    demo_mode: str = "real",
    hub: Iterable[str] = (),
    demo_delay: float = 0.0,
    traces: Iterable[str | Path] = (),
    allow_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] = (),
    data_dir: str | Path | None = None,
    logdir: str | Path | None = None,
    record: bool = True,
    log_level: str = "info",
    **limits: Any,
) -> None:
    """Run the dashboard until interrupted.

    Args:
        host: address to bind; anything but loopback exposes the dashboard (a warning is printed).
        port: 0 picks a free port (the printed URL says which).
        token: the access token; default ``$LOADERSCOPE_TOKEN``, else a fresh random one.
        open_browser: open the printed URL where a browser exists.
        demo: a scenario to start at once (``loaderscope demo``); the URL then opens that run. It is
            printed (and the dashboard published) before the run's process starts, and the run waits,
            paused, until a page opens it: the first look is at a live run.
        demo_params, demo_mode: its parameters (resolved here, after ``hub``) and "real" or "sim".
        hub: torch.hub entries (``DIR:ENTRY``) to offer as scenarios (``loaderscope serve --hub``).
        demo_delay: seconds added per batch from the start, so a first-time viewer can follow.
        traces: recorded trace files to open as replayed runs (the URL opens the first one).
        allow_origins: extra origins (``http://host:port``) whose pages may call the API.
        allowed_hosts: extra Host names to answer besides loopback names (behind a proxy).
        data_dir: where run traces and logs are written (default: a new temporary directory, removed
            when the dashboard exits, by Ctrl-C or SIGTERM).
        logdir: list every trace under this directory (recursively), follow the ones still growing,
            and write this dashboard's runs there too (instead of ``data_dir``); never deleted. An
            fsspec URL (``s3://bucket/runs``) works with the ``remote`` extra: this dashboard's runs
            are then written to a temporary directory and uploaded into ``dashboard/`` when they end.
        record: False keeps runs in memory only (bounded: old events are then lost, and viewers
            asking for them are told so with a gap).
        limits: ServerConfig limits (memory_events, max_lag, max_active_runs, ...).

    Raises:
        ValueError: a bad token, a demo scenario/parameters that do not resolve (ParamError), a
            bad ``hub`` entry (HubError), or a file in ``traces`` that is not a loaderscope trace.
        OSError: the address cannot be bound (port in use).
    """
    token = checked_token(token) if token else checked_token_env() or new_token()
    for spec in hub:
        register(hub_scenario(HubEntry.parse(spec)))
    plan = resolve(demo, demo_params) if demo is not None else None
    recorded = [checked_trace(Path(path)) for path in traces]
    if not is_loopback(host):
        print(f"WARNING: serving on {host}: anyone who can reach this address and has the token can start "
              "processes on this machine. Use --host 127.0.0.1 unless you mean it.", file=sys.stderr, flush=True)
    root = logdir_root(logdir) if logdir is not None else None
    local = root is not None and not is_url(root)
    sock = bind(host, port)
    directory, temporary = data_directory(root if local else data_dir, record or root is not None)
    config = ServerConfig(
        token=token, host=host, port=sock.getsockname()[1], data_dir=directory, remove_data_dir=temporary,
        logdir=root, allow_origins=tuple(allow_origins), allowed_hosts=tuple(allowed_hosts), **limits,
    )
    config.ingest_url = f"ws://{url_host(host)}:{config.port}/ws/ingest"
    address = f"http://{url_host(host)}:{config.port}"

    async def on_started(manager: RunManager) -> None:
        opened = [manager.replay(path).id for path in recorded]
        for path, replayed in zip(recorded, opened, strict=True):
            print(f"loaderscope: {path} opened as run {replayed}", flush=True)
        shown = opened[0] if opened else None
        demo_run = manager.prepare(plan, demo_mode) if plan is not None else None
        if demo_run is not None:
            shown = demo_run.id
            if demo_delay:
                await manager.control(demo_run, None, demo_delay)
            await manager.hold_for_viewer(demo_run)
        announce(config, directory, shown, open_browser)
        # watch() and the CLI on this machine find this dashboard by themselves, a demo's as serve's,
        # from the moment it prints its URL
        if is_loopback(config.host):
            publish(address, config.token)
        if plan is not None and demo_run is not None:
            # in the background: the first launch waits for the launcher's imports, and the page the
            # URL opens is served meanwhile
            manager.launch_soon(demo_run, plan, lambda said: print(
                f"loaderscope: demo run {shown} {said} ({plan.name})"
                + ("; it waits at its first batch until the page opens it" if said == "started" else ""), flush=True))

    # Withdrawn at shutdown (lifespan: Ctrl-C and SIGTERM alike; uvicorn re-raises SIGTERM, so code after
    # server.run() never runs). kill -9 leaves the entry: a reader then finds it fails the proof.
    app = create_app(config, on_started=on_started, on_stopped=lambda: unpublish(address))
    server = uvicorn.Server(uvicorn.Config(
        app, log_level=log_level, http=http_protocol(config.head_timeout, config.max_heads), ws=WebSocketProtocol,
        ws_max_size=MAX_FRAME_BYTES, ws_per_message_deflate=False, ws_ping_interval=config.ping_interval,
        ws_ping_timeout=config.ping_timeout,
        proxy_headers=False, server_header=False, lifespan="on", timeout_graceful_shutdown=3,
    ))
    logs.install(token)  # after uvicorn.Config: it (re)configures logging
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a dashboard ends; uvicorn has already shut down cleanly


def logdir_root(logdir: str | Path) -> str:
    """An absolute local path (the logdir scan and this dashboard's own files must name files alike;
    a ``file://`` URL is its path), or a remote fsspec URL, checked before the server starts.

    Raises:
        ValueError: a URL whose protocol is not available (fsspec or its package missing), or one
            that reads local files through fsspec (``storage.local_path``).
    """
    text = str(logdir)
    path = local_path(text)
    if path is None:
        storage_for(text)
        return text
    return os.path.abspath(os.path.expanduser(path))


def data_directory(chosen: str | Path | None, record: bool) -> tuple[Path | None, bool]:
    """Where runs are written, and whether it is a temporary directory of this launch.

    Raises:
        ValueError: the directory cannot be created (not OSError: that is what a port in use raises).
    """
    if not record:
        return None, False
    if chosen is not None:
        directory = Path(chosen)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot use {directory} for traces: {exc.strerror or exc}") from None
        return directory, False
    return Path(tempfile.mkdtemp(prefix="loaderscope-")), True


def checked_token_env() -> str | None:
    value = os.environ.get(TOKEN_ENV)
    return checked_token(value) if value else None


def checked_trace(path: Path) -> Path:
    """Refuse, before starting, a file that is missing, too large or not a trace (its header says)."""
    from loaderscope.traces.jsonl import (
        MAX_LINE_BYTES,
        MAX_TRACE_BYTES,
        TraceError,
        check_header,
        is_parquet_path,
        parsed_trace,
    )

    if is_parquet_path(path):  # a Parquet trace: its first part's header
        try:
            next(parsed_trace(path))
        except TraceError as exc:
            raise ValueError(str(exc)) from None
        return path
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_TRACE_BYTES >> 30} GiB")
    with path.open("rb") as file:
        first = file.readline(MAX_LINE_BYTES + 1)
    try:
        check_header(first, str(path))
    except TraceError as exc:
        raise ValueError(str(exc)) from None
    return path


def bind(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts, so port 0 works and the URL we print is the one that listens."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), port), family=family, backlog=128)


def url_host(host: str) -> str:
    """Where a browser or a run process on this machine reaches the server."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return f"[{host.strip('[]')}]" if ":" in host else host


def announce(config: ServerConfig, directory: Path | None, run_id: str | None, open_browser: bool) -> None:
    """Print the URL (the only place the token is ever written) and open it."""
    url = f"http://{url_host(config.host)}:{config.port}/?token={config.token}"
    if run_id is not None:
        url += f"&run={run_id}"
    print(f"loaderscope dashboard: {url}", flush=True)
    where = f"traces and run logs go to {directory}" if directory else "runs are kept in memory only"
    print(f"loaderscope: {where}; Ctrl-C stops the dashboard", flush=True)
    if open_browser and _has_display():
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()


def _has_display() -> bool:
    """Without a display webbrowser would start a text browser in our terminal: don't."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
