"""Protocol invariants every trace must satisfy, whoever produced it (real probe, simulator, replay).

One checker for all producers: the same scenario run through the
real DataLoader and through the simulator must pass the same checks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from loaderscope.model.state import LoaderState


def check(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every broken invariant, in words; an empty list means the trace is consistent.

    - seq strictly increasing;
    - every dispatched task arrives at most once and is released (yielded or skipped) exactly once;
    - with ``in_order=True``, tasks are yielded in dispatch order;
    - outstanding tasks never exceed prefetch_factor × num_workers; rcvd_idx never passes send_idx
      (the reducer checks these two as it goes).
    """
    state = LoaderState()
    problems: list[str] = []
    dispatched: Counter[tuple[int, int]] = Counter()
    arrived: Counter[tuple[int, int]] = Counter()
    released: Counter[tuple[int, int]] = Counter()
    last_seq = -1
    epoch_open = False
    for event in events:
        if event["seq"] <= last_seq:
            problems.append(f"seq {event['seq']} after {last_seq}: not strictly increasing")
        last_seq = event["seq"]
        kind = event["kind"]
        if kind == "epoch_start":
            epoch_open = True
        key = (state.epoch, event.get("idx", -1))
        if kind == "dispatch":
            dispatched[key] += 1
        elif kind == "arrive":
            arrived[key] += 1
        elif kind in ("yield", "skip"):
            released[key] += 1
            if kind == "yield" and state.config.get("in_order", True) and event["idx"] != state.rcvd_idx:
                problems.append(f"epoch {key[0]}: task {event['idx']} yielded while rcvd_idx was {state.rcvd_idx}")
        elif kind == "epoch_end":
            abandoned = event.get("abandoned", False)
            problems += _epoch_leftovers(state.epoch, dispatched, released, abandoned)
            epoch_open = False
        state.apply(event)
        if state.rcvd_idx > state.send_idx:
            problems.append(f"seq {event['seq']}: rcvd_idx {state.rcvd_idx} passed send_idx {state.send_idx}")
    if epoch_open:
        problems += _epoch_leftovers(state.epoch, dispatched, released, abandoned=True)
    problems += [f"task {k} dispatched {n} times" for k, n in dispatched.items() if n > 1]
    problems += [f"task {k} arrived {n} times" for k, n in arrived.items() if n > 1]
    problems += [f"task {k} released {n} times" for k, n in released.items() if n > 1]
    problems += [f"task {k} released but never dispatched" for k in released if k not in dispatched]
    return problems + state.violations


def _epoch_leftovers(epoch: int, dispatched: Counter[tuple[int, int]], released: Counter[tuple[int, int]],
                     abandoned: bool) -> list[str]:
    if abandoned:
        return []
    missing = sorted(idx for (e, idx) in dispatched if e == epoch and (e, idx) not in released)
    return [f"epoch {epoch}: tasks {missing} dispatched but never yielded or skipped"] if missing else []
