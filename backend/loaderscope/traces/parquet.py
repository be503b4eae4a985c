"""◆ Columnar traces: Parquet that DuckDB, Spark, Trino and pyarrow read natively (the optional extra
``loaderscope[columnar]``, which brings pyarrow).

A trace is a directory ``NAME.trace.parquet/`` of part files ``part-000000.parquet``, … in event
order. Each part is a closed, complete Parquet file: a Parquet file is unreadable without its footer,
so a writer killed mid-run must never leave the only copy of its events in an open file. Parts are
written under a random dot name and renamed into place (``os.replace``, atomic), so every
``part-*.parquet`` an engine sees is whole; the writer makes them through its directory's descriptor
and never follows a link (``traces/safefiles.py``: a team logdir is writable by others). A killed writer
leaves the parts it closed, a readable prefix, which ``read_parquet_trace`` marks truncated (no
``run_end`` at its end, as for JSON lines). Engines read the directory as one dataset:
``read_parquet('NAME.trace.parquet/*.parquet')`` in DuckDB, the directory's path in Spark, Trino or
``pyarrow.dataset``.

Columns are named as the events' top-level fields and typed from the contract (contract/events.py):
an integer field is the smallest int that holds its bounds, a number (``int | float``) is float64
(JSON's own numbers: exact for every reader), a string is a dictionary-encoded string, a bool a bool;
null where an event lacks the field. What has no column of its own (lists, objects, a field typed
differently in two kinds, an unknown kind's fields) goes to the JSON text column ``extra``, and so
does the original of a value that a column would change (an integer in a float64 column), so that
the same events come back. The trace header (``jsonl.header``) is each part's key-value metadata,
under the key ``loaderscope-trace``, as JSON.

Named for its format, beside ``jsonl.py``; the extra that brings pyarrow keeps the name ``columnar``.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, cast

import msgspec.inspect as mi
import orjson

# pyarrow is the optional `columnar` extra, not a runtime dependency: this module is imported only
# where trace.columnar_available() said it imports (else JSON lines are written and that is said once)
import pyarrow as pa
import pyarrow.parquet as pq

from loaderscope.contract.events import COMMON_FIELDS, KINDS, MAX_NUMBER
from loaderscope.events import Event, EventError, validate
from loaderscope.traces.header import FORMAT, TraceError, check_header, header
from loaderscope.traces.safefiles import open_directory, replace_whole, touch

SUFFIX = ".trace.parquet"
PART_GLOB = "part-*.parquet"
METADATA_KEY = b"loaderscope-trace"
EXTRA = "extra"  # the JSON text column: every field without a column of its own
INTS = "int_fields"  # the float64 columns whose value was an integer (``nbytes,pickled``): they come back as ints
ROW_GROUP_EVENTS = 65_536  # a part is written at this many events ...
PART_SECONDS = 10.0  # ... or this long after its first event, whichever comes first ($LOADERSCOPE_PART_SECONDS)
PART_SECONDS_ENV = "LOADERSCOPE_PART_SECONDS"  # at most what a killed writer loses; smaller means more files
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3  # pyarrow's zstd levels 1-22; bench/trace_size.py: 3 is most of the gain for little CPU
STATISTICS = ("seq", "t", "rank", "epoch", "idx", "worker")  # min/max kept per part: what queries filter on

_INTS = ((pa.int8(), 2**7), (pa.int16(), 2**15), (pa.int32(), 2**31))
_STRING = pa.dictionary(pa.int32(), pa.string())


def _arrow_type(info: Any) -> pa.DataType | None:
    """The column type of one contract field type, or None for a field that goes to ``extra``."""
    if isinstance(info, mi.Metadata):  # a field's description around its type
        return _arrow_type(info.type)
    kinds = [t for t in getattr(info, "types", (info,)) if not isinstance(t, mi.NoneType)]
    if all(isinstance(t, mi.IntType | mi.FloatType) for t in kinds) and any(isinstance(t, mi.FloatType) for t in kinds):
        return pa.float64()
    if len(kinds) != 1:
        return None
    only = kinds[0]
    if isinstance(only, mi.IntType):
        low = only.ge if only.ge is not None else -2**63
        high = only.le if only.le is not None else (only.lt - 1 if only.lt is not None else 2**63 - 1)
        return next((t for t, bound in _INTS if -bound <= low and high < bound), pa.int64())
    if isinstance(only, mi.StrType):
        return _STRING
    if isinstance(only, mi.BoolType):
        return pa.bool_()
    return None


def _columns() -> dict[str, pa.DataType]:
    """Every top-level field of the contract that has one type wherever it appears, common fields first."""
    seen: dict[str, pa.DataType | None] = {}
    for cls in KINDS:
        for field in cast(mi.StructType, mi.type_info(cls)).fields:
            typed = _arrow_type(field.type)
            if field.name in seen and seen[field.name] != typed:
                typed = None  # typed two ways by two kinds: its values go to extra
            seen[field.name] = typed
    seen["kind"] = _STRING
    ordered = [*COMMON_FIELDS, *(name for name in seen if name not in COMMON_FIELDS)]
    return {name: typed for name in ordered if (typed := seen[name]) is not None}


COLUMNS: dict[str, pa.DataType] = _columns()
SCHEMA = pa.schema([*(pa.field(name, typed) for name, typed in COLUMNS.items()), pa.field(EXTRA, pa.string()),
                    pa.field(INTS, _STRING)])
_PY: dict[str, type] = {name: float if pa.types.is_floating(t) else bool if pa.types.is_boolean(t)
                        else int if pa.types.is_integer(t) else str for name, t in COLUMNS.items()}
_BOUND: dict[str, int] = {name: next((b for t, b in _INTS if t == typed), 2**63)
                          for name, typed in COLUMNS.items() if pa.types.is_integer(typed)}
# How each column is encoded. The int64 columns (seq, idx, epoch, ...) take DELTA_BINARY_PACKED: a
# dictionary of seq (a new value each row) overflows and falls back to PLAIN, 8 bytes a row that zstd
# then works through; deltas of 1 pack to nothing. A simulated 1M-event trace: 2.4 bytes an event
# instead of 7.0, and a third of the zstd work for the page that reads it (frontend/js/views/parquet-trace.js).
# The clock's floats (t, and the durations measured on it) are new in nearly every row: a dictionary of
# them is the values again plus an index each (t cost 8.4 bytes an event of a real recording), so they
# take BYTE_STREAM_SPLIT straight away (each byte of the float in a stream of its own: the exponent's
# and the high mantissa's bytes repeat, and zstd takes them; 3.0 bytes an event for t).
# The rest take a dictionary (n, nbytes, pickled repeat; strings repeat).
DELTA_COLUMNS = [name for name, typed in COLUMNS.items() if typed == pa.int64()]
CLOCK_COLUMNS = [name for name in ("t", "dt", "wait", "elapsed", "seconds", "h2d", "compute", "h2d_pageable",
                                   "pickle_s", "duration", "wall_start", "others") if name in COLUMNS]
DICTIONARY_COLUMNS = [name for name in SCHEMA.names if name not in DELTA_COLUMNS and name not in CLOCK_COLUMNS]


def to_table(events: Iterable[Mapping[str, Any]]) -> pa.Table:
    """The events as one table of ``SCHEMA`` (the columns, then ``extra``)."""
    rows = list(events)
    columns: dict[str, list[Any]] = {name: [None] * len(rows) for name in COLUMNS}
    extras: list[str | None] = [None] * len(rows)
    ints: list[str | None] = [None] * len(rows)
    py, bound = _PY, _BOUND
    for i, event in enumerate(rows):
        extra: dict[str, Any] | None = None
        as_int: list[str] | None = None
        for key, value in event.items():
            want = py.get(key)
            kind = type(value)
            if kind is want and (kind is not int or -bound[key] <= value < bound[key]):
                columns[key][i] = value
            elif want is float and kind is int and -MAX_NUMBER <= value <= MAX_NUMBER:
                columns[key][i] = value  # exact in float64; named in int_fields to come back an int
                as_int = as_int or []
                as_int.append(key)
            elif key == "kind" and isinstance(value, str):  # a producer's Kind enum: its text
                columns[key][i] = str(value)
            else:  # no column, a value of another type or range, or a null (which a missing field is not)
                extra = extra or {}
                extra[key] = value
        if extra is not None:
            extras[i] = orjson.dumps(extra, option=orjson.OPT_NON_STR_KEYS).decode()
        if as_int is not None:
            ints[i] = ",".join(as_int)
    arrays = [pa.array(columns[name], type=typed) for name, typed in COLUMNS.items()]
    return pa.Table.from_arrays([*arrays, pa.array(extras, type=pa.string()), pa.array(ints, type=_STRING)],
                                schema=SCHEMA)


def from_table(table: pa.Table) -> list[dict[str, Any]]:
    """The events of a table written by ``to_table`` (or of any table with some of its columns)."""
    # columns null throughout are left out: most of a part's rows are per-batch kinds with a few fields
    names = [name for name in table.column_names
             if name not in (EXTRA, INTS) and table.column(name).null_count < table.num_rows]
    values = [table.column(name).to_pylist() for name in names]
    missing = [None] * table.num_rows
    extras = table.column(EXTRA).to_pylist() if EXTRA in table.column_names else missing
    ints = table.column(INTS).to_pylist() if INTS in table.column_names else missing
    events: list[dict[str, Any]] = []
    for i, (extra, as_int) in enumerate(zip(extras, ints, strict=True)):
        event = {name: column[i] for name, column in zip(names, values, strict=True) if column[i] is not None}
        if as_int is not None:
            event.update((name, int(event[name])) for name in as_int.split(","))
        if extra is not None:
            event.update(orjson.loads(extra))
        events.append(event)
    return events


def parts(path: str | os.PathLike[str]) -> list[Path]:
    """The complete part files of a trace, in order (one file given is its own only part)."""
    path = Path(path)
    return sorted(path.glob(PART_GLOB)) if path.is_dir() else [path]


def part_header(file: pq.ParquetFile, source: str) -> dict[str, Any]:
    """The trace header kept in a part's key-value metadata; TraceError when it is not a trace's."""
    meta = file.schema_arrow.metadata or {}
    if METADATA_KEY not in meta:
        raise TraceError(f"{source} is a Parquet file but not a loaderscope trace: its key-value metadata has no "
                         f"{METADATA_KEY.decode()!r} header "
                         "(write one with `loaderscope export FILE -o NAME.trace.parquet`)")
    return check_header(meta[METADATA_KEY], source)


def read_part(part: Path | IO[bytes], name: str | None = None, *, only: slice | None = None,
              max_rows: int | None = None, max_bytes: int | None = None) -> tuple[dict[str, Any], list[Event]]:
    """The header and validated events of one part file (a path, or an open binary file named ``name``);
    TraceError names the file and the row.

    ``only``: the rows to make events of (``slice(-1, None)``: the last), the others left as columns.
    ``max_rows``, ``max_bytes``: a part whose footer says more rows, or more bytes of decoded column
    data, is refused before a row is decoded (``check_part``).
    """
    source = _source(part, name)
    try:
        file = pq.ParquetFile(part)
        head = part_header(file, source)
        check_part(file, source, max_rows, max_bytes)
        table = file.read()
    except (OSError, pa.ArrowException) as exc:
        raise TraceError(f"{source}: not a readable Parquet file ({exc})") from None
    first, stop, _ = (only or slice(None)).indices(table.num_rows)
    events: list[Event] = []
    for number, row in enumerate(from_table(table.slice(first, max(0, stop - first))), start=first):
        try:
            events.append(validate(row))
        except EventError as exc:
            raise TraceError(f"{source}, row {number}: {exc}") from None
    return head, events


def count_kind(part: Path | IO[bytes], kind: str, name: str | None = None, *, max_rows: int | None = None,
               max_bytes: int | None = None) -> int:
    """How many events of ``kind`` a part holds, from its ``kind`` column alone (``read_part``'s checks)."""
    source = _source(part, name)
    try:
        file = pq.ParquetFile(part)
        part_header(file, source)
        check_part(file, source, max_rows, max_bytes)
        kinds: list[str | None] = file.read(columns=["kind"]).column("kind").to_pylist()
    except (OSError, KeyError, pa.ArrowException) as exc:
        raise TraceError(f"{source}: not a readable Parquet file ({exc})") from None
    return kinds.count(kind)


def check_part(file: pq.ParquetFile, source: str, max_rows: int | None, max_bytes: int | None) -> None:
    """TraceError when the footer says the part holds over ``max_rows`` rows or ``max_bytes`` of
    decoded column data (None: no limit).

    The footer says both before anything is decoded: a part of millions of alike rows is a few
    hundred KB of zstd and decodes to gigabytes of Python objects (2M rows: 1.4 GB and 19 s).
    """
    meta = file.metadata
    decoded = sum(meta.row_group(number).total_byte_size for number in range(meta.num_row_groups))
    if max_rows is not None and meta.num_rows > max_rows:
        raise over_budget(source, f"holds {meta.num_rows:,} events, more than the {max_rows:,} a part may hold here")
    if max_bytes is not None and decoded > max_bytes:
        raise over_budget(source, f"decodes to {decoded:,} bytes of columns, "
                                  f"more than the {max_bytes:,} a part may here")


def over_budget(source: str, what: str) -> TraceError:
    """The refusal of a part over a reader's budget: what it is over, why that matters, and the fix."""
    return TraceError(f"{source} {what}: not read, so that decoding it cannot take the reader's memory "
                      f"(loaderscope writes parts of at most {ROW_GROUP_EVENTS:,} events; a real trace can be "
                      "rewritten in such parts: loaderscope export TRACE -o NEW.trace.parquet)")


def _source(part: Path | IO[bytes], name: str | None) -> str:
    return name or (os.fspath(part) if isinstance(part, Path) else "a Parquet file")


def read_parquet_trace(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Event], bool]:
    """Header, events and whether the trace is truncated (``jsonl.read_trace_tolerant`` for Parquet).

    A writer that was killed, or is still writing, leaves the parts it closed and maybe a dot file
    it never renamed: the events of the closed parts come back, marked truncated.
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such file or directory")
    found = parts(path)
    if not found:
        raise TraceError(f"{path} holds no {PART_GLOB} part: not a Parquet trace, or its writer was killed "
                         "before its first part (nothing to read)")
    head: dict[str, Any] | None = None
    events: list[Event] = []
    for part in found:
        part_head, part_events = read_part(part)
        head = head or part_head
        events += part_events
    assert head is not None
    torn = path.is_dir() and any(path.glob(".part-*"))
    return head, events, torn or not events or events[-1]["kind"] != "run_end"


def _part_seconds() -> float:
    """``$LOADERSCOPE_PART_SECONDS`` when it is a positive number, else ``PART_SECONDS``."""
    try:
        seconds = float(os.environ.get(PART_SECONDS_ENV) or PART_SECONDS)
    except ValueError:
        return PART_SECONDS
    return seconds if seconds > 0 else PART_SECONDS


def parsed_parquet_trace(path: str | os.PathLike[str]) -> Iterator[dict[str, Any] | Event]:
    """The header, then every event, part by part (``jsonl.parse_lines`` for Parquet)."""
    found = parts(path)
    if not found or not found[0].exists():
        raise TraceError(f"{path}: no {PART_GLOB} part in it (not a Parquet trace, or nothing written yet)")
    for number, part in enumerate(found):
        head, events = read_part(part)
        if number == 0:
            yield head
        yield from events


def part_bytes(events: list[Mapping[str, Any]], metadata: dict[bytes, bytes], *,
               every_column: bool = True) -> memoryview:
    """One whole Parquet file of ``events``, with the trace header as its key-value ``metadata``.

    Unless ``every_column``, a column null in every row of the part is left out of it (the common
    fields stay): each column kept costs its chunk's metadata in the footer, whatever it holds.
    Readers take a missing column for nulls (DuckDB ``union_by_name``, Spark ``mergeSchema``,
    ``from_table``, the page); a trace's first part keeps every column, so that the union of its
    parts has the whole ``SCHEMA`` and SQL naming a column no event filled still runs.
    """
    table = to_table(events)
    if not every_column:
        table = table.select([name for name in table.column_names
                              if name in COMMON_FIELDS or table.column(name).null_count < table.num_rows])
    names = set(table.column_names)
    encodings: dict[str, str] = {name: "DELTA_BINARY_PACKED" for name in DELTA_COLUMNS if name in names}
    encodings.update((name, "BYTE_STREAM_SPLIT") for name in CLOCK_COLUMNS if name in names)
    buffer = pa.BufferOutputStream()
    # No Arrow schema blob and statistics only where engines prune by them: a part's footer is
    # otherwise ~6 KB, 2 bytes an event for a 10-second part of a slow loader.
    with pq.ParquetWriter(buffer, table.schema, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL,
                          store_schema=False, use_dictionary=[n for n in DICTIONARY_COLUMNS if n in names],
                          column_encoding=encodings,
                          write_statistics=[n for n in STATISTICS if n in names]) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata(metadata)
    return memoryview(buffer.getvalue())


@functools.cache
def import_what_writing_imports() -> None:
    """Write a small part to memory, so that what pyarrow imports on its first use is imported now,
    in the calling thread.

    The probe's writer thread must import nothing (tests/probe/test_fork_safety.py): pyarrow's first
    ``pa.array`` imports pandas, which imports ``numpy.random``; a DataLoader worker forked while
    another thread is half-way through that import finds the module locked forever, and torch's
    worker loop imports ``numpy.random`` to seed itself, so the worker hangs, and training with it.
    """
    event = {"seq": 0, "t": 0.5, "run": "r", "rank": 0, "kind": "dispatch", "idx": 0, "worker": 0,
             "indices": [0, 1]}
    part_bytes([event], {METADATA_KEY: b"{}"})


def _part_name(number: int) -> str:
    return f"part-{number:06d}.parquet"  # PART_GLOB's; sorted by name, the parts are in order


class ParquetTraceWriter:
    """A Parquet trace written as it comes: a closed part file every ``ROW_GROUP_EVENTS`` events or
    ``PART_SECONDS`` seconds (``write`` checks), and the rest at ``flush``/``close``.

    Same interface as ``jsonl.TraceWriter``, so the probe's writer thread takes either.
    """

    def __init__(self, path: str | Path, run: str, *, exclusive: bool = False, row_group_events: int | None = None,
                 part_seconds: float | None = None, **meta: Any) -> None:
        self.path = Path(path)
        # Opened once: every part is made through this descriptor, so a link planted at the trace's
        # name, or the directory renamed while the run goes on, never sends a part elsewhere
        self._directory = open_directory(self.path, exclusive=exclusive)
        self._closer = weakref.finalize(self, os.close, self._directory)  # also for a writer dropped on an error
        self.row_group_events = row_group_events or ROW_GROUP_EVENTS
        self.part_seconds = part_seconds if part_seconds is not None else _part_seconds()
        self._metadata = {METADATA_KEY: orjson.dumps(header(run, **meta))}
        self._pending: list[Mapping[str, Any]] = []
        self._since = 0.0  # monotonic time of the first pending event
        self._parts = len(fnmatch.filter(os.listdir(self._directory), PART_GLOB))
        self._newest: IO[bytes] | None = None  # the last part written, kept open for its heartbeat

    def write(self, events: Iterable[Mapping[str, Any]]) -> None:
        if not self._pending:
            self._since = time.monotonic()
        self._pending.extend(events)
        while len(self._pending) >= self.row_group_events:
            self._write_part(self._pending[:self.row_group_events])
            del self._pending[:self.row_group_events]
        self.flush()

    def flush(self) -> None:
        """Write the pending events as a part once the oldest is ``part_seconds`` old (a part per call
        would make thousands of tiny files)."""
        if self._pending and time.monotonic() - self._since >= self.part_seconds:
            self._write_pending()

    def sync(self) -> None:
        """As ``flush``: each part is synced to the disk as it is written."""
        self.flush()

    def touch(self) -> None:
        """Set the newest part's modification time to now (none before the first part): its writer lives.

        Through the part's descriptor: whatever its name leads to now is not touched.
        """
        if self._newest is not None:
            touch(self._newest)

    def close(self) -> None:
        try:
            self._write_pending()
            if self._parts == 0:  # no event at all: one empty part still holds the header
                self._write_part([])
        finally:
            if self._newest is not None:
                self._newest.close()
            self._closer()

    def _write_pending(self) -> None:
        if self._pending:
            self._write_part(self._pending)
            self._pending = []

    def _write_part(self, events: list[Mapping[str, Any]]) -> None:
        # under a random dot name, then renamed: a part seen is a part whole, and a link planted at a
        # name the writer would use is replaced, never written through
        data = part_bytes(events, self._metadata, every_column=self._parts == 0)
        written = replace_whole(self._directory, _part_name(self._parts), data)
        if self._newest is not None:
            self._newest.close()
        self._newest = written
        self._parts += 1

    def __enter__(self) -> ParquetTraceWriter:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def write_parquet_trace(path: str | Path, events: Iterable[Mapping[str, Any]], run: str, **meta: Any) -> Path:
    with ParquetTraceWriter(path, run, **meta) as writer:
        writer.write(events)
    return Path(path)


__all__ = ["COLUMNS", "EXTRA", "FORMAT", "ParquetTraceWriter", "SCHEMA", "SUFFIX", "from_table",
           "read_parquet_trace", "to_table", "write_parquet_trace"]
