"""Parquet traces in a logdir (``traces/parquet.py``): a directory ``NAME.trace.parquet/`` of part files,
listed and followed as one run, as ``tracefile.TraceFile`` follows a JSON-lines file.

Its writer renames each part into place whole, so a part seen is a part complete: following the
trace is reading the parts not read yet, in order. The store renumbers the events as it does for
JSON lines (``seq = i``, ``run`` = the dashboard's id), and ``read`` reads any seq range back from
its part. pyarrow is the ``loaderscope[columnar]`` extra: without it, such a trace is listed with
the problem and the fix.
"""

from __future__ import annotations

import bisect
import io
import posixpath
from typing import IO, Any

import orjson

from loaderscope.events import Event
from loaderscope.server.budgets import PARQUET_FOOTER_BYTES, PARQUET_PART_BYTES, PARQUET_PART_ROWS
from loaderscope.server.logdir.index import Index, take_last, take_run_start
from loaderscope.server.logdir.storage import Entry, Storage
from loaderscope.server.logdir.tracefile import TraceFile
from loaderscope.traces.jsonl import SUFFIXES, TraceError, columnar_available

PARQUET_SUFFIX = SUFFIXES["parquet"]
NEEDS_PYARROW = ("is a Parquet trace: listing it needs pyarrow "
                 "(pip install 'loaderscope[columnar]' where the dashboard runs)")


def is_part(path: str) -> bool:
    """Whether ``path`` is a complete part file of a Parquet trace (not its writer's unrenamed dot file)."""
    directory, name = posixpath.split(path)
    return directory.endswith(PARQUET_SUFFIX) and name.startswith("part-") and name.endswith(".parquet")


def grouped(entries: list[Entry]) -> list[Entry]:
    """Each Parquet trace among ``entries`` (a listing's files) as one entry: the directory, the total
    size of its parts and the newest mtime, so a new part reads as the file growing."""
    parts: dict[str, list[Entry]] = {}
    for entry in entries:
        if is_part(entry.path):
            parts.setdefault(posixpath.dirname(entry.path), []).append(entry)
    return [_entry(directory, found) for directory, found in parts.items()]


def trace_entry(storage: Storage, directory: str) -> Entry:
    """The entry of one Parquet trace as it is now (``grouped`` for one directory). Raises OSError."""
    found = [entry for entry in storage.files(directory) if is_part(entry.path)]
    if not found:
        raise OSError(f"{directory}: no part file")
    return _entry(directory, found)


def _entry(directory: str, parts: list[Entry]) -> Entry:
    problem = next((entry.problem for entry in parts if entry.problem), None)
    size = -1 if problem else sum(entry.size for entry in parts)
    return Entry(directory, size, max(entry.mtime_ns for entry in parts), problem)


def part_paths(storage: Storage, directory: str) -> list[Entry]:
    return sorted((entry for entry in storage.files(directory) if is_part(entry.path)), key=lambda e: e.path)


def read_part(storage: Storage, path: str, only: slice | None = None) -> tuple[dict[str, Any], list[Event]]:
    """A part's header and events (``only`` those rows), within the budgets (``budgets.PARQUET_PART_*``).

    Raises:
        OSError: it cannot be read.
        TraceError: it is not a trace's part, or it is over a budget (then nothing of it was decoded).
    """
    from loaderscope.traces.parquet import read_part as read

    return read(_part_file(storage, path), path, only=only, max_rows=PARQUET_PART_ROWS,
                max_bytes=PARQUET_PART_BYTES)


def count_yields(storage: Storage, path: str) -> int:
    """The batches of a part, from its ``kind`` column alone. Raises OSError, TraceError."""
    from loaderscope.traces.parquet import count_kind

    return count_kind(_part_file(storage, path), "yield", path, max_rows=PARQUET_PART_ROWS,
                      max_bytes=PARQUET_PART_BYTES)


def _part_file(storage: Storage, path: str) -> IO[bytes]:
    """A part's bytes in memory (its footer is read from the end, its columns from anywhere), read to at
    most ``PARQUET_PART_BYTES``, its footer at most ``PARQUET_FOOTER_BYTES``. Raises OSError, TraceError."""
    from loaderscope.traces.parquet import over_budget

    with storage.open(path) as f:
        data = f.read(PARQUET_PART_BYTES + 1)
    if len(data) > PARQUET_PART_BYTES:
        raise over_budget(path, f"is over {PARQUET_PART_BYTES:,} bytes, more than a part may be here")
    footer = int.from_bytes(data[-8:-4], "little")  # Parquet ends: footer, its length (4 bytes LE), PAR1
    if footer > PARQUET_FOOTER_BYTES:
        raise over_budget(path, f"has a footer of {footer:,} bytes, "
                                f"more than the {PARQUET_FOOTER_BYTES:,} a part's may have here")
    return io.BytesIO(data)


def parquet_index(storage: Storage, path: str) -> Index:
    """Index a Parquet trace from its first part's header and run_start and its last part's last event
    (the batches: that event's stats, else the ``yield`` rows of every part's ``kind`` column).

    Every part read is checked against the budgets first: one over them makes the trace's ``problem``.
    """
    try:
        entry = trace_entry(storage, path)
    except OSError as exc:
        return Index(size=0, mtime_ns=0, problem=f"cannot read {path}: {exc.strerror or exc}")
    index = Index(size=entry.size, mtime_ns=entry.mtime_ns)
    if not columnar_available():
        index.problem = f"{path} {NEEDS_PYARROW}"
        return index
    try:
        parts = part_paths(storage, path)
        head, first = read_part(storage, parts[0].path, slice(0, 1))
        last = read_part(storage, parts[-1].path, slice(-1, None))[1]
        _take_events(index, head, first, last)
        if index.batches is None:
            index.batches = sum(count_yields(storage, part.path) for part in parts)
    except (OSError, TraceError) as exc:
        index.problem = str(exc)
    return index


def _take_events(index: Index, head: dict[str, Any], first: list[Event], last: list[Event]) -> None:
    index.created, index.scenario, index.mode = head.get("created"), head.get("scenario"), head.get("mode") or ""
    index.run = head.get("run") if isinstance(head.get("run"), str) else None
    index.origin = head.get("origin") if isinstance(head.get("origin"), str) else None
    if first and first[0]["kind"] == "run_start":
        take_run_start(index, first[0])
    if last:
        take_last(index, last[-1])


class ParquetTraceFile(TraceFile):
    """Tail of one Parquet trace: ``poll`` returns the events of the parts not read yet.

    ``offset`` and ``size`` count the bytes of the parts read and of all parts, so the follower's
    growth and shrink checks read them as a file's.
    """

    def __init__(self, storage: Storage, path: str, run_id: str) -> None:
        super().__init__(storage, path, run_id)
        self._parts: list[str] = []  # the parts read, in order
        self._starts: list[int] = []  # the index of each part's first event
        self._cached: tuple[str, list[Event]] | None = None  # the part ``read`` read last

    @property
    def offsets(self) -> list[int]:
        return []  # a producer never resumes into a Parquet trace (Logdir.resume takes its own files only)

    @property
    def flushed_bytes(self) -> int:
        return len(self._jsonl())

    def open(self) -> IO[bytes]:
        """What has been read, as a JSON-lines trace (what GET .../trace serves)."""
        return io.BytesIO(self._jsonl())

    def _jsonl(self) -> bytes:
        head = orjson.dumps(self.header or {}, option=orjson.OPT_NON_STR_KEYS)
        return b"\n".join([head, *self.read(0, self.count)]) + b"\n"

    def read(self, start: int, count: int, max_bytes: int | None = None) -> list[bytes]:
        if start < 0 or start >= self.count or count <= 0:
            return []
        lines: list[bytes] = []
        used = 0
        seq = start
        while seq < min(self.count, start + count):
            part = bisect.bisect_right(self._starts, seq) - 1
            events = self._events_of(self._parts[part])
            for event in events[seq - self._starts[part]:]:
                line = orjson.dumps({**event, "seq": seq, "run": self.run_id}, option=orjson.OPT_NON_STR_KEYS)
                used += len(line) + 1
                if lines and max_bytes is not None and used > max_bytes:
                    return lines
                lines.append(line)
                seq += 1
                if seq >= min(self.count, start + count):
                    break
        return lines

    def _events_of(self, path: str) -> list[Event]:
        if self._cached is None or self._cached[0] != path:
            self._cached = (path, read_part(self.storage, path)[1])
        return self._cached[1]

    def poll(self, max_bytes: int) -> list[Event]:
        """Events of the parts after those read (about ``max_bytes`` of parts at most).

        Raises:
            OSError: a part cannot be read.
            TraceError: a part is not a loaderscope trace's.
        """
        parts = part_paths(self.storage, self.path)
        self.size = sum(entry.size for entry in parts)
        events: list[Event] = []
        read = 0
        for entry in parts[len(self._parts):]:
            if events and read + entry.size > max_bytes:
                break
            head, part_events = read_part(self.storage, entry.path)
            self.header = self.header or head
            self._parts.append(entry.path)
            self._starts.append(self.count)
            self.count += len(part_events)
            self.offset += entry.size
            read += entry.size
            events += part_events
        return events
