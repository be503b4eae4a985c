"""The event schema (version 1), declared once: what the probe, the simulator, the doctor and the
server send.

Each known kind is a msgspec ``Struct`` below: its fields, their types and limits, which are required
(no default) and which may be null (``| None``), and what each means (``doc``). ``loaderscope.events``
decodes and validates a frame against them in one pass, and ``contract/generate.py`` writes from them
the page's tables, its event column map and its types, and the reference (docs/reference/events.md).
Adding a field is one edit here, the producer that sends it, and ``python -m loaderscope.contract
--write``; tests/probe/test_contract_producers.py fails on a field a producer sends that is not here.

Consumers ignore unknown fields and show unknown kinds rather than dropping them, so the schema can
grow without a version bump; such events are checked by the rules by field name (``NAMED``) and the
limits below (docs/DESIGN.md, "Events").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, TypeVar, Union

from msgspec import UNSET, Meta, Struct, UnsetType
from msgspec.structs import fields

from loaderscope.contract.shapes import doc

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
    PARKED = "parked"
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
    MEMORY = "memory"


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
Number = Int | Float
Seq = Annotated[int, Meta(ge=0, le=MAX_NUMBER)]
WorkerId = Annotated[int, Meta(ge=0, lt=MAX_WORKERS)]
Scalar = Int | Float | str | bool
Value = Int | Float | str | bool | list[Any] | dict[str, Any]  # anything; nesting bounded by MAX_DEPTH
# An absolute time in a compact row (t0 is subtracted): half the range, so that the difference is in it.
Time = Annotated[float, Meta(ge=-MAX_NUMBER / 2, le=MAX_NUMBER / 2)]
Indices = list[Int | Float | str | bool | None]  # flat: events.clip_indices makes them JSON scalars
T = TypeVar("T")
# Union[...], not T | ...: mypy takes a PEP 604 union of a TypeVar for no generic alias ("invalid as target")
Maybe = Union[T, None, UnsetType]  # noqa: UP007  # optional, and null allowed
Absent = Union[T, UnsetType]  # noqa: UP007  # optional, never null

# Fields typed by their name wherever they appear, an unknown kind's too.
NAMED: dict[str, Any] = {
    "seq": Seq, "rank": Int, "t": Number,
    "idx": Int, "worker": WorkerId, "epoch": Int, "waiting_for": Int, "world_size": Int,
    "wait": Number, "dt": Number, "elapsed": Number, "seconds": Number,
}


class Common(Struct, kw_only=True, forbid_unknown_fields=True):
    """The fields every event carries (``seq``, ``run`` and ``rank`` are filled in by the server)."""

    seq: Annotated[Absent[Seq], doc(
        "position in the run, strictly increasing from 0; the store renumbers what it keeps (a producer's own "
        "seq only counts what was lost on the way)")] = UNSET
    t: Annotated[Number, doc(
        "seconds since the producer's clock origin (the probe: when the loader was instrumented, on "
        "time.monotonic(), which main process, pin thread and workers share; the simulator: virtual time 0)")]
    run: Annotated[Maybe[str], doc("the run's id; the store writes its own")] = UNSET
    rank: Annotated[Absent[Int], doc("the distributed rank ($RANK, else 0)")] = UNSET


class Event(Common, tag_field="kind"):
    """A known kind: ``kind`` names the Struct (its tag)."""


class UnknownKind(Common):
    """A kind this schema does not know: kept and shown, checked by its fields' names."""

    kind: str


# Who sends a field, where not every producer does: P the probe, S the simulator, D the doctor.
class RunStart(Event, tag=Kind.RUN_START.value):
    """A run begins: the loader's settings and where it runs."""

    mode: Annotated[str, doc("`real`, `sim`, `replay` or `doctor` (a `loaderscope doctor --out` snapshot)")]
    config: Annotated[dict[str, Any], doc("the loader's settings as torch resolved them", js="LoaderConfig")]
    name: Annotated[Maybe[str], doc("the loader's name from the code that built it (watch(), record)")] = UNSET
    job: Annotated[Maybe[str], doc(
        "shared by the ranks of one job (a logdir's rule, else $TORCHELASTIC_RUN_ID)")] = UNSET
    world_size: Annotated[Maybe[Int], doc("ranks in the job")] = UNSET
    scenario: Annotated[Maybe[str], doc("the built-in scenario run, if any")] = UNSET
    params: Annotated[Maybe[dict[str, Any]], doc("the scenario's parameters")] = UNSET
    torch: Annotated[Maybe[str], doc("torch's version (S: null)")] = UNSET
    python: Annotated[Maybe[str], doc("Python's version")] = UNSET
    host: Annotated[Maybe[str], doc("the host name (S: `simulator`)")] = UNSET
    pid: Annotated[Maybe[Int], doc("the training process's pid")] = UNSET
    wall_start: Annotated[Maybe[Number], doc("epoch seconds at t = 0: ranks line up on it")] = UNSET
    snapshot: Annotated[Maybe[bool], doc("D: true, the run is a frozen snapshot")] = UNSET
    loader: Annotated[Maybe[str], doc(
        "P: the DataLoader class watched, qualified (a subclass, or torchdata's StatefulDataLoader)")] = UNSET


class RunEnd(Event, tag=Kind.RUN_END.value):
    """The run ends (the server writes one for a producer that vanished)."""

    reason: Annotated[str, doc("`done`, `stopped` or `error`: the run's status")]
    message: Annotated[Maybe[str], doc("the server's: why it ended the run")] = UNSET
    stats: Annotated[Maybe[dict[str, Any]], doc("the run's summary at its end")] = UNSET
    error: Annotated[Maybe[dict[str, Any]], doc(
        "P: the exception a watch()ed script died of, or left `with loader:` on", js="RunError")] = UNSET
    exitcode: Annotated[Maybe[Int], doc(
        "the process's exit status, where the run ended because it exited (130 for Ctrl-C)")] = UNSET
    truncated: Annotated[Maybe[bool], doc("S: the run stopped at the event cap")] = UNSET
    source: Annotated[Maybe[str], doc("`server` when the server wrote it")] = UNSET


class EpochStart(Event, tag=Kind.EPOCH_START.value):
    """An iterator was created, or a persistent one reset (torch's ``_reset``)."""

    epoch: Annotated[Int, doc("the epoch, from 0")]
    batches: Annotated[Maybe[Int], doc("S: the batches the epoch will yield")] = UNSET


class EpochEnd(Event, tag=Kind.EPOCH_END.value):
    """An epoch ended: its iterator ran out, or was left early."""

    epoch: Annotated[Int, doc("the epoch")]
    batches: Annotated[Maybe[Int], doc("the yields the producer saw in the epoch")] = UNSET
    abandoned: Annotated[Maybe[bool], doc(
        "left early: tasks still in flight, a break, an error, a dropped iterator, fewer yields than its length")
                         ] = UNSET
    shard: Annotated[Maybe[str], doc(
        "distributed: how many times each sample index was read, zlib'd and base64'd")] = UNSET
    shard_length: Annotated[Maybe[Int], doc("distributed: the dataset's length the shard digest covers")] = UNSET


class EpochResume(Event, tag=Kind.EPOCH_RESUME.value):
    """An iterator restored from a checkpoint (torchdata's ``load_state_dict``) starts part-way into its epoch."""

    epoch: Annotated[Int, doc("the epoch")]
    batch: Annotated[Scalar, doc("the batch it resumes at")]
    replayed: Annotated[Maybe[Int], doc(
        "the batches it fetched again inside __init__ to restore its state (they show as yields)")] = UNSET


class WorkerStart(Event, tag=Kind.WORKER_START.value):
    """A worker process started."""

    worker: Annotated[WorkerId, doc("the worker")]
    pid: Annotated[Int, doc("its process id")]


class WorkerExit(Event, tag=Kind.WORKER_EXIT.value):
    """A worker process ended (shutdown, an exhausted shard)."""

    worker: Annotated[WorkerId, doc("the worker")]
    pid: Annotated[Maybe[Int], doc("its process id")] = UNSET
    exitcode: Annotated[Maybe[Int], doc("its exit code")] = UNSET


class Dispatch(Event, tag=Kind.DISPATCH.value):
    """A task was put on a worker's index queue (torch's ``_try_put_index``)."""

    idx: Annotated[Int, doc("the task: torch's send_idx, counted per epoch")]
    worker: Annotated[WorkerId, doc("the worker whose index queue took it")]
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET
    indices: Annotated[Maybe[Indices], doc(f"the sample indices, the first {MAX_INDICES}")] = UNSET
    n: Annotated[Maybe[Number], doc("how many sample indices the task has")] = UNSET


class FetchStart(Event, tag=Kind.FETCH_START.value):
    """The worker took the task and began fetching and collating it."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[WorkerId, doc("the worker")]
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET
    n: Annotated[Maybe[Number], doc("the samples it fetches")] = UNSET


class FetchEnd(Event, tag=Kind.FETCH_END.value):
    """The worker put its result on the result queue."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[WorkerId, doc("the worker")]
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET
    dt: Annotated[Maybe[Number], doc("seconds the fetch took")] = UNSET
    nbytes: Annotated[Maybe[Number], doc("the batch's payload in bytes")] = UNSET
    pickled: Annotated[Maybe[Number], doc(
        "of which crossed pickled by value, not through shared memory")] = UNSET
    stop: Annotated[Maybe[bool], doc(
        "S: the worker's iterable dataset ran out: the result is torch's _IterableDatasetStopIteration")] = UNSET


class Arrive(Event, tag=Kind.ARRIVE.value):
    """The main process took the result off the result (or pinned-data) queue."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[WorkerId, doc("the worker that fetched it")]
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET


class PinStart(Event, tag=Kind.PIN_START.value):
    """The pin-memory thread took the result off the result queue."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[Maybe[WorkerId], doc("S: the worker that fetched it")] = UNSET
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET


class PinEnd(Event, tag=Kind.PIN_END.value):
    """The pin-memory thread handed the pinned batch on."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[Maybe[WorkerId], doc("S: the worker that fetched it")] = UNSET
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET
    dt: Annotated[Maybe[Number], doc("seconds the pinning took")] = UNSET
    nbytes: Annotated[Maybe[Number], doc("the batch's payload in bytes")] = UNSET
    pinned: Annotated[Maybe[bool], doc(
        "whether the batch's first tensor is page-locked (null: it holds no tensor)")] = UNSET


class Parked(Event, tag=Kind.PARKED.value):
    """The result arrived out of order: parked in ``_task_info`` until rcvd_idx reaches it."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[WorkerId, doc("the worker that fetched it")]
    waiting_for: Annotated[Int, doc("rcvd_idx at that moment: the task next() waits for")]
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET


class Yield(Event, tag=Kind.YIELD.value):
    """next() returned the task's batch to the training loop."""

    idx: Annotated[Int, doc("the task")]
    wait: Annotated[Number, doc("seconds the training loop spent inside next()")]
    worker: Annotated[Maybe[WorkerId], doc("S: the worker that fetched it")] = UNSET
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET
    from_parked: Annotated[Maybe[bool], doc("the batch had been parked in the reorder buffer")] = UNSET


class Skip(Event, tag=Kind.SKIP.value):
    """A task of an exhausted worker was abandoned (iterable datasets), or in-process the iterable ran out in it."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[WorkerId, doc("the worker")]
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET


class WorkerStuck(Event, tag=Kind.WORKER_STUCK.value):
    """A fetch ran past the stuck threshold; said again every 5 s with a fresh stack while it stays stuck."""

    worker: Annotated[WorkerId, doc("the worker")]
    idx: Annotated[Int, doc("the task it fetches")]
    elapsed: Annotated[Number, doc("seconds since it began the task")]
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET
    pid: Annotated[Maybe[Int], doc("P, D: the worker's process id")] = UNSET
    threshold: Annotated[Maybe[Number], doc("P, D: the stuck threshold, s")] = UNSET
    pos: Annotated[Maybe[Int], doc("P, D: the sample's position in the task")] = UNSET
    sample: Annotated[Maybe[Value], doc("P, D: the index of the sample it fetches")] = UNSET
    stack: Annotated[Maybe[list[Any]], doc(
        "the worker's main thread, outermost frame first (S: one `<simulated>` frame)", js="Frame[]")] = UNSET
    state: Annotated[Maybe[str], doc("D: what the samples saw it doing (`fetching`, `collate`, `lock`, ...)")] = UNSET


class ConsumerStuck(Event, tag=Kind.CONSUMER_STUCK.value):
    """The training loop has been inside next() past the stuck threshold."""

    elapsed: Annotated[Number, doc("seconds it has waited")]
    threshold: Annotated[Maybe[Number], doc("P: the stuck threshold, s")] = UNSET
    stack: Annotated[Maybe[list[Any]], doc("the training thread's stack, outermost frame first", js="Frame[]")
                     ] = UNSET
    waiting_for: Annotated[Maybe[Int], doc("the task next() waits for (rcvd_idx)")] = UNSET
    held_by: Annotated[Maybe[Int], doc("the worker that holds it, or null")] = UNSET
    has_data: Annotated[Maybe[bool], doc("P: its result has arrived (parked) and next() still waits")] = UNSET


class WorkerDied(Event, tag=Kind.WORKER_DIED.value):
    """A worker exited by a signal or a non-zero code."""

    worker: Annotated[WorkerId, doc("the worker")]
    signal: Annotated[Maybe[str], doc("the signal's name (`SIGKILL`), null for an exit code")] = UNSET
    idx: Annotated[Maybe[Int], doc("the task it held (probe/liveness.py), or null")] = UNSET
    pid: Annotated[Maybe[Int], doc("its process id")] = UNSET
    exitcode: Annotated[Maybe[Int], doc("its exit code (negative: the signal)")] = UNSET
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET
    pos: Annotated[Maybe[Int], doc("P: the sample's position in its task")] = UNSET
    sample: Annotated[Maybe[Value], doc("P: the index of the sample it fetched")] = UNSET
    elapsed: Annotated[Maybe[Number], doc("P: seconds since it began the task")] = UNSET
    holding: Annotated[Maybe[bool], doc("S: it held a task")] = UNSET


class Error(Event, tag=Kind.ERROR.value):
    """The dataset or collate_fn raised: in a worker (torch's ExceptionWrapper), or in-process."""

    type: Annotated[str, doc("the exception's class name")]
    message: Annotated[str, doc("its message (a worker's: the last line of its traceback)")]
    traceback: Annotated[Maybe[str], doc("the traceback, as torch re-raises it")] = UNSET
    where: Annotated[Maybe[str], doc("P: torch's words for where (`in DataLoader worker process 1`)")] = UNSET
    idx: Annotated[Maybe[Int], doc("the task that failed, or null")] = UNSET
    worker: Annotated[Maybe[WorkerId], doc("the worker it failed in")] = UNSET
    epoch: Annotated[Maybe[Int], doc("S: the epoch")] = UNSET


class Timeout(Event, tag=Kind.TIMEOUT.value):
    """``DataLoader(timeout=...)`` expired in ``_get_data``."""

    seconds: Annotated[Number, doc("the loader's timeout")]
    workers: Annotated[Maybe[list[Any]], doc("P: what each worker was doing", js="TimeoutWorker[]")] = UNSET


class BatchInfo(Event, tag=Kind.BATCH_INFO.value):
    """The structure of a sampled batch: the first 3 of each worker process (in-process, of each epoch), and
    any batch whose values were asked for."""

    idx: Annotated[Int, doc("the task")]
    worker: Annotated[WorkerId, doc("the worker that fetched it")]
    structure: Annotated[Value, doc("the batch as collated", js="BatchStructure")]
    epoch: Annotated[Maybe[Int], doc("the epoch")] = UNSET
    pickle_bytes: Annotated[Maybe[Number], doc("the bytes pickled for the result queue")] = UNSET
    pickle_s: Annotated[Maybe[Number], doc("seconds the pickling took (null: not measured)")] = UNSET
    values: Annotated[Maybe[bool], doc("its leaves carry a few values")] = UNSET


class Step(Event, tag=Kind.STEP.value):
    """The training step's own timings (the gpu_step scenario)."""

    batch: Annotated[Scalar, doc("the batch's number within the epoch")]
    h2d: Annotated[Maybe[Number], doc("seconds the copy to the device took")] = UNSET
    compute: Annotated[Maybe[Number], doc("seconds the step's compute took")] = UNSET
    h2d_pageable: Annotated[Maybe[Number], doc("seconds a copy from pageable memory took, for comparison")] = UNSET
    device: Annotated[Maybe[str], doc("the device")] = UNSET
    bytes: Annotated[Maybe[Scalar], doc("the bytes copied")] = UNSET
    pinned: Annotated[Maybe[Scalar], doc("the batch was in page-locked memory")] = UNSET


class ProbeError(Event, tag=Kind.PROBE_ERROR.value):
    """loaderscope's own code failed; training went on and this run may miss events (said once per process
    and place)."""

    where: Annotated[str, doc("the probe's part")]
    type: Annotated[str, doc("the exception's class name")]
    message: Annotated[str, doc("its message")]


class DoctorVerdict(Event, tag=Kind.DOCTOR_VERDICT.value):
    """What ``loaderscope doctor`` concluded from its samples of a process (only in doctor snapshots)."""

    text: Annotated[Value, doc("the verdict")]
    cause: Annotated[Maybe[str], doc("its cause, a key of doctor/verdict.py's TEXT")] = UNSET
    advice: Annotated[Maybe[str], doc("what to do about it")] = UNSET
    worker: Annotated[Maybe[WorkerId], doc("the worker it names")] = UNSET
    idx: Annotated[Maybe[Int], doc("the task it names")] = UNSET
    sample: Annotated[Maybe[Value], doc("the index of the sample it names")] = UNSET
    indices: Annotated[Maybe[Indices], doc("the task's sample indices")] = UNSET
    where: Annotated[Maybe[dict[str, Any]], doc("the user's frame", js="Frame")] = UNSET
    details: Annotated[Maybe[list[Any]], doc("one line per thread and worker", js="string[]")] = UNSET
    pid: Annotated[Maybe[Int], doc("the process sampled")] = UNSET
    samples: Annotated[Maybe[Int], doc("how many samples were taken")] = UNSET
    duration: Annotated[Maybe[Number], doc("seconds the samples spanned")] = UNSET
    training: Annotated[Maybe[str], doc("where the training thread was (`next`, `step`, ...)")] = UNSET
    job: Annotated[Maybe[str], doc("with --job: the job's sentence")] = UNSET


class Loop(Event, tag=Kind.LOOP.value):
    """Sent before a batch's yield when, since this loader's last batch, the same thread spent ``others``
    seconds inside other loaders' ``next()`` (a val loader zipped with train, say): that time is neither
    this loader's wait nor the loop's step."""

    others: Annotated[Number, doc("seconds spent inside other watched loaders' next()")]


Bytes = Annotated[int, Meta(ge=0, le=MAX_NUMBER)]


class Memory(Event, tag=Kind.MEMORY.value):
    """P: the memory of the run's processes and the host's headroom, sampled four times a second by the probe
    thread (probe/memory.py: 0.25 s apart; a full sample as often as 2% of a core allows, light ones between)."""

    source: Annotated[str, doc(
        "where the figures come from: `smaps_rollup` (Linux's /proc/PID/smaps_rollup) or `psutil` (elsewhere: "
        "what psutil gives, PSS and swap only on Linux)")]
    procs: Annotated[list[Any], doc(
        "the main process (no `worker`), then each worker of the current iterator with memory to read",
        js="MemoryProcess[]")]
    available: Annotated[Maybe[Bytes], doc("the host's MemAvailable, bytes")] = UNSET
    total: Annotated[Maybe[Bytes], doc("the host's MemTotal, bytes")] = UNSET
    cgroup_limit: Annotated[Maybe[Bytes], doc(
        "the smallest memory cgroup limit on the process's path, where one applies")] = UNSET
    cgroup_usage: Annotated[Maybe[Bytes], doc(
        "that cgroup's working set: its usage less inactive file pages (what the kubelet counts)")] = UNSET
    shm_used: Annotated[Maybe[Bytes], doc("bytes used in /dev/shm, where torch's workers put tensors")] = UNSET
    shm_total: Annotated[Maybe[Bytes], doc("/dev/shm's size, bytes")] = UNSET
    pinned: Annotated[Maybe[Bytes], doc(
        "pinned host memory torch's CUDA host allocator holds, where CUDA is initialized")] = UNSET
    light: Annotated[Maybe[bool], doc(
        "a light sample: each process's `rss` and `swap` only, the kernel's counters (/proc/PID/status; psutil: "
        "`rss`), no `uss`, `pss` or `shared`; absent in a full sample")] = UNSET
    cost: Annotated[Maybe[Number], doc("CPU seconds this sample took the probe thread")] = UNSET


KINDS: tuple[type[Event], ...] = (
    RunStart, RunEnd, EpochStart, EpochEnd, EpochResume, WorkerStart, WorkerExit, Dispatch, FetchStart,
    FetchEnd, Arrive, PinStart, PinEnd, Parked, Yield, Skip, WorkerStuck, ConsumerStuck, WorkerDied, Error,
    Timeout, BatchInfo, Step, ProbeError, DoctorVerdict, Loop, Memory,
)

# Fields the reducers add to the events they keep as notes (state.py, reducer.js): never sent by a
# producer, so not in the kinds' Structs; the page's notes are typed with them.
NOTE_FIELDS: dict[str, dict[str, Any]] = {
    Kind.WORKER_STUCK.value: {"recovered": Annotated[Number, doc(
        "seconds the stuck fetch took in all, set when its fetch_end came")]},
    Kind.CONSUMER_STUCK.value: {"recovered": Annotated[Number, doc(
        "seconds the training loop waited in all, set when its yield came")]},
    Kind.WORKER_DIED.value: {
        "indices": Annotated[Indices | None, doc("the sample indices of the task it held")],
        "memory": Annotated[dict[str, Any], doc("its last memory sample and the host's headroom then",
                                                js="MemoryEvidence")]},
    Kind.ERROR.value: {"indices": Annotated[Indices | None, doc("the sample indices of the task that failed")]},
}

# The frequent kinds: one or more per batch. The page keeps them in typed columns (event-table.js),
# as many of their declared fields as it has columns for.
FREQUENT = ("dispatch", "fetch_start", "fetch_end", "arrive", "parked", "yield", "skip", "pin_start", "pin_end")

# Compact rows: what the probe sends for the per-batch kinds, ``[kind, t, field values...]`` in this
# order (any other kind is ``[kind, t, {fields}]``). Building a dict per event costs the training
# process more than the batch itself for small batches, so producers send rows and the consumer
# (the server, or a Python sink's adapter) expands them with ``events.expand``.
ROW_FIELDS: dict[str, tuple[str, ...]] = {
    "dispatch": ("idx", "worker", "indices"),
    "fetch_start": ("worker", "idx", "n"),
    "fetch_end": ("worker", "idx", "dt", "nbytes", "pickled"),
    "arrive": ("idx", "worker"),
    "parked": ("idx", "worker", "waiting_for"),
    "yield": ("idx", "wait", "from_parked"),
    "skip": ("idx", "worker"),
}
# Names a kind or field had before: traces written then, and older probes, still carry them. Every
# reader renames them as it takes an event in (events.validate; the page's trace readers), so the
# reducers only know the new names. A trace's header keeps its version: no kind or field takes an old
# name again, so the mapping is right for every trace, and a new version would lock the old ones out
# (traces/header.py refuses any other).
RENAMED_KINDS: dict[str, str] = {"buffer": "parked"}  # issue 37: the event says what the page says
RENAMED_FIELDS: dict[str, dict[str, str]] = {"yield": {"from_buffer": "from_parked"}}


def renamed(event: dict[str, Any]) -> bool:
    """Give ``event`` (in place) the names of this schema for a kind or field it carries by an old
    name (``RENAMED_KINDS``, ``RENAMED_FIELDS``); whether it had one."""
    kind = event.get("kind")
    if not isinstance(kind, str):
        return False
    new_kind = RENAMED_KINDS.get(kind)
    if new_kind is not None:
        event["kind"] = kind = new_kind
    old = [(name, new) for name, new in RENAMED_FIELDS.get(kind, {}).items() if name in event]
    for name, new in old:
        event.setdefault(new, event.pop(name))
    return new_kind is not None or bool(old)


# One row for a whole in-process batch (num_workers=0): ``["batch", t, idx, next_started, fetch_started,
# nbytes, pickled, indices]`` stands for dispatch, fetch_start, fetch_end, arrive and yield, which
# happen back to back in the training thread; one row instead of five keeps tiny batches cheap.
BATCH_ROW = "batch"
BATCH_EVENTS = 5
BATCH_ROW_FIELDS: dict[str, Any] = {"idx": Int, "next_started": Time, "fetch_started": Time,
                                    "nbytes": Number | None, "pickled": Number | None,
                                    "indices": Indices | None}

# --- derived: nothing below restates a field ------------------------------------------------------
STRUCTS: dict[str, type[Event]] = {str(cls.__struct_config__.tag): cls for cls in KINDS}
# Fields each kind must carry beyond the common ones; optional fields are not listed.
REQUIRED: dict[str, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(cls) if f.required and f.name not in COMMON_FIELDS)
    for kind, cls in STRUCTS.items()
}
