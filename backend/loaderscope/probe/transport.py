"""Events from a training script to a dashboard that may be slow, gone or restarted.

The training loop must never wait for the dashboard: the sink only appends to a bounded buffer and
returns; a sender thread connects, sends frames, reconnects with backoff, and when the buffer is
full the newest events are dropped and counted. The dashboard counts them too: the store sees the
gaps in the probe's seq numbers and shows them as dropped events.

Each connection starts with the dashboard's proof that it holds the token (``loaderscope/proof.py``),
over the very socket the websocket then uses: a listener that cannot prove it (another user's program
on a port our dashboard left) gets neither the token nor an event, and that is said.

Problems are said once, on stderr, from the sender thread (never the training loop's): a dashboard
that refuses the token (the events are lost until the right token is given, so the user must know
at once) and one that stays unreachable. Nothing the sender thread meets may reach the training
process: every failure is caught, said at most once, and retried with backoff.

At the end, the websocket's closing handshake is the dashboard's receipt: it answers our close frame
only once it has read every frame sent before it. A dashboard far behind (a loaded box, a job of
many ranks) may not answer within ``CLOSE_CONFIRM``; the connection is then dropped with frames
still unread on its side, so that is said, never passed over in silence.

A connection that ends otherwise (the dashboard closed it for a limit, a network error, a restart)
may also leave frames it never read. The dashboard's hello on reconnect says how many events of the
run it holds (``next_seq``): the sink keeps the frames it sent last (up to ``resend_events`` events)
and sends again those the dashboard did not get; what it no longer holds is counted as lost and said
once. The dashboard counts the same events from the gap in the producer's seq numbers. A dashboard
that closed the connection with 1009 refused the first of those frames for its size: sent again it
would be refused again, for ever, with every frame after it waiting behind it. That frame is dropped
(its events lost, counted as dropped there too), the dashboard's reason said once, and the rest go on.
"""

from __future__ import annotations

# The sender thread must import nothing (a worker forked mid-import hangs: tests/probe/test_fork_safety.py);
# socket encodes a host name with the idna codec, which its first connect would import.
import encodings.idna  # noqa: F401
import socket
import sys
import threading
import time
from collections import deque
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect

from loaderscope import proof
from loaderscope.events import Event, encode_frame
from loaderscope.proof import is_loopback

BUFFER_EVENTS = 200_000
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
CONNECT_TIMEOUT = 3.0
UNREACHABLE_AFTER = 2.0  # seconds of failed connections before saying so (a restart takes about that)
REFUSED = (401, 403)
CLOSE_TOO_BIG = 1009  # the dashboard refused a frame for its size (docs/DESIGN.md §8)
CLOSE_CONFIRM = 10.0  # seconds close() waits for the dashboard to confirm it read every frame


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

    def __init__(self, dashboard: str, token: str | None, *, buffer_events: int = BUFFER_EVENTS,
                 resend_events: int = BUFFER_EVENTS) -> None:
        self.dashboard = dashboard.rstrip("/")
        self.url = ingest_url(dashboard)
        self.token = token
        self.refused: int | None = None  # the status of the last refused handshake, until one succeeds
        self.unproven: str | None = None  # why the last listener failed the proof, until one passes
        self._said: set[str] = set()  # kinds of problem already reported
        self.buffer: deque[tuple[bytes, int]] = deque()
        self.buffered = 0  # events in the buffer
        # The recorder's thread adds frames while the uplink thread sends them: a count changed by both
        # (``+=`` is no atomic step) is changed under this lock, or it drifts and frames drop as if full.
        self._counts = threading.Lock()
        self.capacity = buffer_events
        self.dropped = 0  # events lost because the buffer was full
        self.run: str | None = None  # the dashboard's id for this run, once connected
        self.secret: str | None = None  # the run's proof of ownership from the hello, shown on reconnects
        self.head: bytes | None = None  # the first frame (run_start): a restarted dashboard needs it
        self.head_count = 0
        self.sent = 0
        self.held = 0  # events of this run the dashboard should hold: sent on it since its next_seq was 0
        self.recent: deque[tuple[bytes, int]] = deque()  # the last frames sent, to send again if unread
        self.recent_events = 0
        self.resend_limit = resend_events
        self.unread = 0  # events sent that the dashboard never read and that could not be sent again
        self.refused_frames = 0  # events of frames the dashboard refused for their size, dropped (said once)
        self.too_big: str | None = None  # the reason of the last connection's 1009 close, until its frame is dropped
        self.unconfirmed = False  # the last connection closed without the dashboard's receipt
        self.connected = threading.Event()
        self._wake = threading.Event()
        self._closing = False
        self._until = 0.0  # once closing: until when one more connection may start, for a refused frame's followers
        self._thread = threading.Thread(target=self._run, name="loaderscope-uplink", daemon=True)
        self._thread.start()

    def frame(self, data: bytes, count: int) -> None:
        with self._counts:
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
        # a frame refused for its size ends the connection, and the next one drops it: the rest goes then
        while self.buffer and (self.connected.is_set() or self.too_big is not None) and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.01)
        self._until = deadline
        self._closing = True
        self._wake.set()
        going = self.connected.is_set() or self.too_big is not None
        self._thread.join(max(0.1, deadline - time.monotonic()) + (CLOSE_CONFIRM if going else 0))
        lost = self.dropped + self.buffered + self.unread
        if lost:  # the training went on; say what the dashboard did not get
            total = self.sent + self.dropped + self.buffered  # what was sent but never read is in `sent`
            besides = f"; besides the {self.refused_frames} it refused, said above" if self.refused_frames else ""
            self._say("lost", f"loaderscope: {lost} of {total + self.refused_frames} events did not reach the "
                      f"dashboard at {self.dashboard} ({self._why_lost()}){besides}")
        elif self.sent and (self.unconfirmed or self._thread.is_alive()):
            self._say("unconfirmed", f"loaderscope: the dashboard at {self.dashboard} did not confirm within "
                      f"{CLOSE_CONFIRM:.0f} s that it read the run's last frames (it is far behind); the end of "
                      "the run may be missing there. A logdir keeps every event whatever the dashboard does: "
                      "LOADERSCOPE_LOGDIR=DIR, or watch(loader, logdir=DIR)")

    def _why_lost(self) -> str:
        if self.unread and not (self.dropped or self.buffered):
            return "a connection ended before it read them"
        if self.refused is not None:
            return f"it refused the token ({self.refused}): pass the URL it printed, with ?token=..."
        if self.unproven is not None:
            return f"what listens there did not prove that it holds the token: {self.unproven}"
        if not self.connected.is_set():
            return "it was unreachable"
        return "it did not read them in time: it is far behind" if self.buffered else "the buffer was full"

    # --- the sender thread ---------------------------------------------------------------------

    def _run(self) -> None:
        backoff = BACKOFF_FIRST
        failing_since = time.monotonic()  # when the current run of failed connections began
        while not self._closing or self._one_more():
            try:
                if self._attempt(failing_since):
                    backoff, failing_since = BACKOFF_FIRST, time.monotonic()
            except Exception:  # _attempt handles its failures; this guards the handlers
                pass
            self.connected.clear()
            if not self._closing or self._one_more():
                self._wake.wait(backoff)
                self._wake.clear()
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _one_more(self) -> bool:
        """Closing, yet the last connection ended on a frame the dashboard refused: the frames after it,
        which it did not read either, still go (on one more connection, while close() waits)."""
        return self.too_big is not None and time.monotonic() < self._until

    def _attempt(self, failing_since: float) -> bool:
        """One connection until it ends; whether it got through the handshake (then backoff starts over)."""
        try:
            self._session()
        except InvalidStatus as exc:
            self._rejected(exc.response.status_code)
        except proof.Unproven as exc:
            self._unproven(exc)
        except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError):
            if not self.connected.is_set():
                self._check_unreachable(failing_since)
        except Exception as exc:  # a bug or a strange answer must not end the uplink
            # websockets' sync client can trip over its own closing handshake when the dashboard's 1009
            # crosses our close (an AssertionError in send_context): the refusal, said when its frame is
            # dropped, is what happened
            if self.too_big is None:
                self._say("error", f"loaderscope: streaming to the dashboard at {self.dashboard} failed "
                          f"({type(exc).__name__}: {exc}); retrying")
        return self.connected.is_set()

    def _session(self) -> None:
        """One connection: the handshake, the dashboard's hello, then frames until it fails or we close."""
        url, headers = self._address()
        with connect(url, sock=self._proven(), additional_headers=headers, compression=None,
                     open_timeout=CONNECT_TIMEOUT, close_timeout=CLOSE_CONFIRM, max_size=1 << 20) as ws:
            if self.token is None:  # nothing to prove with, and a dashboard always asks for a token
                raise proof.Unproven("it took a stream without a token, which a loaderscope dashboard never does")
            try:
                self._exchange(ws)
            finally:  # however it ended (a send, the hello, our own close): did the dashboard refuse a frame?
                close = ws.protocol.close_rcvd
                if close is not None and close.code == CLOSE_TOO_BIG:
                    self.too_big = close.reason

    def _exchange(self, ws: ClientConnection) -> None:
        """The dashboard's hello, what it did not read sent again (but a frame it refused), then frames."""
        hello = orjson.loads(ws.recv(timeout=CONNECT_TIMEOUT))
        self.run = hello.get("run", self.run)
        self.secret = hello.get("secret", self.secret)
        held = hello.get("next_seq")
        first_unread_next = True  # the first frame the dashboard did not read is first in the buffer
        if isinstance(held, int) and not isinstance(held, bool) and 0 <= held < self.held:
            first_unread_next = self._resend(self.held - held)  # a restart holds less, or nothing
        self.refused = self.unproven = None
        self.connected.set()
        if self.too_big is not None:  # after connected: close() waits for the frames after it all along
            self._drop_refused(first_unread_next)
        self._pump(ws)
        ws.close()
        self.unconfirmed = ws.protocol.close_rcvd is None

    def _proven(self) -> socket.socket | None:
        """A connection whose peer proved the token; None where TLS proves the peer or there is no token
        (the handshake then carries no secret, and a dashboard refuses it)."""
        if self.token is None or urlsplit(self.dashboard).scheme == "https":
            return None
        host = urlsplit(self.dashboard).hostname or ""
        sock = proof.proven_socket(self.dashboard, self.token, CONNECT_TIMEOUT, loopback=is_loopback(host))
        sock.settimeout(None)  # the websocket's own timeouts take over
        return sock

    def _unproven(self, exc: proof.Unproven) -> None:
        self.unproven = str(exc)
        self._say("unproven", f"loaderscope: what listens at {self.dashboard} did not prove that it holds the token "
                  f"({exc}), so neither the token nor an event was sent to it. If it is your dashboard, it holds "
                  "another token: pass the URL it printed (http://...:PORT/?token=...) to loaderscope.watch(loader, "
                  "url=...), or set $LOADERSCOPE_URL to it or $LOADERSCOPE_TOKEN to its token; if not, it is another "
                  "program, maybe another user's on a port a dashboard left. Training goes on; events wait in a "
                  "buffer until a dashboard there proves the token")

    def _rejected(self, status: int) -> None:
        if status not in REFUSED:
            self._say("status", f"loaderscope: the dashboard at {self.dashboard} answered {status} to the event "
                      "stream; retrying")
            return
        self.refused = status
        what = "a missing token" if not self.token else "the token"
        self._say("refused", f"loaderscope: the dashboard at {self.dashboard} refused {what} ({status}): pass the "
                  "URL it printed (http://...:PORT/?token=...) to loaderscope.watch(loader, url=...), or set "
                  "$LOADERSCOPE_URL to it or $LOADERSCOPE_TOKEN to its token. Training goes on; its events are "
                  "lost until then")

    def _check_unreachable(self, failing_since: float) -> None:
        """Said once, while running, and only after UNREACHABLE_AFTER: a restart is no news."""
        if time.monotonic() - failing_since >= UNREACHABLE_AFTER and self.refused is None:
            self._say("unreachable", f"loaderscope: the dashboard at {self.dashboard} is unreachable; training goes "
                      f"on, events wait in a buffer (up to {self.capacity:,}) and are sent if it comes back")

    def _say(self, kind: str, message: str) -> None:
        """Print ``message`` the first time a ``kind`` of problem happens; never raises (stderr may be gone)."""
        if kind in self._said:
            return
        self._said.add(kind)
        try:
            print(message, file=sys.stderr, flush=True)
        except Exception:  # a closed stderr at interpreter exit
            pass

    def _address(self) -> tuple[str, dict[str, str]]:
        """URL (re-attaching to our run after a reconnect) and auth headers."""
        url = f"{self.url}?{urlencode({'run': self.run})}" if self.run else self.url
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if self.secret:  # the run is ours: a token holder without it cannot take it over (4403)
            headers["X-Loaderscope-Run-Secret"] = self.secret
        return url, headers

    def _pump(self, ws: ClientConnection) -> None:
        while True:
            if self.buffer:
                data, count = self.buffer[0]
                ws.send(data)  # on failure the frame stays first in line for the next connection
                if self.head is None:
                    self.head, self.head_count = data, count
                with self._counts:
                    self.buffer.popleft()
                    self.buffered -= count
                self.sent += count
                self.held += count
                self._keep(data, count)
                continue
            if self._closing:
                return
            if ws.protocol.state is State.CLOSED:  # the dashboard went away while nothing was to be sent
                raise ConnectionClosed(ws.protocol.close_rcvd, ws.protocol.close_sent)
            self._wake.wait(0.05)
            self._wake.clear()


    def _keep(self, data: bytes, count: int) -> None:
        """Remember a sent frame until ``resend_limit`` newer events were sent: the dashboard may not read it."""
        self.recent.append((data, count))
        self.recent_events += count
        while self.recent and self.recent_events > self.resend_limit:
            self.recent_events -= self.recent.popleft()[1]

    def _resend(self, missing: int) -> bool:
        """The dashboard did not read the last ``missing`` events sent: queue again the frames still held
        (whole frames, newest last), count the rest as lost, and say so once. Returns whether the first
        frame it did not read is among those queued again (first in line now)."""
        again: list[tuple[bytes, int]] = []
        count = 0
        while self.recent and count + self.recent[-1][1] <= missing:
            frame = self.recent.pop()
            again.append(frame)
            count += frame[1]
        self.recent.clear()  # older frames were read: they never go again
        self.recent_events = 0
        first_again = count == missing
        if missing == self.held and count < missing and self.head is not None:
            again.append((self.head, self.head_count))  # a new run: its config first, then the gap
            count += self.head_count
            first_again = True
        with self._counts:
            self.buffer.extendleft(again)  # newest first onto the front: the oldest ends up first in line
            self.buffered += count
        self.sent -= count  # counted again when sent again
        self.held -= missing
        lost = missing - count
        if lost:
            self.unread += lost
            self._say("unread", f"loaderscope: the dashboard at {self.dashboard} does not hold {lost} events sent "
                      "before a connection ended (it closed it, or restarted, before reading them), and they are no "
                      "longer held here to send again: they are lost, and counted as dropped there too")
        return first_again

    def _drop_refused(self, first_in_line: bool) -> None:
        """The last connection ended on a 1009: the first frame the dashboard did not read is the one it
        refused. Dropped if it is first in line (else it was no longer held, and is counted lost already)."""
        reason, self.too_big = self.too_big, None
        if not first_in_line or not self.buffer:
            return
        with self._counts:
            data, count = self.buffer.popleft()
            self.buffered -= count
        self.refused_frames += count
        events = f"{count} event" + ("s" if count != 1 else "")
        self._say("too_big", f"loaderscope: the dashboard at {self.dashboard} refused a frame of {events}: "
                  f"{reason or 'too big'}. Lost, and counted as dropped there; the stream goes on with the next "
                  "frames, and training goes on")


def reachable(dashboard: str, timeout: float = 1.0) -> bool:
    """Whether a loaderscope dashboard answers ``GET /api/health`` at this address."""
    import http.client

    parts = urlsplit(dashboard)
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = None
    try:
        conn = conn_class(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
        conn.request("GET", "/api/health")
        body: Any = orjson.loads(conn.getresponse().read())
        return isinstance(body, dict) and body.get("status") == "ok"
    except (OSError, ValueError, http.client.HTTPException):
        return False
    finally:
        if conn is not None:
            conn.close()  # an unclosed socket is a ResourceWarning
