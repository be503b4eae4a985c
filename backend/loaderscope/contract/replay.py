"""What a replay of a recorded loader can change: its own dataset and batches stay (sim/sweep.py)."""

from __future__ import annotations

from typing import Literal

# Each loader argument a trace-replay sweep may set, with the kind of value it takes.
TRACE_SETTINGS: dict[str, Literal["int", "bool"]] = {
    "num_workers": "int",
    "prefetch_factor": "int",
    "persistent_workers": "bool",
    "in_order": "bool",
    "pin_memory": "bool",
}
TRACE_KEYS = frozenset(TRACE_SETTINGS)
