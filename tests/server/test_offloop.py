"""Slow work off the dashboard's event loop (``server/offloop.py``): its answer or its exception comes back to
the awaiting request as ``asyncio.to_thread``'s would, and a dashboard that stops while it runs exits without
waiting for it (``asyncio.to_thread``'s executor is joined at exit: Ctrl-C waited for a sweep to end)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from loaderscope.server.offloop import in_daemon_thread

# A request whose work never ends, cancelled as uvicorn cancels its requests when it stops; then the exit.
STOPPING = """
import asyncio, contextlib, threading
from loaderscope.server.offloop import in_daemon_thread
never = threading.Event()

async def main():
    request = asyncio.ensure_future(in_daemon_thread(never.wait))
    while not any(t.name == "loaderscope-wait" for t in threading.enumerate()):
        await asyncio.sleep(0.01)
    request.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await request

asyncio.run(main())
print("stopped")
"""


def run(work: Coroutine[Any, Any, Any]) -> Any:
    """``work`` on an event loop of its own thread (a browser test's Playwright may hold this one's)."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, work).result(timeout=60)


def test_the_answer_and_the_exception_come_back_to_the_request() -> None:
    assert run(in_daemon_thread(sum, [1, 2, 3], start=4)) == 10
    with pytest.raises(ZeroDivisionError):
        run(in_daemon_thread(divmod, 1, 0))


def test_a_stopping_dashboard_does_not_wait_for_work_it_no_longer_needs() -> None:
    done = subprocess.run([sys.executable, "-c", STOPPING], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "stopped"), done.stderr
