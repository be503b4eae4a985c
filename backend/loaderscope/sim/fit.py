"""Seed the cost model from a recorded trace: what each sample, worker and step really cost.

``fit_from_trace`` reads the ◆ events of a real run (a trace file, or a run the dashboard recorded)
and returns a ``CostModel`` that replays it: per-sample fetch times (a table per index where the
trace names the indices, a lognormal fit for the rest), per-worker speed factors, the consumer's
step, and the machinery around them (worker spawn and boot, result-queue transfer, pinning).
Pure: events in, a model out.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from loaderscope.sim.costs import MB, CostModel, SampleDist

# Spread below this share of the mean is noise of the clock, not of the data: fit a constant.
CONSTANT_CV = 0.02
# Worker factors this close to 1 are noise too.
FACTOR_TOLERANCE = 0.05

Events = Iterable[Mapping[str, Any]]


def _epochs(events: Events) -> list[tuple[int, Mapping[str, Any]]]:
    """Each event with the epoch it belongs to (real traces carry no ``epoch`` on task events)."""
    epoch, out = 0, []
    for event in events:
        if event["kind"] == "epoch_start":
            epoch = event["epoch"]
        out.append((event.get("epoch", epoch), event))
    return out


def _tasks(events: list[tuple[int, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Fetched tasks: worker, seconds, sample count and (when complete) sample indices."""
    dispatched: dict[tuple[int, int], Mapping[str, Any]] = {}
    skipped: set[tuple[int, int]] = set()
    ends = []
    for epoch, event in events:
        key = (epoch, event.get("idx", -1))
        if event["kind"] == "dispatch":
            dispatched[key] = event
        elif event["kind"] == "skip":
            skipped.add(key)
        elif event["kind"] == "fetch_end" and event.get("dt") is not None and not event.get("stop"):
            ends.append((key, event))
    tasks = []
    for key, end in ends:
        sent = dispatched.get(key)
        if key in skipped or sent is None or not sent.get("n"):
            continue  # an exhausted iterable's last pull: no batch came of it
        indices = sent.get("indices")
        complete = isinstance(indices, list) and len(indices) == sent["n"] and None not in indices
        tasks.append({"worker": end["worker"], "dt": end["dt"], "n": sent["n"],
                      "indices": indices if complete else None})
    return tasks


def _worker_factors(tasks: list[dict[str, Any]]) -> dict[int, float]:
    per_worker: dict[int, list[float]] = defaultdict(list)
    for task in tasks:
        per_worker[task["worker"]].append(task["dt"] / task["n"])
    medians = {w: statistics.median(v) for w, v in per_worker.items() if len(v) >= 2}
    if len(medians) < 2:
        return {}
    # The lower median: with two workers, the faster one is the norm and the other the straggler.
    base = statistics.median_low(medians.values())
    factors = {w: m / base for w, m in medians.items()} if base > 0 else {}
    return {w: round(f, 3) for w, f in factors.items() if abs(f - 1) > FACTOR_TOLERANCE}


def _sample_fit(tasks: list[dict[str, Any]], factors: dict[int, float]) -> tuple[SampleDist | None, dict[int, float]]:
    """A distribution over per-sample times (ms) and a table for the indices the trace names."""
    per_sample, table = [], {}
    for task in tasks:
        ms = task["dt"] / task["n"] / factors.get(task["worker"], 1.0) * 1000
        per_sample.append(ms)
        for index in task["indices"] or ():
            table[int(index)] = round(ms, 6)
    if not per_sample:
        return None, {}
    mean = statistics.fmean(per_sample)
    sd = statistics.pstdev(per_sample)
    if mean <= 0 or sd <= CONSTANT_CV * mean:
        return SampleDist(dist="constant", mean_ms=mean), table
    return SampleDist(dist="lognormal", mean_ms=mean, sd_ms=sd), table


def _step_ms(events: list[tuple[int, Mapping[str, Any]]]) -> float | None:
    """The consumer's time outside ``next()`` between two batches of an epoch: its training step."""
    steps, last = [], None
    for epoch, event in events:
        if event["kind"] == "epoch_start":
            last = None
        elif event["kind"] == "yield":
            if last is not None:
                steps.append(event["t"] - event["wait"] - last)
            last = event["t"]
    return max(0.0, statistics.median(steps) * 1000) if steps else None


def _first(events: list[tuple[int, Mapping[str, Any]]], kind: str) -> Mapping[str, Any] | None:
    return next((event for _, event in events if event["kind"] == kind), None)


def machinery(events: Events, *, sample_ms: float | None = None) -> dict[str, float]:
    """The loader's own costs in a trace, as CostModel fields (ms).

    - ``spawn_ms``: the main process's time from ``run_start`` to the first ``epoch_start``, per
      worker (torch starts them one after another);
    - ``startup_ms``: the time from the last worker's start (the end of spawning, when the first
      tasks are dispatched) to its first fetch, median over the epochs that started workers
      (earlier workers may have booted before any task reached them);
    - ``get_ms``: the median wait inside ``next()`` for a result that was already on the queue
      (the main process unpickling it);
    - ``transfer_ms``: a low percentile of ``fetch_end`` → ``arrive`` beyond ``get_ms``, over results
      the main process was already waiting for (others also waited for a busy consumer, and even
      these may have queued behind another result being unpickled);
    - ``pin_ms_per_mb`` from pin events;
    - ``sample_overhead_ms``: with ``sample_ms``, the nominal cost of each sample, what a sample
      really took beyond it (``time.sleep`` overshoot, indexing, collate).
    """
    tagged = _epochs(events)
    start, epoch = _first(tagged, "run_start"), _first(tagged, "epoch_start")
    workers = (start or {}).get("config", {}).get("num_workers", 0) or 0
    fields: dict[str, float] = {}
    if start is not None and epoch is not None and workers:
        fields["spawn_ms"] = max(0.0, (epoch["t"] - start["t"]) / workers * 1000)
    if workers:
        fields |= _worker_side(tagged, workers)
    if sample_ms is not None:
        per_sample = [task["dt"] / task["n"] * 1000 for task in _tasks(tagged)]
        if per_sample:
            fields["sample_overhead_ms"] = max(0.0, statistics.median(per_sample) - sample_ms)
    return {name: round(value, 4) for name, value in fields.items()}


def _worker_side(tagged: list[tuple[int, Mapping[str, Any]]], workers: int) -> dict[str, float]:
    ended: dict[tuple[int, int], Mapping[str, Any]] = {}
    spawned, spawn_end, boots = False, None, []
    transfers, gets, pins = [], [], []
    arrived: list[tuple[float, float]] = []  # (fetch_end, arrive) of results taken in this next()
    for e, event in tagged:
        key, kind = (e, event.get("idx", -1)), event["kind"]
        if kind == "worker_start":
            spawned = True
        elif kind == "epoch_start":
            spawn_end, spawned = (event["t"] if spawned else None), False
        elif kind == "fetch_start" and spawn_end is not None and event["worker"] == workers - 1:
            boots.append(event["t"] - spawn_end)
            spawn_end = None
        elif kind == "fetch_end":
            ended[key] = event
        elif kind == "arrive" and key in ended:
            arrived.append((ended[key]["t"], event["t"]))
        elif kind == "yield":
            called = event["t"] - event["wait"]
            transfers += [taken - put for put, taken in arrived if put > called]  # main waited for it
            arrived.clear()
            if not event.get("from_buffer") and key in ended and event["wait"] > 0 and ended[key]["t"] < called:
                gets.append(event["wait"])  # on the queue before next() was called
        elif kind == "pin_end" and event.get("nbytes") and event.get("dt") is not None and event.get("pinned"):
            pins.append(event["dt"] * 1000 / (event["nbytes"] / MB))
    fields: dict[str, float] = {}
    if boots:
        fields["startup_ms"] = max(0.0, statistics.median(boots) * 1000)
    get = statistics.median(gets) if gets else 0.0
    if gets:
        fields["get_ms"] = get * 1000
    if transfers:
        fields["transfer_ms"] = max(0.0, sorted(transfers)[len(transfers) // 10] - get) * 1000
    if pins:
        fields["pin_ms_per_mb"] = statistics.median(pins)
    return fields


def fit_from_trace(events: Events) -> CostModel:
    """A cost model that replays a recorded run's latencies (see the module docstring).

    Raises:
        ValueError: if the trace holds no finished fetch with its dispatch (nothing to fit).
    """
    tagged = _epochs(events)
    tasks = _tasks(tagged)
    if not tasks:
        raise ValueError("the trace holds no fetch_end with a matching dispatch: nothing to fit")
    factors = _worker_factors(tasks)
    sample, table = _sample_fit(tasks, factors)
    step = _step_ms(tagged)
    nbytes = [event["nbytes"] / task_n for task_n, event in _bytes_per_task(tagged)]
    return CostModel(
        sample=sample,
        sample_table_ms=table,
        worker_factor=factors,
        step_ms=step,
        sample_bytes=int(statistics.median(nbytes)) if nbytes else CostModel().sample_bytes,
        **machinery([event for _, event in tagged]),
    )


def _bytes_per_task(tagged: list[tuple[int, Mapping[str, Any]]]) -> list[tuple[int, Mapping[str, Any]]]:
    counts: dict[tuple[int, int], int] = {(e, ev["idx"]): ev.get("n") or 0 for e, ev in tagged
                                          if ev["kind"] == "dispatch"}
    return [
        (counts[(e, ev["idx"])], ev)
        for e, ev in tagged
        if ev["kind"] == "fetch_end" and ev.get("nbytes") and counts.get((e, ev["idx"]))
    ]

