"""◆ Every DataLoader a process builds, watched: what ``loaderscope record`` and ``$LOADERSCOPE_LOGDIR`` turn on.

``install()`` runs once torch's DataLoader module has loaded in a process started with
``$LOADERSCOPE_LOGDIR`` or ``$LOADERSCOPE_RECORD`` set: the one line of ``loaderscope_auto.pth`` in
site-packages leaves a tiny hook for it at interpreter start (``loaderscope_hook.py``). That is how the ranks
torchrun starts, DataLoader workers started by spawn or forkserver and ``python -m`` modules all get
it without a line of the script changing: each is a new interpreter that inherits the environment.

It costs nothing until torch's DataLoader module is imported (a command that never imports torch
never imports this package): the hook's meta-path finder waits for
``torch.utils.data.dataloader``, lets it load, then this wraps ``DataLoader.__init__`` and, through
``__init_subclass__``, the ``__init__`` of every subclass defined later (torchdata's
``StatefulDataLoader`` does not call ``DataLoader.__init__``). When the outermost ``__init__`` of a
new loader returns, the loader is ``watch()``ed (``probe/watch.py``, ``auto_watch``), unless it is
already instrumented, or is built inside a DataLoader worker (a dataset's own business).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import loaderscope_hook  # ours, not a dependency: the top-level module the wheel ships beside the .pth
from loaderscope_hook import TARGET

from loaderscope.probe.faults import report, without_probe_frames

_installed = False
_building: set[int] = set()  # ids of loaders inside their __init__: only the outermost one watches


def install() -> None:
    """Watch every DataLoader this process builds from now on (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    loaderscope_hook.after_import(TARGET, lambda: _patch(sys.modules[TARGET]))


def _patch(module: ModuleType) -> None:
    data_loader = module.DataLoader
    data_loader.__init__ = _watching(data_loader.__init__)
    previous = data_loader.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, /, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(data_loader, cls).__init_subclass__(**kwargs)
        own = cls.__dict__.get("__init__")
        if own is not None:
            cls.__init__ = _watching(own)  # type: ignore[misc]

    data_loader.__init_subclass__ = classmethod(__init_subclass__)


def _watching(init: Callable[..., None]) -> Callable[..., None]:
    """``init``, then ``auto_watch`` once the outermost ``__init__`` of the loader has returned.

    ``functools.wraps`` keeps the signature visible: Lightning re-creates loaders from it.
    """

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        key = id(self)
        outermost = key not in _building
        _building.add(key)
        try:
            init(self, *args, **kwargs)
        except BaseException as exc:  # an argument torch refuses, said as torch says it
            without_probe_frames(exc)
            raise
        finally:
            if outermost:
                _building.discard(key)
        if outermost:
            _watch(self)

    return __init__


def _watch(loader: Any) -> None:
    try:
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:
            return
        from loaderscope.probe.watch import auto_watch

        auto_watch(loader)
    except Exception as exc:  # the user's loader works unwatched rather than not at all
        report("record (watching a new DataLoader)", exc)
