"""The producers' side of the run manager: a producer connecting to its run and leaving it (the
ingest websocket), and the controls sent to it (pause, step, stop, delay), queued while it is away.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any, Protocol

from loaderscope.server.config import ServerConfig
from loaderscope.server.processes import process
from loaderscope.server.runs.eviction import Eviction
from loaderscope.server.runs.run import ControlChannel, LogdirLink, Run, RunRefused

RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Controls queued for a run whose producer is away (the newest kept): a run on disk, or any disconnected
# one, must not grow with every control a client sends it.
MAX_PENDING_CONTROLS = 16


class _Manager(Protocol):
    """What producer control asks of the ``RunManager`` it is part of."""

    config: ServerConfig
    runs: dict[str, Run]
    logdir: LogdirLink | None
    eviction: Eviction

    def create(self, *, scenario: str | None, mode: str, params: dict[str, Any], origin: str,
               run_id: str | None = None) -> Run: ...
    def producers_of(self, peer: str | None) -> int: ...
    def _close(self, run: Run) -> None: ...
    def _finish(self, run: Run, code: int | None, why: str | None = None) -> None: ...
    def _background(self, coro: Any) -> None: ...
    async def _terminate(self, run: Run) -> None: ...
    async def stop(self, run: Run) -> None: ...
    async def _send(self, run: Run, message: dict[str, Any]) -> None: ...


class ProducerControl:
    """``RunManager``'s producer side (a mixin: its methods are the manager's)."""

    def attach(self: _Manager, run_id: str | None, channel: ControlChannel, secret: str | None = None,
               peer: str | None = None) -> tuple[Run, list[dict[str, Any]]]:
        """A producer connects: to a run the dashboard started, or as a new (or returning) external run.

        A run belongs to whoever created it: attaching to an existing run takes its ``secret``.
        Returns the run and the control messages queued for it. Raises RunRefused (with a
        websocket close reason) when the run cannot take a producer.
        """
        if run_id is not None and not RUN_ID.match(run_id):
            raise RunRefused(4400, "run ids are 1 to 64 characters from A-Z a-z 0-9 _ -")
        if (held := self.producers_of(peer)) >= self.config.max_source_producers:
            raise RunRefused(429, f"{peer} has {held} producers connected, the most one source may "
                             "(max_source_producers); try again when one ends")
        run = self.runs.get(run_id) if run_id else None
        if run is None:
            run = self.create(scenario=None, mode="", params={}, origin="external", run_id=run_id)
            run.peer = peer
        elif run.source is None and not run.closed and not secrets.compare_digest(secret or "", run.secret):
            raise RunRefused(4403, f"run {run.id} is another producer's: its owner returns with the "
                             f"{process.SECRET_HEADER} header")
        if run.source is not None:
            if self.logdir is None:
                raise RunRefused(4409, f"run {run.id} is read from a trace file; a producer cannot add to it")
            self.logdir.resume(run, secret)  # the run it streamed before this dashboard restarted, or refused
        if run.closed:
            raise RunRefused(4409, f"run {run.id} has ended; a producer cannot add to it (start a new run)")
        if run.producer is not None:
            raise RunRefused(4409, f"run {run.id} already has a producer connected")
        if run.log.parked:
            self.eviction.unpark(run)
        run.producer, run.producer_peer = channel, peer
        run.attached = True
        run.producer_gone.clear()
        queued, run.pending_control = run.pending_control, []
        run.changed.notify()
        return run, queued

    def detach(self: _Manager, run: Run) -> None:
        run.producer, run.producer_peer = None, None
        run.detached_at = time.monotonic()
        run.producer_gone.set()
        if run.origin == "external" and run.log.ended:
            self._close(run)
        run.changed.notify()

    # --- controls -------------------------------------------------------------------------------

    async def control(self: _Manager, run: Run, action: str | None, delay: float | None) -> None:
        if run.source is not None:
            raise RunRefused(409, f"run {run.id} is read from a trace file ({run.source.relative}): its producer "
                             "does not take controls from this dashboard")
        if run.closed or run.log.ended:
            raise RunRefused(409, f"run {run.id} has already ended ({run.status}); start a new run")
        if delay is not None:
            run.delay = delay
            await self._send(run, {"delay": delay})
        if action == "stop":
            await self.stop(run)
        elif action == "inspect":  # the batch inspector asks for values; playback is unchanged
            await self._send(run, {"action": action})
        elif action is not None:
            run.paused = action in ("pause", "step")
            await self._send(run, {"action": action})
        run.changed.notify()

    async def stop(self: _Manager, run: Run) -> None:
        """Ask the run to stop; if its process has not ended after a grace period, end its group."""
        run.stop_requested = True
        await self._send(run, {"action": "stop"})
        if run.process is not None:
            self._background(self._terminate(run))
        elif run.producer is None:
            self._finish(run, None)  # an external run with nobody connected: just end it

    async def _send(self: _Manager, run: Run, message: dict[str, Any]) -> None:
        if run.producer is not None:
            try:
                await run.producer.send(message)
                return
            except Exception:  # a producer that just went away: its run ends on its own
                pass
        run.pending_control = [*run.pending_control[1 - MAX_PENDING_CONTROLS:], message]
