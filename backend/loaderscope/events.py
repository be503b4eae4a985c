"""Events as the rest of loaderscope meets them: plain dicts, decoded and validated against the
contract (``loaderscope/contract/events.py``, where every kind, field and limit is declared).

Every event is a plain dict with the common fields ``seq``, ``t``, ``run``, ``rank`` and ``kind``
plus the kind's own fields (docs/DESIGN.md, "Events"). A frame is checked in one pass of msgspec's
decoder over the contract's Structs; a frame it does not pass for sure (an unknown kind or field, a
bad value) takes the full check, which says what is wrong and where.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from functools import partial
from operator import countOf, itemgetter
from typing import Annotated, Any, Union, get_args, get_origin

import msgspec
import orjson
from msgspec import Struct, UnsetType, ValidationError
from msgspec.structs import asdict, astuple, fields

from loaderscope.contract.events import (
    BATCH_EVENTS,
    BATCH_ROW,
    BATCH_ROW_FIELDS,
    COMMON_FIELDS,
    ENDED,
    MAX_DEPTH,
    MAX_FRAME_BYTES,
    MAX_INDICES,
    MAX_NUMBER,
    MAX_ROWS,
    MAX_WORKERS,
    NAMED,
    RENAMED_KINDS,
    REQUIRED,
    ROW_FIELDS,
    SCHEMA_VERSION,
    STRUCTS,
    Int,
    Kind,
    RunStatus,
    Seq,
    Time,
    UnknownKind,
    renamed,
)

__all__ = ["BATCH_EVENTS", "BATCH_ROW", "COMMON_FIELDS", "ENDED", "MAX_DEPTH", "MAX_FRAME_BYTES", "MAX_INDICES",
           "MAX_NUMBER", "MAX_ROWS", "MAX_WORKERS", "REQUIRED", "ROW_FIELDS", "SCHEMA_VERSION", "Event", "EventError",
           "Kind", "RunStatus", "clip_indices", "decode_frame", "decode_message", "encode_frame", "event_count",
           "expand", "recording_of", "task_key", "to_json", "validate"]

Event = dict[str, Any]


class EventError(ValueError):
    """An event or frame that does not follow the schema; the message says what and how to fix it.

    ``kept``: the events a decoder made, valid, before the bad one of the slice it was making."""

    def __init__(self, message: str, kept: list[Event] | None = None) -> None:
        super().__init__(message)
        self.kept = kept or []


# --- decoders built from the contract's Structs ---------------------------------------------------

def _present(annotation: Any) -> Any:
    """A field's type where a value must be given (a compact row has every position)."""
    if get_origin(annotation) is Annotated:  # its bounds and description kept around the type
        inner, *metadata = get_args(annotation)
        return Annotated[(_present(inner), *metadata)]
    if get_origin(annotation) is Union:
        return Union[tuple(arg for arg in get_args(annotation) if arg is not UnsetType)]  # noqa: UP007
    return annotation


def _row_struct(kind: str, names: tuple[str, ...]) -> type[Struct]:
    """``[kind, t, values...]``: ROW_FIELDS' layout, typed by the kind's Struct."""
    types = {f.name: _present(f.type) for f in fields(STRUCTS[kind])}
    return msgspec.defstruct(f"{STRUCTS[kind].__name__}Row", [("t", Time), *((name, types[name]) for name in names)],
                             tag=kind, array_like=True, forbid_unknown_fields=True)


def _fields_row_struct(kind: str) -> type[Struct]:
    """``[kind, t, {fields}]``: any other known kind, its fields those of its Struct but the common ones."""
    own = [(f.name, f.type) if f.required else (f.name, f.type, f.default)
           for f in fields(STRUCTS[kind]) if f.name not in COMMON_FIELDS]
    body = msgspec.defstruct(f"{STRUCTS[kind].__name__}Fields", own, kw_only=True, forbid_unknown_fields=True)
    return msgspec.defstruct(f"{STRUCTS[kind].__name__}Row", [("t", Time), ("fields", body)],
                             tag=kind, array_like=True, forbid_unknown_fields=True)


_BatchRow = msgspec.defstruct("BatchRow", [("t", Time), *BATCH_ROW_FIELDS.items()], tag=BATCH_ROW, array_like=True,
                              forbid_unknown_fields=True)
_ROW_KIND: dict[type[Struct], str] = {_row_struct(kind, names): kind for kind, names in ROW_FIELDS.items()}
_BY_FIELDS: dict[type[Struct], str] = {_fields_row_struct(kind): kind for kind in STRUCTS if kind not in ROW_FIELDS}


def _may_nest(annotation: Any) -> bool:
    """Whether a value of this type may hold containers (msgspec checks no depth: MAX_DEPTH is ours)."""
    if annotation is Any:
        return True
    return any(_may_nest(arg) for arg in get_args(annotation) if arg is not str)


# Kinds with a field that may nest: their events get the depth check after the decoder passed them.
_NESTING = frozenset(kind for kind, cls in STRUCTS.items() if any(_may_nest(f.type) for f in fields(cls)))
_NESTING_TYPES = frozenset({*(STRUCTS[kind] for kind in _NESTING),
                            *(row for row, kind in _BY_FIELDS.items() if kind in _NESTING)})


class _CompactFrame(Struct):
    rows: list[Union[tuple(_ROW_KIND) + tuple(_BY_FIELDS) + (_BatchRow,)]]  # type: ignore[valid-type]  # noqa: UP007
    run: str = ""
    rank: Int = 0
    seq: Seq = 0
    t0: Time = 0.0


_FRAME = msgspec.json.Decoder(Union[list[Union[tuple(STRUCTS.values())]], _CompactFrame])  # type: ignore[misc]  # noqa: UP007
_SLICE = 2000


# --- one event, with the reason when it is bad -----------------------------------------------------

def validate(event: Any) -> Event:
    """Check one decoded event against the schema and return it.

    Raises:
        EventError: naming the field that is missing or of the wrong type.
    """
    kind = event.get("kind") if type(event) is dict else None
    if isinstance(kind, Kind):  # in-process producers (the simulator, doctor) emit the enum; msgspec's tags are text
        event["kind"] = kind = kind.value
    cls = STRUCTS.get(kind) if type(kind) is str else None
    if cls is not None:
        try:
            msgspec.convert(event, cls)
        except ValidationError:
            return _explain(event)
        if cls.__struct_config__.tag in _NESTING:
            _check_depth(event)
        valid: Event = event
        return valid
    return _explain(event)


def _explain(event: Any) -> Event:
    """The full check: the event back when it is valid, else an EventError saying why."""
    if not isinstance(event, dict):
        raise EventError(f"an event must be a JSON object, got {type(event).__name__}")
    if renamed(event):  # an old trace's or an older probe's names (contract: RENAMED_KINDS): here, off the hot path
        return validate(event)
    kind = event.get("kind")
    if not isinstance(kind, str) or not kind:
        raise EventError("an event needs a non-empty string 'kind'")
    if "t" not in event:
        raise EventError(f"{kind} event is missing 't'")
    for name in REQUIRED.get(kind, ()):
        if name not in event:
            raise EventError(f"{kind} event is missing its '{name}' field (see docs/DESIGN.md, Events)")
    cls = STRUCTS.get(kind, UnknownKind)
    declared = {*cls.__struct_fields__, "kind"}
    try:
        msgspec.convert({name: value for name, value in event.items() if name in declared}, cls)
    except ValidationError as exc:
        raise EventError(_reason(kind, event, str(exc))) from None
    for name, value in event.items():
        rule = NAMED.get(name)
        if name not in declared and rule is not None and value is not None:
            try:
                msgspec.convert(value, rule)
            except ValidationError as exc:
                raise EventError(_reason(kind, event, f"{exc} - at `$.{name}`")) from None
        elif name not in declared and isinstance(value, (int, float)) and not -MAX_NUMBER <= value <= MAX_NUMBER:
            raise EventError(f"{kind} event: '{name}' must be a finite number within +-2**53, got {value!r}")
    _check_depth(event)
    return event


_AT = re.compile(r"at `\$\.(\w+)")
_EXPECTED = re.compile(r"Expected `([^`]+)`")
_NOUNS = {"int": "an integer", "float": "a number", "int | float": "a number", "str": "a string",
          "object": "a JSON object", "array": "a JSON array", "bool": "true or false"}


def _reason(kind: str, event: Event, said: str) -> str:
    """msgspec's complaint about ``event``, said in the schema's words: the field, the rule, the value."""
    at = _AT.search(said)
    if at is None:
        return f"{kind} event: {said}"
    name = at.group(1)
    value = event.get(name)
    if value is None:
        return f"{kind} event: '{name}' must not be null"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not -MAX_NUMBER <= value <= MAX_NUMBER:  # NaN fails every comparison
            return f"{kind} event: '{name}' must be a finite number within +-2**53, got {value!r}"
        if name == "worker" and isinstance(value, int):
            return f"{kind} event: 'worker' must be from 0 to {MAX_WORKERS - 1}, got {value}"
        if name == "seq" and isinstance(value, int):
            return f"{kind} event: 'seq' must be from 0 to 2**53, got {value}"
    expected = _EXPECTED.search(said)
    noun = _NOUNS.get(expected.group(1), f"`{expected.group(1)}`") if expected else None
    if noun is None or not said.endswith(f"$.{name}`"):  # a value inside the field: msgspec's words say where
        return f"{kind} event: '{name}': {said}"
    shown = repr(value) if isinstance(value, (int, float, str)) else type(value).__name__
    return f"{kind} event: '{name}' must be {noun}, got {shown[:60]}"


def _check_depth(event: Event) -> None:
    for name, value in event.items():
        if isinstance(value, (list, dict)) and _deeper_than(value, MAX_DEPTH):
            raise EventError(f"{event.get('kind')} event: '{name}' is nested more than {MAX_DEPTH} levels deep")


def _deeper_than(value: list[Any] | dict[str, Any], limit: int) -> bool:
    """Whether ``value`` holds containers more than ``limit`` levels deep (walked without recursion)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [child for container in level
                 for child in (container.values() if isinstance(container, dict) else container)
                 if isinstance(child, (list, dict))]
        if not level:
            return False
    return True


# --- compact rows -----------------------------------------------------------------------------------

def event_count(rows: list[Any]) -> int:
    """How many events a list of rows expands to."""
    return len(rows) + (BATCH_EVENTS - 1) * countOf(map(itemgetter(0), rows), BATCH_ROW)


def _event(keys: tuple[str, ...], values: Iterable[Any]) -> Event:
    return dict(zip(keys, values, strict=True))


_KEYS = {kind: ("seq", "t", "run", "rank", "kind", *names) for kind, names in ROW_FIELDS.items()}


def _batch_events(seq: int, t: float, run: str, rank: int, idx: int, next_started: float,
                  fetch_started: float, nbytes: Any, pickled: Any, indices: Any) -> list[Event]:
    indices, n = clip_indices(indices)
    keys = _KEYS
    return [_event(keys["dispatch"], (seq, fetch_started, run, rank, "dispatch", idx, 0, indices)) | {"n": n},
            _event(keys["fetch_start"], (seq + 1, fetch_started, run, rank, "fetch_start", 0, idx, n)),
            _event(keys["fetch_end"], (seq + 2, t, run, rank, "fetch_end", 0, idx, t - fetch_started, nbytes, pickled)),
            _event(keys["arrive"], (seq + 3, t, run, rank, "arrive", idx, 0)),
            _event(keys["yield"], (seq + 4, t, run, rank, "yield", idx, t - next_started, False))]


def expand(frame: Mapping[str, Any], *, validated: bool = False) -> list[Event]:
    """Events from a compact frame ``{"rows": [...], "run", "rank", "seq", "t0"}``; with ``validated``,
    each checked as ``validate`` would.

    Raises:
        EventError: naming the row that does not fit the row format (or, validated, the bad field).
    """
    rows, t0, seq = frame.get("rows"), frame.get("t0", 0.0), frame.get("seq", 0)
    run, rank = frame.get("run", ""), frame.get("rank", 0)
    if not isinstance(rows, list) or len(rows) > MAX_ROWS:
        raise EventError(f"a compact frame needs 'rows', a list of at most {MAX_ROWS} rows")
    if not isinstance(t0, (int, float)) or not isinstance(seq, int):
        raise EventError("a compact frame needs a numeric 't0' and an integer 'seq'")
    events: list[Event] = []
    number = seq
    for position, row in enumerate(rows):
        try:
            kind = RENAMED_KINDS.get(row[0], row[0])  # an older probe's rows: positional, only the kind renamed
            keys = _KEYS.get(kind)
            if keys is not None and len(row) == len(keys) - 3:  # [kind, t, values...] for the five common keys
                event = dict(zip(keys, (number, row[1] - t0, run, rank, kind, *row[2:]), strict=True))
                if kind == "dispatch":
                    event["indices"], event["n"] = clip_indices(event["indices"])
                events.append(_checked(event, position) if validated else event)
                number += 1
                continue
            if kind == BATCH_ROW and len(row) == 2 + len(BATCH_ROW_FIELDS):
                made = _batch_events(number, row[1] - t0, run, rank, row[2], row[3] - t0, row[4] - t0, *row[5:])
            elif keys is None and kind != BATCH_ROW:
                made = [{"seq": number, "t": row[1] - t0, "run": run, "rank": rank, "kind": kind, **row[2]}]
            else:
                raise IndexError
            events.extend([_checked(event, position) for event in made] if validated else made)
        except (TypeError, IndexError, KeyError):
            raise EventError(f"compact frame, row {position}: expected [kind, t, fields...] with the "
                             f"fields of events.ROW_FIELDS, got {str(row)[:80]}", events) from None
        except EventError as exc:  # the rows before it are good: they go with the error
            raise EventError(str(exc), events) from None
        number += len(made)
    return events


def _checked(event: Event, row: int) -> Event:
    try:
        return validate(event)
    except EventError as exc:
        raise EventError(f"{exc} (compact frame, row {row})") from None


def _expand_typed(frame: _CompactFrame, start: int, stop: int, seq: int,
                  sent: Callable[[int], dict[str, Any]]) -> list[Event]:
    """Events from rows the decoder checked: nothing left to validate but the depth of free fields.
    ``sent(position)``: a rare kind's fields as the producer sent them (their order too, which a
    Struct would not keep: the stored line is the same whether the run sent compact or full frames)."""
    t0, run, rank = frame.t0, frame.run, frame.rank
    events: list[Event] = []
    try:  # one try around the loop: the rows are the server's hottest path
        for position, row in enumerate(frame.rows[start:stop], start):
            cls = type(row)
            kind = _ROW_KIND.get(cls)
            if kind is not None:
                fields_of_row = asdict(row)
                fields_of_row["t"] -= t0
                # the common fields first, in their order; the row's own t takes the place of the 0
                event = {"seq": seq, "t": 0, "run": run, "rank": rank, "kind": kind, **fields_of_row}
                if kind == "dispatch":  # JSON scalars already: only cut to MAX_INDICES
                    indices = event["indices"]
                    event["indices"], event["n"] = ((None, 0) if indices is None
                                                    else (indices[:MAX_INDICES], len(indices)))
                events.append(event)
                seq += 1
            elif cls is _BatchRow:
                t, idx, next_started, fetch_started, nbytes, pickled, indices = astuple(row)
                events += _batch_events(seq, t - t0, run, rank, idx, next_started - t0, fetch_started - t0,
                                        nbytes, pickled, indices)
                seq += BATCH_EVENTS
            else:
                event = {"seq": seq, "t": row.t - t0, "run": run, "rank": rank, "kind": _BY_FIELDS[cls],
                         **sent(position)}
                if cls in _NESTING_TYPES:
                    _check_depth(event)
                events.append(event)
                seq += 1
    except EventError as exc:  # the rows before it are good: they go with the error
        raise EventError(str(exc), events) from None
    return events


# --- frames -------------------------------------------------------------------------------------------

def to_json(value: Any) -> bytes:
    """JSON for anything a producer may put in an event: non-string keys become strings (a config's
    ``{worker: factor}``), unknown objects their ``str()``, rather than failing a user's run."""
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)


def encode_frame(events: Iterable[Mapping[str, Any]]) -> bytes:
    """A frame is a JSON array of events: many per websocket message, for throughput."""
    return to_json(list(events))


def decode_frame(data: bytes | str, *, max_bytes: int = MAX_FRAME_BYTES) -> list[Event]:
    """Parse and validate a frame (as data, never as code).

    Raises:
        EventError: when the frame is too large, not JSON, not an array, or holds a bad event.
    """
    message = decode_message(data, max_bytes=max_bytes)
    if isinstance(message, dict):
        raise EventError(f"a frame must be a JSON array of events, got a {message.get('type')!r} message")
    return [event for part in message for event in part]


def decode_message(data: bytes | str, *, max_bytes: int = MAX_FRAME_BYTES,
                   slice_events: int = _SLICE) -> dict[str, Any] | Iterator[list[Event]]:
    """A producer's message: a meta object ``{"type": ...}`` as it is, or a frame's validated events,
    ``slice_events`` at a time, so that the caller can apply them between other work. A bad event
    raises when its slice is reached, after the events before it (that slice's too) were yielded.

    Raises:
        EventError: when the message is too large or not JSON (at once), or holds a bad event (in
            the iteration).
    """
    if len(data) > max_bytes:
        raise EventError(f"frame of {len(data)} bytes exceeds the {max_bytes}-byte limit; send smaller frames")
    try:
        typed = _FRAME.decode(data)
    except (msgspec.DecodeError, ValidationError):
        return _decode_slowly(data, slice_events)
    if isinstance(typed, _CompactFrame):
        if typed.seq + BATCH_EVENTS * len(typed.rows) > MAX_NUMBER or len(typed.rows) > MAX_ROWS:  # to be exact
            return _decode_slowly(data, slice_events)
        return _typed_slices(typed, data, slice_events)
    try:
        events: list[Event] = orjson.loads(data)
    except orjson.JSONDecodeError:  # text msgspec reads but orjson does not (a lone surrogate)
        return _decode_slowly(data, slice_events)
    if not _NESTING_TYPES.isdisjoint(map(type, typed)):
        return _event_slices(events, slice_events, _check_nesting)
    return iter([events[i:i + slice_events] for i in range(0, len(events), slice_events)])


def _typed_slices(frame: _CompactFrame, data: bytes | str, slice_events: int) -> Iterator[list[Event]]:
    rows = max(1, slice_events // BATCH_EVENTS)
    seq = frame.seq
    parsed: list[Any] = []

    def sent(position: int) -> dict[str, Any]:  # rare rows (run_start, epoch_start, ...): parsed once a frame
        if not parsed:
            try:
                parsed.extend(orjson.loads(data)["rows"])
            except orjson.JSONDecodeError as exc:  # text msgspec reads but orjson does not (a lone surrogate)
                raise EventError(f"frame is not valid JSON: {exc}") from None
        fields_sent: dict[str, Any] = parsed[position][2]
        return fields_sent

    for start in range(0, len(frame.rows), rows):
        events = yield from _made(partial(_expand_typed, frame, start, start + rows, seq, sent))
        if events:
            seq = events[-1]["seq"] + 1


def _decode_slowly(data: bytes | str, slice_events: int) -> dict[str, Any] | Iterator[list[Event]]:
    """The full check, for a message the decoder did not pass: it names what is wrong and where."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EventError(f"frame is not valid JSON: {exc}") from None
    if isinstance(value, dict) and "type" in value and "kind" not in value:
        return value
    if isinstance(value, dict) and "rows" in value:
        rows = value["rows"]
        if not isinstance(rows, list) or len(rows) > MAX_ROWS:
            raise EventError(f"a compact frame needs 'rows', a list of at most {MAX_ROWS} rows")
        return _compact_slices(value, rows, max(1, slice_events // BATCH_EVENTS))
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise EventError(f"a frame must be a JSON array of events, got {type(value).__name__}")
    return _event_slices(value, slice_events, validate)


def _compact_slices(frame: dict[str, Any], rows: list[Any], size: int) -> Iterator[list[Event]]:
    seq = frame.get("seq", 0)
    for start in range(0, len(rows), size):
        events = yield from _made(partial(expand, {**frame, "rows": rows[start:start + size], "seq": seq},
                                          validated=True))
        if events:
            seq = events[-1]["seq"] + 1


def _made(make: Callable[[], list[Event]]) -> Generator[list[Event], None, list[Event]]:
    """Yields the slice ``make()`` makes, unless empty, and returns it; when the slice holds a bad event,
    yields the good ones before it (``EventError.kept``) and then raises: they are the producer's
    record, kept as DESIGN promises."""
    try:
        events = make()
    except EventError as exc:
        if exc.kept:
            yield exc.kept
        raise
    if events:
        yield events
    return events


def _event_slices(events: list[Any], size: int, check: Callable[[Event], object]) -> Iterator[list[Event]]:
    """Slices of ``events``, each ``check``ed; a bad event's slice is cut before it, then it raises."""
    for start in range(0, len(events), size):
        part = events[start:start + size]
        for position, event in enumerate(part):
            try:
                check(event)
            except EventError as exc:
                if position:
                    yield part[:position]
                raise EventError(f"{exc} (event {start + position} of the frame)") from None
        yield part


def _check_nesting(event: Event) -> None:
    if event["kind"] in _NESTING:
        _check_depth(event)


# --- helpers for producers and the reducer -------------------------------------------------------------

def recording_of(run_start: Mapping[str, Any]) -> str | None:
    """Which probe's run a run_start opens: its host, pid and wall clock, with the loader's job, name
    and rank. Two runs with one recording are one run written twice (a script that streams to
    ``serve --logdir DIR`` and writes its own trace into DIR). None without a wall clock (a simulated
    run): such runs are never taken for copies. ``jobquery`` partitions by the same fields."""
    wall = run_start.get("wall_start")
    if not isinstance(wall, (int, float)) or isinstance(wall, bool):
        return None
    return orjson.dumps([run_start.get(k) for k in ("host", "pid", "job", "name", "rank")] + [wall],
                        default=str).decode()


def task_key(event: Mapping[str, Any]) -> tuple[int, int]:
    """Tasks are numbered per epoch (``send_idx`` restarts at each reset): key them by both."""
    return (event.get("epoch", 0), event["idx"])


_PLAIN = frozenset((int, float, str, bool, type(None)))  # JSON scalars


def clip_indices(indices: Any) -> tuple[list[Any] | None, int]:
    """Sample indices for a task, cut to MAX_INDICES, and the full count."""
    if indices is None:
        return None, 0
    if isinstance(indices, (list, tuple)):
        head = list(indices[:MAX_INDICES])
        if not _PLAIN.issuperset(map(type, head)):  # one pass in C for the usual list of ints
            head = [_plain(i) for i in head]
        return head, len(indices)
    return [_plain(indices)], 1


def _plain(value: Any) -> Any:
    """Sampler outputs may be tensors or numpy ints; events hold JSON scalars."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)
