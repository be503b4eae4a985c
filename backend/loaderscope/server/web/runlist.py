"""WS /ws/runs: the run list, pushed to the page whenever it changes.

An open page lists a run as it starts, without a reload and without the page asking (as
TensorBoard's reload does). What the picker shows of a run is state the server already holds, so
the handler looks every ``LIST_POLL`` seconds at a cheap key per run (id, status, name, job, rank,
epochs, its logdir index) and sends the whole list, as ``GET /api/runs`` answers it, when that key
changed; batch counts alone re-send it at most every ``BATCHES_EVERY`` seconds. A logdir scan, a
producer connecting, a run ending: each shows on the page within ``LIST_POLL``.

Messages (◆): ``{"type": "runs", "runs": [brief, ...]}``, the first one at once. Viewers need not
send anything (what they send is ignored). Closes: 1013 ``max_viewers`` viewers are connected.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.websockets import WebSocket

from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.run import Run
from loaderscope.server.web.ingest import CLOSE_TRY_LATER, close_reason

LIST_POLL = 0.5  # seconds between looks at the list: the logdir is scanned as often
BATCHES_EVERY = 5.0  # seconds between lists sent only because batch counts moved


async def run_list(websocket: WebSocket, manager: RunManager) -> None:
    await websocket.accept()
    if manager.viewers >= manager.config.max_viewers:
        await websocket.close(CLOSE_TRY_LATER, close_reason(
            f"{manager.config.max_viewers} viewers are connected, the most this dashboard serves; try again later"))
        return
    manager.viewers += 1
    sender = asyncio.ensure_future(_send_changes(websocket, manager))
    receiver = asyncio.ensure_future(_until_gone(websocket))
    try:
        await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        manager.viewers -= 1
        for task in (sender, receiver):
            task.cancel()
        await asyncio.gather(sender, receiver, return_exceptions=True)


async def _send_changes(websocket: WebSocket, manager: RunManager) -> None:
    loop = asyncio.get_running_loop()
    sent: tuple[Any, ...] | None = None
    sent_batches: tuple[Any, ...] | None = None
    sent_at = 0.0
    while True:
        runs = manager.listed()
        key = tuple(map(_shown, runs))
        batches = tuple(_batches(run) for run in runs)
        now = loop.time()
        if key != sent or (batches != sent_batches and now - sent_at >= BATCHES_EVERY):
            body = orjson.dumps({"type": "runs", "runs": [run.brief() for run in runs]})
            await websocket.send_text(body.decode())
            sent, sent_batches, sent_at = key, batches, now
        await asyncio.sleep(LIST_POLL)


def _shown(run: Run) -> tuple[Any, ...]:
    """What the picker shows of ``run``, but its batch count: a change re-sends the list at once."""
    state = run.log.state
    index = run.source.index if run.source is not None else None
    return (run.id, run.status, state.name, state.job, state.rank, state.epoch,
            None if index is None else (index.size, index.mtime_ns))


def _batches(run: Run) -> int | None:
    if run.source is not None and not run.source.read_whole:
        return run.source.index.batches
    return run.log.state.batches


async def _until_gone(websocket: WebSocket) -> None:
    while (await websocket.receive())["type"] != "websocket.disconnect":
        pass
