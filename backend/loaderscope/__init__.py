"""loaderscope: watch torch's DataLoader work — a visual debugger and simulator of its protocol."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["InstrumentedDataLoader", "watch", "__version__"]


def __getattr__(name: str) -> Any:
    # torch is imported only when the probe is used, so the pure core and the server start fast.
    if name == "InstrumentedDataLoader":
        from loaderscope.probe.loader import InstrumentedDataLoader

        return InstrumentedDataLoader
    if name == "watch":
        from loaderscope.probe.watch import watch

        return watch
    raise AttributeError(f"module 'loaderscope' has no attribute {name!r}")
