"""The advice on num_workers as data and as one sentence: what ``sim.advice.advise`` answers, worded.

``Advice`` is what ``sim.advice.advise`` returns, ``GET /api/runs/{id}/advice`` answers and the page's
what-if panel shows; ``advice_text`` says it in one sentence (``frontend/js/model/advice.js`` word for word).
They live in the core, below the simulator that makes the advice, so that the diagnosis can word an
advice it is given. The numbers it names come from ``sim.sweep``: a count "within 2% of the fastest"
is ``SATURATION`` (98%), "after each epoch's first batch" is ``stats.summary``'s ``input_bound_steady``.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

Status = Literal["keep_up", "limited", "more", "off", "none"]


class Advice(TypedDict):
    """The advice on ``num_workers`` for one recorded loader (JSON as it is).

    ``status``: ``keep_up`` (``workers`` keeps the loop fed), ``limited`` (batches/s levels off at
    ``workers`` with the loop still waiting: more workers would not make it faster), ``more`` (still
    waiting at ``workers``, the most tried, and batches/s still rising), ``off`` (the replay of the
    recorded setting is off by more than ``sim.advice.TRUST``, 10%: no count), ``none`` (nothing to
    advise on: no batch, no fetch to fit, a run too long to replay; ``reason`` says which).
    ``workers``, ``batches_per_s``, ``waiting``: the count chosen, its predicted batches/s and its
    waiting share after each epoch's first batch (null for ``off`` and ``none``).
    ``recorded_workers``, ``recorded_batches_per_s``: the run's own; ``replayed_batches_per_s`` and
    ``error`` (replayed / recorded - 1): the fit's check at the recorded ``setting`` (the settings a
    replay may change, as recorded). ``step_ms``: the fitted training step per batch. ``rows``: the
    replays by ``num_workers`` (the recorded one among them), as a sweep's rows. ``reason``: why
    there is no recommendation, for ``off`` and ``none``. ``memory``: where the run sampled its memory and
    the count chosen would not fit the memory it had, why (``sim.footprint.over_text``), else null.
    """

    status: Status
    workers: int | None
    batches_per_s: float | None
    waiting: float | None
    recorded_workers: int | None
    recorded_batches_per_s: float | None
    replayed_batches_per_s: float | None
    error: float | None
    setting: dict[str, Any]
    step_ms: float | None
    rows: list[dict[str, Any]]
    reason: str | None
    memory: str | None


def rate_text(batches_per_s: float) -> str:
    """Batches/s with two decimals below 10 (0.96, 9.58), one from 10 (95.8)."""
    return f"{batches_per_s:.2f}" if batches_per_s < 10 else f"{batches_per_s:.1f}"


def advice_text(advice: Advice) -> str:
    """The advice as one sentence (the terminal's; ``frontend/js/model/advice.js`` says the same).

    It says whose prediction it is and what the simulator leaves out: it gives each process a core of
    its own, so where the workers' and the main process's own work compete for fewer cores, more
    workers gain less than it predicts (bench/advice_check.py runs the counts side by side).
    """
    status = advice["status"]
    if status in ("off", "none"):
        return f"no advice on num_workers: {advice['reason']}"
    workers, rate = advice["workers"], rate_text(advice["batches_per_s"] or 0.0)
    waiting = f"the training loop waiting {advice['waiting'] or 0.0:.0%} of the time after each epoch's first batch"
    recorded = (f"against {rate_text(advice['recorded_batches_per_s'] or 0.0)} batches/s recorded with "
                f"num_workers={advice['recorded_workers']} (its replay of that setting: "
                f"{rate_text(advice['replayed_batches_per_s'] or 0.0)}, {advice['error'] or 0.0:+.1%})")
    if status == "keep_up":
        said = f"num_workers={workers} would keep up: {rate} batches/s, {waiting}, {recorded}"
    elif status == "more":
        said = (f"even num_workers={workers} would not keep up: {rate} batches/s and still rising, {waiting}, "
                f"{recorded}; it would take more workers than it tried, or cheaper samples")
    else:
        said = (f"num_workers={workers} comes within 2% of the fastest count it tried: {rate} "
                f"batches/s, {waiting}, {recorded}; more workers would not make it faster")
    memory = f"; but it would not fit in memory: {advice['memory']}" if advice.get("memory") else ""
    return f"the simulator fitted to this run predicts {said}, giving each process a core of its own{memory}"
