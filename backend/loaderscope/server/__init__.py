"""The dashboard server: FastAPI + uvicorn, a run store, run processes, websockets, security.

``serve()`` runs it; ``create_app(ServerConfig(...))`` builds the ASGI app for embedding and tests.
"""

from loaderscope.server.app import create_app
from loaderscope.server.config import ServerConfig
from loaderscope.server.serve import serve

__all__ = ["ServerConfig", "create_app", "serve"]
