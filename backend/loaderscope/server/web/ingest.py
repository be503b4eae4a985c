"""WS /ws/ingest: producers (run processes, ``watch()`` in a training script) send events here.

Protocol (◆):
- connect to ``/ws/ingest?run=ID`` with the token (``Authorization: Bearer`` or ``?token=``);
  without ``run`` the server names a new run. A known ID attaches to that run (the dashboard's
  run process, or an external producer reconnecting).
- the server says ``{"type": "hello", "run": ID, "next_seq": N, "secret": S, "controls": [...]}`` (the
  controls held for the run while it started, oldest first); a producer coming back to
  an existing run sends S in the ``X-Loaderscope-Run-Secret`` header (4403 without it);
- the producer sends frames: JSON arrays of events (the store renumbers ``seq``; gaps in the
  producer's own seq are counted as dropped), and meta objects ``{"type": "dropped", "count": N}``
  or ``{"type": "failed", "error": "..."}``;
- the server sends controls: ``{"action": "pause"|"resume"|"step"|"stop"}`` and ``{"delay": s}``.
Bad input closes the connection with a code that says why: 1007 (not JSON, not the schema),
1009 (too big), 1008 (over the run's event limit), 4400/4409 (bad or busy run id), 4403 (another
producer's run), 1013 (try again
later: ``max_producers`` connected, or ``max_source_producers`` of this producer's source, or every
run in memory still live, or its run moved to disk and being read back for it).

A frame is applied in slices of about SLICE_EVENTS events, yielding to the event loop between them:
a 7 MB compact frame expands to a million events, and must not hold every other connection for
seconds. Events before a bad one in the same frame are kept.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from loaderscope.events import MAX_FRAME_BYTES, MAX_NUMBER, EventError, decode_message
from loaderscope.server.config import ServerConfig
from loaderscope.server.processes.process import SECRET_HEADER
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.run import Run, RunRefused
from loaderscope.server.runs.spill import TraceSpill

MAX_ERROR_TEXT = 4000
CLOSE_BAD_DATA = 1007
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_TRY_LATER = 1013
# ~7 ms of the server's ~3.5 us per event: the longest one frame holds the event loop at a time.
SLICE_EVENTS = 2000


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


def close_code(status: int) -> int:
    """A websocket close code for a RunRefused status: 4xxx as they are, "busy" (429) as 1013."""
    return CLOSE_TRY_LATER if status == 429 else status


async def ingest(websocket: WebSocket, manager: RunManager) -> None:
    await websocket.accept()
    if manager.producers >= manager.config.max_producers:
        await websocket.close(CLOSE_TRY_LATER, close_reason(
            f"{manager.config.max_producers} producers are connected, the most this dashboard takes; try again later"))
        return
    channel = WebSocketChannel(websocket)
    try:
        run, queued = manager.attach(websocket.query_params.get("run"), channel, websocket.headers.get(SECRET_HEADER),
                                     source_of(websocket))
    except RunRefused as exc:
        await websocket.close(close_code(exc.status), close_reason(exc.message))
        return
    try:
        # Controls held while the run was starting ride in the hello, so a pause is in force before the
        # producer's first next() however late the next message would arrive on a busy machine.
        await channel.send({"type": "hello", "run": run.id, "next_seq": run.log.next_seq, "secret": run.secret,
                            "controls": queued})
        await _receive(websocket, run, manager.config)
    except WebSocketDisconnect:
        pass
    finally:
        manager.detach(run)


async def _receive(websocket: WebSocket, run: Run, config: ServerConfig) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes") if message.get("bytes") is not None else message.get("text")
        if data is None:
            continue
        try:
            await take(run, data)
        except EventError as exc:
            code = CLOSE_TOO_BIG if len(data) > MAX_FRAME_BYTES else CLOSE_BAD_DATA
            await websocket.close(code, close_reason(str(exc)))
            return
        over = _over_limit(run, config)
        if over is not None:
            await websocket.close(CLOSE_POLICY, close_reason(f"run {run.id} reached the limit of {over}"))
            return
        await asyncio.sleep(0)  # a flooding producer must not starve the other connections


def source_of(websocket: WebSocket) -> str | None:
    """Who a producer is, for eviction's per-source share: on loopback every producer has the same
    address, so the uid that owns its end of the connection ("uid:N"); else its address."""
    client, server = websocket.client, websocket.scope.get("server")
    if client is None:
        return None
    uid = loopback_uid((client.host, client.port), server) if server is not None else None
    return client.host if uid is None else f"uid:{uid}"


def loopback_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid owning ``peer``'s end of a TCP connection to ``local`` on this machine: the kernel lists
    it in /proc/net/tcp (or tcp6) as the row whose local address is ``peer``. None where there is no
    such row (another machine, no /proc)."""
    try:
        want = (_proc_address(*peer), _proc_address(*local))
    except (OSError, ValueError):
        return None
    table = "/proc/net/tcp6" if ":" in peer[0] else "/proc/net/tcp"
    try:
        with open(table, encoding="ascii") as rows:
            next(rows, None)  # the column names
            for row in rows:
                fields = row.split()
                if len(fields) > 7 and (fields[1], fields[2]) == want:
                    return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


def _proc_address(host: str, port: int) -> str:
    """An address as /proc/net/tcp writes it: the address's 32-bit words in host order, in hex, then the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    packed = socket.inet_pton(family, host)
    words = "".join(f"{int.from_bytes(packed[i:i + 4], sys.byteorder):08X}" for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def _over_limit(run: Run, config: ServerConfig) -> str | None:
    """Which of the run's limits it passed (events, or bytes on disk), if any."""
    if run.log.next_seq > config.max_run_events:
        return f"{config.max_run_events} events"
    spill = run.log.spill
    if isinstance(spill, TraceSpill) and spill.size > config.max_run_bytes:
        return f"{config.max_run_bytes} bytes of trace"
    return None


async def take(run: Run, data: bytes | str) -> None:
    """One message from a producer: a meta object, or a frame of events, applied a slice at a time.

    Raises:
        EventError: the message is not JSON, not the schema, or too big.
    """
    message = decode_message(data, slice_events=SLICE_EVENTS)
    if isinstance(message, dict):
        _apply_meta(run, message)
        return
    first = True
    for events in message:
        if not first:
            await asyncio.sleep(0)
        first = False
        run.ingest(events)


def _apply_meta(run: Run, meta: dict[str, Any]) -> None:
    kind = meta["type"]
    if kind == "dropped":
        count = meta.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_NUMBER:
            raise EventError(f"'dropped' needs a non-negative integer 'count' (at most 2**53), got {count!r}")
        run.add_dropped(count)
        run.changed.notify()
    elif kind == "failed":
        error = meta.get("error")
        if not isinstance(error, str):
            raise EventError(f"'failed' needs a string 'error', got {type(error).__name__}")
        run.error = error[:MAX_ERROR_TEXT]
    else:
        raise EventError(f"unknown meta message type {kind!r}; producers send event arrays, 'dropped' or 'failed'")
