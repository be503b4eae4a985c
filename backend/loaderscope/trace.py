"""◆ Trace files (JSON Lines with a versioned header) and the Chrome trace-event export.

Like ``torch.save``'s magic number and protocol version (torch/serialization.py, ``_legacy_save``: ``MAGIC_NUMBER`` and ``PROTOCOL_VERSION``), the first line names the format
and its version, so a reader refuses other files with a clear message instead of misreading them.
Traces are parsed as data (orjson), never unpickled, with size limits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from loaderscope.events import SCHEMA_VERSION, Event, EventError, to_json, validate
from loaderscope.version import __version__

FORMAT = "loaderscope-trace"
MAX_LINE_BYTES = 1 << 20
MAX_TRACE_BYTES = 4 << 30


class TraceError(ValueError):
    """A file that is not a loaderscope trace, or a damaged one; the message says which line and why."""


def header(run: str, **meta: Any) -> dict[str, Any]:
    return {"format": FORMAT, "version": SCHEMA_VERSION, "run": run, "created": time.time(),
            "loaderscope": __version__, **meta}


class TraceWriter:
    """Appends events to a trace file as they come (a long run is complete on disk, however long)."""

    def __init__(self, path: str | Path, run: str, **meta: Any) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = self.path.open("wb")
        self._file.write(to_json(header(run, **meta)) + b"\n")

    def write(self, events: Iterable[Mapping[str, Any]]) -> None:
        self._file.write(b"".join(to_json(event) + b"\n" for event in events))

    def flush(self) -> None:
        self._file.flush()

    def sync(self) -> None:
        """Flush and ``fsync``: on the disk (and visible to other nodes of a shared filesystem)."""
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def write_trace(path: str | Path, events: Iterable[Mapping[str, Any]], run: str, **meta: Any) -> Path:
    with TraceWriter(path, run, **meta) as writer:
        writer.write(events)
    return Path(path)


def check_header(line: bytes, source: str) -> dict[str, Any]:
    try:
        head = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise TraceError(f"{source} is not a loaderscope trace: its first line is not JSON") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise TraceError(f"{source} is not a loaderscope trace: the first line must be a header "
                         f'{{"format": "{FORMAT}", "version": {SCHEMA_VERSION}, ...}}')
    if head.get("version") != SCHEMA_VERSION:
        raise TraceError(f"{source} is a version {head.get('version')!r} trace; this loaderscope reads version "
                         f"{SCHEMA_VERSION}: open it with the loaderscope that wrote it ({head.get('loaderscope')})")
    return head


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


def read_trace(path: str | Path) -> tuple[dict[str, Any], list[Event]]:
    """Header and events of a trace file, also one a killed process left (``read_trace_tolerant``)."""
    head, events, _ = read_trace_tolerant(path)
    return head, events


def read_trace_tolerant(path: str | Path) -> tuple[dict[str, Any], list[Event], bool]:
    """Header, events, and whether the trace is truncated, for a trace that may still be written.

    A process that was killed, or is still running, leaves a trace without ``run_end`` whose last
    line may be torn (a write cut short). That is no error here: the events up to the torn line are
    returned with ``truncated=True``. Damage anywhere else raises TraceError naming the line, as in
    ``read_trace``.
    """
    path = Path(path)
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
                       f'"args":{{"from_buffer":{"true" if e.get("from_buffer") else "false"}}}}}')
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
