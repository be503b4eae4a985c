"""How many workers would keep a recorded loop fed: the fitted simulator's answer, one for every surface.

``advise(events)`` fits the simulator to a recorded run (``fit_from_trace``) and replays the setting
it recorded, the fit's own check (``recorded_check``'s numbers). Only when that replay comes within
``TRUST`` (10%) of the recorded batches/s does it replay the run's own batches at each worker count
of ``WORKER_COUNTS``, the other settings as recorded (``trace_sweep``), and choose among them as every
sweep's recommendation does (``sweep.choose``): the smallest count whose batches/s is within
``SATURATION`` (98%) of the best swept. The loop is *fed* there when the training loop waits inside
``next()`` at most ``FED_SHARE`` (10%) of its time in the epochs, each epoch's first wait left out
(``stats.summary``'s ``input_bound_steady``: that batch waits for the pipeline to fill however many
workers fill it). ``loaderscope run``, ``loaderscope sim --from-trace``, ``GET /api/runs/{id}/advice``
and the page's what-if panel all show this one answer (``advicetext.Advice``); ``advicetext.advice_text``
words it, and ``frontend/js/model/advice.js`` words it the same.

The cost is bounded as a sweep's is: each replay simulates about as many events as the run holds,
and the replays together stay within ``MAX_SWEEP_EVENTS`` (a run of 10,000 batches: 12 replays of
~50,000 events, 7.7 s of CPU with the fit). A run too long for every count in ``WORKER_COUNTS`` is
replayed at fewer, kept in ``PRIORITY`` order; one too long to replay twice gets no advice, and says so.
Pure: events in, advice out; the same events give the same advice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loaderscope.events import Event
from loaderscope.model.advicetext import Advice, Status, rate_text
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.sim.fit import fit_from_trace
from loaderscope.sim.footprint import over_text
from loaderscope.sim.sweep import MAX_SWEEP_EVENTS, TRACE_KEYS, choose, trace_sweep

# The replay of the recorded setting must come this close to the recorded batches/s to advise.
TRUST = 0.10
WORKER_COUNTS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
# The counts kept when the budget allows fewer replays: the doublings first, then those between.
PRIORITY = (1, 2, 4, 8, 16, 32, 0, 3, 6, 12, 24)


def advise(events: Sequence[Event]) -> Advice:
    """The advice on ``num_workers`` for the loader ``events`` recorded (see the module docstring)."""
    start = next((e for e in events if e["kind"] == "run_start"), None)
    config = (start or {}).get("config", {})
    setting = {k: config[k] for k in sorted(TRACE_KEYS) if k in config}
    recorded_workers = int(config.get("num_workers") or 0)
    advice = _nothing(None, setting, recorded_workers if start else None)
    if start is None:
        return advice | {"reason": "the trace has no run_start: it does not say which loader it recorded"}
    counts = affordable(len(events), recorded_workers)
    if not counts:
        return too_long(len(events), setting, recorded_workers)
    recorded = summary(reduce(events))["batches_per_s"]
    if recorded <= 0:
        return advice | {"reason": "the run yielded no batch: nothing to advise on"}
    try:
        costs = fit_from_trace(events)
    except ValueError as exc:
        return advice | {"reason": str(exc)}
    own = {"num_workers": recorded_workers} | trace_sweep(events, {}, costs)[0]  # the setting as recorded
    error = own["batches_per_s"] / recorded - 1
    advice |= {"recorded_batches_per_s": recorded, "replayed_batches_per_s": own["batches_per_s"], "error": error,
               "step_ms": costs.step_ms, "rows": [own]}
    if (off := untrusted(own["batches_per_s"], recorded)) is not None:
        return advice | {"status": "off", "reason": off}
    rows = sorted([own, *trace_sweep(events, {"num_workers": counts}, costs)], key=lambda r: r["num_workers"])
    choice = choose(rows)
    status: Status = "keep_up" if choice.fed else "more" if choice.rising else "limited"
    advice |= {"status": status, "workers": choice.row["num_workers"], "rows": rows,
               "batches_per_s": choice.row["batches_per_s"], "waiting": choice.row["input_bound_steady"],
               "memory": over_text(choice.row, ["num_workers"])}  # a count over the memory the run had
    return advice


def untrusted(replayed: float, recorded: float) -> str | None:
    """Why the fit may not advise, when its replay of the recorded setting is off by more than ``TRUST``."""
    error = replayed / recorded - 1 if recorded > 0 else None
    if error is not None and abs(error) <= TRUST:
        return None
    off = f"off by {abs(error):.1%}" if error is not None else "not comparable"
    return (f"the simulator's replay of the recorded setting is {off} ({rate_text(replayed)} batches/s against "
            f"{rate_text(recorded)} recorded), more than the {TRUST:.0%} it must come within: no recommendation")


def affordable(events: int, recorded_workers: int) -> list[int]:
    """The worker counts besides the recorded one that a run of ``events`` can be replayed at within
    ``MAX_SWEEP_EVENTS`` (the recorded setting is replayed too); empty when not even one."""
    others = [n for n in PRIORITY if n != recorded_workers]
    kept = others[:max(0, MAX_SWEEP_EVENTS // max(events, 1) - 1)]
    return sorted(kept)


def too_long(events: int, setting: dict[str, Any], recorded_workers: int | None) -> Advice:
    """The advice for a run too long to replay twice within the budget (before its events are read)."""
    return _nothing(f"the run holds {events:,} events: replaying it at two worker counts would simulate more "
                    f"than the {MAX_SWEEP_EVENTS:,} events a sweep may", setting, recorded_workers)


def _nothing(reason: str | None, setting: dict[str, Any], recorded_workers: int | None) -> Advice:
    return Advice(status="none", workers=None, batches_per_s=None, waiting=None, recorded_workers=recorded_workers,
                  recorded_batches_per_s=None, replayed_batches_per_s=None, error=None, setting=setting,
                  step_ms=None, rows=[], reason=reason, memory=None)
