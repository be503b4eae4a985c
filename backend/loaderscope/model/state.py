"""The loader-state model: a reducer from events to what the DataLoader looks like at any seq.

Pure (no torch, no I/O): the real probe, the simulator and replayed traces feed it the same events,
and the browser's ``frontend/js/model/reducer.js`` mirrors it. Each kind's effect is a transition rule
of the contract (``contract/rules.py``): the table-shaped part is compiled here into steps as in
reducer.js, and the rest is the rule's own code below, one function per rule. ``fastpath.py`` applies
a frame of frequent kinds at once; ``stats.py`` gives the statistics as numbers and ``diagnosis.py``
says what they mean. Tasks are numbered per epoch, so everything task-shaped lives in the current
epoch and is reset by ``epoch_start``.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loaderscope.contract.loader import TORCH_PREFETCH_FACTOR
from loaderscope.contract.rules import RULES, Rule, Where, WorkerStatus
from loaderscope.events import Kind, RunStatus
from loaderscope.model.memory import MemoryModel

MAX_KEPT = 1000  # notes, errors and violations kept in memory per run


@dataclass(slots=True)  # slots: one per batch is made and read on the server's per-event path
class Task:
    idx: int
    worker: int
    indices: list[Any] | None
    n: int
    dispatched: float
    where: Where = Where.INDEX_QUEUE
    fetch_start: float | None = None
    fetch_end: float | None = None
    pin_start: float | None = None
    pin_end: float | None = None
    arrived: float | None = None
    nbytes: int | None = None


@dataclass(slots=True)
class Worker:
    id: int
    pid: int | None = None
    status: WorkerStatus = WorkerStatus.STARTING
    current: int | None = None  # task being fetched
    queue: list[int] = field(default_factory=list)  # tasks waiting in its index queue, in order
    # 8 bytes a fetch, not a list's 32 (a pointer and a float object): a server follows runs of 10M batches
    fetch_times: array[float] = field(default_factory=lambda: array("d"))
    busy: float = 0.0
    nbytes: int = 0
    exitcode: int | None = None
    signal: str | None = None
    samples: int = 0  # sample indices fetched (copy-on-read grows with them)


@dataclass
class LoaderState:
    """Cursors, queues, reorder buffer and workers of the current epoch, plus run-wide statistics."""

    run: str = ""
    mode: str = ""
    rank: int = 0
    name: str | None = None  # what watch() was told (default: the script's name)
    job: str | None = None  # shared by the ranks of one distributed job
    world_size: int = 1
    config: dict[str, Any] = field(default_factory=dict)
    status: str = RunStatus.PENDING  # then run_end's reason, as the producer sent it
    seq: int = -1
    t: float = 0.0
    epoch: int = -1
    send_idx: int = 0
    rcvd_idx: int = 0
    tasks: dict[int, Task] = field(default_factory=dict)  # live tasks of this epoch (not yet released)
    workers: dict[int, Worker] = field(default_factory=dict)
    result_queue: list[int] = field(default_factory=list)  # fetched, not yet taken by the main process
    parked: list[int] = field(default_factory=list)  # the reorder buffer: out of order, waiting for rcvd_idx
    outstanding: int = 0  # dispatched, not yet arrived (torch's _tasks_outstanding)
    # statistics, run-wide
    batches: int = 0
    epochs_done: int = 0
    out_of_order: int = 0
    parked_high: int = 0
    outstanding_high: int = 0
    consumer_wait: float = 0.0
    startup_wait: float = 0.0  # waits for each epoch's first batch: worker start-up, priming
    epoch_batches: int = 0
    head_of_line_wait: float = 0.0
    skipped: int = 0
    # counted here, not from notes: notes stop at MAX_KEPT, and /metrics exports these as counters
    worker_deaths: int = 0
    timeouts: int = 0
    pin_bytes: int = 0
    pin_time: float = 0.0
    pin_wait: float = 0.0  # consumer wait spent while the awaited batch was being pinned
    unpinned: int = 0  # batches that left the pin thread without pinned tensors
    fetched_bytes: int = 0
    pickled_bytes: int = 0  # of which crossed the process boundary pickled, not in shared memory
    batch_samples: list[dict[str, Any]] = field(default_factory=list)  # structures for the inspector
    # consumer steps that reported their timings (step events) between two batches of an epoch: the
    # steps the step gaps hold, so that the split's step, copy and compute are means over the same batches
    steps: int = 0
    step_h2d: float = 0.0
    step_compute: float = 0.0
    step_h2d_pageable: float = 0.0
    pending_steps: int = 0  # step events since the last batch
    pending_h2d: float = 0.0
    pending_compute: float = 0.0
    pending_h2d_pageable: float = 0.0
    step_device: str | None = None
    first_t: float | None = None
    last_yield_t: float | None = None
    epoch_yield_t: float | None = None  # the current epoch's latest yield (None before its first)
    # the training loop's own time between two yields of one epoch, inside no loader's next(): its step.
    # Gaps between epochs are not steps.
    step_gaps: array[float] = field(default_factory=lambda: array("d"))  # as Worker.fetch_times
    step_total: float = 0.0
    # time the loop spent inside other loaders' next() (a zipped val loader, say: loop events), since
    # this loader's last batch; then added up within epochs and before each epoch's first batch
    pending_others: float = 0.0
    other_wait: float = 0.0
    between_others: float = 0.0
    # iterators abandoned after a few batches (next(iter(loader)) before an epoch): not epochs
    peeks: int = 0
    peek_batches: int = 0
    peek_wait: float = 0.0
    peek_starts: int = 0  # worker start-ups the peeks cost
    epoch_wait: float = 0.0  # consumer wait of the current epoch
    epoch_failed: bool = False  # a worker died, an error or a timeout ended it: not a peek
    epoch_open: bool = False  # an iterator began an epoch that has not ended yet
    first_next_t: float | None = None  # when the training loop first asked for a batch
    # the latest worker_stuck note of each worker, and the consumer_stuck one, until they recover
    stuck_notes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    consumer_note: dict[str, Any] | None = None
    starts: int = 0  # worker start-ups since the last epoch_end
    worker_starts: int = 0  # worker start-ups in the whole run
    yield_order: list[tuple[int, int]] = field(default_factory=list)  # (epoch, idx) as released, the latest ones
    errors: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)  # stuck, died, timeout, unknown kinds
    violations: list[str] = field(default_factory=list)  # protocol invariants broken by the stream
    memory: MemoryModel = field(default_factory=MemoryModel)  # the memory samples, compactly (memory.py)

    @property
    def window(self) -> int:
        """Most tasks torch keeps in flight: prefetch_factor × num_workers (1 in-process), a missing
        prefetch_factor being torch's 2: ``settings.max_tasks``, which tests/core/test_settings.py holds this to
        (the reducer does not import pydantic for it)."""
        workers = self.config.get("num_workers", 0) or 0
        return (self.config.get("prefetch_factor") or TORCH_PREFETCH_FACTOR) * workers if workers else 1

    def keep(self, into: list[Any], item: Any) -> None:
        """Append to a list the state keeps, up to MAX_KEPT: a hostile or broken producer must not
        grow the server's memory without bound (the trace on disk still has everything)."""
        if len(into) < MAX_KEPT:
            into.append(item)

    def apply(self, event: Mapping[str, Any]) -> None:
        """Advance the state by one event (events must come in seq order)."""
        self.seq = event.get("seq", self.seq + 1)
        self.t = event.get("t", self.t)
        if self.first_t is None:
            self.first_t = self.t
        steps = _STEPS.get(event["kind"])
        if steps is None:
            self.keep(self.notes, dict(event))  # unknown kinds are shown, never dropped
            return
        needs_task, effects = steps
        if needs_task and self.task(event) is None:
            return
        for effect in effects:
            effect(self, event)

    # --- helpers used by handlers ----------------------------------------------------------------

    def worker(self, wid: int) -> Worker:
        worker = self.workers.get(wid)
        if worker is None:
            worker = self.workers[wid] = Worker(wid)
        return worker

    def task(self, event: Mapping[str, Any]) -> Task | None:
        task = self.tasks.get(event["idx"])
        if task is None:
            self.keep(self.violations, f"seq {self.seq}: {event['kind']} for unknown task {event['idx']}")
        return task

    def release(self, idx: int) -> None:
        """A task leaves the pipeline (yielded or skipped); rcvd_idx moves past released tasks."""
        self.tasks.pop(idx, None)
        if idx in self.parked:
            self.parked.remove(idx)
        while self.rcvd_idx < self.send_idx and self.rcvd_idx not in self.tasks:
            self.rcvd_idx += 1


Effect = Callable[[LoaderState, Mapping[str, Any]], None]  # one step of a rule


# --- each rule's own code: what its row in contract/rules.py does not say ---------------------------


def _run_start(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.run = e.get("run", s.run)
    s.mode = e["mode"]
    s.rank = e.get("rank", 0)
    s.name, s.job, s.world_size = e.get("name"), e.get("job"), e.get("world_size", 1)
    s.config = dict(e["config"])
    s.status = RunStatus.RUNNING
    for wid in range(s.config.get("num_workers", 0) or 1):
        s.worker(wid)


def _run_end(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.status = e["reason"]
    if e.get("error"):  # the script died of an exception: the diagnosis says which
        s.keep(s.notes, dict(e))


def _epoch_start(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.epoch = e["epoch"]
    s.send_idx = s.rcvd_idx = s.outstanding = s.epoch_batches = 0
    s.epoch_wait = 0.0
    s.epoch_yield_t = None
    s.epoch_failed = False
    s.epoch_open = True
    s.stuck_notes.clear()
    s.tasks.clear()
    s.result_queue.clear()
    s.parked.clear()
    for worker in s.workers.values():
        worker.queue.clear()
        worker.current = None
        if worker.status in (WorkerStatus.FETCHING, WorkerStatus.STUCK):
            worker.status = WorkerStatus.IDLE


PEEK_BATCHES = 3  # an iterator abandoned with fewer batches than this (and than its epoch) was a peek


def is_peek(e: Mapping[str, Any], batches_per_epoch: int | None) -> bool:
    """An epoch_end of an iterator left after a look at its first batches, not an epoch of training."""
    batches = e.get("batches")
    return (bool(e.get("abandoned")) and isinstance(batches, int) and batches < PEEK_BATCHES
            and (batches_per_epoch is None or batches < batches_per_epoch))


def _epoch_end(s: LoaderState, e: Mapping[str, Any]) -> None:
    if not s.epoch_failed and is_peek(e, s.config.get("batches_per_epoch")):
        s.peeks += 1
        s.peek_batches = max(s.peek_batches, e["batches"])
        s.peek_wait += s.epoch_wait
        s.peek_starts += s.starts
    else:
        s.epochs_done += 1
        s.memory.epoch_end(s.epochs_done)
    s.starts = 0
    s.epoch_open = False


def _worker_start(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.worker(e["worker"]).pid = e["pid"]


def _worker_exit(s: LoaderState, e: Mapping[str, Any]) -> None:
    worker = s.worker(e["worker"])
    if e.get("pid") is not None and worker.pid is not None and e["pid"] != worker.pid:
        return  # an older iterator's worker, shut down after the next epoch's workers started
    worker.exitcode = e.get("exitcode")
    if worker.status != WorkerStatus.DIED:
        worker.status = WorkerStatus.EXITED


def _dispatch(s: LoaderState, e: Mapping[str, Any]) -> None:
    idx, wid = e["idx"], e["worker"]
    if idx != s.send_idx:
        s.keep(s.violations, f"seq {s.seq}: dispatch of task {idx} but send_idx is {s.send_idx}")
    indices = e.get("indices")
    s.tasks[idx] = Task(idx, wid, indices, e.get("n", len(indices) if indices else 0), s.t)
    s.send_idx = idx + 1
    s.outstanding_high = max(s.outstanding_high, s.outstanding)
    if s.outstanding > s.window:
        s.keep(s.violations, f"seq {s.seq}: {s.outstanding} tasks outstanding, window is {s.window}")


def _fetch_start(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.worker(e["worker"]).current = e["idx"]
    task = s.tasks.get(e["idx"])
    if task is not None:
        task.fetch_start = s.t


def _fetch_end(s: LoaderState, e: Mapping[str, Any]) -> None:
    task, worker = s.tasks.get(e["idx"]), s.worker(e["worker"])
    dt = e.get("dt")
    if dt is None and task is not None and task.fetch_start is not None:
        dt = s.t - task.fetch_start
    if dt is not None:
        worker.fetch_times.append(dt)
        worker.busy += dt
    worker.nbytes += e.get("nbytes") or 0
    if task is not None:
        worker.samples += task.n
    episode = s.stuck_notes.get(worker.id)
    if episode is not None and episode[0].get("idx") == e["idx"]:  # a stuck fetch that ended after all
        del s.stuck_notes[worker.id]
        for note in episode:
            note["recovered"] = dt if dt is not None else s.t - note["t"] + note["elapsed"]
    if worker.current == e["idx"]:
        worker.current = None
        if worker.status in (WorkerStatus.FETCHING, WorkerStatus.STUCK):
            worker.status = WorkerStatus.IDLE
    # A worker's events are drained from its ring and may reach the stream after the pin thread's or
    # the main process's: never move a task back once it has moved on (hence not a table move).
    if task is not None and task.where in (Where.INDEX_QUEUE, Where.FETCHING):
        task.where = Where.RESULT_QUEUE
        task.fetch_end = s.t
        task.nbytes = e.get("nbytes")
        s.result_queue.append(task.idx)


def _leave_result_queue(s: LoaderState, task: Task) -> None:
    if task.idx in s.result_queue:
        s.result_queue.remove(task.idx)
    worker = s.workers.get(task.worker)
    if worker is not None and task.idx in worker.queue:  # arrival seen before the worker's own events
        worker.queue.remove(task.idx)


def _arrive(s: LoaderState, e: Mapping[str, Any]) -> None:
    task = s.tasks[e["idx"]]
    _leave_result_queue(s, task)
    task.arrived = s.t


def _parked(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.parked_high = max(s.parked_high, len(s.parked))


def _yield(s: LoaderState, e: Mapping[str, Any]) -> None:
    idx, wait = e["idx"], e["wait"]
    task = s.tasks.get(idx)
    if task is None or task.arrived is None:
        s.keep(s.violations, f"seq {s.seq}: yield of task {idx} that has not arrived")
    in_order = s.config.get("in_order", True)
    if in_order and idx != s.rcvd_idx:
        s.keep(s.violations, f"seq {s.seq}: yield of task {idx} while rcvd_idx is {s.rcvd_idx}")
    if wait > 0 and not e.get("from_parked") and s.parked:
        s.head_of_line_wait += _parked_wait(s, wait)
    if wait > 0 and task is not None and task.pin_start is not None:  # how much of the wait was pinning
        s.pin_wait += max(0.0, min(s.t, task.pin_end or s.t) - max(s.t - wait, task.pin_start))
    if s.first_next_t is None:
        s.first_next_t = s.t - wait
    if s.epoch_batches == 0:
        s.startup_wait += wait
    others, s.pending_others = s.pending_others, 0.0
    if s.epoch_yield_t is not None:  # the step: the gap since the last batch, less other loaders' next()
        gap = max(0.0, s.t - wait - s.epoch_yield_t - others)
        s.step_gaps.append(gap)
        s.step_total += gap
        s.other_wait += others
        s.steps += s.pending_steps
        s.step_h2d += s.pending_h2d
        s.step_compute += s.pending_compute
        s.step_h2d_pageable += s.pending_h2d_pageable
    else:
        s.between_others += others
    s.pending_steps, s.pending_h2d, s.pending_compute, s.pending_h2d_pageable = 0, 0.0, 0.0, 0.0
    if s.consumer_note is not None:  # the loop was stuck in next(), and this batch ended the wait
        s.consumer_note["recovered"] = wait
        s.consumer_note = None
    s.epoch_batches += 1
    s.last_yield_t = s.epoch_yield_t = s.t
    s.yield_order.append((s.epoch, idx))
    if len(s.yield_order) > 2 * MAX_KEPT:  # keep the most recent (amortised: trim in halves)
        del s.yield_order[:MAX_KEPT]
    s.release(idx)


def _parked_wait(s: LoaderState, wait: float) -> float:
    """The reorder cost of one wait: the part of it after a later result had arrived and parked, which
    ``in_order=False`` would have handed over at once (torch/utils/data/dataloader.py, ``_next_data``)."""
    arrived = [task.arrived for idx in s.parked if (task := s.tasks.get(idx)) is not None and task.arrived is not None]
    return max(0.0, min(wait, s.t - min(arrived))) if arrived else 0.0


def _last_note(s: LoaderState, e: Mapping[str, Any]) -> dict[str, Any] | None:
    """The note the rule's ``keeps`` just made of ``e`` (None once MAX_KEPT notes are kept)."""
    return s.notes[-1] if s.notes and s.notes[-1] == e else None


def _worker_stuck(s: LoaderState, e: Mapping[str, Any]) -> None:
    note = _last_note(s, e)
    if note is not None:  # the stuck fetch's notes, marked recovered if its fetch_end comes
        episode = s.stuck_notes.get(e["worker"])
        if episode is None or episode[0].get("idx") != e["idx"]:
            episode = s.stuck_notes[e["worker"]] = []
        episode.append(note)


def _consumer_stuck(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.consumer_note = _last_note(s, e) or s.consumer_note


def _skip(s: LoaderState, e: Mapping[str, Any]) -> None:
    task = s.tasks.get(e["idx"])
    if task is not None and task.arrived is None:
        s.outstanding -= 1
        _leave_result_queue(s, task)
    s.release(e["idx"])


def _worker_died(s: LoaderState, e: Mapping[str, Any]) -> None:
    worker = s.worker(e["worker"])
    worker.exitcode = e.get("exitcode")
    worker.signal = e.get("signal")
    note = dict(e)
    task = s.tasks.get(e.get("idx", -1))
    if task is not None:
        note.setdefault("indices", task.indices)
    evidence = s.memory.evidence(e["worker"], e.get("pid"))
    if evidence is not None:  # what the dead worker held at its last sample, and the host's headroom
        note.setdefault("memory", evidence)
    s.keep(s.notes, note)


def _error(s: LoaderState, e: Mapping[str, Any]) -> None:
    error = dict(e)
    task = s.tasks.get(e.get("idx", -1))
    if task is not None:
        error.setdefault("indices", task.indices)
    s.keep(s.errors, error)


IN_FLIGHT = (Where.RESULT_QUEUE, Where.PINNING, Where.PARKED)  # fetched, not yet handed to the training loop


def _memory(s: LoaderState, e: Mapping[str, Any]) -> None:
    flying = [task.nbytes for task in s.tasks.values() if task.where in IN_FLIGHT and task.nbytes is not None]
    s.memory.apply(e, (sum(flying), len(flying)), {w.id: w.samples for w in s.workers.values()})


MAX_BATCH_SAMPLES = 64


def _batch_info(s: LoaderState, e: Mapping[str, Any]) -> None:
    if len(s.batch_samples) < MAX_BATCH_SAMPLES:
        s.batch_samples.append({**e, "epoch": s.epoch})


def _step(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.step_device = e.get("device", s.step_device)


def _pin_start(s: LoaderState, e: Mapping[str, Any]) -> None:
    task = s.tasks.get(e["idx"])
    if task is not None and task.arrived is None:  # a batch already taken is not pinned again
        if task.idx in s.result_queue:
            s.result_queue.remove(task.idx)
        task.where = Where.PINNING
        task.pin_start = s.t


def _pin_end(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.unpinned += e.get("pinned") is False
    task = s.tasks.get(e["idx"])
    if task is not None and task.arrived is None:
        task.where = Where.RESULT_QUEUE  # on the pinned-data queue, for the main process to take
        task.pin_end = s.t
        s.result_queue.append(task.idx)


_CODE: dict[Kind, Effect] = {
    Kind.RUN_START: _run_start,
    Kind.RUN_END: _run_end,
    Kind.EPOCH_START: _epoch_start,
    Kind.EPOCH_END: _epoch_end,
    Kind.WORKER_START: _worker_start,
    Kind.WORKER_EXIT: _worker_exit,
    Kind.DISPATCH: _dispatch,
    Kind.FETCH_START: _fetch_start,
    Kind.FETCH_END: _fetch_end,
    Kind.ARRIVE: _arrive,
    Kind.PARKED: _parked,
    Kind.YIELD: _yield,
    Kind.SKIP: _skip,
    Kind.WORKER_DIED: _worker_died,
    Kind.WORKER_STUCK: _worker_stuck,
    Kind.CONSUMER_STUCK: _consumer_stuck,
    Kind.ERROR: _error,
    Kind.BATCH_INFO: _batch_info,
    Kind.STEP: _step,
    Kind.PIN_START: _pin_start,
    Kind.PIN_END: _pin_end,
    Kind.MEMORY: _memory,
}


# --- the rules' table-shaped effects, compiled once into steps (contract/rules.py gives the order) ---


def _set_worker(status: WorkerStatus) -> Effect:
    def effect(s: LoaderState, e: Mapping[str, Any]) -> None:
        s.worker(e["worker"]).status = status
    return effect


def _move(sources: tuple[Where, ...], to: Where) -> Effect:
    def effect(s: LoaderState, e: Mapping[str, Any]) -> None:
        task = s.tasks.get(e.get("idx", -1))
        if task is not None and (not sources or task.where in sources):
            task.where = to
    return effect


def _enter(queue: str) -> Effect:
    def to_worker(s: LoaderState, e: Mapping[str, Any]) -> None:
        s.worker(e["worker"]).queue.append(e["idx"])

    def to_parked(s: LoaderState, e: Mapping[str, Any]) -> None:
        s.parked.append(e["idx"])
    return to_worker if queue == "worker_queue" else to_parked


def _leave(queue: str) -> Effect:
    def from_worker(s: LoaderState, e: Mapping[str, Any]) -> None:
        _discard(s.worker(e["worker"]).queue, e["idx"])

    def from_parked(s: LoaderState, e: Mapping[str, Any]) -> None:
        _discard(s.parked, e["idx"])
    return from_worker if queue == "worker_queue" else from_parked


def _discard(queue: list[int], idx: int) -> None:
    if idx in queue:
        queue.remove(idx)


def _count(counts: dict[str, int | str]) -> Effect:
    bumps = tuple(counts.items())
    if len(bumps) == 1 and isinstance(bumps[0][1], int):  # the common case, one counter by a number
        (name, step), = bumps

        def bump(s: LoaderState, e: Mapping[str, Any]) -> None:
            s.__dict__[name] += step
        return bump

    def effect(s: LoaderState, e: Mapping[str, Any]) -> None:
        counters = s.__dict__  # the counters are plain attributes: their dict is the fast way in
        for name, by in bumps:
            counters[name] += by if isinstance(by, int) else e.get(by) or 0
    return effect


def _fail(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.epoch_failed = True


def _keep(s: LoaderState, e: Mapping[str, Any]) -> None:
    s.keep(s.notes, dict(e))


def _compile(kind: Kind, rule: Rule) -> tuple[bool, tuple[Effect, ...]]:
    """A rule's effects in the contract's order, its own code last."""
    effects: list[Effect | None] = [
        _set_worker(rule.worker) if rule.worker is not None else None,
        _move(*rule.moves) if rule.moves is not None else None,
        _enter(rule.enters) if rule.enters is not None else None,
        _leave(rule.leaves) if rule.leaves is not None else None,
        _count(rule.counts) if rule.counts else None,
        _fail if rule.fails else None,
        _keep if rule.keeps else None,
        _CODE.get(kind),
    ]
    return rule.needs_task, tuple(effect for effect in effects if effect is not None)


_STEPS = {kind: _compile(kind, rule) for kind, rule in RULES.items()}



def reduce(events: Iterable[Mapping[str, Any]], until_seq: int | None = None) -> LoaderState:
    """The state after every event up to and including ``until_seq`` (all of them by default)."""
    state = LoaderState()
    for event in events:
        if until_seq is not None and event.get("seq", 0) > until_seq:
            break
        state.apply(event)
    return state
