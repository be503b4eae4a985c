"""The reducer's frame-at-once path: ``apply_all`` applies the frequent kinds' table-shaped effects in
one loop, without a Python call per compiled step, and then their rule's own code from ``state.py``.

The server's per-event path (``server/runs/store.py``). Mirrored by ``frontend/js/model/fastpath.js``
(``applyInlined``); tests/core/test_state_apply_all.py holds it to ``LoaderState.apply``, event by event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from loaderscope.contract.rules import RULES, Rule, Where, WorkerStatus
from loaderscope.events import Kind

# the rules' own code, which the loop calls after the effects it writes out
from loaderscope.model.state import (
    LoaderState,
    _arrive,
    _discard,
    _dispatch,
    _fetch_end,
    _fetch_start,
    _parked,
    _skip,
    _yield,
)

# The rows apply_all does in its own loop, as they were when it was written: a kind whose row in
# contract/rules.py changes goes through its compiled steps until apply_all is changed with it.
_INLINED_RULES = {
    Kind.DISPATCH: Rule("", enters="worker_queue", counts={"outstanding": 1}),
    Kind.FETCH_START: Rule("", worker=WorkerStatus.FETCHING, moves=((Where.INDEX_QUEUE,), Where.FETCHING),
                           leaves="worker_queue"),
    Kind.FETCH_END: Rule("", counts={"fetched_bytes": "nbytes", "pickled_bytes": "pickled"}),
    Kind.ARRIVE: Rule("", needs_task=True, counts={"outstanding": -1}),
    Kind.PARKED: Rule("", needs_task=True, moves=((), Where.PARKED), enters="parked", counts={"out_of_order": 1}),
    Kind.YIELD: Rule("", counts={"batches": 1, "consumer_wait": "wait", "epoch_wait": "wait"}),
    Kind.SKIP: Rule("", counts={"skipped": 1}),
}
_INLINED = frozenset(kind.value for kind, rule in _INLINED_RULES.items() if replace(RULES[kind], says="") == rule)


def apply_all(s: LoaderState, events: Iterable[Mapping[str, Any]],
              failed: Callable[[Mapping[str, Any], Exception], None] | None = None) -> None:
    """``s.apply`` each event in order, the frequent kinds' table-shaped effects done in this one loop
    (the same effects, in the same order, as their compiled steps: ``_INLINED``), the rest by ``s.apply``.

    The server's per-event path: a frame's events without a Python call per effect. ``failed``
    gets an event whose rule raised, and the events after it are applied (without it, it raises).
    """
    tasks, workers, parked, counters = s.tasks, s.workers, s.parked, s.__dict__
    for e in events:
        kind = e["kind"]
        try:
            if kind not in _INLINED:
                s.apply(e)
                continue
            s.seq = e.get("seq", s.seq + 1)
            s.t = e.get("t", s.t)
            if s.first_t is None:
                s.first_t = s.t
            if kind == "fetch_end":
                counters["fetched_bytes"] += e.get("nbytes") or 0
                counters["pickled_bytes"] += e.get("pickled") or 0
                _fetch_end(s, e)
            elif kind == "yield":
                s.batches += 1
                wait = e.get("wait") or 0
                s.consumer_wait += wait
                s.epoch_wait += wait
                _yield(s, e)
            elif kind == "dispatch":
                worker = workers.get(e["worker"]) or s.worker(e["worker"])
                worker.queue.append(e["idx"])
                s.outstanding += 1
                _dispatch(s, e)
            elif kind == "fetch_start":
                worker = workers.get(e["worker"]) or s.worker(e["worker"])
                worker.status = WorkerStatus.FETCHING
                task = tasks.get(e.get("idx", -1))
                if task is not None and task.where == Where.INDEX_QUEUE:
                    task.where = Where.FETCHING
                _discard(worker.queue, e["idx"])
                _fetch_start(s, e)
            elif kind == "arrive":
                if s.task(e) is not None:
                    s.outstanding -= 1
                    _arrive(s, e)
            elif kind == "parked":
                task = s.task(e)
                if task is not None:
                    task.where = Where.PARKED
                    parked.append(e["idx"])
                    s.out_of_order += 1
                    _parked(s, e)
            else:  # skip
                s.skipped += 1
                _skip(s, e)
        except Exception as exc:  # said to ``failed``
            if failed is None:
                raise
            failed(e, exc)
