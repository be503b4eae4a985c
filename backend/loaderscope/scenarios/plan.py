"""``resolve``: a scenario's name and raw values in, a ``Plan`` out — the one place they are parsed.

The command line, the dashboard's API and a run process's own command line each call ``resolve``
at their edge and pass the ``Plan`` on; nothing downstream validates again. A plan is torch-free:
``build()`` imports the scenario's builder when a run is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loaderscope.scenarios import catalog
from loaderscope.scenarios.params import CommonParams
from loaderscope.scenarios.workload import Workload


@dataclass(frozen=True)
class Plan:
    """A scenario with validated parameters: what a run (real or simulated) is made from."""

    scenario: catalog.Scenario
    params: CommonParams

    @property
    def name(self) -> str:
        return self.scenario.name

    def values(self) -> dict[str, Any]:
        """Every parameter as JSON values: to record (run_start, trace headers) or to send to a run process."""
        return self.params.model_dump()

    def with_values(self, values: Mapping[str, Any]) -> Plan:
        """The same scenario with some values changed, checked again as a whole (sweeps)."""
        return resolve(self.name, self.values() | dict(values))

    def build(self) -> Workload:
        """The dataset, samplers, latency model and ``LoaderSettings`` (imports the builder and torch)."""
        return self.scenario.build(self.params)


def resolve(name: str, values: Mapping[str, Any] | None = None) -> Plan:
    """The plan for scenario ``name`` with ``values`` (defaults for the rest).

    Raises:
        ParamError: naming each bad field, what was given and what is allowed (UnknownScenario,
            a ParamError too, for a name not in the catalog).
    """
    scenario = catalog.get(name)
    return Plan(scenario, scenario.validate(values))
