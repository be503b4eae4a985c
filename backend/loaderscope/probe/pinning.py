"""The pin-memory thread, observed: when it takes a result, when it hands the pinned batch on.

torch's ``_pin_memory_loop`` looks up ``in_queue.get`` and ``out_queue.put`` at every step, so
instance attributes on the two queues see every batch without touching torch's code. The probe
also checks, on the very object the training loop will receive, that its tensors are pinned.
"""

from __future__ import annotations

import time
from typing import Any

from loaderscope.probe.batchinfo import is_pinned, sizes
from loaderscope.probe.recorder import Recorder


def tap_pin_thread(in_queue: Any, out_queue: Any, probe: Recorder) -> None:
    """Record pin_start when the pin thread takes a result, pin_end when it passes it on."""
    started: dict[int, float] = {}
    get, put = in_queue.get, out_queue.put

    def tapped_get(*args: Any, **kwargs: Any) -> Any:
        item = get(*args, **kwargs)
        if type(item[0]) is int:
            started[item[0]] = now = time.monotonic()
            probe.note_at("pin_start", now, idx=item[0])
        return item

    def tapped_put(item: Any, *args: Any, **kwargs: Any) -> None:
        idx, data = item
        if type(idx) is int:
            now = time.monotonic()
            probe.note_at("pin_end", now, idx=idx, dt=now - started.pop(idx, now), nbytes=sizes(data)[0],
                          pinned=is_pinned(data))
        put(item, *args, **kwargs)

    in_queue.get = tapped_get
    out_queue.put = tapped_put
