"""Compare two runs: what changed between them, in numbers a user can act on.

A user changes one thing (``num_workers``, ``prefetch_factor``, a ``collate_fn``) and wants to know
what it did. ``compare(a, b)`` takes the two runs' events (or their reduced ``LoaderState``) and
returns plain data: the settings that differ, throughput and the training loop's waiting share,
per-worker fetch-time histograms on one common scale, and how the diagnosis changed.

Pure (no I/O): ``loaderscope compare`` (``cli/compare.py``) and the page's compare view
(``frontend/js/model/compare.js`` mirrors this module; a node test checks that they agree) present it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loaderscope.events import Kind
from loaderscope.model.diagnosis import diagnosis, memory_findings
from loaderscope.model.state import LoaderState, reduce
from loaderscope.model.stats import summary

BINS = 24  # histogram bins over the common range: enough for a shape, few enough to read per worker

# (summary key, label, how the value reads): what tells whether the change paid off, first.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("batches_per_s", "throughput", "rate"),
    ("input_bound", "training loop waiting", "share"),
    ("input_bound_steady", "waiting after start-up", "share"),
    ("startup_wait", "wait for the first batch", "seconds"),
    ("median_task", "fetch time per batch (median)", "seconds"),
    ("batches", "batches", "count"),
    ("wall", "wall time", "seconds"),
)

# A number in a finding, unless it names a worker ("worker 1" is who, not how much). Digits inside
# words ("h2d") are left alone; the same pattern is used by compare.js.
NUMBER = re.compile(r"(?<![A-Za-z0-9_])(?<!worker )-?[0-9]+(?:[.,][0-9]+)*")
TOPIC_WORDS = 3  # findings whose first words match are about the same thing ("straggler: worker 1")


@dataclass(frozen=True)
class Side:
    """One run of the comparison: its final state and its ``run_start`` (params live only there)."""

    label: str
    state: LoaderState
    start: Mapping[str, Any] | None


def side(source: Iterable[Mapping[str, Any]] | LoaderState, label: str) -> Side:
    """A run from its events or its state; a bare state has no ``run_start``, hence no params."""
    if isinstance(source, LoaderState):
        return Side(label, source, None)
    events = list(source)
    start = next((e for e in events if e.get("kind") == Kind.RUN_START), None)
    return Side(label, reduce(events), start)


def compare(a: Iterable[Mapping[str, Any]] | LoaderState, b: Iterable[Mapping[str, Any]] | LoaderState,
            labels: Sequence[str] = ("A", "B")) -> dict[str, Any]:
    """The comparison of run ``a`` with run ``b`` (see docs/DESIGN.md, "Comparing runs")."""
    sa, sb = side(a, labels[0]), side(b, labels[1])
    stats_a, stats_b = summary(sa.state), summary(sb.state)
    return {
        "runs": [describe(sa, stats_a), describe(sb, stats_b)],
        "settings": settings_diff(sa, sb),
        "metrics": metrics(stats_a, stats_b),
        "histograms": histograms(sa.state, sb.state),
        "diagnosis": diagnosis_diff(diagnosis(sa.state), diagnosis(sb.state)),
    }


def run_memory(state: LoaderState) -> dict[str, Any] | None:
    """A run's memory beside the comparison: ``summary()``'s ``memory`` (what ``loaderscope show --json``
    gives), plus its memory verdicts as ``{code, text}``; None for a run without memory samples."""
    stats = summary(state)
    memory: dict[str, Any] | None = stats["memory"]
    if memory is None:
        return None
    return {**memory, "verdicts": [{"code": f.code, "text": f.text} for f in memory_findings(state, stats)]}


def describe(run: Side, stats: Mapping[str, Any]) -> dict[str, Any]:
    """Who the run is: enough to tell the two apart in a heading."""
    start = run.start or {}
    return {"label": run.label, "run": run.state.run, "mode": run.state.mode, "scenario": start.get("scenario"),
            "name": run.state.name, "rank": run.state.rank, "job": run.state.job, "status": stats["status"]}


def _settings(run: Side) -> dict[str, Any]:
    """The loader's config, plus scenario parameters the config does not already hold (``params.KEY``)."""
    config = dict(run.state.config)
    params = (run.start or {}).get("params") or {}
    return {**config, **{f"params.{k}": v for k, v in params.items() if k not in config}}


def settings_diff(a: Side, b: Side) -> dict[str, Any]:
    """Settings whose values differ (a missing key reads as None), and the names of those that agree."""
    sa, sb = _settings(a), _settings(b)
    keys = sorted(set(sa) | set(sb))
    changed = [{"key": k, "a": sa.get(k), "b": sb.get(k)} for k in keys if sa.get(k) != sb.get(k)]
    return {"changed": changed, "same": [k for k in keys if sa.get(k) == sb.get(k)]}


def metrics(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each headline statistic for both runs, with B's change against A (ratio: None when A is 0)."""
    rows = []
    for key, label, unit in METRICS:
        va, vb = float(a[key] or 0.0), float(b[key] or 0.0)
        rows.append({"key": key, "label": label, "unit": unit, "a": va, "b": vb, "delta": vb - va,
                     "ratio": vb / va if va else None})
    return rows


def log_edges(lo: float, hi: float, bins: int = BINS) -> list[float]:
    """Log-spaced bin edges covering [lo, hi] seconds (as histogram-view.js): fetch times span decades."""
    lo = max(lo, 1e-6)
    hi = max(hi, lo * 1.5)
    a, b = math.log(lo / 1.05), math.log(hi * 1.05)
    return [math.exp(a + (b - a) * i / bins) for i in range(bins + 1)]


def counts(values: Iterable[float], edges: Sequence[float]) -> list[int]:
    """How many ``values`` fall in each bin of ``edges`` (values outside go to the end bins)."""
    bins = len(edges) - 1
    out = [0] * bins
    a = math.log(edges[0])
    span = math.log(edges[-1]) - a
    for v in values:
        k = math.floor((math.log(max(v, 1e-9)) - a) / span * bins)
        out[min(max(k, 0), bins - 1)] += 1
    return out


def histograms(a: LoaderState, b: LoaderState) -> dict[str, Any]:
    """Per-worker fetch-time histograms of both runs over one set of edges, so bars compare directly."""
    times = [dt for s in (a, b) for w in s.workers.values() for dt in w.fetch_times]
    edges = log_edges(min(times), max(times)) if times else []

    def rows(s: LoaderState) -> list[dict[str, Any]]:
        stats = {w["worker"]: w for w in summary(s)["workers"]}
        return [{"worker": w.id, "in_process": not s.config.get("num_workers"), "tasks": len(w.fetch_times),
                 "p50": stats[w.id]["fetch_p50"], "p95": stats[w.id]["fetch_p95"],
                 "counts": counts(w.fetch_times, edges) if edges else []}
                for w in sorted(s.workers.values(), key=lambda w: w.id)]

    return {"edges": edges, "a": rows(a), "b": rows(b)}


def normalise(finding: str) -> str:
    """A finding with its measurements blanked out: two runs' findings about the same thing match."""
    return NUMBER.sub("#", finding)


def _topic(finding: str) -> str:
    return " ".join(normalise(finding).split()[:TOPIC_WORDS])


def _pair(left: list[str], right: list[str], key: Any) -> tuple[list[dict[str, str]], list[str], list[str]]:
    """Match findings with equal ``key`` in order; returns the pairs and what is left on each side."""
    pairs, rest = [], list(right)
    unmatched = []
    for text in left:
        match = next((i for i, other in enumerate(rest) if key(other) == key(text)), None)
        if match is None:
            unmatched.append(text)
        else:
            pairs.append({"a": text, "b": rest.pop(match)})
    return pairs, unmatched, rest


def diagnosis_diff(a: list[str], b: list[str]) -> dict[str, Any]:
    """Findings only in A (gone in B), only in B (new), and in both.

    Two findings are the same when they read the same once numbers are blanked ("straggler: worker 1
    fetches 3.1× slower" and "... 2.4× slower"); failing that, when their first words agree ("training
    waited for data 80% ...; loading is the bottleneck" against "...; the training step is the
    bottleneck"), which lists them side by side as changed rather than as one gone and one new.
    """
    same, rest_a, rest_b = _pair(a, b, normalise)
    changed, only_a, only_b = _pair(rest_a, rest_b, _topic)
    return {"only_a": only_a, "only_b": only_b,
            "both": [{**p, "changed": p["a"] != p["b"]} for p in same]
            + [{**p, "changed": True} for p in changed]}
