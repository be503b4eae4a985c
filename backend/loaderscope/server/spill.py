"""A run's trace file on disk: every event appended as it arrives, readable back by seq.

The format is the ◆ trace format of ``loaderscope.trace`` (JSON Lines): a header line
``{"format": "loaderscope-trace", "version": 1, "run": ..., ...}`` then one event per line, in seq
order from 0; ``trace.read_trace`` reads it. What this adds to ``trace.TraceWriter``: an offset
index, so the store can read any seq range back while the run goes on. Writing everything (not
only what memory evicts) keeps the file a complete record at all times, so the store can drop old
events from memory and still answer for them.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import IO, Any

import orjson

INDEX_EVERY = 256  # one byte offset remembered per this many events
WRITE_BUFFER = 1 << 20


class TraceSpill:
    """Append-only JSON Lines file with an offset index for reads by seq.

    Written from the server's event loop only; ``read`` may run in another thread, and only
    reads bytes that ``flush`` has already handed to the OS.
    """

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        """``header`` is the first line as ``loaderscope.trace.header()`` makes it."""
        self.path = path
        # "x": a trace is never truncated, whatever id a producer reuses (FileExistsError instead)
        self._file = path.open("xb", buffering=WRITE_BUFFER)
        line = orjson.dumps(header) + b"\n"
        self._file.write(line)
        self._pos = len(line)
        self._flushed = 0
        self._offsets: list[int] = []  # byte offset of seq i * INDEX_EVERY
        self.count = 0
        self.closed = False

    def write_many(self, lines: list[bytes]) -> None:
        """Append the next events (already encoded; the first one's seq == self.count)."""
        if not lines:
            return
        # line i starts at self._pos + before[i] + i (the lengths of the lines before it, and their newlines)
        before = list(itertools.accumulate(map(len, lines), initial=0))
        first = -self.count % INDEX_EVERY  # the first line whose seq is a multiple of INDEX_EVERY
        self._offsets.extend(self._pos + before[i] + i for i in range(first, len(lines), INDEX_EVERY))
        self._file.write(b"\n".join(lines) + b"\n")
        self._pos += before[-1] + len(lines)
        self.count += len(lines)

    def flush(self) -> None:
        if not self.closed:
            self._file.flush()
            self._flushed = self._pos

    def close(self) -> None:
        if not self.closed:
            self.flush()
            self._file.close()
            self.closed = True

    def open(self) -> IO[bytes]:
        return self.path.open("rb")

    @property
    def size(self) -> int:
        """Bytes written so far, flushed or not."""
        return self._pos

    @property
    def flushed_bytes(self) -> int:
        """Bytes of the file that are complete lines on disk (header included)."""
        return self._flushed

    def read(self, start: int, count: int, max_bytes: int | None = None) -> list[bytes]:
        """Events ``start .. start+count-1`` (fewer at the end, or past ``max_bytes`` after the first),
        as encoded lines without newline.

        Call ``flush`` first (from the writing thread): unflushed events are not returned.
        """
        if start < 0 or start >= self.count or count <= 0:
            return []
        block = start // INDEX_EVERY
        lines: list[bytes] = []
        budget = max_bytes if max_bytes is not None else -1
        with self.path.open("rb") as f:
            f.seek(self._offsets[block])
            limit = self._flushed
            seq = block * INDEX_EVERY
            while len(lines) < count and f.tell() < limit:
                line = f.readline()
                if not line.endswith(b"\n"):
                    break  # a partial line: not flushed yet
                if seq >= start:
                    budget -= len(line)
                    if lines and max_bytes is not None and budget < 0:
                        break
                    lines.append(line[:-1])
                seq += 1
        return lines
