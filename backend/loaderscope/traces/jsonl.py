"""◆ Trace files (JSON Lines with a versioned header) and the Chrome trace-event export.

The first line is the header (``traces/header.py``: the format and its version). Traces are parsed as
data (orjson), never unpickled, with size limits. The readers and ``open_writer`` also take the
columnar format (``traces/parquet.py``, Parquet; the ``loaderscope[columnar]`` extra), chosen by the path.

Named for the format it holds, as ``parquet.py`` is for the other: JSON lines is what every producer
writes unless told otherwise, so the readers that pick either format by the path live here too.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from loaderscope.events import Event, EventError, to_json, validate
from loaderscope.traces.formats import FORMAT_ENV, FORMATS, SUFFIXES
from loaderscope.traces.header import FORMAT, TraceError, check_header, header
from loaderscope.traces.safefiles import create_file, touch

if TYPE_CHECKING:
    from loaderscope.traces.parquet import ParquetTraceWriter

__all__ = ["FORMAT", "FORMATS", "FORMAT_ENV", "SUFFIXES", "TraceError", "TraceWriter", "check_header", "chosen_format",
           "header", "open_writer", "is_parquet_path", "parse_lines", "parsed_trace", "read_trace",
           "read_trace_tolerant", "write_trace"]

MAX_LINE_BYTES = 1 << 20
MAX_TRACE_BYTES = 4 << 30


_noted: list[str] = []  # the fallback to JSON lines, once said


@functools.cache
def columnar_available() -> bool:
    """Whether pyarrow (the ``loaderscope[columnar]`` extra) imports here: installed, and not broken."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def chosen_format(asked: str | None = None) -> str:
    """The trace format to write: ``asked``, else ``$LOADERSCOPE_FORMAT``, else JSON lines.

    Parquet without pyarrow falls back to JSON lines with one note (training must not stop for it).
    Raises ValueError for a format that does not exist, naming the ones that do.
    """
    name = (asked or os.environ.get(FORMAT_ENV) or "jsonl").strip().lower()
    if name not in FORMATS:
        source = "" if asked else f" (from ${FORMAT_ENV})"
        raise ValueError(f"unknown trace format {name!r}{source}: use one of {', '.join(FORMATS)}")
    if name == "parquet" and not columnar_available():
        if not _noted:  # once per process, however many loaders it records
            _noted.append(name)
            print("loaderscope: Parquet traces need pyarrow (pip install 'loaderscope[columnar]'); "
                  "writing JSON lines instead", file=sys.stderr, flush=True)
        return "jsonl"
    return name


def with_format(path: Path, fmt: str) -> Path:
    """``path`` (named for JSON lines) with the suffix of ``fmt``."""
    return path.with_name(path.name.removesuffix(SUFFIXES["jsonl"]) + SUFFIXES[fmt])


def open_writer(path: str | Path, run: str, fmt: str = "jsonl", *, exclusive: bool = False,
                **meta: Any) -> TraceWriter | ParquetTraceWriter:
    """A writer of ``fmt`` (``FORMATS``); both have ``write``, ``flush``, ``sync``, ``touch`` and ``close``.

    ``exclusive``: the trace must be new (FileExistsError when anything has its name), as a run's own
    trace in a logdir is; else a file there is replaced. Neither writes through a link (``traces/safefiles.py``).
    """
    if fmt == "parquet":
        from loaderscope.traces.parquet import ParquetTraceWriter
        return ParquetTraceWriter(path, run, exclusive=exclusive, **meta)
    return TraceWriter(path, run, exclusive=exclusive, **meta)


# A live writer's heartbeat: while no event comes (an evaluation between epochs, a checkpoint), the
# probe sets its trace's modification time to now this often (``TraceWriter.touch``); a dashboard
# following the logdir tells a quiet run from a killed one by it (server/logdir/follow.py: a file
# neither grown nor touched for its `silent_after`, 30 s, is truncated).
HEARTBEAT_EVERY = 5.0


class TraceWriter:
    """Appends events to a trace file as they come (a long run is complete on disk, however long)."""

    def __init__(self, path: str | Path, run: str, *, exclusive: bool = False, **meta: Any) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = create_file(self.path, exclusive=exclusive)
        self._file.write(to_json(header(run, **meta)) + b"\n")

    def write(self, events: Iterable[Mapping[str, Any]]) -> None:
        self._file.write(b"".join(to_json(event) + b"\n" for event in events))

    def flush(self) -> None:
        self._file.flush()

    def sync(self) -> None:
        """Flush and ``fsync``: on the disk (and visible to other nodes of a shared filesystem)."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def touch(self) -> None:
        """Set the file's modification time to now: its writer lives (``probe/logfile.py``, heartbeat)."""
        touch(self._file)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def write_trace(path: str | Path, events: Iterable[Mapping[str, Any]], run: str, fmt: str = "jsonl",
                **meta: Any) -> Path:
    """A whole trace at once, in ``fmt`` (a Parquet trace is a directory: name it ``*.trace.parquet``)."""
    with open_writer(path, run, fmt, **meta) as writer:
        writer.write(events)
    return Path(path)


def parse_lines(lines: Iterable[bytes], source: str = "trace") -> Iterator[dict[str, Any] | Event]:
    """The header, then every event, from the lines of a trace; raises TraceError naming the line."""
    number = 0
    for number, line in enumerate(lines, start=1):
        if len(line) > MAX_LINE_BYTES:
            raise TraceError(f"{source}, line {number}: longer than {MAX_LINE_BYTES} bytes")
        if number == 1:
            yield check_header(line, source)
            continue
        if not line.strip():
            continue
        try:
            yield validate(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise TraceError(f"{source}, line {number}: not valid JSON (a truncated or edited file?)") from None
        except EventError as exc:
            raise TraceError(f"{source}, line {number}: {exc}") from None
    if number == 0:
        raise TraceError(f"{source} is empty: a trace starts with a header line")


def parsed_trace(path: str | Path) -> Iterator[dict[str, Any] | Event]:
    """The header, then every event, of a trace file of either format, read as it is consumed.

    Raises:
        TraceError: naming the file and the line (or part and row) that is not a trace's.
    """
    if is_parquet_path(path):
        if not columnar_available():
            raise TraceError(f"{path} is a Parquet trace: reading it needs pyarrow "
                             "(pip install 'loaderscope[columnar]')")
        from loaderscope.traces.parquet import parsed_parquet_trace
        yield from parsed_parquet_trace(path)
        return
    with Path(path).open("rb") as file:
        yield from parse_lines(file, str(path))


def read_trace(path: str | Path) -> tuple[dict[str, Any], list[Event]]:
    """Header and events of a trace file, also one a killed process left (``read_trace_tolerant``)."""
    head, events, _ = read_trace_tolerant(path)
    return head, events


def read_trace_tolerant(path: str | Path) -> tuple[dict[str, Any], list[Event], bool]:
    """Header, events, and whether the trace is truncated, for a trace that may still be written.

    A process that was killed, or is still running, leaves a trace without ``run_end`` whose last
    line may be torn (a write cut short). That is no error here: the events up to the torn line are
    returned with ``truncated=True``. Damage anywhere else raises TraceError naming the line, as in
    ``read_trace``. A Parquet trace (``parquet.read_parquet_trace``) is read the same way.
    """
    path = Path(path)
    if is_parquet_path(path):
        if not columnar_available():
            raise TraceError(f"{path} is a Parquet trace: reading it needs pyarrow "
                             "(pip install 'loaderscope[columnar]')")
        from loaderscope.traces.parquet import read_parquet_trace
        return read_parquet_trace(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise TraceError(f"{path}: larger than {MAX_TRACE_BYTES >> 30} GiB; split the run")
    torn: list[bool] = []
    with path.open("rb") as file:
        parsed = parse_lines(_complete_lines(file, torn), str(path))
        head = next(parsed)
        events: list[Event] = list(parsed)
    truncated = bool(torn) or not events or events[-1]["kind"] != "run_end"
    return head, events, truncated


def is_parquet_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a Parquet trace (its directory, or a part file), by its name."""
    return os.fspath(path).rstrip("/").endswith((SUFFIXES["parquet"], ".parquet"))


def _complete_lines(file: IO[bytes], torn: list[bool]) -> Iterator[bytes]:
    """The file's lines; a last line without its newline that does not parse (a write cut short)
    is left out and noted in ``torn``."""
    for line in file:
        if not line.endswith(b"\n"):
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                torn.append(True)
                return
        yield line


# --- Chrome trace-event format (Perfetto, chrome://tracing) -----------------------------------------

MAIN_TID, PIN_TID = 0, 1
US = 1_000_000


def _tid(worker: int) -> int:
    return worker + 2  # 0: main thread, 1: pin-memory thread, 2…: workers


def to_chrome(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Chrome trace-event JSON as a dict (see ``chrome_json``)."""
    chrome: dict[str, Any] = orjson.loads(chrome_json(events))
    return chrome


def _j(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def chrome_json(events: Iterable[Mapping[str, Any]]) -> bytes:
    """Chrome trace-event JSON, whole (``chrome_chunks`` streams the same bytes)."""
    return b"".join(chrome_chunks(events))


CHROME_CHUNK_EVENTS = 20_000  # trace events per chunk: a streamed export holds about this many at once


def chrome_chunks(events: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    """Chrome trace-event JSON in chunks: a process per rank, a thread per worker plus main and pin threads.

    Fetches and consumer waits are complete ("X") events, dispatch→arrival a flow arrow ("s"/"f"),
    parking, skips, errors and the like are instants ("i"). The per-batch kinds are written as
    JSON text directly (numbers through f-strings, anything else through orjson): building a dict
    per trace event made the export the slowest step for million-event traces.
    """
    out: list[str] = []
    append = out.append
    named: set[tuple[int, int]] = set()
    pins: dict[tuple[int, int, int], float] = {}
    epoch = 0

    def name_thread(pid: int, tid: int, label: str) -> None:
        if (pid, tid) not in named:
            named.add((pid, tid))
            append(f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"ts":0,"args":{{"name":{_j(label)}}}}}')

    yield b'{"traceEvents":['
    separator = ""
    for e in events:  # branches ordered by how often each kind occurs: this loop is the export's cost
        if len(out) >= CHROME_CHUNK_EVENTS:
            yield (separator + ",".join(out)).encode()
            out.clear()
            separator = ","
        try:
            kind, ts, pid = e["kind"], e["t"] * US, int(e.get("rank", 0))
            if kind == "fetch_start":
                continue  # the complete event at fetch_end covers it
            if kind == "dispatch":
                flow = (pid << 40) | (epoch << 24) | int(e["idx"])
                append(f'{{"ph":"s","name":"task","cat":"flow","id":{flow},"pid":{pid},"tid":{MAIN_TID},"ts":{ts!r},'
                       f'"args":{{"worker":{int(e["worker"])},"indices":{_j(e.get("indices"))}}}}}')
            elif kind == "fetch_end":
                worker = int(e["worker"])
                tid = worker + 2
                if (pid, tid) not in named:
                    name_thread(pid, tid, f"worker {worker}")
                dur = max(0.0, float(e.get("dt") or 0.0) * US)
                nbytes = e.get("nbytes")
                append(f'{{"ph":"X","name":"task {int(e["idx"])}","cat":"fetch","pid":{pid},"tid":{tid},'
                       f'"ts":{ts - dur!r},"dur":{dur!r},"args":{{"epoch":{epoch},'
                       f'"nbytes":{int(nbytes) if isinstance(nbytes, int) else "null"}}}}}')
            elif kind == "arrive":
                flow = (pid << 40) | (epoch << 24) | int(e["idx"])
                append(f'{{"ph":"f","bp":"e","name":"task","cat":"flow","id":{flow},"pid":{pid},"tid":{MAIN_TID},'
                       f'"ts":{ts!r}}}')
            elif kind == "yield":
                dur = max(0.0, float(e["wait"]) * US)
                append(f'{{"ph":"X","name":"wait for task {int(e["idx"])}","cat":"consumer","pid":{pid},'
                       f'"tid":{MAIN_TID},"ts":{ts - dur!r},"dur":{dur!r},'
                       f'"args":{{"from_parked":{"true" if e.get("from_parked") else "false"}}}}}')
            elif kind == "run_start":
                label = f"rank {pid} ({e.get('scenario') or e.get('name') or 'loader'})"
                append(f'{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"ts":0,"args":{{"name":{_j(label)}}}}}')
                name_thread(pid, MAIN_TID, "main (consumer)")
            elif kind == "epoch_start":
                epoch = int(e["epoch"])
            elif kind == "pin_start":
                pins[(pid, epoch, e["idx"])] = ts
            elif kind == "pin_end":
                name_thread(pid, PIN_TID, "pin memory")
                start = pins.pop((pid, epoch, e["idx"]), ts)
                append(_j({"ph": "X", "name": f"pin task {e['idx']}", "cat": "pin", "pid": pid, "tid": PIN_TID,
                           "ts": start, "dur": max(0.0, ts - start), "args": {"nbytes": e.get("nbytes")}}))
            elif kind != "run_end":
                tid = _tid(e["worker"]) if isinstance(e.get("worker"), int) else MAIN_TID
                args = {k: v for k, v in e.items() if k not in ("seq", "t", "run", "rank", "kind")}
                append(_j({"ph": "i", "s": "t", "name": kind, "cat": "protocol", "pid": pid, "tid": tid, "ts": ts,
                           "args": args}))
        except (TypeError, ValueError, KeyError, OverflowError):
            # An event off the schema (validate refuses them; a stored one may predate a rule) is shown
            # as it is: a null idx once cut the export off mid-stream, an unreadable answer.
            append(_j({"ph": "i", "s": "g", "name": str(e.get("kind")), "cat": "unreadable", "pid": 0,
                       "tid": MAIN_TID, "ts": 0, "args": dict(e)}))
    yield ((separator if out else "") + ",".join(out) + '],"displayTimeUnit":"ms"}').encode()
