"""The event schema (version 1), declared once: what probe, simulator and replay produce.

Each known kind is a msgspec ``Struct`` below: its fields, their types and limits, which are required
(no default) and which may be null (``| None``). ``loaderscope.events`` decodes and validates a frame
against them in one pass, and ``contract/generate.py`` writes the same tables for the page. Adding a
field is one edit here plus ``python -m loaderscope.contract --write``.

Consumers ignore unknown fields and show unknown kinds rather than dropping them, so the schema can
grow without a version bump; such events are checked by the rules by field name (``NAMED``) and the
limits below (docs/DESIGN.md, "Events").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, TypeVar, Union

from msgspec import UNSET, Meta, Struct, UnsetType
from msgspec.structs import fields

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
# Containers nested deeper than this are refused: the store's encoder stops at 255 levels, and an
# event that cannot be encoded must be refused with a reason, not drop its producer.
MAX_DEPTH = 64
MAX_ROWS = 200_000  # rows of one compact frame


class Kind(StrEnum):
    """Every kind this schema knows: the tags of the Structs below."""

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
    LOOP = "loop"


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

# --- value types ---------------------------------------------------------------------------------
# A bool is an int to Python, but never a count or a time: msgspec keeps them apart.
Int = Annotated[int, Meta(ge=-MAX_NUMBER, le=MAX_NUMBER)]
Float = Annotated[float, Meta(ge=-MAX_NUMBER, le=MAX_NUMBER)]  # NaN and infinities fail the bounds
Number = Union[Int, Float]
Seq = Annotated[int, Meta(ge=0, le=MAX_NUMBER)]
WorkerId = Annotated[int, Meta(ge=0, lt=MAX_WORKERS)]
Scalar = Union[Int, Float, str, bool]
Value = Union[Int, Float, str, bool, list[Any], dict[str, Any]]  # anything; nesting bounded by MAX_DEPTH
# An absolute time in a compact row (t0 is subtracted): half the range, so that the difference is in it.
Time = Annotated[float, Meta(ge=-MAX_NUMBER / 2, le=MAX_NUMBER / 2)]
Indices = list[Union[Int, Float, str, bool, None]]  # flat: events.clip_indices makes them JSON scalars
T = TypeVar("T")
Maybe = Union[T, None, UnsetType]  # optional, and null allowed
Absent = Union[T, UnsetType]  # optional, never null

# Fields typed by their name wherever they appear, an unknown kind's too.
NAMED: dict[str, Any] = {
    "seq": Seq, "rank": Int, "t": Number,
    "idx": Int, "worker": WorkerId, "epoch": Int, "waiting_for": Int, "world_size": Int,
    "wait": Number, "dt": Number, "elapsed": Number, "seconds": Number,
}


class Common(Struct, kw_only=True, forbid_unknown_fields=True):
    """The fields every event carries (``seq``, ``run`` and ``rank`` are filled in by the server)."""

    seq: Absent[Seq] = UNSET
    t: Number
    run: Maybe[str] = UNSET
    rank: Absent[Int] = UNSET


class Event(Common, tag_field="kind"):
    """A known kind: ``kind`` names the Struct (its tag)."""


class UnknownKind(Common):
    """A kind this schema does not know: kept and shown, checked by its fields' names."""

    kind: str


class RunStart(Event, tag=Kind.RUN_START.value):
    mode: str
    config: dict[str, Any]
    name: Maybe[str] = UNSET
    job: Maybe[str] = UNSET
    world_size: Maybe[Int] = UNSET
    scenario: Maybe[Value] = UNSET  # the rest as the probe (P) and the simulator (S) send them (docs/DESIGN.md, Kinds)
    params: Maybe[Value] = UNSET
    torch: Maybe[Value] = UNSET
    python: Maybe[Value] = UNSET
    host: Maybe[Value] = UNSET
    pid: Maybe[Value] = UNSET
    wall_start: Maybe[Value] = UNSET
    snapshot: Maybe[Value] = UNSET
    loader: Maybe[str] = UNSET  # P: the DataLoader class watched, qualified (a subclass or torchdata's)


class RunEnd(Event, tag=Kind.RUN_END.value):
    reason: str
    message: Maybe[str] = UNSET
    stats: Maybe[Value] = UNSET
    error: Maybe[Value] = UNSET
    exitcode: Maybe[Value] = UNSET
    truncated: Maybe[Value] = UNSET
    source: Maybe[Value] = UNSET


class EpochStart(Event, tag=Kind.EPOCH_START.value):
    epoch: Int
    batches: Maybe[Scalar] = UNSET


class EpochEnd(Event, tag=Kind.EPOCH_END.value):
    epoch: Int
    batches: Maybe[Scalar] = UNSET
    abandoned: Maybe[Scalar] = UNSET
    shard: Maybe[Scalar] = UNSET
    shard_length: Maybe[Scalar] = UNSET


class EpochResume(Event, tag=Kind.EPOCH_RESUME.value):
    epoch: Int
    batch: Scalar


class WorkerStart(Event, tag=Kind.WORKER_START.value):
    worker: WorkerId
    pid: Scalar


class WorkerExit(Event, tag=Kind.WORKER_EXIT.value):
    worker: WorkerId
    pid: Maybe[Scalar] = UNSET
    exitcode: Maybe[Scalar] = UNSET


class Dispatch(Event, tag=Kind.DISPATCH.value):
    idx: Int
    worker: WorkerId
    epoch: Maybe[Int] = UNSET
    indices: Maybe[Indices] = UNSET
    n: Maybe[Number] = UNSET


class FetchStart(Event, tag=Kind.FETCH_START.value):
    idx: Int
    worker: WorkerId
    epoch: Maybe[Int] = UNSET
    n: Maybe[Number] = UNSET


class FetchEnd(Event, tag=Kind.FETCH_END.value):
    idx: Int
    worker: WorkerId
    epoch: Maybe[Int] = UNSET
    dt: Maybe[Number] = UNSET
    nbytes: Maybe[Number] = UNSET
    pickled: Maybe[Number] = UNSET


class Arrive(Event, tag=Kind.ARRIVE.value):
    idx: Int
    worker: WorkerId
    epoch: Maybe[Int] = UNSET


class PinStart(Event, tag=Kind.PIN_START.value):
    idx: Int
    worker: Maybe[WorkerId] = UNSET
    epoch: Maybe[Int] = UNSET


class PinEnd(Event, tag=Kind.PIN_END.value):
    idx: Int
    worker: Maybe[WorkerId] = UNSET
    epoch: Maybe[Int] = UNSET
    dt: Maybe[Number] = UNSET
    nbytes: Maybe[Number] = UNSET
    pinned: Maybe[bool] = UNSET


class Buffer(Event, tag=Kind.BUFFER.value):
    idx: Int
    worker: WorkerId
    waiting_for: Int
    epoch: Maybe[Int] = UNSET


class Yield(Event, tag=Kind.YIELD.value):
    idx: Int
    wait: Number
    worker: Maybe[WorkerId] = UNSET
    epoch: Maybe[Int] = UNSET
    from_buffer: Maybe[bool] = UNSET


class Skip(Event, tag=Kind.SKIP.value):
    idx: Int
    worker: WorkerId
    epoch: Maybe[Int] = UNSET


class WorkerStuck(Event, tag=Kind.WORKER_STUCK.value):
    worker: WorkerId
    idx: Int
    elapsed: Number
    epoch: Maybe[Int] = UNSET


class ConsumerStuck(Event, tag=Kind.CONSUMER_STUCK.value):
    elapsed: Number


class WorkerDied(Event, tag=Kind.WORKER_DIED.value):
    worker: WorkerId
    signal: Maybe[str] = UNSET
    idx: Maybe[Int] = UNSET  # the task its worker held (probe/liveness.py), if any
    pid: Maybe[Scalar] = UNSET
    exitcode: Maybe[Scalar] = UNSET


class Error(Event, tag=Kind.ERROR.value):
    type: str
    message: str
    traceback: Maybe[str] = UNSET


class Timeout(Event, tag=Kind.TIMEOUT.value):
    seconds: Number
    workers: Maybe[list[Any]] = UNSET


class BatchInfo(Event, tag=Kind.BATCH_INFO.value):
    idx: Int
    worker: WorkerId
    structure: Value
    epoch: Maybe[Int] = UNSET
    pickle_bytes: Maybe[Value] = UNSET
    pickle_s: Maybe[Value] = UNSET
    values: Maybe[Value] = UNSET


class Step(Event, tag=Kind.STEP.value):
    batch: Scalar
    h2d: Maybe[Number] = UNSET  # the step's own timings (gpu_step), in seconds; state.py adds them up
    compute: Maybe[Number] = UNSET
    h2d_pageable: Maybe[Number] = UNSET
    device: Maybe[Scalar] = UNSET
    bytes: Maybe[Scalar] = UNSET
    pinned: Maybe[Scalar] = UNSET


class ProbeError(Event, tag=Kind.PROBE_ERROR.value):
    where: str
    type: str
    message: str


class DoctorVerdict(Event, tag=Kind.DOCTOR_VERDICT.value):
    text: Value


class Loop(Event, tag=Kind.LOOP.value):
    """Sent before a batch's yield when, since this loader's last batch, the same thread spent ``others``
    seconds inside other loaders' ``next()`` (a val loader zipped with train, say): that time is neither
    this loader's wait nor the loop's step."""

    others: Number


KINDS: tuple[type[Event], ...] = (
    RunStart, RunEnd, EpochStart, EpochEnd, EpochResume, WorkerStart, WorkerExit, Dispatch, FetchStart,
    FetchEnd, Arrive, PinStart, PinEnd, Buffer, Yield, Skip, WorkerStuck, ConsumerStuck, WorkerDied, Error,
    Timeout, BatchInfo, Step, ProbeError, DoctorVerdict, Loop,
)

# The frequent kinds: one or more per batch. The page keeps them in typed columns (event-table.js),
# as many of their declared fields as it has columns for.
FREQUENT = ("dispatch", "fetch_start", "fetch_end", "arrive", "buffer", "yield", "skip", "pin_start", "pin_end")

# Compact rows: what the probe sends for the per-batch kinds, ``[kind, t, field values...]`` in this
# order (any other kind is ``[kind, t, {fields}]``). Building a dict per event costs the training
# process more than the batch itself for small batches, so producers send rows and the consumer
# (the server, or a Python sink's adapter) expands them with ``events.expand``.
ROW_FIELDS: dict[str, tuple[str, ...]] = {
    "dispatch": ("idx", "worker", "indices"),
    "fetch_start": ("worker", "idx", "n"),
    "fetch_end": ("worker", "idx", "dt", "nbytes", "pickled"),
    "arrive": ("idx", "worker"),
    "buffer": ("idx", "worker", "waiting_for"),
    "yield": ("idx", "wait", "from_buffer"),
    "skip": ("idx", "worker"),
}
# One row for a whole in-process batch (num_workers=0): ``["batch", t, idx, next_started, fetch_started,
# nbytes, pickled, indices]`` stands for dispatch, fetch_start, fetch_end, arrive and yield, which
# happen back to back in the training thread; one row instead of five keeps tiny batches cheap.
BATCH_ROW = "batch"
BATCH_EVENTS = 5
BATCH_ROW_FIELDS: dict[str, Any] = {"idx": Int, "next_started": Time, "fetch_started": Time,
                                    "nbytes": Union[Number, None], "pickled": Union[Number, None],
                                    "indices": Union[Indices, None]}

# --- derived: nothing below restates a field ------------------------------------------------------
STRUCTS: dict[str, type[Event]] = {str(cls.__struct_config__.tag): cls for cls in KINDS}
# Fields each kind must carry beyond the common ones; optional fields are not listed.
REQUIRED: dict[str, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(cls) if f.required and f.name not in COMMON_FIELDS)
    for kind, cls in STRUCTS.items()
}
