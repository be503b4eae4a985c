"""The simulator: torch's DataLoader protocol on a virtual clock, for teaching and for "what if".

``engine`` and ``costs`` are the pure core (no torch, no I/O); ``run``, ``sweep`` and ``fit`` are
thin shells that take scenarios, traces and tables in and out of it.
"""

from loaderscope.sim.costs import CostModel, Death, SampleDist, Stall, TaskCosts
from loaderscope.sim.engine import SimConfig, Simulator
from loaderscope.sim.run import simulate

__all__ = [
    "CostModel",
    "Death",
    "SampleDist",
    "SimConfig",
    "Simulator",
    "Stall",
    "TaskCosts",
    "simulate",
]
