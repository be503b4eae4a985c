"""uvicorn's HTTP and websocket protocols, with the limits a shared machine needs.

uvicorn bounds neither how long a client may take to send its request head nor how many clients
may be doing so at once: 21,000 half-sent heads (no token needed) made most health polls fail. Its
websocket answers every ping with a pong written whether or not the peer reads (a flood of 881k
pings grew the write buffer by 99 MB), and its keepalive closes a producer with 1011 when the pong
sits unread behind frames the server itself has not caught up with (it stops reading while the
app is behind), dropping what that producer had sent. A frame over its size limit it refuses with
1009 and closes the socket at once, the rest of the frame unread: the kernel then resets the
connection, and the reset can reach the producer before the close frame (2 of 6 producers sending
8 MB never saw the 1009 nor why). The frames read with that frame's head it drops unhandled.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import PayloadTooBig
from websockets.frames import Close, Frame, Opcode

HEAD_TIMEOUT = 10.0  # seconds a connection has to send a whole request head
MAX_HEADS = 256  # connections still sending their head at once; past it the oldest is closed


def http_protocol(head_timeout: float = HEAD_TIMEOUT, max_heads: int = MAX_HEADS) -> type[H11Protocol]:
    """An h11 protocol class (one per server: its waiting heads are counted together)."""

    class HeadLimitedH11(H11Protocol):
        waiting: dict[HeadLimitedH11, asyncio.TimerHandle] = {}  # in arrival order: the oldest first

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the head is in (or the connection is done)
                self._head_in()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:  # keep-alive: the next
                # head gets the same time (a pipelined one already read is not waited for)
                self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_in()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            if self in self.waiting:
                return
            while len(self.waiting) >= max_heads:
                oldest = next(iter(self.waiting))
                oldest._head_in()
                oldest.transport.close()
            self.waiting[self] = self.loop.call_later(head_timeout, self._head_late)

        def _head_in(self) -> None:
            timer = self.waiting.pop(self, None)
            if timer is not None:
                timer.cancel()

        def _head_late(self) -> None:
            self.waiting.pop(self, None)
            self.transport.close()

    return HeadLimitedH11


class WebSocketProtocol(WebSocketsSansIOProtocol):
    """Stops reading a peer that does not read what it is sent (pongs included), counts a peer that
    keeps sending as alive (the keepalive only closes one that has gone quiet), and tells a peer whose
    frame it refuses why, before the connection ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.write_blocked = False
        self.heard_at = 0.0

    def data_received(self, data: bytes) -> None:
        self.heard_at = self.loop.time()
        super().data_received(data)

    def pause_writing(self) -> None:
        super().pause_writing()
        self.write_blocked = True
        self.transport.pause_reading()  # a flood of pings the peer never reads the pongs of stops here

    def resume_writing(self) -> None:
        super().resume_writing()
        self.write_blocked = False
        if not self.read_paused:
            self.transport.resume_reading()

    async def receive(self) -> Any:
        message = await self.queue.get()
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            if not self.write_blocked:
                self.transport.resume_reading()
        return message

    def keepalive_timeout(self) -> None:
        # The server stopped reading because its app is behind, or the peer sent something since the
        # ping: the missing pong is ours to read, not the peer's fault.
        if self.read_paused or self.heard_at >= self.ping_sent_at:
            self.pong_timer = None
            self.pending_ping_payload = None
            self.schedule_ping()
            return
        super().keepalive_timeout()

    def handle_parser_exception(self) -> None:
        """A frame websockets refused (over ``ws_max_size``; text that is not UTF-8): the close frame
        saying why goes out, then the end of our side of the stream, and the rest of the peer's frame
        is read and dropped (websockets' parser now discards everything) until the peer closes, for at
        most ``close_timeout``. Closed at once with that rest unread, the socket would be reset."""
        if self.close_sent:
            return  # more of the refused frame: already dropped
        # The frames read before the refused one (the same read may hold them): uvicorn handles no event of
        # a read that ends in a parser error, so they were lost, and the producer, told by the next hello
        # that they are missing, dropped one of them for the refused frame (tests/server/test_ingest.py).
        self.handle_events()
        close = self.conn.close_sent
        assert close is not None
        output = self.conn.data_to_send()
        if isinstance(self.conn.parser_exc, PayloadTooBig):  # websockets' words name no fix: ours do
            theirs = _close_frame(close)
            close = Close(close.code, too_big(self.conn.parser_exc))
            output = [_close_frame(close) if data == theirs else data for data in output]
        self.queue.put_nowait({"type": "websocket.disconnect", "code": close.code, "reason": close.reason})
        self.transport.write(b"".join(output))
        if output and output[-1] == b"" and self.transport.can_write_eof():  # websockets' end of stream
            self.transport.write_eof()
        self.close_sent = True
        if self.read_paused:  # the app, gone, will not read again: the rest of the frame must be read here
            self.read_paused = False
            if not self.write_blocked:
                self.transport.resume_reading()
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)


def too_big(exc: PayloadTooBig) -> str:
    """The close reason for a frame over the limit (at most 123 bytes of UTF-8, as every reason)."""
    size = f"of {exc.size:,} bytes " if exc.size is not None else ""
    return f"a frame {size}is over this dashboard's limit of {exc.max_size:,} bytes; send smaller frames"


def _close_frame(close: Close) -> bytes:
    return Frame(Opcode.CLOSE, close.serialize()).serialize(mask=False)
