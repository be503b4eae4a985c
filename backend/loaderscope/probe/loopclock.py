"""The loop's clock: how long each thread has spent inside watched loaders' ``next()``.

A training loop may iterate several loaders (a val loader zipped with train, one loader per task): the
time it spends inside one loader's ``next()`` is waiting for *that* loader, and its step is the time it
spends inside none. Each watched iterator adds its ``next()`` to its thread's clock; at each call it
tells the time the thread spent inside *other* loaders' ``next()`` since this loader's previous call
returned, which the probe sends as a ``loop`` event and the reducers take out of the step.
"""

from __future__ import annotations

import threading
from threading import get_ident
from typing import Any, Protocol

from loaderscope.events import Kind
from loaderscope.probe.faults import report


class LoopClock(threading.local):
    """Per thread: seconds inside watched loaders' ``next()`` so far (a ``next()`` running inside another's,
    a loader iterated by a dataset, counts once: each adds its own time to the clock it found at its start)."""

    inside = 0.0


LOOP = LoopClock()


class Marked(Protocol):
    """What a loader's recorder keeps of its last ``next()``: the clock after it, and in which thread."""

    loop_mark: float
    loop_thread: int | None

    def note(self, kind: str, **fields: Any) -> None: ...

    def note_at(self, kind: str, t: float, **fields: object) -> None: ...


def loop_step(probe: Marked, before: float, started: float, ended: float) -> None:
    """One ``next()`` of ``probe``'s loader ran from ``started`` to ``ended``, ``before`` being ``LOOP.inside``
    at its start: move the clock on, and note the other loaders' time since this loader's previous ``next()``
    in the same thread (none the first time, or after a move to another thread: that time is unknown).

    Every ``next()`` of every watched loader calls this: it guards itself, rather than a second call around it."""
    try:
        LOOP.inside = after = before + (ended - started)
        thread = get_ident()
        others = before - probe.loop_mark if probe.loop_thread == thread else 0.0
        probe.loop_mark, probe.loop_thread = after, thread
        if others > 0.0:
            probe.note_at(Kind.LOOP, started, others=others)
    except Exception as exc:
        report("loop clock", exc, probe.note)
