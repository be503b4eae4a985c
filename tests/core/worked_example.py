"""Seed 001's worked example as events: 4 workers, tasks 0–3, task 1 arrives before task 0 and parks.

Shared by the reducer's tests (test_state.py) and the event parser's (test_events_parse.py).
"""

from __future__ import annotations

from typing import Any


def stream(*steps: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"seq": i, "t": i * 0.01, "run": "r", "rank": 0, "kind": kind, **fields}
            for i, (kind, fields) in enumerate(steps)]


CONFIG = {"num_workers": 4, "prefetch_factor": 1, "in_order": True, "batch_size": 2}
EXAMPLE = stream(
    ("run_start", {"mode": "sim", "config": CONFIG}),
    ("epoch_start", {"epoch": 0}),
    *[("dispatch", {"idx": i, "worker": i, "indices": [2 * i, 2 * i + 1]}) for i in range(4)],
    *[("fetch_start", {"idx": i, "worker": i}) for i in range(4)],
    ("fetch_end", {"idx": 1, "worker": 1, "dt": 0.02}),          # seq 10
    ("arrive", {"idx": 1, "worker": 1}),                          # 11
    ("parked", {"idx": 1, "worker": 1, "waiting_for": 0}),        # 12
    ("fetch_end", {"idx": 0, "worker": 0, "dt": 0.09}),           # 13
    ("arrive", {"idx": 0, "worker": 0}),                          # 14
    ("yield", {"idx": 0, "wait": 0.12, "from_parked": False}),    # 15
    ("dispatch", {"idx": 4, "worker": 0, "indices": [8, 9]}),     # 16
    ("yield", {"idx": 1, "wait": 0.0, "from_parked": True}),      # 17
)
