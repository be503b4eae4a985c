"""WS /ws/ingest: producers (run processes, ``watch()`` in a training script) send events here.

Protocol (◆):
- connect to ``/ws/ingest?run=ID`` with the token (``Authorization: Bearer`` or ``?token=``);
  without ``run`` the server names a new run. A known ID attaches to that run (the dashboard's
  run process, or an external producer reconnecting).
- the server says ``{"type": "hello", "run": ID, "next_seq": N}``;
- the producer sends frames: JSON arrays of events (the store renumbers ``seq``; gaps in the
  producer's own seq are counted as dropped), and meta objects ``{"type": "dropped", "count": N}``
  or ``{"type": "failed", "error": "..."}``;
- the server sends controls: ``{"action": "pause"|"resume"|"step"|"stop"}`` and ``{"delay": s}``.
Bad input closes the connection with a code that says why: 1007 (not JSON, not the schema),
1009 (too big), 1008 (over the run's event limit), 4400/4409 (bad or busy run id).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from loaderscope.events import MAX_FRAME_BYTES, EventError, decode_frame
from loaderscope.server.runs import Run, RunManager, RunRefused

MAX_ERROR_TEXT = 4000
CLOSE_BAD_DATA = 1007
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009


class WebSocketChannel:
    """Control messages to a producer, as JSON text."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    async def send(self, message: dict[str, Any]) -> None:
        await self.websocket.send_text(orjson.dumps(message).decode())


def close_reason(text: str) -> str:
    """Close reasons are limited to 123 bytes of UTF-8."""
    raw = text.encode()
    return text if len(raw) <= 123 else raw[:120].decode("utf-8", "ignore") + "..."


async def ingest(websocket: WebSocket, manager: RunManager) -> None:
    await websocket.accept()
    channel = WebSocketChannel(websocket)
    try:
        run, queued = manager.attach(websocket.query_params.get("run"), channel)
    except RunRefused as exc:
        await websocket.close(exc.status, close_reason(exc.message))
        return
    try:
        await channel.send({"type": "hello", "run": run.id, "next_seq": run.log.next_seq})
        for message in queued:
            await channel.send(message)
        await _receive(websocket, run, manager.config.max_run_events)
    except WebSocketDisconnect:
        pass
    finally:
        manager.detach(run)


async def _receive(websocket: WebSocket, run: Run, max_events: int) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes") if message.get("bytes") is not None else message.get("text")
        if data is None:
            continue
        try:
            take(run, data)
        except EventError as exc:
            code = CLOSE_TOO_BIG if len(data) > MAX_FRAME_BYTES else CLOSE_BAD_DATA
            await websocket.close(code, close_reason(str(exc)))
            return
        if run.log.next_seq > max_events:
            await websocket.close(CLOSE_POLICY, close_reason(f"run {run.id} reached the limit of {max_events} events"))
            return
        await asyncio.sleep(0)  # a flooding producer must not starve the other connections


def take(run: Run, data: bytes | str) -> None:
    """One message from a producer: a meta object, or a frame of events.

    Raises:
        EventError: the message is not JSON, not the schema, or too big.
    """
    if len(data) <= MAX_FRAME_BYTES and data[:1] in (b"{", "{"):
        meta = _meta(data)
        if meta is not None:
            _apply_meta(run, meta)
            return
    run.ingest(decode_frame(data))


def _meta(data: bytes | str) -> dict[str, Any] | None:
    """A JSON object with a ``type`` and no ``kind`` is a meta message; anything else is a frame."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EventError(f"message is not valid JSON: {exc}") from None
    if isinstance(value, dict) and "type" in value and "kind" not in value:
        return value
    return None


def _apply_meta(run: Run, meta: dict[str, Any]) -> None:
    kind = meta["type"]
    if kind == "dropped":
        count = meta.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise EventError(f"'dropped' needs a non-negative integer 'count', got {count!r}")
        run.dropped += count
        run.changed.notify()
    elif kind == "failed":
        error = meta.get("error")
        if not isinstance(error, str):
            raise EventError(f"'failed' needs a string 'error', got {type(error).__name__}")
        run.error = error[:MAX_ERROR_TEXT]
    else:
        raise EventError(f"unknown meta message type {kind!r}; producers send event arrays, 'dropped' or 'failed'")
