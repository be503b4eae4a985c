"""Keep the token out of the logs: uvicorn writes request paths with their query strings."""

from __future__ import annotations

import logging
import re

_TOKEN_IN_QUERY = re.compile(r"(token=)[^&\s\"']+")
LOGGERS = ("uvicorn.access", "uvicorn.error", "uvicorn")


def redact(text: str) -> str:
    return _TOKEN_IN_QUERY.sub(r"\1[redacted]", text)


class RedactToken(logging.Filter):
    """Rewrites ``token=...`` in a record's message and arguments before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def install() -> None:
    """Attach the filter to uvicorn's loggers (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactToken) for f in logger.filters):
            logger.addFilter(RedactToken())
