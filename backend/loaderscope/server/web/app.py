"""The ASGI application: routes, websockets, the page, and the guard in front of them all."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from loaderscope import proof
from loaderscope.server.config import ServerConfig
from loaderscope.server.logdir.follow import Logdir
from loaderscope.server.logdir.storage import storage_for
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.run import RunRefused
from loaderscope.server.security.bodylimit import BodyLimit
from loaderscope.server.security.guard import Guard, Policy
from loaderscope.server.web import api, ingest, jobs, metrics, runlist, stream, whatif
from loaderscope.server.web.errors import field_problems, readable
from loaderscope.version import __version__

FLUSH_EVERY = 0.5  # seconds: how stale a trace file on disk may be while its run goes on

OnStarted = Callable[[RunManager], Awaitable[None]]
OnStopped = Callable[[], None]


def frontend_dir() -> Path:
    """The page: inside the package when installed from a wheel, else the repository's frontend/."""
    package = Path(__file__).resolve().parents[2]  # loaderscope/ (this is loaderscope/server/web/app.py)
    packaged = package / "frontend"
    if packaged.is_dir():
        return packaged
    return package.parents[1] / "frontend"


def create_app(config: ServerConfig, *, on_started: OnStarted | None = None,
               on_stopped: OnStopped | None = None) -> Any:
    """The dashboard app, wrapped in its security guard (an ASGI callable).

    ``on_started`` runs once the app is up (serve() uses it to start a demo run and print the URL);
    ``on_stopped`` first thing at shutdown, Ctrl-C and SIGTERM alike (serve() withdraws itself from
    the discovery state file).
    The FastAPI app itself is reachable as ``.app`` on the result, and its run manager as
    ``.app.state.manager``.
    """
    manager = RunManager(config)
    logdir = Logdir(manager, storage_for(config.logdir)) if config.logdir is not None else None

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(_flush_periodically(manager))]
        if logdir is not None:  # listed before the URL is printed: the first page load shows every run
            tasks.append(await logdir.start())
        if on_started is not None:
            await on_started(manager)
        try:
            yield
        finally:
            if on_stopped is not None:
                on_stopped()
            for task in tasks:
                task.cancel()
            await manager.shutdown()
            _remove_temporary(config)

    app = FastAPI(title="loaderscope", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.manager = manager
    app.state.config = config
    app.openapi = functools.partial(_openapi, app)  # type: ignore[method-assign]
    if config.allow_origins:  # pages served elsewhere (a dev server, a proxy) calling with the token
        app.add_middleware(CORSMiddleware, allow_origins=list(config.allow_origins), allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "content-type"])
    app.add_middleware(BodyLimit)  # before any body is parsed
    app.include_router(api.router)
    app.include_router(whatif.router)
    app.include_router(jobs.router)
    app.state.metrics = metrics.Exporter(manager)
    app.include_router(metrics.router)  # GET /metrics, before the page's catch-all mount
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(RunRefused, api.refused)
    _proof(app, config)
    _websockets(app, manager)
    policy = Policy(config)
    _page(app, config.frontend_dir or frontend_dir(), policy)
    return Guard(app, policy)


class _Page:
    """The page's files. Loading the page to open a run (``/?run=ID``) that is a rank of a logdir job
    starts the job's table (``jobs.warm``) while the page's modules load: only for a request with the
    token, as the table's own route needs (the page's files need none)."""

    def __init__(self, app: FastAPI, directory: Path, policy: Policy) -> None:
        self.app, self.policy, self.files = app, policy, StaticFiles(directory=directory, html=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/" and self.policy.holds_token(dict(scope)):
            for run_id in parse_qs(scope["query_string"].decode("latin-1")).get("run", [])[:1]:
                jobs.warm(self.app.state, run_id)
        await self.files(scope, receive, send)


def _proof(app: FastAPI, config: ServerConfig) -> None:
    @app.get(proof.PATH, include_in_schema=False)
    async def prove(nonce: str = "") -> JSONResponse:
        """No token needed: the answer shows that this dashboard holds it, and gives nothing else away."""
        if not proof.NONCE.match(nonce):
            return JSONResponse({"detail": "nonce: 16-128 characters of A-Z a-z 0-9 _ - expected"}, status_code=422)
        return JSONResponse(proof.answer(config.token, nonce, config.port), headers={"Cache-Control": "no-store"})


def _websockets(app: FastAPI, manager: RunManager) -> None:
    @app.websocket("/ws/ingest")
    async def ws_ingest(websocket: WebSocket) -> None:
        await ingest.ingest(websocket, manager)

    @app.websocket("/ws/runs")
    async def ws_run_list(websocket: WebSocket) -> None:
        await runlist.run_list(websocket, manager)

    @app.websocket("/ws/runs/{run_id}")
    async def ws_run(websocket: WebSocket) -> None:
        await stream.stream(websocket, manager)


def _page(app: FastAPI, directory: Path, policy: Policy) -> None:
    if (directory / "index.html").is_file():
        app.mount("/", _Page(app, directory, policy), name="page")
        return

    @app.get("/", include_in_schema=False)
    async def missing_page() -> PlainTextResponse:
        return PlainTextResponse(f"the dashboard page is missing: expected {directory / 'index.html'}; "
                                 "the API works (GET /api/health)", status_code=503)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, with the 422 body as this server writes it: ``detail`` a sentence, ``errors``
    one entry per field (FastAPI documents its default, ``detail`` a list)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas["HTTPValidationError"] = {
            "title": "HTTPValidationError", "type": "object", "required": ["detail", "errors"],
            "properties": {"detail": {"type": "string"}, "errors": {"type": "array", "items": {
                "type": "object", "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"},
                               "allowed": {"type": ["string", "null"]}}}}}}
        app.openapi_schema = schema
    return app.openapi_schema


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = field_problems(exc.errors())
    return JSONResponse({"detail": readable(problems), "errors": problems}, status_code=422)


def _remove_temporary(config: ServerConfig) -> None:
    """Here rather than after ``server.run()``: uvicorn re-raises SIGTERM once shut down, so code
    after it never runs; lifespan shutdown runs for Ctrl-C and SIGTERM alike."""
    if config.remove_data_dir and config.data_dir is not None and config.logdir is None:
        shutil.rmtree(config.data_dir, ignore_errors=True)


async def _flush_periodically(manager: RunManager) -> None:
    while True:
        await asyncio.sleep(FLUSH_EVERY)
        manager.flush()
