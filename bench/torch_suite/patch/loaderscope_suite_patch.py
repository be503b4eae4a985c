"""Swap torch's DataLoader for a probed one, in every process of a torch-suite run.

``install()`` replaces ``torch.utils.data.DataLoader`` and ``torch.utils.data.dataloader.DataLoader``
with ``SuiteDataLoader``: an ``InstrumentedDataLoader`` whose ``sink`` defaults to a no-op, so the
unmodified ``test_dataloader.py`` builds probed loaders wherever it says ``DataLoader(...)``.

It is active only when ``LOADERSCOPE_TORCH_SUITE=instrumented``. ``run.py`` puts this folder on
``PYTHONPATH`` so that ``sitecustomize`` installs it in every Python process of the run: the pytest
process, the processes the suite spawns itself (``ErrorTrackingProcess`` targets such as
``_test_timeout`` and ``_test_segfault``) and its ``python -c`` subprocesses (``test_fd_limit_exceeded``,
``test_early_exit``). Without that those tests would quietly exercise vanilla torch.

With ``LOADERSCOPE_TORCH_SUITE_LOG=DIR`` every SuiteDataLoader built appends its pid to
``DIR/constructed.txt``: the proof, for the report, that the probe really ran (and where).
"""

from __future__ import annotations

import os
from typing import Any

ENV = "LOADERSCOPE_TORCH_SUITE"
LOG_ENV = "LOADERSCOPE_TORCH_SUITE_LOG"

_installed: Any = None


def active() -> bool:
    return os.environ.get(ENV) == "instrumented"


def _noop_sink(events: Any) -> None:
    pass


def install() -> Any:
    """Install the probed DataLoader (idempotent); returns the class, or None when not active."""
    global _installed
    if _installed is not None or not active():
        return _installed

    from typing import TypeVar

    import torch.utils.data
    import torch.utils.data.dataloader

    # import the probe before patching: its modules bind torch's real DataLoader at import time
    from loaderscope import InstrumentedDataLoader

    T_co = TypeVar("T_co", covariant=True)
    log_dir = os.environ.get(LOG_ENV)

    class SuiteDataLoader(InstrumentedDataLoader[T_co]):  # type: ignore[valid-type,misc]
        """InstrumentedDataLoader with a no-op default sink: a drop-in for torch's DataLoader."""

        def __init__(self, *args: Any, sink: Any = _noop_sink, **kwargs: Any) -> None:
            if log_dir:
                with open(os.path.join(log_dir, "constructed.txt"), "a") as f:
                    f.write(f"{os.getpid()}\n")
            super().__init__(*args, sink=sink, **kwargs)

    SuiteDataLoader.__module__ = __name__
    SuiteDataLoader.__qualname__ = "SuiteDataLoader"
    globals()["SuiteDataLoader"] = SuiteDataLoader  # picklable by reference, should anything try

    torch.utils.data.DataLoader = SuiteDataLoader  # type: ignore[misc]
    torch.utils.data.dataloader.DataLoader = SuiteDataLoader  # type: ignore[misc]
    _installed = SuiteDataLoader
    return SuiteDataLoader
