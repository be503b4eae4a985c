"""Who may talk to the dashboard: Host, Origin and token checks, and the headers every answer carries.

A local dashboard that starts processes is an attack surface: browsers apply neither same-origin
nor CORS to websocket handshakes, and uvicorn/Starlette check neither ``Origin`` nor ``Host``
(DNS rebinding). The model is Jupyter Server's ``check_origin``/``check_host`` plus a per-launch
token (as Jupyter Server's check_origin/check_host and token). Checks run in one ASGI middleware, before any
route, for HTTP and websockets: a rejected websocket is answered with an HTTP error before the handshake
completes.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

import orjson

from loaderscope.proof import is_loopback
from loaderscope.server.config import ServerConfig
from loaderscope.server.security.logs import REFUSED_HANDSHAKE

Scope = dict[str, Any]
PUBLIC_PATHS = frozenset({"/api/health", "/api/proof"})  # proof: loaderscope/proof.py
_HOST_SAFE = re.compile(r"^[A-Za-z0-9.\-:\[\]]+$")


@dataclass(frozen=True)
class Rejection:
    status: int
    message: str


class Policy:
    """The checks, as plain functions of a request's scope (testable without a server)."""

    def __init__(self, config: ServerConfig) -> None:
        self.token = config.token.encode()
        self.cookie_name = config.cookie_name
        self.remote = config.remote
        self.allowed_hosts = frozenset(h.lower() for h in config.allowed_hosts)
        self.allow_origins = frozenset(o.rstrip("/").lower() for o in config.allow_origins)

    def check(self, scope: Scope) -> Rejection | None:
        """The first check a request fails, or None."""
        headers = _headers(scope)
        return (
            self.check_host(headers.get("host"))
            or self.check_origin(headers.get("origin"), headers.get("host", ""))
            or self.check_token(scope, headers)
        )

    def check_host(self, host: str | None) -> Rejection | None:
        """DNS rebinding: a page on evil.example resolving to 127.0.0.1 still sends its own Host."""
        if not host:
            return Rejection(400, "the request has no Host header")
        name = host_name(host)
        if self.remote or is_loopback(name) or name in self.allowed_hosts:
            return None
        return Rejection(
            403,
            f"Host {host!r} is not allowed: this dashboard answers to loopback names only "
            "(127.0.0.1, localhost, ::1); serve with --host to expose it, or list the name in allowed_hosts",
        )

    def check_origin(self, origin: str | None, host: str) -> Rejection | None:
        """Browsers send Origin on websocket handshakes and cross-origin requests; only ours may pass."""
        if origin is None:
            return None  # not sent by a browser (scripts, run processes), or a same-origin GET
        normalized = origin.rstrip("/").lower()
        if normalized in (f"http://{host}".lower(), f"https://{host}".lower()) or normalized in self.allow_origins:
            return None
        return Rejection(
            403,
            f"Origin {origin!r} is not allowed: only pages served by this dashboard (http://{host}) "
            "may call it; add the origin with allow_origins to permit another",
        )

    def check_token(self, scope: Scope, headers: dict[str, str]) -> Rejection | None:
        if not needs_token(scope["path"]) or _is_preflight(scope, headers):
            return None
        given = self.token_of(scope, headers)
        if given is None:
            return Rejection(401, "missing token: open the URL that `loaderscope serve` printed (it carries "
                             "?token=...), or send 'Authorization: Bearer <token>'")
        if not self.valid(given):
            return Rejection(401, "wrong token: the token changes at every launch unless --token or "
                             "$LOADERSCOPE_TOKEN sets it; use the URL printed by this launch")
        return None

    def valid(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.token)

    def token_of(self, scope: Scope, headers: dict[str, str]) -> str | None:
        """The token from ``Authorization: Bearer``, ``?token=`` or the cookie, in that order."""
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        query = query_token(scope)
        if query is not None:
            return query
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header is the same as none
            return None
        morsel = cookie.get(self.cookie_name)
        return morsel.value if morsel is not None else None

    def holds_token(self, scope: Scope) -> bool:
        """Whether a request carries the token, where none is needed (the page's files)."""
        given = self.token_of(scope, _headers(scope))
        return given is not None and self.valid(given)

    def set_cookie(self) -> str:
        """HttpOnly: page scripts never see it; SameSite=Strict: other sites' requests never carry it."""
        return f"{self.cookie_name}={self.token.decode()}; HttpOnly; SameSite=Strict; Path=/"


def needs_token(path: str) -> bool:
    """Every API route, websocket and /metrics; not the page shell (it holds no data) nor the health check."""
    if path in PUBLIC_PATHS:
        return False
    return (path.startswith("/api/") or path == "/api" or path.startswith("/ws/") or path == "/ws"
            or path == "/metrics")  # run names and ids: Prometheus sends the token (authorization:)


def host_name(host: str) -> str:
    """``127.0.0.1:8000`` -> ``127.0.0.1``; ``[::1]:8000`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def _query(scope: Scope) -> list[tuple[str, str]]:
    raw: bytes = scope.get("query_string", b"")
    return parse_qsl(raw.decode("latin-1"), keep_blank_values=True)


def query_token(scope: Scope) -> str | None:
    return next((value for key, value in _query(scope) if key == "token"), None)


def without_token(scope: Scope) -> str:
    """The request's path and query with the token removed (where the page redirects to)."""
    pairs = [(k, v) for k, v in _query(scope) if k != "token"]
    path: str = scope["path"]
    return path + (f"?{urlencode(pairs)}" if pairs else "")


def security_headers(host: str) -> list[tuple[bytes, bytes]]:
    """CSP without wildcards; the page may connect back only to where it came from.

    ``'wasm-unsafe-eval'`` lets the page compile WebAssembly (its zstd decoder for Parquet traces,
    frontend/js/vendor/zstddec), and nothing else: scripts still come only from the dashboard.
    """
    host = host if _HOST_SAFE.match(host) else "invalid"
    csp = (
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data: blob:; "
        f"connect-src 'self' ws://{host} wss://{host}; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )
    return [
        (b"content-security-policy", csp.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),
        (b"referrer-policy", b"no-referrer"),
        (b"cross-origin-opener-policy", b"same-origin"),
        (b"cross-origin-resource-policy", b"same-origin"),
    ]


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class Guard:
    """ASGI middleware: reject what fails the policy, trade a URL token for a cookie, add headers."""

    def __init__(self, app: Any, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = _headers(scope).get("host", "")
        extra = security_headers(host)
        rejection = self.policy.check(scope)
        if rejection is not None:
            await _reject(scope, send, rejection, extra)
            return
        if scope["type"] == "http" and _is_page_with_token(scope):
            await self._trade_token(scope, send, extra)
            return
        await self.app(scope, receive, _with_headers(send, extra, api=needs_token(scope["path"])))

    async def _trade_token(self, scope: Scope, send: Any, extra: list[tuple[bytes, bytes]]) -> None:
        """``/?token=T&run=ID`` -> cookie + redirect to ``/?run=ID``: the token leaves the address bar."""
        token = query_token(scope) or ""
        if not self.policy.valid(token):
            await _reject(scope, send, Rejection(401, "this link's token does not match this dashboard's: the "
                          "token changes at every launch; open the URL printed by the running `loaderscope`"), extra)
            return
        headers = [
            (b"location", without_token(scope).encode("latin-1")),
            (b"set-cookie", self.policy.set_cookie().encode()),
            (b"cache-control", b"no-store"),
            (b"content-length", b"0"),
            *extra,
        ]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _is_preflight(scope: Scope, headers: dict[str, str]) -> bool:
    """A CORS preflight carries no credentials; the app's CORS middleware answers it, no route runs.

    Only origins that passed check_origin get here, and only allow_origins get a CORS answer.
    """
    return scope.get("method") == "OPTIONS" and "access-control-request-method" in headers


def _is_page_with_token(scope: Scope) -> bool:
    return scope["method"] in ("GET", "HEAD") and not needs_token(scope["path"]) and query_token(scope) is not None


def _with_headers(send: Any, extra: Iterable[tuple[bytes, bytes]], *, api: bool) -> Any:
    extra = list(extra) + ([(b"cache-control", b"no-store")] if api else [])

    async def wrapped(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return wrapped


async def _reject(scope: Scope, send: Any, rejection: Rejection, extra: list[tuple[bytes, bytes]]) -> None:
    """HTTP: a JSON error. Websocket: the same as an HTTP answer to the handshake (never accepted)."""
    body = orjson.dumps({"detail": rejection.message})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": rejection.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif "websocket.http.response" in scope.get("extensions", {}):
        REFUSED_HANDSHAKE.set(True)
        await send({"type": "websocket.http.response.start", "status": rejection.status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": rejection.message[:120]})


_TOKEN_CHARS = re.compile(r"^[A-Za-z0-9._~\-]{16,256}$")


def checked_token(token: str) -> str:
    """A token given with --token / $LOADERSCOPE_TOKEN must be long and URL- and cookie-safe.

    Raises:
        ValueError: naming the rule it breaks.
    """
    if not _TOKEN_CHARS.match(token):
        raise ValueError(
            "the token must be 16 to 256 characters from A-Z a-z 0-9 . _ ~ - (it travels in URLs and "
            "cookies); leave --token and $LOADERSCOPE_TOKEN unset to get a fresh random one"
        )
    return token
