"""The startup hook of ``loaderscope_auto.pth``: it waits for torch's DataLoader, at almost no cost.

The ``.pth`` line runs at every interpreter start of the environment and imports this module only
when ``$LOADERSCOPE_LOGDIR`` or ``$LOADERSCOPE_RECORD`` is set. It is a top-level module beside the
``.pth``, importing nothing that is not already loaded at startup (``os``, ``sys``): the
``loaderscope`` package (and ``typing``, ``functools``, ...) is imported only once
``torch.utils.data.dataloader`` has executed, by ``loaderscope.autowatch``. A process that never
imports torch's DataLoader never imports loaderscope.
"""

import os
import sys

TYPE_CHECKING = False  # typing itself costs milliseconds at startup; mypy reads the block all the same
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from importlib.machinery import ModuleSpec
    from types import ModuleType

TARGET = "torch.utils.data.dataloader"
OFF = frozenset({"", "0", "false", "no", "off"})


def wanted(environ: "Mapping[str, str]") -> bool:
    """``$LOADERSCOPE_LOGDIR`` set, or ``$LOADERSCOPE_RECORD`` set to anything but 0/false/no/off/empty."""
    return bool(environ.get("LOADERSCOPE_LOGDIR")) or environ.get("LOADERSCOPE_RECORD", "").strip().lower() not in OFF


_installed = False


def install() -> None:
    """From the ``.pth``: watch every DataLoader of this process once torch's DataLoader module loads.

    Idempotent: an interpreter may process site-packages twice (a venv over pyenv's Python does).
    """
    global _installed
    if wanted(os.environ) and not _installed:
        _installed = True
        after_import(TARGET, _watch_every_loader)


def after_import(name: str, callback: "Callable[[], None]") -> None:
    """Call ``callback()`` once module ``name`` has executed (at once if it already has)."""
    if name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _Finder(name, callback))


def _watch_every_loader() -> None:
    from loaderscope import autowatch

    autowatch.install()


class _Finder:
    """Finds nothing itself: when ``name`` is about to load, it asks the other finders for its spec
    and arranges for the callback to run once the module has executed."""

    def __init__(self, name: str, callback: "Callable[[], None]") -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: "object", target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once, and not found again by the search below
        spec: ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is not None and hasattr(loader, "exec_module"):
            original = loader.exec_module
            callback = self.callback

            def exec_module(module: "ModuleType") -> None:
                del loader.exec_module  # the loader is this module's own: leave it as it was
                original(module)
                callback()

            loader.exec_module = exec_module
        return spec
