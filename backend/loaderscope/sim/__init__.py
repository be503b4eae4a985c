"""The simulator: torch's DataLoader protocol on a virtual clock, for teaching and for "what if".

``engine`` and ``costs`` are the pure core (no torch, no I/O, clock and randomness injected);
``run`` (``simulate``), ``sweep`` and ``fit`` are thin shells that take workloads, traces and tables
in and out of it. The simulator takes the loader's settings as one record (``settings.LoaderSettings``,
the one the real loader is built from) and depends on ``scenarios.workload`` (``Workload``), never on
a scenario's builder or on torch: a workload's sampler order comes from the workload.
"""

from loaderscope.sim.costs import CostModel, Death, SampleDist, Stall, TaskCosts
from loaderscope.sim.engine import Simulator
from loaderscope.sim.fit import describe_fit, fit_from_trace, machinery
from loaderscope.sim.records import SimConfig
from loaderscope.sim.run import simulate
from loaderscope.sim.sweep import (
    TRACE_KEYS,
                                   Variant,
                                   format_table,
                                   memory_notes,
                                   recommend,
                                   recorded_check,
                                   replay_grid,
                                   simulate_variants,
                                   sweep,
                                   trace_sweep,
                                   variants,
)

__all__ = [
    "TRACE_KEYS",
    "CostModel",
    "Death",
    "SampleDist",
    "SimConfig",
    "Simulator",
    "Stall",
    "TaskCosts",
    "Variant",
    "describe_fit",
    "fit_from_trace",
    "format_table",
    "machinery",
    "memory_notes",
    "recommend",
    "recorded_check",
    "replay_grid",
    "simulate",
    "simulate_variants",
    "sweep",
    "trace_sweep",
    "variants",
]
