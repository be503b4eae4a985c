"""WS /ws/runs/{id}?after=SEQ: a run's events to a viewer, from ``after`` on, then live.

Each subscriber is a cursor into the run's store, not a queue of copies: the producer appends
and wakes subscribers, each sends what it has not sent yet, in frames of up to ``frame_events``.
A subscriber that falls more than ``max_lag`` events behind (a paused tab, a slow link) is not
fed the backlog: it gets ``resync`` with the range it skipped and fetches that over REST, so no
viewer ever slows the producer or holds more than one frame in memory.

Messages (◆): a JSON array is a frame of events in seq order. A JSON object is meta:
- ``{"type": "hello", "run", "after", "last_seq", "first_held", "status"}`` first;
- ``{"type": "resync", "from": a, "to": b}``: events a..b are not sent here: GET
  /api/runs/{id}/events?after=a-1 for them; the next frame starts at b+1;
- ``{"type": "gap", "from": a, "to": b, "reason"}``: events a..b are no longer held anywhere;
- ``{"type": "status", "status", "paused", "delay", "dropped"}`` when the run's status changes;
- ``{"type": "end", "status", "last_seq"}``: the run ended and every event was sent; the
  server then closes with 1000.
Frames hold at most ``frame_events`` events and VIEWER_FRAME_BYTES (1 MiB; at least one event).
Closes: 4404 unknown run, 4400 bad ``after``, 1007/1009 a viewer sending garbage, 1013 too many
viewers (``max_viewers`` in all, ``max_run_viewers`` per run).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.websockets import WebSocket

from loaderscope.events import MAX_NUMBER
from loaderscope.server.budgets import VIEWER_FRAME_BYTES
from loaderscope.server.config import ServerConfig
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.run import Run
from loaderscope.server.web.ingest import CLOSE_TRY_LATER, close_reason

MAX_VIEWER_MESSAGE = 64 * 1024


async def stream(websocket: WebSocket, manager: RunManager) -> None:
    await websocket.accept()
    run_id = websocket.path_params["run_id"]
    run = manager.get(run_id)
    if run is None:
        await websocket.close(4404, close_reason(f"no run named {run_id!r}; GET /api/runs lists the runs"))
        return
    after = _parse_after(websocket.query_params.get("after", "-1"))
    if after is None:
        await websocket.close(4400, "'after' must be an integer from -1 to 2**53 (the last seq already seen)")
        return
    busy = _too_many(manager, run)
    if busy is not None:
        await websocket.close(CLOSE_TRY_LATER, close_reason(busy))
        return
    manager.opened(run)  # a logdir run's file is read into the store from now on
    manager.watched(run)  # a demo's run waits for its page
    manager.viewers += 1
    run.viewers += 1
    try:
        await Subscriber(websocket, run, manager.config, after + 1).serve()
    finally:
        manager.viewers -= 1
        run.viewers -= 1


def _too_many(manager: RunManager, run: Run) -> str | None:
    config = manager.config
    if manager.viewers >= config.max_viewers:
        return f"{config.max_viewers} viewers are connected, the most this dashboard serves; try again later"
    if run.viewers >= config.max_run_viewers:
        return f"run {run.id} has {config.max_run_viewers} viewers, the most one run serves; try again later"
    return None


def _parse_after(text: str) -> int | None:
    if len(text) > 20:  # int() of a huge string is itself slow
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if -1 <= value <= MAX_NUMBER else None


class Subscriber:
    """Sends one run's events to one websocket, from ``cursor`` on."""

    def __init__(self, websocket: WebSocket, run: Run, config: ServerConfig, cursor: int) -> None:
        self.websocket = websocket
        self.run = run
        self.cursor = cursor
        self.frame_events = config.frame_events
        # Beyond memory the backlog would come from disk: that is REST's job, so lag is capped by it.
        self.max_lag = min(config.max_lag, config.memory_events)
        self._status: dict[str, Any] | None = None

    async def serve(self) -> None:
        sender = asyncio.ensure_future(self._send_loop())
        receiver = asyncio.ensure_future(self._receive_loop())
        try:
            await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, receiver):
                task.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)

    async def _send_loop(self) -> None:
        log = self.run.log
        await self._meta({"type": "hello", "run": self.run.id, "after": self.cursor - 1, "last_seq": log.last_seq,
                          "first_held": log.first_held, "status": self.run.status})
        while True:
            if self.cursor < log.next_seq:
                await self._send_next()
                continue
            await self._send_status()
            if self.run.closed:
                await self._meta({"type": "end", "status": self.run.status, "last_seq": log.last_seq})
                await self.websocket.close(1000, "run ended")
                return
            await self.run.changed.wait()

    async def _send_next(self) -> None:
        """One frame, or a resync / gap when the next events should not or cannot come from here."""
        log = self.run.log
        head = log.next_seq
        if self.cursor < log.first_held:
            await self._meta({"type": "gap", "from": self.cursor, "to": log.first_held - 1,
                              "reason": "not held by the store (memory-only run)"})
            self.cursor = log.first_held
            return
        lines = (log.read_memory(self.cursor, self.frame_events, VIEWER_FRAME_BYTES)
                 if head - self.cursor <= self.max_lag else [])
        if not lines:
            await self._meta({"type": "resync", "from": self.cursor, "to": head - 1})
            self.cursor = head
            return
        await self.websocket.send_text((b"[" + b",".join(lines) + b"]").decode())
        self.cursor += len(lines)

    async def _send_status(self) -> None:
        status = {"type": "status", "status": self.run.status, "paused": self.run.paused,
                  "delay": self.run.delay, "dropped": self.run.dropped}
        if status != self._status:
            self._status = status
            await self._meta(status)

    async def _meta(self, message: dict[str, Any]) -> None:
        await self.websocket.send_text(orjson.dumps(message).decode())

    async def _receive_loop(self) -> None:
        """Viewers need not send anything; JSON objects are accepted (and ignored), garbage is not."""
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("text") if message.get("text") is not None else message.get("bytes")
            if data is None:
                continue
            if len(data) > MAX_VIEWER_MESSAGE:
                await self.websocket.close(1009, "viewer messages are limited to 64 KiB")
                return
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                value = None
            if not isinstance(value, dict):
                await self.websocket.close(1007, "viewer messages must be JSON objects")
                return
