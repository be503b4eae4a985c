"""What the run list needs to know about a trace file, without parsing its events.

A logdir can hold hundreds of traces of millions of events; listing them must not read them.
``quick_index`` reads the header, the first event (``run_start``: name, job, rank, world size,
mode) and the last complete line (``run_end`` and its ``stats``, or the last seq): a few
kilobytes per file whatever its length. The result is kept in a sidecar ``<trace>.idx.json``
(written by the server, next to the trace, or in the user's cache when others can write there:
``Storage.sidecar_path``) with the file's size and mtime; a dashboard that starts again reads the
sidecar instead of the trace while both are unchanged. A sidecar is input like any other: one
that does not validate (``Sidecar``, strictly typed) is treated as absent, and the trace indexed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

import orjson
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from loaderscope.events import EventError, recording_of, validate
from loaderscope.server.logdir.storage import Entry, Storage
from loaderscope.trace import MAX_LINE_BYTES, TraceError, check_header

SIDECAR_FORMAT = "loaderscope-index"
SIDECAR_VERSION = 2  # 2: an index says its run's recording
TAIL_BYTES = MAX_LINE_BYTES + 1  # the last complete line is within this much of the end
COUNT_CHUNK = 8 << 20
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
    events: Count = 0  # the last event's seq + 1 (the producer's numbering)
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
    first = f.readline(MAX_LINE_BYTES + 1)
    if not first.endswith(b"\n"):
        if entry.size == 0 or (len(first) <= MAX_LINE_BYTES and first.lstrip().startswith(b"{")):
            index.torn = True  # the header itself is still being written
            return index
        raise TraceError(f"{source} is not a loaderscope trace: no header line")
    head = check_header(first, source)
    index.created, index.scenario, index.mode = head.get("created"), head.get("scenario"), head.get("mode") or ""
    index.run, index.origin = _text(head.get("run")), _text(head.get("origin"))
    start = _first_event(f)
    if start is not None and start["kind"] == "run_start":
        take_run_start(index, start)
    last, index.torn = _last_line(f, entry.size)
    if last is not None:
        take_last(index, last)
    if index.batches is None:  # no stats to read it from: count, at disk speed, without parsing
        index.batches = _count_yields(f)
    return index


def _first_event(f: Any) -> dict[str, Any] | None:
    while True:
        line = f.readline(MAX_LINE_BYTES + 1)
        if not line.endswith(b"\n"):
            return None
        if line.strip():
            return _parse(line)


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


def _count_yields(f: Any) -> int:
    f.seek(0)
    count, carry = 0, b""
    while chunk := f.read(COUNT_CHUNK):
        block = carry + chunk
        count += sum(block.count(mark) for mark in YIELD_MARKS)
        carry = block[-len(YIELD_MARKS[1]):]  # a mark cut by the chunk's end is counted with the next
        count -= sum(carry.count(mark) for mark in YIELD_MARKS)
    return count


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        return validate(orjson.loads(line))
    except (orjson.JSONDecodeError, EventError):
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
