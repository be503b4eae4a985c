"""loaderscope: watch torch's DataLoader work — a visual debugger and simulator of its protocol.

``loaderscope.watch`` and ``loaderscope.InstrumentedDataLoader`` are the probe's (``probe/watch.py``,
``probe/loader.py``), which import torch. They are attributes of the package loaded on first use,
the one lazy import of the package: ``import loaderscope`` runs for every submodule (the server, the
command line, the startup hook of ``loaderscope record``), and none of those may pay for torch. The
startup hook imports ``loaderscope.autowatch`` while torch itself is still being imported, where
importing the probe at once would fail. Nothing inside the package imports these two names from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loaderscope.version import __version__

if TYPE_CHECKING:
    from loaderscope.probe.loader import InstrumentedDataLoader
    from loaderscope.probe.watch import watch

__all__ = ["InstrumentedDataLoader", "watch", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "InstrumentedDataLoader":
        from loaderscope.probe.loader import InstrumentedDataLoader

        return InstrumentedDataLoader
    if name == "watch":
        from loaderscope.probe.watch import watch

        return watch
    raise AttributeError(f"module 'loaderscope' has no attribute {name!r}")
