"""The DataLoader's settings as the contract declares them: torch's defaults and the bounds a request
may ask for, written once. ``loaderscope/settings.py`` builds its typed record and checks from them;
the page reads them as ``LOADER_SETTINGS`` in ``contract.gen.js`` (its run form and what-if sweeps).

The defaults are torch's (``torch/utils/data/dataloader.py``, ``DataLoader.__init__``); the upper
bounds keep a request from exhausting the machine, the lower ones are torch's own
(``_MultiProcessingDataLoaderIter`` refuses ``prefetch_factor`` <= 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

T = TypeVar("T")

# torch/utils/data/dataloader.py, DataLoader.__init__: "elif num_workers > 0 and prefetch_factor is None:
# prefetch_factor = 2". Without workers it stays None.
TORCH_PREFETCH_FACTOR = 2


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One DataLoader argument: torch's default, the bounds a request may ask for, what it means."""

    type: Literal["integer", "number", "boolean"]
    default: T
    about: str
    low: int | None = None
    high: int | None = None


NUM_WORKERS = Setting[int]("integer", 0, "worker processes (0: load in the main process)", 0, 64)
BATCH_SIZE = Setting[int | None]("integer", 1, "samples per batch", 1, 1024)
DROP_LAST = Setting[bool]("boolean", False, "drop the last incomplete batch")
# None: torch's "decide for me", TORCH_PREFETCH_FACTOR with workers
PREFETCH_FACTOR = Setting[int | None]("integer", None, "batches in flight per worker "
                                        f"(torch's default: {TORCH_PREFETCH_FACTOR}; ignored without workers)", 1, 16)
PERSISTENT_WORKERS = Setting[bool]("boolean", False, "keep workers alive across epochs (needs workers)")
IN_ORDER = Setting[bool]("boolean", True, "yield batches in sampler order")
TIMEOUT = Setting[float]("number", 0.0, "seconds to wait for a batch (0: forever)", 0, 600)
PIN_MEMORY = Setting[bool]("boolean", False, "copy batches to page-locked memory")

SETTINGS: dict[str, Setting[int] | Setting[float] | Setting[bool] | Setting[int | None]] = {
    "num_workers": NUM_WORKERS,
    "batch_size": BATCH_SIZE,
    "drop_last": DROP_LAST,
    "prefetch_factor": PREFETCH_FACTOR,
    "persistent_workers": PERSISTENT_WORKERS,
    "in_order": IN_ORDER,
    "timeout": TIMEOUT,
    "pin_memory": PIN_MEMORY,
}


def table() -> dict[str, dict[str, object]]:
    """The settings for the page: type, torch's default, bounds, meaning."""
    return {name: {"type": s.type, "default": s.default, "min": s.low, "max": s.high, "about": s.about}
            for name, s in SETTINGS.items()}
