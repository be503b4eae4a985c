"""The pin-memory thread, observed: when it takes a result, when it hands the pinned batch on.

torch's ``_pin_memory_loop`` looks up ``in_queue.get`` and ``out_queue.put`` at every step, so
instance attributes on the two queues see every batch without touching torch's code. ``get`` is
tapped when the result queue is created, before the pin thread starts (a ``get`` already blocked
in the thread would otherwise miss the first batch); ``put`` before the first task is dispatched.
The probe also checks, on the very object the training loop will receive, that it is pinned.
"""

from __future__ import annotations

import time
from typing import Any

from loaderscope.probe.batchinfo import is_pinned, sizes
from loaderscope.probe.recorder import Recorder


class PinTap:
    def __init__(self, probe: Recorder) -> None:
        self.probe = probe
        self.started: dict[int, float] = {}

    def tap_get(self, in_queue: Any) -> None:
        """Record pin_start when the pin thread takes a result from the workers' queue."""
        get, probe, started = in_queue.get, self.probe, self.started

        def tapped_get(*args: Any, **kwargs: Any) -> Any:
            item = get(*args, **kwargs)
            if type(item[0]) is int:
                started[item[0]] = now = time.monotonic()
                probe.note_at("pin_start", now, idx=item[0])
            return item

        in_queue.get = tapped_get

    def tap_put(self, out_queue: Any) -> None:
        """Record pin_end (bytes, time, pinned or not) when the pin thread passes a batch on."""
        put, probe, started = out_queue.put, self.probe, self.started

        def tapped_put(item: Any, *args: Any, **kwargs: Any) -> None:
            idx, data = item
            if type(idx) is int:
                now = time.monotonic()
                probe.note_at("pin_end", now, idx=idx, dt=now - started.pop(idx, now), nbytes=sizes(data)[0],
                              pinned=is_pinned(data))
            put(item, *args, **kwargs)

        out_queue.put = tapped_put
