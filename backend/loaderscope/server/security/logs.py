"""Keep the token out of the logs: uvicorn writes request paths with their query strings.

The token is redacted by its value as well as by the parameter's name: ``?%74oken=T`` is
``?token=T`` to the query parser, and a refused request is logged like any other.
"""

from __future__ import annotations

import logging
import re
from contextvars import ContextVar
from urllib.parse import unquote_plus

_QUERY_PAIR = re.compile(r"([?&;])([^=&;\s\"'#]*)=([^&;\s\"'#]*)")
LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn")
REDACTED = "[redacted]"
# uvicorn's websocket protocol (websockets-sansio, 0.3x-0.5x) answers a handshake refused with an HTTP
# status, then logs it twice: '"WebSocket /path" 401' (kept: it says what happened) and
# 'ASGI callable returned without completing handshake.' (dropped: nothing went wrong). The guard sets
# this in the connection's task, where uvicorn logs both.
REFUSED_HANDSHAKE: ContextVar[bool] = ContextVar("refused_handshake", default=False)
_HANDSHAKE_NOISE = "ASGI callable returned without completing handshake."


def redact(text: str, token: str | None = None) -> str:
    """``text`` with every query value named token (in any encoding), and every occurrence of the
    token itself (in any encoding), replaced by ``[redacted]``."""

    def pair(match: re.Match[str]) -> str:
        key, value = unquote_plus(match.group(2)), unquote_plus(match.group(3))
        if key.strip().lower() == "token" or (token and token in value):
            return f"{match.group(1)}{match.group(2)}={REDACTED}"
        return match.group(0)

    text = _QUERY_PAIR.sub(pair, text)
    return text.replace(token, REDACTED) if token else text


class RedactToken(logging.Filter):
    """Rewrites the token in a record's message and arguments before any handler sees it."""

    def __init__(self, token: str | None = None) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _HANDSHAKE_NOISE and REFUSED_HANDSHAKE.get():
            return False
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, self.token)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a, self.token) if isinstance(a, str) else a for a in record.args)
        return True


def install(token: str | None = None) -> None:
    """Attach the filter to uvicorn's loggers (idempotent: the newest token wins)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, RedactToken)]:
            logger.removeFilter(old)
        logger.addFilter(RedactToken(token))
