"""Events from a training script to a dashboard that may be slow, gone or restarted.

The training loop must never wait for the dashboard: the sink only appends to a bounded buffer and
returns; a sender thread connects, sends frames, reconnects with backoff, and when the buffer is
full the newest events are dropped and counted. The dashboard counts them too: the store sees the
gaps in the probe's seq numbers and shows them as dropped events.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from loaderscope.events import Event, encode_frame

BUFFER_EVENTS = 200_000
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
CONNECT_TIMEOUT = 3.0


def ingest_url(dashboard: str) -> str:
    """ws://host:port/ws/ingest from the dashboard's http(s) address."""
    parts = urlsplit(dashboard)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{parts.netloc}/ws/ingest"


class StreamSink:
    """A probe sink that streams to ``WS /ws/ingest``; call ``close()`` to flush and disconnect.

    It takes the probe's compact frames as they are (encoded bytes, one websocket message each).
    """

    takes_frames = True

    def __init__(self, dashboard: str, token: str | None, *, buffer_events: int = BUFFER_EVENTS) -> None:
        self.url = ingest_url(dashboard)
        self.token = token
        self.buffer: deque[tuple[bytes, int]] = deque()
        self.buffered = 0  # events in the buffer
        self.capacity = buffer_events
        self.dropped = 0  # events lost because the buffer was full
        self.run: str | None = None  # the dashboard's id for this run, once connected
        self.head: bytes | None = None  # the first frame (run_start): a restarted dashboard needs it
        self.sent = 0
        self.connected = threading.Event()
        self._wake = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="loaderscope-uplink", daemon=True)
        self._thread.start()

    def frame(self, data: bytes, count: int) -> None:
        if self.buffered + count > self.capacity:
            self.dropped += count  # the dashboard sees the gap in seq numbers too
            return
        self.buffer.append((data, count))
        self.buffered += count
        self._wake.set()

    def __call__(self, events: list[Event]) -> None:
        """Events as dicts, from other producers than the probe (a replayed trace, say)."""
        self.frame(encode_frame(events), len(events))

    def close(self, timeout: float = 5.0) -> None:
        """Send what is buffered (for at most ``timeout`` seconds), then disconnect."""
        deadline = time.monotonic() + timeout
        while self.buffer and self.connected.is_set() and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.01)
        self._closing = True
        self._wake.set()
        self._thread.join(max(0.1, deadline - time.monotonic()))
        lost = self.dropped + self.buffered
        if lost:  # the training went on; say what the dashboard did not get
            print(f"loaderscope: {lost} of {self.sent + lost} events did not reach the dashboard at {self.url} "
                  f"({'it was unreachable' if not self.connected.is_set() else 'its buffer was full'})",
                  file=sys.stderr, flush=True)

    # --- the sender thread ---------------------------------------------------------------------

    def _run(self) -> None:
        backoff = BACKOFF_FIRST
        while not self._closing:
            try:
                url, headers = self._address()
                with connect(url, additional_headers=headers, compression=None, open_timeout=CONNECT_TIMEOUT,
                             max_size=1 << 20) as ws:
                    hello = orjson.loads(ws.recv(timeout=CONNECT_TIMEOUT))
                    self.run = hello.get("run", self.run)
                    if self.head is not None and hello.get("next_seq") == 0:
                        ws.send(self.head)  # a new dashboard: the run's config first, then the gap
                    self.connected.set()
                    backoff = BACKOFF_FIRST
                    self._pump(ws)
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError):
                pass
            self.connected.clear()
            if not self._closing:
                self._wake.wait(backoff)
                self._wake.clear()
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _address(self) -> tuple[str, dict[str, str]]:
        """URL (re-attaching to our run after a reconnect) and auth headers."""
        url = f"{self.url}?{urlencode({'run': self.run})}" if self.run else self.url
        return url, {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _pump(self, ws: ClientConnection) -> None:
        while True:
            if self.buffer:
                data, count = self.buffer[0]
                ws.send(data)  # on failure the frame stays first in line for the next connection
                self.head = self.head or data
                self.buffer.popleft()
                self.buffered -= count
                self.sent += count
                continue
            if self._closing:
                return
            self._wake.wait(0.05)
            self._wake.clear()


def reachable(dashboard: str, timeout: float = 1.0) -> bool:
    """Whether a loaderscope dashboard answers ``GET /api/health`` at this address."""
    import http.client

    parts = urlsplit(dashboard)
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        conn = conn_class(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        conn.request("GET", "/api/health")
        body: Any = orjson.loads(conn.getresponse().read())
        return isinstance(body, dict) and body.get("status") == "ok"
    except (OSError, ValueError, InvalidStatus):
        return False
