"""The simulator: torch's DataLoader protocol on a virtual clock, for teaching and for "what if".

``engine`` and ``costs`` are the pure core (no torch, no I/O, clock and randomness injected);
``run`` (``simulate``), ``sweep`` and ``fit`` are thin shells that take scenarios, traces and tables
in and out of it; ``batches`` iterates a plan's real torch samplers.
"""

from loaderscope.sim.costs import CostModel, Death, SampleDist, Stall, TaskCosts
from loaderscope.sim.engine import SimConfig, Simulator
from loaderscope.sim.fit import fit_from_trace, machinery
from loaderscope.sim.run import simulate
from loaderscope.sim.sweep import format_table, recommend, sweep, trace_sweep

__all__ = [
    "CostModel",
    "Death",
    "SampleDist",
    "SimConfig",
    "Simulator",
    "Stall",
    "TaskCosts",
    "fit_from_trace",
    "format_table",
    "machinery",
    "recommend",
    "simulate",
    "sweep",
    "trace_sweep",
]
