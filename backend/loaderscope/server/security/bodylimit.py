"""Request bodies are limited in bytes before anything parses them.

A 9 MB sweep body of 3,000,000 values was validated value by value for 12 s before its 422: the
limit applies to what arrives, ahead of JSON decoding and validation, with or without a
Content-Length (a chunked body is read up to the limit, then replayed to the app).
"""

from __future__ import annotations

from typing import Any

import orjson

from loaderscope.server.budgets import MAX_BODY_BYTES


class BodyLimit:
    """ASGI middleware: 413 for an HTTP request whose body passes ``limit`` bytes."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(send, declared)
            return
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.limit:
                await self._refuse(send, size)
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        await self.app(scope, _replay(messages, receive), send)

    async def _refuse(self, send: Any, size: int) -> None:
        body = orjson.dumps({"detail": f"the request body has {size} bytes or more, over the {self.limit}-byte "
                             "limit; a run or a sweep needs a few hundred bytes (1 to 36 combinations)"})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: dict[str, Any]) -> int | None:
    for key, value in scope.get("headers", []):
        if key.lower() == b"content-length":
            try:
                return int(value[:20])
            except ValueError:
                return None
    return None


def _replay(messages: list[dict[str, Any]], receive: Any) -> Any:
    pending = list(messages)

    async def replayed() -> dict[str, Any]:
        return pending.pop(0) if pending else await receive()

    return replayed
