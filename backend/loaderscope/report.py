"""What the terminal says of a run (pure: events in, data and text out).

``run_report`` is one run as ``loaderscope show --json`` gives it (docs/DESIGN.md §14), and as
``loaderscope run`` and ``show`` print it (``cli/summary.py``): who the run is, its settings,
``stats.summary``'s numbers, the findings with their cause codes, and the first epoch's reordering.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from loaderscope.events import Kind
from loaderscope.model.diagnosis import findings
from loaderscope.model.state import LoaderState, reduce
from loaderscope.model.stats import summary

ORDER_LIMIT = 24  # task ids of the first epoch shown in arrival and in yield order
STORY_LIMIT = 6  # steps of the reordering story


class Identity(TypedDict):
    """Who the run is: its ``run_start`` (else its trace's header) and where it was read from."""

    file: str | None  # the trace; null for a run printed as it ran (``loaderscope run``)
    run: str | None
    job: str | None
    name: str | None
    rank: int
    world_size: int | None
    pid: int | None
    host: str | None
    loader: str | None  # the loader's class, qualified
    mode: str | None
    scenario: str | None
    truncated: bool  # no ``run_end``: its process is still writing it, or was killed


class FindingJSON(TypedDict):
    code: str  # the cause (``diagnosis.Finding.code``): what a script tests
    text: str


class Reordering(TypedDict):
    """The first epoch's task ids as they reached the main process and as they were handed over."""

    arrivals: list[int]
    yields: list[int]
    story: list[str]  # the first parked results, told step by step


class RunReport(TypedDict):
    identity: Identity
    settings: dict[str, Any]  # ``run_start.config``: the DataLoader's settings as torch resolved them
    params: dict[str, Any] | None  # a scenario's parameters; null for the user's own loader
    summary: dict[str, Any]  # ``stats.summary()``, every key (docs/DESIGN.md §3)
    findings: list[FindingJSON]
    reordering: Reordering


def run_report(events: Sequence[Mapping[str, Any]], head: Mapping[str, Any] | None = None, *,
               file: str | None = None, truncated: bool = False, state: LoaderState | None = None) -> RunReport:
    """One run, from its events (and its trace's header; ``state``: the reduced events, if the caller has them)."""
    state = reduce(events) if state is None else state
    stats = summary(state)
    start: Mapping[str, Any] = next((e for e in events if e["kind"] == Kind.RUN_START), {})
    arrivals, yields = first_epoch_orders(events, ORDER_LIMIT)
    return {
        "identity": identity(start, head or {}, state, file, truncated),
        "settings": dict(state.config),
        "params": start.get("params") or (head or {}).get("params") or None,
        "summary": stats,
        "findings": [{"code": f.code, "text": f.text} for f in findings(state, stats)],
        "reordering": {"arrivals": arrivals, "yields": yields, "story": reordering_story(events, STORY_LIMIT)},
    }


def identity(start: Mapping[str, Any], head: Mapping[str, Any], state: LoaderState, file: str | None,
             truncated: bool) -> Identity:
    """What ``run_start`` says of the run; its trace's header where it says nothing (the header of a
    logdir trace repeats it, that of ``loaderscope run``'s holds the scenario)."""
    def of(key: str) -> Any:
        value = start.get(key)
        return head.get(key) if value is None else value

    return {"file": file, "run": state.run or head.get("run"), "job": state.job or head.get("job"),
            "name": state.name or head.get("name"), "rank": state.rank, "world_size": of("world_size"),
            "pid": of("pid"), "host": of("host"), "loader": of("loader"), "mode": state.mode or head.get("mode"),
            "scenario": of("scenario"), "truncated": truncated}


def first_epoch_orders(events: Sequence[Mapping[str, Any]], limit: int = ORDER_LIMIT) -> tuple[list[int], list[int]]:
    """Task ids of the first epoch in arrival order and in yield order (the reordering at a glance)."""
    arrivals: list[int] = []
    yields: list[int] = []
    for e in events:
        if e["kind"] == "epoch_start" and e["epoch"] > 0:
            break
        if e["kind"] == "arrive" and len(arrivals) < limit:
            arrivals.append(e["idx"])
        elif e["kind"] == "yield" and len(yields) < limit:
            yields.append(e["idx"])
    return arrivals, yields


def reordering_story(events: Sequence[Mapping[str, Any]], limit: int = STORY_LIMIT) -> list[str]:
    """The first parked results, told step by step: parked by ``_task_info[idx] += (data,)`` and released by
    ``_task_info.pop(_rcvd_idx)`` in torch's ``_MultiProcessingDataLoaderIter._next_data``."""
    lines: list[str] = []
    parked: dict[int, tuple[float, int, int]] = {}
    for e in events:
        kind = e["kind"]
        if kind == "epoch_start" and e["epoch"] > 0:
            break
        if kind == "parked":
            parked[e["idx"]] = (e["t"], e["worker"], e["waiting_for"])
            if len(lines) < limit:
                lines.append(f"{e['t'] * 1000:8.1f} ms  task {e['idx']} arrived from worker {e['worker']} while "
                             f"rcvd_idx = {e['waiting_for']}: parked in _task_info")
        elif kind == "yield" and e.get("from_parked") and e["idx"] in parked and len(lines) < limit:
            since, _, waited_for = parked[e["idx"]]
            lines.append(f"{e['t'] * 1000:8.1f} ms  task {e['idx']} released from the buffer after "
                         f"{(e['t'] - since) * 1000:.1f} ms, once task {waited_for} had arrived")
    return lines
