"""The event schema (version 1): the one stream that probe, simulator and replay produce.

Every event is a plain dict with the common fields ``seq``, ``t``, ``run``, ``rank`` and
``kind`` plus the kind's own fields (docs/DESIGN.md, "Events"). Consumers ignore unknown fields
and show unknown kinds rather than dropping them, so the schema can grow without a version bump.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from operator import countOf, itemgetter
from typing import Any

import orjson

SCHEMA_VERSION = 1
COMMON_FIELDS = ("seq", "t", "run", "rank", "kind")
# A frame is one websocket message, parsed in one go: the cap bounds both a hostile producer's
# memory and how long one frame can hold the dashboard's event loop (the probe sends half of it).
MAX_FRAME_BYTES = 2 * 1024 * 1024
MAX_INDICES = 64  # sample indices kept per task; the rest is counted in ``n``
MAX_WORKERS = 4096  # per loader: the reducer keeps state per worker id
# Every number at an event's top level lies within +-2**53 (JSON's exact integers; floats finite):
# a time of 1.7e308 made the statistics overflow to infinity, and a seq of 2**64-1 made every later
# answer about the run unencodable.
MAX_NUMBER = 2**53

Event = dict[str, Any]


class Kind(StrEnum):
    RUN_START = "run_start"
    RUN_END = "run_end"
    EPOCH_START = "epoch_start"
    EPOCH_END = "epoch_end"
    EPOCH_RESUME = "epoch_resume"
    WORKER_START = "worker_start"
    WORKER_EXIT = "worker_exit"
    DISPATCH = "dispatch"
    FETCH_START = "fetch_start"
    FETCH_END = "fetch_end"
    ARRIVE = "arrive"
    PIN_START = "pin_start"
    PIN_END = "pin_end"
    BUFFER = "buffer"
    YIELD = "yield"
    SKIP = "skip"
    WORKER_STUCK = "worker_stuck"
    CONSUMER_STUCK = "consumer_stuck"
    WORKER_DIED = "worker_died"
    ERROR = "error"
    TIMEOUT = "timeout"
    BATCH_INFO = "batch_info"
    STEP = "step"
    PROBE_ERROR = "probe_error"
    DOCTOR_VERDICT = "doctor_verdict"


class RunStatus(StrEnum):
    """A run's status as the API and the page show it. The reducer sets ``pending``, ``running`` and
    then ``run_end``'s reason (one of ENDED); the server adds the states of a live producer."""

    PENDING = "pending"  # no run_start yet (a logdir run: its file not read to its end yet)
    STARTING = "starting"  # the server started a run process that has not connected yet
    RUNNING = "running"
    PAUSED = "paused"  # the dashboard paused the training loop
    DISCONNECTED = "disconnected"  # a watch() producer went away and may reconnect
    DONE = "done"
    STOPPED = "stopped"
    ERROR = "error"


ENDED: frozenset[RunStatus] = frozenset({RunStatus.DONE, RunStatus.STOPPED, RunStatus.ERROR})


# Fields each kind must carry (beyond the common ones); optional fields are not listed.
REQUIRED: dict[str, tuple[str, ...]] = {
    Kind.RUN_START: ("mode", "config"),
    Kind.RUN_END: ("reason",),
    Kind.EPOCH_START: ("epoch",),
    Kind.EPOCH_END: ("epoch",),
    Kind.EPOCH_RESUME: ("epoch", "batch"),
    Kind.WORKER_START: ("worker", "pid"),
    Kind.WORKER_EXIT: ("worker",),
    Kind.DISPATCH: ("idx", "worker"),
    Kind.FETCH_START: ("idx", "worker"),
    Kind.FETCH_END: ("idx", "worker"),
    Kind.ARRIVE: ("idx", "worker"),
    Kind.PIN_START: ("idx",),
    Kind.PIN_END: ("idx",),
    Kind.BUFFER: ("idx", "worker", "waiting_for"),
    Kind.YIELD: ("idx", "wait"),
    Kind.SKIP: ("idx", "worker"),
    Kind.WORKER_STUCK: ("worker", "idx", "elapsed"),
    Kind.CONSUMER_STUCK: ("elapsed",),
    Kind.WORKER_DIED: ("worker",),
    Kind.ERROR: ("type", "message"),
    Kind.TIMEOUT: ("seconds",),
    Kind.BATCH_INFO: ("idx", "worker", "structure"),
    Kind.STEP: ("batch",),
    Kind.PROBE_ERROR: ("where", "type", "message"),
    Kind.DOCTOR_VERDICT: ("text",),
}

_INT_FIELDS = ("seq", "rank", "idx", "worker", "epoch", "waiting_for", "world_size")
_NUMBER_FIELDS = ("t", "wait", "dt", "elapsed", "seconds")
_FIELD_TYPES: dict[str, Any] = {name: int for name in _INT_FIELDS} | {name: (int, float) for name in _NUMBER_FIELDS}
# Fields of the known kinds that the reducer, the diagnosis and the exports read as text or as a
# mapping: a list for run_end's reason became the run's status, a number for error's message failed
# the diagnosis (and GET /api/runs/{id} with it). Null passes where the field is optional.
_KIND_TYPES: dict[str, dict[str, type]] = {
    Kind.RUN_START: {"mode": str, "config": dict, "name": str, "job": str},
    Kind.RUN_END: {"reason": str, "message": str},
    Kind.ERROR: {"type": str, "message": str, "traceback": str},
    Kind.PROBE_ERROR: {"where": str, "type": str, "message": str},
    Kind.WORKER_DIED: {"signal": str},
    Kind.TIMEOUT: {"workers": list},
}
# Never null where present: the common fields the reducer does arithmetic with (a null rank cut the
# Chrome export off), besides every field the event's kind requires.
_NEVER_NULL = frozenset(("t", "seq", "rank"))
# Containers nested deeper than this are refused: the store's encoder stops at 255 levels, and an
# event that cannot be encoded must be refused with a reason, not drop its producer.
MAX_DEPTH = 64


class EventError(ValueError):
    """An event or frame that does not follow the schema; the message says what and how to fix it."""


_REQUIRED_SETS = {kind: frozenset(("t", *names)) for kind, names in REQUIRED.items()}
_T_ONLY = frozenset(("t",))
# What any field without a type may hold for sure, besides numbers: containers take the full check,
# which bounds their depth (sample indices excepted: a flat list of scalars is checked in one pass).
_SCALAR_VALUES = (str, bool, type(None))
_PLAIN = frozenset((int, float, str, bool, type(None)))  # JSON scalars
# Fields an event's shape may be made of to get a compiled check (see _shape_check); others take the
# loop. The per-kind typed fields are not among them: their kinds are rare, the loop checks them.
_PER_KIND = frozenset(name for types in _KIND_TYPES.values() for name in types)
_SOMETIMES_REQUIRED = frozenset(name for names in REQUIRED.values() for name in names)
_KNOWN_FIELDS = frozenset((*COMMON_FIELDS, *_FIELD_TYPES, *(n for names in REQUIRED.values() for n in names),
                           "n", "indices", "nbytes", "pickled", "from_buffer", "pid", "exitcode", "dt")) - _PER_KIND
MAX_SHAPES = 256  # compiled checks kept; producers send a handful of shapes, a hostile one cannot grow this


def validate(event: Any) -> Event:
    """Check one decoded event against the schema and return it.

    This is the server's main cost per event: an event of a shape seen before (the same fields in
    the same order) is checked by that shape's compiled expression; anything it does not pass for
    sure takes the full check, which says what is wrong.

    Raises:
        EventError: naming the field that is missing or of the wrong type.
    """
    if type(event) is dict:
        check = _SHAPES.get(tuple(event))
        if check is not None and check(event):
            return event
    return _validate_fully(event)


def _validate_fully(event: Any) -> Event:
    if not isinstance(event, dict):
        raise EventError(f"an event must be a JSON object, got {type(event).__name__}")
    kind = event.get("kind")
    if not isinstance(kind, str) or not kind:
        raise EventError("an event needs a non-empty string 'kind'")
    required = _REQUIRED_SETS.get(kind, _T_ONLY)
    if not event.keys() >= required:
        _missing(event, kind)
    types = _KIND_TYPES.get(kind, {})
    for name, value in event.items():
        if value is None:
            if name in required or name in _NEVER_NULL:
                raise EventError(f"{kind} event: '{name}' must not be null")
            continue
        _check_field(kind, name, value)
        want = types.get(name)
        if want is not None and not isinstance(value, want):
            raise EventError(f"{kind} event: '{name}' must be {_NOUNS[want]}, got {type(value).__name__}")
        if isinstance(value, (list, dict)) and _deeper_than(value, MAX_DEPTH):
            raise EventError(f"{kind} event: '{name}' is nested more than {MAX_DEPTH} levels deep")
    worker = event.get("worker")
    if worker is not None and not 0 <= worker < MAX_WORKERS:
        raise EventError(f"{kind} event: 'worker' must be from 0 to {MAX_WORKERS - 1}, got {worker}")
    seq = event.get("seq")
    if seq is not None and seq < 0:
        raise EventError(f"{kind} event: 'seq' must be from 0 to 2**53, got {seq}")
    shape = tuple(event)
    if len(_SHAPES) < MAX_SHAPES and _KNOWN_FIELDS.issuperset(shape):
        _SHAPES[shape] = _shape_check(shape)
    return event


_NOUNS: dict[type, str] = {str: "a string", dict: "a JSON object", list: "a JSON array"}


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


def _value_check(name: str, value: str) -> str:
    """Python for: the value in variable ``value`` passes ``validate`` as field ``name`` for sure
    (false may still pass: the full check decides)."""
    within = f"-{MAX_NUMBER} <= {value} <= {MAX_NUMBER}"
    if name == "worker":
        return f"(type({value}) is int and 0 <= {value} < {MAX_WORKERS})"
    if name == "seq":
        return f"(type({value}) is int and 0 <= {value} <= {MAX_NUMBER})"
    if _FIELD_TYPES.get(name) is int:
        return f"(type({value}) is int and {within})"
    number = f"((type({value}) is float or type({value}) is int) and {within})"
    if name in _FIELD_TYPES:
        return number
    if name == "indices":
        return f"({value} is None or (type({value}) is list and _PLAIN.issuperset(map(type, {value}))))"
    if name in _SOMETIMES_REQUIRED:  # null: the full check knows whether this kind requires it
        return f"({value} is not None and (type({value}) in _SCALAR_VALUES or {number}))"
    return f"(type({value}) in _SCALAR_VALUES or {number})"


def _compile(source: str, **names: Any) -> Any:
    """The function ``check`` that ``source`` defines. Only our own field names reach it (the schema's,
    in _KNOWN_FIELDS or ROW_FIELDS, as variables v0, v1...): never a producer's text."""
    namespace: dict[str, Any] = {"_SCALAR_VALUES": _SCALAR_VALUES, "_PLAIN": _PLAIN, **names}
    exec(source, namespace)  # noqa: S102
    return namespace["check"]


def _shape_check(shape: tuple[str, ...]) -> Any:
    """One expression over the values of an event with exactly these fields, in this order."""
    variables = [f"v{i}" for i in range(len(shape))]
    kind = variables[shape.index("kind")]
    terms = [f"type({kind}) is str", kind, f"_REQUIRED_SETS.get({kind}, _T_ONLY) <= _FIELDS"]
    terms += [_value_check(name, variable) for name, variable in zip(shape, variables) if name != "kind"]
    unpack = f"{', '.join(variables)}, = event.values()"
    return _compile(f"def check(event):\n    {unpack}\n    return {' and '.join(terms)}",
                    _REQUIRED_SETS=_REQUIRED_SETS, _T_ONLY=_T_ONLY, _FIELDS=frozenset(shape))


_SHAPES: dict[tuple[str, ...], Any] = {}


def _check_field(kind: str, name: str, value: Any) -> None:
    """The whole rule for one field. A bool is an int to isinstance, but never a count or a time."""
    want = _FIELD_TYPES.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not -MAX_NUMBER <= value <= MAX_NUMBER:  # NaN fails every comparison
            raise EventError(f"{kind} event: '{name}' must be a finite number within +-2**53, got {value!r}")
        if want is not int or isinstance(value, int):
            return
    elif want is None or value is None:
        return
    noun = "an integer" if want is int else "a number"
    raise EventError(f"{kind} event: '{name}' must be {noun}, got {value!r}")


def _missing(event: Event, kind: str) -> None:
    if "t" not in event:
        raise EventError(f"{kind} event is missing 't'")
    for name in REQUIRED.get(kind, ()):
        if name not in event:
            raise EventError(f"{kind} event is missing its '{name}' field (see docs/DESIGN.md, Events)")


# Compact rows: what the probe sends for the per-batch kinds, ``[kind, t, field values...]`` in this
# order (any other kind is ``[kind, t, {fields}]``). Building a dict per event costs the training
# process more than the batch itself for small batches, so producers send rows and the consumer
# (the server, or a Python sink's adapter) expands them with ``expand``.
ROW_FIELDS: dict[str, tuple[str, ...]] = {
    "dispatch": ("idx", "worker", "indices"),
    "fetch_start": ("worker", "idx", "n"),
    "fetch_end": ("worker", "idx", "dt", "nbytes", "pickled"),
    "arrive": ("idx", "worker"),
    "buffer": ("idx", "worker", "waiting_for"),
    "yield": ("idx", "wait", "from_buffer"),
    "skip": ("idx", "worker"),
}
MAX_ROWS = 200_000
# One row for a whole in-process batch (num_workers=0): ``["batch", t, idx, next_started, fetch_started,
# nbytes, pickled, indices]`` stands for dispatch, fetch_start, fetch_end, arrive and yield, which
# happen back to back in the training thread; one row instead of five keeps tiny batches cheap.
BATCH_ROW = "batch"
BATCH_EVENTS = 5


def _row_builder(kind: str, names: tuple[str, ...]) -> Any:
    """A function building one kind's event dict from a row: a dict display compiled once per kind,
    since expanding rows is the main cost of every consumer of the probe's frames."""
    args = ", ".join(names)
    fields = ", ".join(f"{name!r}: {name}" for name in names)
    source = (f"def build(seq, t, run, rank, {args}):\n"
              f"    return {{'seq': seq, 't': t, 'run': run, 'rank': rank, 'kind': {kind!r}, {fields}}}")
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # noqa: S102  (our own field names, fixed at import; no input reaches it)
    return namespace["build"]


_BUILDERS = {kind: _row_builder(kind, names) for kind, names in ROW_FIELDS.items()}


def _row_check(names: tuple[str, ...]) -> Any:
    """A function of a row's ``t`` and field values: true when the event they make is valid, so the
    server checks a row in one expression instead of a loop over its dict (``indices`` is always
    valid once ``clip_indices`` made it a list)."""
    terms = " and ".join(_value_check(name, name) for name in ("t", *names) if name != "indices")
    return _compile(f"def check(t, {', '.join(names)}):\n    return {terms}")


_CHECKS = {kind: _row_check(names) for kind, names in ROW_FIELDS.items()}


def _common_fields_valid(frame: Mapping[str, Any], rows: int) -> bool:
    """Whether every event of a compact frame has valid ``seq``, ``run`` and ``rank``."""
    seq, rank = frame.get("seq", 0), frame.get("rank", 0)
    return (isinstance(frame.get("run", ""), str) and type(seq) is int and 0 <= seq <= MAX_NUMBER - BATCH_EVENTS * rows
            and type(rank) is int and -MAX_NUMBER <= rank <= MAX_NUMBER)


def event_count(rows: list[Any]) -> int:
    """How many events a list of rows expands to."""
    return len(rows) + (BATCH_EVENTS - 1) * countOf(map(itemgetter(0), rows), BATCH_ROW)


def _batch_events(seq: int, t: float, run: str, rank: int, idx: int, next_started: float,
                  fetch_started: float, nbytes: int, pickled: int, indices: Any) -> list[Event]:
    build = _BUILDERS
    indices, n = clip_indices(indices)
    return [build["dispatch"](seq, fetch_started, run, rank, idx, 0, indices) | {"n": n},
            build["fetch_start"](seq + 1, fetch_started, run, rank, 0, idx, n),
            build["fetch_end"](seq + 2, t, run, rank, 0, idx, t - fetch_started, nbytes, pickled),
            build["arrive"](seq + 3, t, run, rank, idx, 0),
            build["yield"](seq + 4, t, run, rank, idx, t - next_started, False)]


def expand(frame: Mapping[str, Any], *, validated: bool = False) -> list[Event]:
    """Events from a compact frame ``{"rows": [...], "run", "rank", "seq", "t0"}``; with ``validated``,
    each checked as ``validate`` would (the per-batch rows by their values, before any dict is built).

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
    builders = _BUILDERS
    number = seq
    checks = _CHECKS if validated and _common_fields_valid(frame, len(rows)) else {}
    for position, row in enumerate(rows):
        try:
            kind = row[0]
            build = builders.get(kind)
            if build is not None:
                event = build(number, row[1] - t0, run, rank, *row[2:])
            elif kind == BATCH_ROW:
                batch = _batch_events(number, row[1] - t0, run, rank, row[2], row[3] - t0, row[4] - t0, *row[5:])
                events.extend(map(validate, batch) if validated else batch)
                number += BATCH_EVENTS
                continue
            else:
                event = {"seq": number, "t": row[1] - t0, "run": run, "rank": rank, "kind": kind, **row[2]}
        except (TypeError, IndexError, KeyError):
            raise EventError(f"compact frame, row {position}: expected [kind, t, fields...] with the "
                             f"fields of events.ROW_FIELDS, got {str(row)[:80]}") from None
        if kind == "dispatch":
            event["indices"], event["n"] = clip_indices(event["indices"])
        if validated and not (kind in checks and checks[kind](event["t"], *row[2:])):
            validate(event)
        events.append(event)
        number += 1
    return events


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
    if len(data) > max_bytes:
        raise EventError(f"frame of {len(data)} bytes exceeds the {max_bytes}-byte limit; send smaller frames")
    try:
        decoded = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EventError(f"frame is not valid JSON: {exc}") from None
    if isinstance(decoded, dict) and "rows" in decoded:
        return expand(decoded, validated=True)
    if isinstance(decoded, dict):
        decoded = [decoded]
    if not isinstance(decoded, list):
        raise EventError(f"a frame must be a JSON array of events, got {type(decoded).__name__}")
    return [validate(event) for event in decoded]


def task_key(event: Mapping[str, Any]) -> tuple[int, int]:
    """Tasks are numbered per epoch (``send_idx`` restarts at each reset): key them by both."""
    return (event.get("epoch", 0), event["idx"])


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
