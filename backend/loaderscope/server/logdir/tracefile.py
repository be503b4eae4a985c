"""A trace file that someone else writes: read by byte offset as it grows, tolerant of damage.

A producer writing a logdir (``watch(logdir=...)``, ``loaderscope record``, another dashboard)
appends complete lines and may be killed at any moment, so the file can end in a torn line and
may never get its ``run_end``. ``TraceFile`` reads only complete lines, skips (and names) lines
that are not events, and keeps a byte offset every ``INDEX_EVERY`` events so the store can read
any seq range back from the file: to the store it is what ``TraceSpill`` is for its own runs.

Event ``i`` of the run is the ``i``-th line after the header that parses and validates; the
store renumbers it (``seq = i``, ``run`` = the dashboard's id), and ``read`` does the same when it
reads events back, so the file is never rewritten.
"""

from __future__ import annotations

from typing import IO, Any

import orjson

from loaderscope.events import Event, EventError, validate
from loaderscope.server.logdir.storage import Storage
from loaderscope.traces.jsonl import MAX_LINE_BYTES, TraceError, check_header

INDEX_EVERY = 256  # one byte offset remembered per this many events (as TraceSpill)
MAX_PROBLEMS = 20  # damaged lines named per file; more are counted


class TraceFile:
    """Tail of one trace file: ``poll`` returns the events of new complete lines.

    ``poll`` runs in one worker thread at a time; ``read`` may run in another thread and only
    looks at offsets ``poll`` has already published.
    """

    def __init__(self, storage: Storage, path: str, run_id: str) -> None:
        self.storage = storage
        self.path = path
        self.run_id = run_id
        self.header: dict[str, Any] | None = None
        self.offset = 0  # bytes consumed: the end of the last complete line read
        self.count = 0  # events read
        self.torn = 0  # bytes after the last complete line (a writer killed mid-line, or mid-write)
        self.size = 0  # the file's size at the last poll
        self.problems: list[str] = []
        self.problem_count = 0
        self._line = 0  # line number of the last complete line read
        self._offsets: list[int] = []  # byte offset of event i * INDEX_EVERY

    @property
    def offsets(self) -> list[int]:
        """The byte offset of event ``i * INDEX_EVERY``, for each ``i`` read so far."""
        return self._offsets

    # --- the spill interface the store uses ---------------------------------------------------

    @property
    def flushed_bytes(self) -> int:
        """Bytes of the file that are whole lines already read (what GET .../trace serves)."""
        return self.offset

    def write_many(self, lines: list[bytes]) -> None:
        """The store appending what ``poll`` returned: the file already holds it."""

    def flush(self) -> None:
        """Nothing to flush: the producer writes the file."""

    def close(self) -> None:
        """Nothing is held open between polls."""

    def open(self) -> IO[bytes]:
        return self.storage.open(self.path)

    def read(self, start: int, count: int, max_bytes: int | None = None) -> list[bytes]:
        """Events ``start .. start+count-1`` as the store numbers them, encoded, read from the file
        (fewer past ``max_bytes`` after the first)."""
        if start < 0 or start >= self.count or count <= 0:
            return []
        block = start // INDEX_EVERY
        seq, end = block * INDEX_EVERY, self.offset
        lines: list[bytes] = []
        used = 0
        with self.storage.open(self.path) as f:
            f.seek(self._offsets[block])
            while len(lines) < count and seq < self.count and f.tell() < end:
                event = _event(f.readline(MAX_LINE_BYTES + 2))
                if event is None:
                    continue  # the same lines poll skipped
                if seq >= start:
                    event["seq"], event["run"] = seq, self.run_id
                    line = orjson.dumps(event, option=orjson.OPT_NON_STR_KEYS)
                    used += len(line) + 1
                    if lines and max_bytes is not None and used > max_bytes:
                        break
                    lines.append(line)
                seq += 1
        return lines

    # --- reading what is new ------------------------------------------------------------------

    def poll(self, max_bytes: int) -> list[Event]:
        """Events from the complete lines after ``offset`` (about ``max_bytes`` of them at most).

        Raises:
            OSError: the file cannot be read.
            TraceError: its first line is not a loaderscope trace header.
        """
        with self.storage.open(self.path) as f:
            f.seek(self.offset)
            events = self._read_lines(f, max_bytes) if self.header is not None or self._read_header(f) else []
            # the size after reading: a writer appends while we read, so a size taken before could be
            # passed by the lines just read, and the file would look as if it had shrunk
            self.size = f.seek(0, 2)
        self.torn = max(0, self.size - self.offset)
        return events

    def _read_header(self, f: Any) -> bool:
        line = f.readline(MAX_LINE_BYTES + 2)
        if not line.endswith(b"\n"):
            if len(line) > MAX_LINE_BYTES:
                raise TraceError(f"{self.path}: the first line is longer than {MAX_LINE_BYTES} bytes: not a trace")
            return False  # the header is still being written
        self.header = check_header(line, self.path)
        self.offset, self._line = len(line), 1
        return True

    def _read_lines(self, f: Any, max_bytes: int) -> list[Event]:
        events: list[Event] = []
        stop = self.offset + max_bytes
        while self.offset < stop:
            start = self.offset
            line = f.readline(MAX_LINE_BYTES + 2)
            if not line.endswith(b"\n"):
                if len(line) > MAX_LINE_BYTES:  # no newline within the limit: skip to the next one
                    self._skip_long_line(f, start)
                    continue
                break  # a torn last line: the writer has not finished it (or never will)
            self.offset += len(line)
            self._line += 1
            event = _event(line)
            if event is None:
                if line.strip():
                    self._problem(f"line {self._line}: not a loaderscope event (damaged?); skipped")
                continue
            if self.count % INDEX_EVERY == 0:
                self._offsets.append(start)
            self.count += 1
            events.append(event)
        return events

    def _skip_long_line(self, f: Any, start: int) -> None:
        f.seek(start)
        while True:
            chunk = f.readline(1 << 20)
            if not chunk or chunk.endswith(b"\n"):
                break
        if not chunk.endswith(b"\n"):  # the long line is the torn end: stay before it
            f.seek(start)
            self.offset = start
            return
        self.offset = f.tell()
        self._line += 1
        self._problem(f"line {self._line}: longer than {MAX_LINE_BYTES} bytes; skipped")

    def _problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)


def _event(line: bytes) -> Event | None:
    """The event on one line, or None for a blank, damaged or invalid line."""
    if len(line) > MAX_LINE_BYTES + 1 or not line.strip():
        return None
    try:
        return validate(orjson.loads(line))
    except (orjson.JSONDecodeError, EventError):
        return None
