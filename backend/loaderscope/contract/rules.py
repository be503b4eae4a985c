"""The reducers' transition rules: what each kind of event does to the loader-state model, as data.

``state.py`` and its mirror ``frontend/js/model/reducer.js`` interpret the same ``RULES`` (the page reads
them from ``contract.gen.js``). A rule's table-shaped effects are applied in this order, before the
rule's own code:

1. ``needs_task``: the event's ``idx`` must name a live task of this epoch, else the stream broke the
   protocol (a violation "for unknown task") and the rule stops there;
2. ``worker``: the status the event's worker takes;
3. ``moves``: a live task in one of the ``from`` places (any place when empty) moves ``to`` its next
   place (``Where``), never back;
4. ``enters`` / ``leaves``: the queue the batch's index joins or leaves (``QUEUES``);
5. ``counts``: counters of the state bumped by a number, or by an event field's value (0 when absent);
6. ``fails``: the current epoch failed (an error, a death or a timeout ended it: not a peek);
7. ``keeps``: the event is kept, as it came, in the state's ``notes``.

What is not table-shaped (cursors, conditional moves, statistics that read the event's times) stays
in each reducer's code for the rule, named after it. Adding a rule: a row here, its code (if any) in
both reducers, ``python -m loaderscope.contract --write``; the agreement tests (tests/core/test_rules.py,
frontend/tests/rules.test.js) run one case per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from loaderscope.contract.events import Kind


class Where(StrEnum):
    """Where a task is in the pipeline (torch/utils/data/dataloader.py, _MultiProcessingDataLoaderIter)."""

    INDEX_QUEUE = "index_queue"  # dispatched, waiting in its worker's index queue
    FETCHING = "fetching"  # the worker is running __getitem__/collate for it
    RESULT_QUEUE = "result_queue"  # fetched, on the shared result queue
    PINNING = "pinning"  # the pin-memory thread copies it to page-locked memory
    PARKED = "parked"  # arrived out of order, parked in _task_info (the reorder buffer)
    YIELDED = "yielded"
    SKIPPED = "skipped"
    FAILED = "failed"


class WorkerStatus(StrEnum):
    STARTING = "starting"
    IDLE = "idle"
    FETCHING = "fetching"
    STUCK = "stuck"
    EXITED = "exited"
    DIED = "died"


# The queues a rule moves a batch's index through: the event's worker's index queue (torch's
# _index_queues[w]) and the reorder buffer (the tasks parked in _task_info).
Queue = Literal["worker_queue", "parked"]
QUEUES: tuple[Queue, ...] = ("worker_queue", "parked")


@dataclass(frozen=True)
class Rule:
    """One kind's effect on the loader-state model (see the module's docstring for the order)."""

    says: str  # the transition, in torch's terms
    needs_task: bool = False
    worker: WorkerStatus | None = None
    moves: tuple[tuple[Where, ...], Where] | None = None
    enters: Queue | None = None
    leaves: Queue | None = None
    counts: dict[str, int | str] = field(default_factory=dict)
    fails: bool = False
    keeps: bool = False


RULES: dict[Kind, Rule] = {
    Kind.RUN_START: Rule("the loader's settings are known; its workers appear, starting"),
    Kind.RUN_END: Rule("the run ends with run_end's reason as its status"),
    Kind.EPOCH_START: Rule("a new iterator: cursors, queues and tasks start empty (tasks are numbered per epoch)"),
    Kind.EPOCH_END: Rule("the iterator ends: an epoch done, or a peek when abandoned after a few batches"),
    Kind.EPOCH_RESUME: Rule("a resumed iterator, shown as a note", keeps=True),
    Kind.WORKER_START: Rule("a worker process runs _worker_loop", worker=WorkerStatus.IDLE,
                            counts={"starts": 1, "worker_starts": 1}),
    Kind.WORKER_EXIT: Rule("a worker process exits"),
    Kind.DISPATCH: Rule("_try_put_index: the sampler's next batch goes to worker w's index queue; send_idx advances",
                        enters="worker_queue", counts={"outstanding": 1}),
    Kind.FETCH_START: Rule("worker w takes the batch off its index queue and fetches it",
                           worker=WorkerStatus.FETCHING, moves=((Where.INDEX_QUEUE,), Where.FETCHING),
                           leaves="worker_queue"),
    Kind.FETCH_END: Rule("worker w puts the fetched batch on the result queue",
                         counts={"fetched_bytes": "nbytes", "pickled_bytes": "pickled"}),
    Kind.ARRIVE: Rule("the main process takes the batch off the result (or pinned-data) queue",
                      needs_task=True, counts={"outstanding": -1}),
    Kind.PIN_START: Rule("the pin-memory thread takes the batch off the result queue"),
    Kind.PIN_END: Rule("the pin-memory thread puts the pinned batch on the data queue",
                       counts={"pin_bytes": "nbytes", "pin_time": "dt"}),
    Kind.PARKED: Rule("the batch arrived before rcvd_idx's: parked in _task_info", needs_task=True,
                      moves=((), Where.PARKED), enters="parked", counts={"out_of_order": 1}),
    Kind.YIELD: Rule("next() returns the batch at rcvd_idx; rcvd_idx advances",
                     counts={"batches": 1, "consumer_wait": "wait", "epoch_wait": "wait"}),
    Kind.SKIP: Rule("torch drops the task from _task_info (its worker's iterable dataset ran out); "
                    "rcvd_idx moves past it",
                    counts={"skipped": 1}),
    Kind.WORKER_STUCK: Rule("a worker fetches one batch for too long", worker=WorkerStatus.STUCK, keeps=True),
    Kind.CONSUMER_STUCK: Rule("the training loop has waited in next() for too long", keeps=True),
    Kind.WORKER_DIED: Rule("a worker process died", worker=WorkerStatus.DIED,
                           counts={"worker_deaths": 1}, fails=True),
    Kind.ERROR: Rule("the dataset or collate_fn raised for the batch", moves=((), Where.FAILED), fails=True),
    Kind.TIMEOUT: Rule("timeout= expired waiting for a batch", counts={"timeouts": 1}, fails=True, keeps=True),
    Kind.BATCH_INFO: Rule("a batch's structure, kept for the inspector"),
    Kind.STEP: Rule("the training step's own timings, counted once the next batch shows the step was inside an epoch",
                    counts={"pending_steps": 1, "pending_h2d": "h2d", "pending_compute": "compute",
                            "pending_h2d_pageable": "h2d_pageable"}),
    Kind.PROBE_ERROR: Rule("the probe failed and stopped watching; training went on", keeps=True),
    Kind.MEMORY: Rule("a sample of the processes' memory and the host's headroom, kept compactly per process"),
    Kind.LOOP: Rule("the loop spent time inside other loaders' next() since this loader's last batch",
                    counts={"pending_others": "others"}),
}


def table() -> dict[str, dict[str, object]]:
    """The rules as plain data, for the page: only what a rule sets."""
    rows: dict[str, dict[str, object]] = {}
    for kind, rule in RULES.items():
        row: dict[str, object] = {"says": rule.says}
        if rule.needs_task:
            row["needs_task"] = True
        if rule.worker is not None:
            row["worker"] = rule.worker.value
        if rule.moves is not None:
            row["moves"] = {"from": [w.value for w in rule.moves[0]], "to": rule.moves[1].value}
        for name in ("enters", "leaves"):
            if getattr(rule, name) is not None:
                row[name] = getattr(rule, name)
        if rule.counts:
            row["counts"] = dict(rule.counts)
        if rule.fails:
            row["fails"] = True
        if rule.keeps:
            row["keeps"] = True
        rows[kind.value] = row
    return rows
