"""What the run list needs to know about a trace file, without parsing its events.

A logdir can hold hundreds of traces of millions of events; listing them must not parse them.
``quick_index`` parses the header, the first event (``run_start``: name, job, rank, world size,
mode) and the last complete line (``run_end`` and its ``stats``), and counts the file's complete
lines and its yields in its bytes, at disk speed (``bytes.count``), without parsing them: the number of
events is what the file holds, not what its last line says (a last line that says ``seq 0`` made a
2.2M-event file look like one event, and the sweep budget loaded it all before refusing it). A file
is read within ``MAX_INDEX_BYTES`` and ``INDEX_SECONDS``, fixed before the work, from the descriptor
opened once (its size is the descriptor's). The result is kept in a sidecar ``<trace>.idx.json``
(written by the server, next to the trace, or in the user's cache when others can write there:
``Storage.sidecar_path``) with the file's size and mtime; a dashboard that starts again reads the
sidecar instead of the trace while both are unchanged. A sidecar is input like any other: one
that does not validate (``Sidecar``, strictly typed) is treated as absent, and the trace indexed.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

import orjson
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from loaderscope.events import EventError, recording_of, validate
from loaderscope.server.logdir.storage import Entry, Storage
from loaderscope.traces.jsonl import MAX_LINE_BYTES, MAX_TRACE_BYTES, TraceError, check_header

SIDECAR_FORMAT = "loaderscope-index"
SIDECAR_VERSION = 2  # 2: an index says its run's recording
TAIL_BYTES = MAX_LINE_BYTES + 1  # the last complete line is within this much of the end
COUNT_CHUNK = 8 << 20
FIRST_EVENT_BYTES = 2 * (MAX_LINE_BYTES + 1)  # blank lines before the first event are read up to this much
MAX_INDEX_BYTES = MAX_TRACE_BYTES  # a longer file is not indexed (nor read): what `loaderscope` reads of a trace
INDEX_SECONDS = 120.0  # reading one file to index it (4 GiB from a slow disk or store); then it is unreadable
# How a yield looks in a trace line (orjson writes no spaces; json.dumps does): counted, not parsed.
YIELD_MARKS = (b'"kind":"yield"', b'"kind": "yield"')


Count = Annotated[int, Field(ge=0)]


@dataclass
class Index:
    """A trace file as listed: its size and mtime when indexed, and the run's brief facts."""

    __pydantic_config__ = ConfigDict(strict=True)  # how a sidecar's index is validated

    size: Count
    mtime_ns: Count
    created: float | None = None
    scenario: str | None = None
    mode: str = ""
    name: str | None = None
    job: str | None = None
    rank: Count = 0
    world_size: Annotated[int, Field(ge=1)] = 1
    events: Count = 0  # the complete lines after the header (each an event, unless damaged); once read, the events
    batches: Count | None = None  # run_end.stats, else the yields counted in the file's bytes
    reason: str | None = None  # run_end's reason; None: no run_end (yet)
    run: str | None = None  # the header's run id: a dashboard's own file keeps its run's id across restarts
    origin: str | None = None  # the header's origin ("external": a producer that may resume into it)
    recording: str | None = None  # events.recording_of its run_start: a file of the same recording is a copy
    torn: bool = False  # the file ends in an incomplete line
    problem: str | None = None  # why the file cannot be read as a trace
    brief: dict[str, Any] = field(default_factory=dict)  # the run's full brief, once it was read whole

    def matches(self, entry: Entry) -> bool:
        return self.size == entry.size and self.mtime_ns == entry.mtime_ns


@dataclass
class Sidecar:
    """A sidecar file, as validated when read."""

    __pydantic_config__ = ConfigDict(strict=True)

    format: Literal["loaderscope-index"]
    version: Literal[2]
    index: Index


SIDECAR = TypeAdapter(Sidecar)
MAX_SIDECAR_BYTES = 1 << 20


def load_sidecar(storage: Storage, trace_path: str, entry: Entry) -> Index | None:
    """The sidecar's index if it describes the file as it is now; None if missing, stale, damaged or invalid."""
    path = storage.sidecar_path(trace_path)
    if path is None:
        return None
    try:
        with storage.open(path) as f:
            index = SIDECAR.validate_json(f.read(MAX_SIDECAR_BYTES + 1)).index
    except (OSError, ValidationError):
        return None
    return index if index.matches(entry) else None


def save_sidecar(storage: Storage, trace_path: str, index: Index) -> None:
    """Write the sidecar (atomically: a reader never sees half of one).

    Raises:
        OSError: the directory is not writable (the logdir is then indexed at every start).
    """
    path = storage.sidecar_path(trace_path)
    if path is None:
        raise OSError(f"others can write the directory of {trace_path}, and there is no private cache to keep "
                      "its index in (set XDG_CACHE_HOME)")
    body = {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "index": asdict(index)}
    storage.write_atomic(path, orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS, default=str))


def quick_index(storage: Storage, path: str) -> Index:
    """Index a trace from its first two lines and its last complete line. Blocking.

    A file that is not a trace, or cannot be read, gets an index with ``problem`` set.
    """
    entry = Entry(path, 0, 0)
    try:
        entry = storage.stat(path)
        with storage.open(path) as f:
            return _read_index(f, entry, path)
    except OSError as exc:
        return Index(size=0, mtime_ns=0, problem=f"cannot read {path}: {exc.strerror or exc}")
    except TraceError as exc:
        return Index(size=entry.size, mtime_ns=entry.mtime_ns, problem=str(exc))


def _read_index(f: Any, entry: Entry, source: str) -> Index:
    index = Index(size=entry.size, mtime_ns=entry.mtime_ns)
    deadline = time.monotonic() + INDEX_SECONDS
    end = f.seek(0, os.SEEK_END)  # the open file's size: the path may name another file by now
    if end > MAX_INDEX_BYTES:
        raise TraceError(f"{source} holds {end:,} bytes, more than the {MAX_INDEX_BYTES >> 30} GiB the dashboard "
                         "reads of one trace: split the run")
    f.seek(0)
    first = f.readline(MAX_LINE_BYTES + 1)
    if not first.endswith(b"\n"):
        if entry.size == 0 or (len(first) <= MAX_LINE_BYTES and first.lstrip().startswith(b"{")):
            index.torn = True  # the header itself is still being written
            return index
        raise TraceError(f"{source} is not a loaderscope trace: no header line")
    head = check_header(first, source)
    index.created, index.scenario, index.mode = head.get("created"), head.get("scenario"), head.get("mode") or ""
    index.run, index.origin = _text(head.get("run")), _text(head.get("origin"))
    body = len(first)
    start = _first_event(f)
    if start is not None and start["kind"] == "run_start":
        take_run_start(index, start)
    last, index.torn = _last_line(f, end)
    if last is not None:
        take_last(index, last)
    # the yields only where no stats say the batches: a pass over the bytes less
    index.events, yields = _count(f, body, end, deadline, source, yields=index.batches is None)
    if index.batches is None:
        index.batches = yields
    return index


def _first_event(f: Any) -> dict[str, Any] | None:
    """The first non-blank line's event, if it lies within ``FIRST_EVENT_BYTES``."""
    read = 0
    while read < FIRST_EVENT_BYTES:
        line = f.readline(MAX_LINE_BYTES + 1)
        read += len(line)
        if not line.endswith(b"\n"):
            return None
        if line.strip():
            return _parse(line)
    return None


def take_run_start(index: Index, start: dict[str, Any]) -> None:
    index.mode = start.get("mode") or index.mode
    index.scenario = start.get("scenario") or index.scenario
    index.name = start.get("name")
    index.job = start.get("job")
    rank = start.get("rank")
    index.rank = rank if isinstance(rank, int) else 0
    world = start.get("world_size")
    index.world_size = world if isinstance(world, int) and world > 0 else 1
    index.recording = recording_of(start)


def _last_line(f: Any, size: int) -> tuple[dict[str, Any] | None, bool]:
    """The last complete line's event (None if it is not one), and whether a torn line follows it."""
    f.seek(max(0, size - TAIL_BYTES))
    tail = f.read(TAIL_BYTES)
    torn = not tail.endswith(b"\n")
    lines = tail.rstrip(b"\n").split(b"\n") if not torn else tail.split(b"\n")[:-1]
    for line in reversed(lines):
        if line.strip():
            return _parse(line), torn
    return None, torn


def take_last(index: Index, last: dict[str, Any]) -> None:
    if isinstance(last.get("seq"), int):
        index.events = last["seq"] + 1
    if last["kind"] == "run_end":
        index.reason = str(last.get("reason") or "done")
        stats = last.get("stats")
        if isinstance(stats, dict) and isinstance(stats.get("batches"), int):
            index.batches = stats["batches"]


def _count(f: Any, start: int, end: int, deadline: float, source: str, yields: bool) -> tuple[int, int]:
    """The complete lines in bytes ``start..end`` of the file, and the yields among them (0 unless asked).

    Raises:
        TraceError: past ``deadline``.
    """
    f.seek(start)
    lines = found = 0
    carry = b""
    for offset in range(start, end, COUNT_CHUNK):
        chunk = f.read(min(COUNT_CHUNK, end - offset))
        if not chunk:
            break  # shorter than it was: counted as far as it goes
        lines += chunk.count(b"\n")
        if yields:
            block = carry + chunk
            found += sum(block.count(mark) for mark in YIELD_MARKS)
            carry = block[-len(YIELD_MARKS[1]):]  # a mark cut by the chunk's end is counted with the next
            found -= sum(carry.count(mark) for mark in YIELD_MARKS)
        if time.monotonic() > deadline:
            raise TraceError(f"{source}: reading it to count its events took over {INDEX_SECONDS:g} s (a slow disk "
                             "or store); it is indexed again when it changes, or at the next start")
    return lines, found


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        return validate(orjson.loads(line))
    except (orjson.JSONDecodeError, EventError):
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
