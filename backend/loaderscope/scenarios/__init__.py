"""Scenarios: a dataset, samplers and a latency model, runnable for real or simulated.

``resolve(name, values)`` checks a scenario's parameters (raising ``ParamError``) and returns a
``Plan``; ``Plan.build()`` imports the scenario's builder (and torch) and returns the ``Workload``
that the real runner and the simulator both take. Listing and resolving never import torch.

Names are loaded on first use, so the simulator can import ``scenarios.workload`` (``Workload``)
without the catalog.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loaderscope.scenarios.catalog import Scenario, all_scenarios, get, register
    from loaderscope.scenarios.errors import ParamError, Problem, UnknownScenario
    from loaderscope.scenarios.params import CommonParams
    from loaderscope.scenarios.plan import Plan, resolve
    from loaderscope.scenarios.workload import SamplerOrder, Workload

_HOMES = {
    "Scenario": "catalog", "all_scenarios": "catalog", "get": "catalog", "register": "catalog",
    "ParamError": "errors", "Problem": "errors", "UnknownScenario": "errors",
    "CommonParams": "params",
    "Plan": "plan", "resolve": "plan",
    "SamplerOrder": "workload", "Workload": "workload",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'loaderscope.scenarios' has no attribute {name!r}")
    return getattr(importlib.import_module(f"loaderscope.scenarios.{home}"), name)
