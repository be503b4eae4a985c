"""A run's trace file on disk: every event appended as it arrives, readable back by seq.

The format is the ◆ trace format of ``loaderscope.traces.jsonl`` (JSON Lines): a header line
``{"format": "loaderscope-trace", "version": 1, "run": ..., ...}`` then one event per line, in seq
order from 0; ``jsonl.read_trace`` reads it. What this adds to ``jsonl.TraceWriter``: an offset
index, so the store can read any seq range back while the run goes on. Writing everything (not
only what memory evicts) keeps the file a complete record at all times, so the store can drop old
events from memory and still answer for them.
"""

from __future__ import annotations

import errno
import io
import itertools
import os
import stat
from pathlib import Path
from typing import IO, Any

import orjson

INDEX_EVERY = 256  # one byte offset remembered per this many events
HEADER_BYTES = 64 * 1024  # a header line longer than this is not read for its fields (header_of)
WRITE_BUFFER = 1 << 20


def header_of(path: Path) -> dict[str, Any]:
    """The header line of a trace this dashboard wrote: a regular file opened without following a link
    or blocking (its first HEADER_BYTES; ``{}`` for a header that is not a JSON object there).

    Raises:
        OSError: it cannot be read, or is not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EPERM, "not a regular file: not read", str(path))
        line = os.pread(fd, HEADER_BYTES, 0).split(b"\n", 1)[0]
    finally:
        os.close(fd)
    try:
        head = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {}
    return head if isinstance(head, dict) else {}


class TraceSpill:
    """Append-only JSON Lines file with an offset index for reads by seq.

    Written from the server's event loop only; ``read`` may run in another thread, and only
    reads bytes that ``flush`` has already handed to the OS.
    """

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        """``header`` is the first line as ``loaderscope.traces.jsonl.header()`` makes it.

        The file is created with the first event, not before: a producer that connects and leaves
        without sending one leaves no header-only file behind (in a logdir, every file is a run).
        """
        self.path = path
        self._head = orjson.dumps(header) + b"\n"
        self._file: IO[bytes] | None = None
        self._pos = len(self._head)
        self._flushed = len(self._head)  # the header: served from memory until the file exists
        self._offsets: list[int] = []  # byte offset of seq i * INDEX_EVERY
        self.count = 0
        self.closed = False

    @classmethod
    def resume(cls, path: Path, *, count: int, offsets: list[int], end: int) -> TraceSpill:
        """Go on appending to a trace a dashboard wrote before it restarted: its first ``end`` bytes are
        the header and ``count`` whole event lines (``offsets`` as ``read`` needs them); what follows
        (a torn line) is cut off.

        Raises:
            OSError: it is not a regular file of this user's (a link planted in its place, say).
        """
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                raise OSError(errno.EPERM, "not a regular file of this user's: not written to", str(path))
            file = os.fdopen(fd, "r+b", buffering=WRITE_BUFFER)
        except BaseException:
            os.close(fd)
            raise
        file.truncate(end)
        file.seek(end)
        spill = cls(path, {})
        spill._file, spill._pos, spill._flushed = file, end, end
        spill._offsets, spill.count = list(offsets), count
        return spill

    def reopened(self) -> TraceSpill:
        """This trace, closed (its run moved to disk), opened again to append from its last flushed line.

        Raises:
            OSError: it is gone, or no longer a regular file of this user's (``resume``).
        """
        return TraceSpill.resume(self.path, count=self.count, offsets=self._offsets, end=self._flushed)

    @property
    def created(self) -> bool:
        return self._file is not None

    def write_many(self, lines: list[bytes]) -> None:
        """Append the next events (already encoded; the first one's seq == self.count)."""
        if not lines:
            return
        if self._file is None:
            # "x": a trace is never truncated, whatever id a producer reuses (FileExistsError instead)
            self._file = self.path.open("xb", buffering=WRITE_BUFFER)
            self._file.write(self._head)
            self._file.flush()  # readers may read the header from the file from now on
        # line i starts at self._pos + before[i] + i (the lengths of the lines before it, and their newlines)
        before = list(itertools.accumulate(map(len, lines), initial=0))
        first = -self.count % INDEX_EVERY  # the first line whose seq is a multiple of INDEX_EVERY
        self._offsets.extend(self._pos + before[i] + i for i in range(first, len(lines), INDEX_EVERY))
        self._file.write(b"\n".join(lines) + b"\n")
        self._pos += before[-1] + len(lines)
        self.count += len(lines)

    def flush(self) -> None:
        if not self.closed and self._file is not None:
            self._file.flush()
            self._flushed = self._pos

    def close(self) -> None:
        if not self.closed:
            self.flush()
            if self._file is not None:
                self._file.close()
            self.closed = True

    def open(self) -> IO[bytes]:
        return self.path.open("rb") if self._file is not None else io.BytesIO(self._head)

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
