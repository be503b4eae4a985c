"""Slow work off the event loop that a stopping dashboard does not wait for.

``asyncio.to_thread`` runs in the loop's default executor, whose threads the interpreter joins at exit
(``concurrent.futures.thread`` registers the join): a dashboard stopped with Ctrl-C during a sweep, an
advice or a job table waited until it ended (minutes, for a job table within its budget). Such work runs
here in a daemon thread of its own, which the interpreter's exit leaves behind; what it was computing is
for a request that is gone by then.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def in_daemon_thread(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)`` in a daemon thread, awaited: ``asyncio.to_thread`` without the join at exit."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            result = context.run(func, *args, **kwargs)
        except BaseException as exc:  # handed to the awaiting request, whatever it is
            _settle(loop, done, None, exc)
        else:
            _settle(loop, done, result, None)

    threading.Thread(target=work, name=f"loaderscope-{getattr(func, '__name__', 'work')}", daemon=True).start()
    return await done


def _settle(loop: asyncio.AbstractEventLoop, done: asyncio.Future[Any], result: Any,
            exc: BaseException | None) -> None:
    def settle() -> None:
        if done.cancelled():  # the request went away meanwhile
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop closed: the dashboard is stopping, no one waits for this any more
        pass
