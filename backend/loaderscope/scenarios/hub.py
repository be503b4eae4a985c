"""Scenarios from ``torch.hub`` entry points: a team's real dataset on the dashboard, no scenario code.

``loaderscope run --hub DIR:ENTRY`` (and ``serve --hub``) loads ``hubconf.py`` from DIR with
``torch.hub.load(DIR, ENTRY, source="local", **kwargs)`` (torch/hub.py: ``load`` with ``source='local'`` calls
``_load_local``, which imports DIR/hubconf.py). The entry returns a Dataset, or a dict with ``dataset`` and
optionally ``sampler``, ``batch_sampler`` and ``collate_fn``. Only entries named on the command line by whoever
started loaderscope can load: the page may pick among them, never name a path; its parameters are the loader's,
typed and bounded. A run process gets the entry of its scenario on its own command line (``HubEntry.to_json``).
No torch here: the builder (``builders.hub``) loads the entry when a run is built, and ``catalog.hub_scenario``
makes the entry a scenario of the catalog.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "hub:"


class HubError(ValueError):
    """A --hub argument that cannot be used; the message says why and what to pass instead."""


@dataclass(frozen=True)
class HubEntry:
    """``hubconf.py``'s entry point ``entry`` in ``directory``, called with the fixed ``kwargs``."""

    directory: Path
    entry: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str, kwargs: Mapping[str, Any] | None = None) -> HubEntry:
        """``DIR:ENTRY`` as given on the command line; raises HubError saying what is wrong."""
        directory, sep, entry = spec.rpartition(":")
        if not sep or not directory or not entry.isidentifier():
            raise HubError(f"--hub {spec!r}: expected DIR:ENTRY, e.g. --hub ./examples:synthetic_images")
        path = Path(directory).expanduser().resolve()
        if not (path / "hubconf.py").is_file():
            raise HubError(f"--hub {spec!r}: {path} has no hubconf.py")
        return cls(path, entry, dict(kwargs or {}))

    def to_json(self) -> str:
        return json.dumps({"spec": f"{self.directory}:{self.entry}", "kwargs": dict(self.kwargs)})

    @classmethod
    def from_json(cls, text: str) -> HubEntry:
        item = json.loads(text)
        return cls.parse(item["spec"], item.get("kwargs"))

