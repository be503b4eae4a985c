"""The statistics of a loader's state as plain numbers: ``summary``, the workers' fetch percentiles
(``worker_stats``), ``stragglers``, and the user's frame of a stack.

``diagnosis.py`` puts them into words. Mirrored by ``frontend/js/model/stats.js``; the agreement
tests (frontend/tests/reducer.test.js) compare the two summaries on the same streams.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
import numpy.typing as npt

from loaderscope.model.memory import summary as memory_summary
from loaderscope.model.state import LoaderState

STRAGGLER_FACTOR = 1.5  # a median fetch this many times the others' marks a straggler
STRAGGLER_MIN_GAP = 0.005  # …and at least this many seconds slower: sub-millisecond noise is no straggler
STRAGGLER_MIN_TASKS = 5  # fetches a worker (and the others, pooled) needs before it can be named
STRAGGLER_QUARTILE = 0.75  # …and above this quantile of the others' fetches (rank-based: busy CPUs
# spread every worker's fetches, and a spread-scaled margin then hid a worker twice as slow)

Sorted = npt.NDArray[np.float64]
_NONE: Sorted = np.empty(0)


class FetchOrder:
    """The workers' fetch times kept sorted too, so that the statistics read percentiles and medians by
    position instead of sorting every fetch of the run at each summary: at 1M events of a 4-worker run an
    update costs ~2 ms of CPU, a summary from scratch ~30 ms.

    It follows one LoaderState: ``catch_up`` merges the fetches added since its last call (the reducer's
    lists only grow), so a summary costs the new fetches, a copy of the sorted arrays at C speed, and
    binary searches. A server keeps one per run; ``summary(s)`` without one builds it from scratch.
    """

    def __init__(self) -> None:
        self.workers: dict[int, Sorted] = {}  # each worker's fetch times, sorted
        self.all: Sorted = _NONE  # every fetch
        self.done: Sorted = _NONE  # the fetches of workers with STRAGGLER_MIN_TASKS or more (stragglers' pool)
        self.total = 0.0  # sum of every fetch time

    def catch_up(self, s: LoaderState) -> FetchOrder:
        for worker in s.workers.values():
            mine = self.workers.get(worker.id, _NONE)
            if len(mine) == len(worker.fetch_times):
                continue
            new = np.sort(np.array(worker.fetch_times[len(mine):], dtype=np.float64))
            merged = self.workers[worker.id] = _merge(mine, new)
            self.all = _merge(self.all, new)
            if len(merged) >= STRAGGLER_MIN_TASKS:  # a worker joins the pool with all its fetches
                self.done = _merge(self.done, new if len(mine) >= STRAGGLER_MIN_TASKS else merged)
            self.total = math.fsum((self.total, *new.tolist()))
        return self

    def median_without(self, wid: int) -> float:
        """The median of the pooled fetches of every worker but ``wid`` (statistics.median's, exactly)."""
        count = len(self.done) - len(self.workers[wid])
        middle = self._kth_without(wid, count // 2)
        return middle if count % 2 else (self._kth_without(wid, count // 2 - 1) + middle) / 2

    def _kth_without(self, wid: int, k: int) -> float:
        """The k-th smallest (from 0) pooled fetch of the other workers: the first pooled value with
        more than k of theirs at or below it, found by bisection over the pool."""
        pool, mine = self.done, self.workers[wid]
        low, high = 0, len(pool) - 1
        while low < high:
            mid = (low + high) // 2
            value = pool[mid]
            if np.searchsorted(pool, value, "right") - np.searchsorted(mine, value, "right") > k:
                high = mid
            else:
                low = mid + 1
        return float(pool[low])

    def quantile_without(self, wid: int, q: float) -> float:
        """``_percentile`` of the pooled fetches of every worker but ``wid``."""
        count = len(self.done) - len(self.workers[wid])
        return self._kth_without(wid, min(count - 1, int(round(q * (count - 1)))))


def _merge(ordered: Sorted, new: Sorted) -> Sorted:
    """Two sorted arrays as one."""
    return np.insert(ordered, np.searchsorted(ordered, new), new) if len(ordered) else new


def _percentile(ordered: Sorted, q: float) -> float:
    if not len(ordered):
        return 0.0
    return float(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))])


def _median(ordered: Sorted) -> float:
    """statistics.median of sorted values."""
    n = len(ordered)
    if not n:
        return 0.0
    return float(ordered[n // 2]) if n % 2 else (float(ordered[n // 2 - 1]) + float(ordered[n // 2])) / 2


def worker_stats(s: LoaderState, order: FetchOrder | None = None) -> list[dict[str, Any]]:
    order = order or FetchOrder().catch_up(s)
    wall = max(s.t - (s.first_t or 0.0), 1e-9)
    return [
        {
            "worker": w.id,
            "pid": w.pid,
            "status": str(w.status),
            "tasks": len(w.fetch_times),
            "fetch_p50": _percentile(times, 0.5),
            "fetch_p95": _percentile(times, 0.95),
            "fetch_max": float(times[-1]) if len(times) else 0.0,
            "bytes": w.nbytes,
            "idle_share": max(0.0, 1 - w.busy / wall),
        }
        for w in sorted(s.workers.values(), key=lambda w: w.id)
        for times in [order.workers.get(w.id, _NONE)]
    ]


def stragglers(s: LoaderState, order: FetchOrder | None = None) -> list[dict[str, Any]]:
    """Workers whose median fetch is well beyond the other workers' pooled fetch times.

    Robust on purpose: with two or three fetches per worker, one slow sample used to name a worker
    "1.6× slower"; medians and quantiles ignore such outliers, and ask no margin scaled by the others'
    spread, which CPU contention widens for every worker alike.
    """
    order = order or FetchOrder().catch_up(s)
    found = []
    for wid in s.workers:
        times = order.workers.get(wid, _NONE)
        if len(times) < STRAGGLER_MIN_TASKS or len(order.done) - len(times) < STRAGGLER_MIN_TASKS:
            continue
        median, baseline = _median(times), order.median_without(wid)
        if (baseline > 0 and median > STRAGGLER_FACTOR * baseline and median - baseline >= STRAGGLER_MIN_GAP
                and median > order.quantile_without(wid, STRAGGLER_QUARTILE)):
            found.append({"worker": wid, "factor": median / baseline, "median": median, "others": baseline})
    return found


def _consumer_split(s: LoaderState) -> dict[str, Any] | None:
    """Per batch (means), where the training loop's time went: waiting for data, its step, and within
    the step the host-to-device copy and the compute its step events timed."""
    if not s.steps:
        return None
    per = 1 / s.steps
    return {"device": s.step_device, "wait": s.consumer_wait / max(s.batches, 1), "step": _mean_step(s),
            "h2d": s.step_h2d * per, "compute": s.step_compute * per, "h2d_pageable": s.step_h2d_pageable * per or None}


def _mean_step(s: LoaderState) -> float | None:
    """The loop's own time per batch, inside no loader's next(): a mean, since a loop that steps its
    optimizer every Nth batch (gradient accumulation) pays that step in its throughput, which a median hides."""
    return s.step_total / len(s.step_gaps) if s.step_gaps else None


def summary(s: LoaderState, order: FetchOrder | None = None) -> dict[str, Any]:
    """The statistics the diagnosis (docs/DESIGN.md) speaks of, as plain numbers.

    Inside this loader's epochs the loop's time is its wait in this loader's ``next()``, its time in other
    loaders' ``next()`` (``other_wait``) and its own step: ``epoch_wall``, over which ``batches_per_s``
    (the one throughput every view shows) and the shares are taken.
    ``order``: the run's FetchOrder, kept between calls so that each costs only what came since.
    """
    order = (order or FetchOrder()).catch_up(s)
    consumer_wall = (s.last_yield_t or s.t) - (s.first_t or 0.0)
    epoch_wall = s.consumer_wait + s.other_wait + s.step_total
    steady_wait, steady_wall = s.consumer_wait - s.startup_wait, epoch_wall - s.startup_wait
    workers = s.config.get("num_workers", 0) or 0
    mean_task = order.total / len(order.all) if len(order.all) else 0.0
    return {
        "status": s.status,
        "batches": s.batches,
        "epochs": s.epochs_done,
        "wall": consumer_wall,  # from the loader's first event to its last batch: set-up and gaps included
        "batches_per_s": s.batches / epoch_wall if epoch_wall > 0 else 0.0,
        "consumer_wait": s.consumer_wait,
        "step_time": _mean_step(s),  # None before an epoch's 2nd batch
        "step_total": s.step_total,
        "other_wait": s.other_wait,
        "epoch_wall": epoch_wall,
        # from the first next() to the last yield, the time outside this loader's epochs, and how much of
        # it the loop spent inside other loaders' next()
        "between_epochs": max(0.0, (s.last_yield_t or s.t) - (s.t if s.first_next_t is None else s.first_next_t)
                              - epoch_wall),
        "between_others": s.between_others,
        "input_bound": s.consumer_wait / epoch_wall if epoch_wall > 0 else 0.0,
        "other_share": s.other_wait / epoch_wall if epoch_wall > 0 else 0.0,
        # the same without each epoch's first wait (workers starting, the pipeline filling)
        "input_bound_steady": steady_wait / steady_wall if steady_wall > 0 else 0.0,
        "startup_wait": s.startup_wait,
        "startup_share": s.startup_wait / epoch_wall if epoch_wall > 0 else 0.0,
        "worker_starts": s.worker_starts,
        "peeks": s.peeks,
        "peek_batches": s.peek_batches,
        "peek_wait": s.peek_wait,
        "peek_worker_starts": s.peek_starts,
        "out_of_order": s.out_of_order,
        "parked_high": s.parked_high,
        "outstanding_high": s.outstanding_high,
        "window": s.window,
        "head_of_line_wait": s.head_of_line_wait,
        "skipped": s.skipped,
        "errors": len(s.errors),
        "fetched_bytes": s.fetched_bytes,
        "pickled_bytes": s.pickled_bytes,
        "pickle_s": statistics.fmean(times) if (times := [b["pickle_s"] for b in s.batch_samples
                                                           if isinstance(b.get("pickle_s"), (int, float))]) else 0.0,
        "consumer_split": _consumer_split(s),
        "pin_bytes": s.pin_bytes,
        "pin_mb_per_s": s.pin_bytes / s.pin_time / 1e6 if s.pin_time > 0 else None,
        "pin_wait_share": s.pin_wait / s.consumer_wait if s.consumer_wait > 0 else 0.0,
        "mean_task": mean_task,
        "median_task": _median(order.all),
        "ideal_batches_per_s": (max(workers, 1) / mean_task) if mean_task > 0 else None,
        "workers": worker_stats(s, order),
        "stragglers": stragglers(s, order),
        "violations": list(s.violations),
        "memory": memory_summary(s.memory),
    }


def user_frame(stack: Any) -> dict[str, Any] | None:
    """The innermost frame of the user's own code: where a stuck fetch really is.

    A producer's stack is data from outside: anything but a list of frame dicts is ignored.
    """
    frames = [f for f in stack if isinstance(f, dict)] if isinstance(stack, list) else []
    for frame in reversed(frames):
        if frame.get("user"):
            return frame
    return frames[-1] if frames else None
