"""◆ Every DataLoader a process builds, watched: what ``loaderscope record`` and ``$LOADERSCOPE_LOGDIR`` turn on.

``install()`` runs at interpreter start, from the one line of ``loaderscope_auto.pth`` in
site-packages, when ``$LOADERSCOPE_LOGDIR`` or ``$LOADERSCOPE_RECORD`` is set. That is how the ranks
torchrun starts, DataLoader workers started by spawn or forkserver and ``python -m`` modules all get
it without a line of the script changing: each is a new interpreter that inherits the environment.

It costs nothing until torch's DataLoader module is imported (a command that never imports torch
never imports it, nor this package's probe): a meta-path finder waits for
``torch.utils.data.dataloader``, lets it load, then wraps ``DataLoader.__init__`` and, through
``__init_subclass__``, the ``__init__`` of every subclass defined later (torchdata's
``StatefulDataLoader`` does not call ``DataLoader.__init__``). When the outermost ``__init__`` of a
new loader returns, the loader is ``watch()``ed (``probe/watch.py``, ``auto_watch``), unless it is
already instrumented, or is built inside a DataLoader worker (a dataset's own business).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

TARGET = "torch.utils.data.dataloader"

_installed = False
_building: set[int] = set()  # ids of loaders inside their __init__: only the outermost one watches


def install() -> None:
    """Watch every DataLoader this process builds from now on (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    module = sys.modules.get(TARGET)
    if module is not None:
        _patch(module)
    else:
        sys.meta_path.insert(0, _Finder())


class _Finder:
    """Finds nothing itself: when torch's DataLoader module is about to load, it asks the other
    finders for its spec and arranges for ``_patch`` to run once the module has executed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)  # once, and not found again by the search below
        spec: ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None:
            return None
        loader = spec.loader
        if loader is not None and hasattr(loader, "exec_module"):
            original = loader.exec_module

            def exec_module(module: ModuleType) -> None:
                del loader.exec_module  # the loader is this module's own: leave it as it was
                original(module)
                _patch(module)

            loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


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
        if key in _building:
            init(self, *args, **kwargs)
            return
        _building.add(key)
        try:
            init(self, *args, **kwargs)
        finally:
            _building.discard(key)
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
        from loaderscope.probe.faults import report

        report("record (watching a new DataLoader)", exc)
