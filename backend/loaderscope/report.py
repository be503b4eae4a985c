"""Plain-words explanations of a trace, for the terminal (pure: events in, text out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def first_epoch_orders(events: Sequence[Mapping[str, Any]], limit: int = 24) -> tuple[list[int], list[int]]:
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


def reordering_story(events: Sequence[Mapping[str, Any]], limit: int = 6) -> list[str]:
    """The first parked results, told step by step: parked by ``_task_info[idx] += (data,)`` and released by ``_task_info.pop(_rcvd_idx)`` in torch's ``_MultiProcessingDataLoaderIter._next_data``."""
    lines: list[str] = []
    parked: dict[int, tuple[float, int, int]] = {}
    for e in events:
        kind = e["kind"]
        if kind == "epoch_start" and e["epoch"] > 0:
            break
        if kind == "buffer":
            parked[e["idx"]] = (e["t"], e["worker"], e["waiting_for"])
            if len(lines) < limit:
                lines.append(f"{e['t'] * 1000:8.1f} ms  task {e['idx']} arrived from worker {e['worker']} while "
                             f"rcvd_idx = {e['waiting_for']}: parked in _task_info")
        elif kind == "yield" and e.get("from_buffer") and e["idx"] in parked and len(lines) < limit:
            since, _, waited_for = parked[e["idx"]]
            lines.append(f"{e['t'] * 1000:8.1f} ms  task {e['idx']} released from the buffer after "
                         f"{(e['t'] - since) * 1000:.1f} ms, once task {waited_for} had arrived")
    return lines
