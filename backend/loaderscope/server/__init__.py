"""The dashboard server: FastAPI + uvicorn, a run store, run processes, websockets, security.

``serve()`` runs it; ``create_app(ServerConfig(...))`` builds the ASGI app for embedding and tests.
Imports are lazy: run processes and the launcher (``python -m loaderscope.server.processes.runproc`` /
``.launcher``) import this package too, and need neither FastAPI nor uvicorn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerConfig", "create_app", "serve"]


def __getattr__(name: str) -> Any:
    if name == "serve":
        from loaderscope.server.web.dashboard import serve

        return serve
    if name == "create_app":
        from loaderscope.server.web.app import create_app

        return create_app
    if name == "ServerConfig":
        from loaderscope.server.config import ServerConfig

        return ServerConfig
    raise AttributeError(f"module 'loaderscope.server' has no attribute {name!r}")
