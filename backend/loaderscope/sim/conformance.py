"""The protocol invariants every producer's trace must keep, real or simulated (DESIGN.md, conformance).

Pure: events in, a list of problems out (empty when the trace conforms), so the same helper checks
the simulator in property tests and the real probe in integration tests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from loaderscope.events import EventError, validate
from loaderscope.state import LoaderState


def problems(events: Iterable[Mapping[str, Any]], *, complete: bool = True) -> list[str]:
    """What is wrong with a run's events; ``[]`` when they keep every invariant.

    Checked: the schema; ``seq`` strictly increasing and ``t`` never running back; the reducer's
    protocol violations (dispatch order, window bound, in-order yields, yields of unarrived tasks);
    ``rcvd_idx`` never passing ``send_idx``; and, when ``complete`` and the run ended "done", every
    dispatched task yielded or skipped exactly once.
    """
    state = LoaderState()
    found: list[str] = []
    released: Counter[tuple[int, int]] = Counter()
    dispatched: set[tuple[int, int]] = set()
    last_seq, last_t, end = -1, float("-inf"), None
    for event in events:
        try:
            validate(dict(event))
        except EventError as exc:
            found.append(f"schema: {exc}")
            continue
        seq, kind = event.get("seq", last_seq + 1), event["kind"]
        if seq <= last_seq:
            found.append(f"seq {seq} follows seq {last_seq}")
        if event["t"] < last_t:
            found.append(f"seq {seq}: t {event['t']} runs back from {last_t}")
        last_seq, last_t = seq, event["t"]
        state.apply(event)
        key = (event.get("epoch", 0), event.get("idx", -1))
        if kind == "dispatch":
            dispatched.add(key)
        elif kind in ("yield", "skip"):
            released[key] += 1
        elif kind == "run_end":
            end = event["reason"]
        if state.rcvd_idx > state.send_idx:
            found.append(f"seq {seq}: rcvd_idx {state.rcvd_idx} passed send_idx {state.send_idx}")
    found.extend(state.violations)
    if complete and end == "done":
        found.extend(f"task {k} dispatched but never yielded or skipped" for k in sorted(dispatched - set(released)))
        found.extend(f"task {k} released {n} times" for k, n in sorted(released.items()) if n != 1)
        found.extend(f"task {k} released but never dispatched" for k in sorted(set(released) - dispatched))
    return found
