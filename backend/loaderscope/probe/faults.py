"""The probe's own failures: caught where they happen, reported once, never raised into training.

Every piece of the probe that runs inside the user's process (the iterators' bookkeeping, the
recorder, the worker taps, stack capture, the transport) guards its own work with ``guard`` or an
explicit ``except Exception`` that calls ``report``. torch's own exceptions are never caught here:
the probe's code sits beside torch's calls, not around them, so what torch raises reaches the
training loop unchanged, but for the probe's frames, which each hook between the loop and torch cuts
out of its traceback (``without_probe_frames``). One of torch's can start inside the probe's code:
its SIGCHLD handler (``torch/utils/data/_utils/signal_handling.py``) raises "DataLoader worker ... is
killed by signal" in the main thread wherever it happens to be. ``report`` and ``guard`` raise that one on.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

_reported: set[str] = set()


_TORCH_SIGNALS = os.path.join("torch", "utils", "data", "_utils", "signal_handling.py")


def from_torch_signal(exc: BaseException) -> bool:
    """Whether torch's SIGCHLD handler raised ``exc`` (a worker died): training's error, not the probe's."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(_TORCH_SIGNALS):
            return True
        tb = tb.tb_next
    return False


def report(where: str, exc: BaseException, note: Callable[..., None] | None = None) -> None:
    """Say once per process and place that the probe failed at ``where``; training goes on.

    ``note`` (a recorder's ``note``) also records it as a ``probe_error`` event, so the dashboard
    shows why this loader's picture may be incomplete. An exception of torch's SIGCHLD handler that
    started in the probe's code is raised on, as torch would have raised it (CI 53: swallowed here
    as an internal error, it left the loop torch's EOFError instead of its RuntimeError).
    """
    if from_torch_signal(exc):
        raise exc
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    report_remote(where, type(exc).__name__, str(exc), note, detail)


def report_remote(where: str, type_name: str, message: str, note: Callable[..., None] | None = None,
                  detail: str | None = None) -> None:
    """``report`` for a failure described in words (one a worker process sent over)."""
    if where in _reported:
        return
    _reported.add(where)
    print(f"loaderscope: internal error in {where} ({detail or f'{type_name}: {message}'}); training goes on, "
          "unobserved there. Please report it with this line.", file=sys.stderr, flush=True)
    if note is not None:
        try:
            note("probe_error", where=where, type=type_name, message=message[:500])
        except Exception:  # the recorder itself is what failed
            pass


def guard(where: str, note: Callable[..., None] | None = None) -> _Guard:
    """``with guard("recorder flush"):`` runs a block whose failure is reported, not raised."""
    return _Guard(where, note)


class _Guard:
    __slots__ = ("where", "note")

    def __init__(self, where: str, note: Callable[..., None] | None) -> None:
        self.where, self.note = where, note

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, _tb: Any) -> bool:
        if exc is None or not isinstance(exc, Exception) or from_torch_signal(exc):
            return False  # KeyboardInterrupt, SystemExit and torch's dead-worker error belong to the user
        report(self.where, exc, self.note)
        return True


_OUR_MODULES = ("loaderscope", "loaderscope_hook")


def without_probe_frames(exc: BaseException) -> None:
    """Cut the probe's frames out of the traceback of ``exc`` and of every exception it chains, as it
    leaves the probe for training: what the user reads names torch's frames and their own, as without
    loaderscope. A frame is the probe's by its module (``__name__``), whatever path the package lies on.

    A bare ``raise`` after this adds no frame back: the re-raise keeps the traceback it is given."""
    try:
        pending: list[BaseException | None] = [exc]
        seen: set[int] = set()
        while pending:
            current = pending.pop()
            if current is None or id(current) in seen:
                continue
            seen.add(id(current))
            current.__traceback__ = _kept(current.__traceback__)
            pending += [current.__cause__, current.__context__]
    except Exception:  # a traceback that cannot be cut is left whole: what training raises never changes
        pass


def _kept(tb: TracebackType | None) -> TracebackType | None:
    kept = []
    entry = tb
    while entry is not None:
        if entry.tb_frame.f_globals.get("__name__", "").partition(".")[0] not in _OUR_MODULES:
            kept.append(entry)
        entry = entry.tb_next
    if not kept:  # the probe's own exception: its frames are all there is to read
        return tb
    for outer, inner in zip(kept, [*kept[1:], None], strict=True):
        outer.tb_next = inner
    return kept[0]
