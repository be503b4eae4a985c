"""A dashboard proves that it holds the token before a client sends it the token or a byte of a run.

Another user on the same machine can listen on a port that a state file or ``$LOADERSCOPE_URL``
names once our dashboard is gone, or on the default port 8000. A client therefore never sends the
token to a listener that has not answered a challenge first (docs/DESIGN.md §7, "Other local
users"): it sends a fresh nonce to ``GET /api/proof`` (no token needed), and the dashboard answers
``HMAC-SHA256(token, nonce:port)`` with ``port`` the one it listens on. Only a holder of the token
can compute it; binding it to the port defeats a listener that relays the challenge to our real
dashboard on another port. The check and the stream then share one TCP connection, so the proven
listener is the one that gets the token (a port freed in between cannot be taken over).

``mac`` and ``check`` are pure; ``proven_socket`` is the client's side of the exchange. The token
itself (``new_token``) and which hosts count as this machine (``is_loopback``) are here too: the
server, ``discovery`` and the probe's transport all need them, and this module sits below all three.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import re
import secrets
import socket
from typing import Any
from urllib.parse import urlsplit

import orjson

PATH = "/api/proof"
NONCE = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
MAX_ANSWER_BYTES = 4096
_CONTEXT = b"loaderscope proof v1\0"  # domain separation: this MAC is good for nothing else
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def new_token() -> str:
    """A fresh random token (256 bits) that never starts with ``-``: a command line takes
    ``--token VALUE`` for an option otherwise."""
    while True:
        token = secrets.token_urlsafe(32)
        if not token.startswith("-"):
            return token


def is_loopback(host: str) -> bool:
    """True for names and addresses that only this machine can reach."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False



class Unproven(Exception):
    """The listener did not prove that it holds the token; nothing was sent to it. The message says why."""


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def mac(token: str, nonce: str, port: int) -> str:
    """What a holder of ``token`` listening on ``port`` answers to ``nonce``."""
    message = _CONTEXT + f"{nonce}:{port}".encode()
    return hmac.new(token.encode("utf-8", "surrogateescape"), message, hashlib.sha256).hexdigest()


def answer(token: str, nonce: str, port: int) -> dict[str, Any]:
    """The body of ``GET /api/proof?nonce=N`` (the caller checks ``nonce`` against ``NONCE``)."""
    return {"port": port, "proof": mac(token, nonce, port)}


def check(body: bytes, token: str, nonce: str, port: int | None) -> None:
    """Return if ``body`` proves the token for ``nonce``; ``port``: the one we connected to, or None
    to take the one the dashboard names (a non-loopback address, maybe a proxy the user chose).

    Raises:
        Unproven: it does not, saying why.
    """
    try:
        raw: Any = orjson.loads(body)
        proof, listening = raw["proof"], raw["port"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise Unproven("its answer to the challenge is not a dashboard's") from None
    if not isinstance(proof, str) or not isinstance(listening, int):
        raise Unproven("its answer to the challenge is not a dashboard's")
    if port is not None and listening != port:
        raise Unproven(f"it answered for port {listening}, not {port}: it passed the challenge on")
    if not hmac.compare_digest(proof, mac(token, nonce, listening)):
        raise Unproven("it answered the challenge for another token")


def proven_socket(url: str, token: str, timeout: float, *, loopback: bool) -> socket.socket:
    """A connection to ``url`` (http) whose peer proved it holds ``token``; the token was not sent.

    The caller goes on over the same socket (HTTP keep-alive, or a websocket upgrade).

    Raises:
        Unproven: it answered, but not with the proof (another program, another token).
        OSError: it could not be reached.
    """
    parts = urlsplit(url)
    port = parts.port or 80
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", port, timeout=timeout)
    try:
        nonce = new_nonce()
        conn.request("GET", f"{PATH}?nonce={nonce}")
        response = conn.getresponse()
        body = response.read(MAX_ANSWER_BYTES)
        if response.status != 200:
            raise Unproven(f"it answered the challenge with {response.status}")
        check(body, token, nonce, port if loopback else None)
        if response.will_close or conn.sock is None:
            raise Unproven("it closed the connection after the proof")
        sock: socket.socket = conn.sock
        conn.sock = None  # detached: the caller owns it now, conn.close() leaves it open
        return sock
    except http.client.HTTPException as exc:
        raise Unproven(f"it does not speak HTTP as a dashboard does ({type(exc).__name__})") from None
    finally:
        conn.close()
