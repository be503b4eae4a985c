"""A run process: one scenario, run for real (or simulated), streamed to the dashboard.

    python -m loaderscope.server.processes.runproc --url ws://127.0.0.1:PORT/ws/ingest --run ID \\
        --scenario NAME [--mode real|sim] [--params JSON] [--costs JSON] [--hub JSON]

The token comes from ``$LOADERSCOPE_TOKEN`` (never the command line, which /proc shows to all).
The dashboard spawns this in a new session, so its DataLoader workers share its process group
and one ``killpg`` ends them all. Events go up in frames (JSON arrays); controls come down
(``{"action": ...}``, ``{"delay": s}``) and drive the consumer loop through a ``runner.Control``.
Losing the dashboard stops the run: nobody would see it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from loaderscope.events import Event, encode_frame, to_json
from loaderscope.runner import Control
from loaderscope.scenarios.catalog import hub_scenario, register
from loaderscope.scenarios.hub import HubEntry
from loaderscope.scenarios.plan import Plan, resolve
from loaderscope.server.processes.process import SECRET_ENV, SECRET_HEADER

FRAME_EVENTS = 1000  # events per websocket message
HIGH_WATER = 200_000  # events buffered before the sink blocks (backpressure: nothing is dropped)
CONNECT_TIMEOUT = 10.0
MAX_MESSAGE = 1 << 20  # controls are tiny
# Seconds a run process may outlive its connection to the dashboard ($LOADERSCOPE_ORPHAN_GRACE).
ORPHAN_GRACE = float(os.environ.get("LOADERSCOPE_ORPHAN_GRACE", "5"))


class Uplink:
    """Buffers the probe's frames and sends them from a thread of its own.

    The probe hands over compact frames already encoded (``takes_frames``); simulated events come
    as dicts and are encoded here in frames of FRAME_EVENTS. Nothing is dropped: when the dashboard
    falls far behind, the producer waits (a run the dashboard started should show all of itself).
    """

    takes_frames = True

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.pending: deque[tuple[bytes, int]] = deque()
        self.buffered = 0  # events in pending
        self.sending = False  # a frame taken from pending is on its way
        self.cond = threading.Condition()
        self.closing = False
        self.lost: str | None = None  # why the connection broke, if it did
        self.sender = threading.Thread(target=self._send_loop, name="loaderscope-uplink", daemon=True)
        self.sender.start()

    def frame(self, data: bytes, count: int) -> None:
        with self.cond:
            while self.buffered >= HIGH_WATER and self.lost is None:
                self.cond.wait(0.1)
            if self.lost is None:
                self.pending.append((data, count))
                self.buffered += count
                self.cond.notify_all()

    def sink(self, events: list[Event]) -> None:
        for start in range(0, len(events), FRAME_EVENTS):
            chunk = events[start:start + FRAME_EVENTS]
            self.frame(encode_frame(chunk), len(chunk))

    def meta(self, message: dict[str, Any]) -> None:
        """Send a meta message after everything buffered so far."""
        self.flush()
        self._send(to_json(message))

    def flush(self) -> None:
        with self.cond:
            while (self.pending or self.sending) and self.lost is None:
                self.cond.notify_all()
                self.cond.wait(0.1)

    def close(self) -> None:
        self.flush()
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.sender.join(5)
        self.ws.close()

    def _send_loop(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.pending or self.closing, timeout=1.0)
                if not self.pending:
                    if self.closing:
                        return
                    continue
                data, count = self.pending.popleft()
                self.sending = True
            sent = self._send(data)
            with self.cond:
                self.buffered -= count
                self.sending = False
                self.cond.notify_all()
            if not sent:
                return

    def _send(self, data: bytes) -> bool:
        try:
            self.ws.send(data.decode())
            return True
        except Exception as exc:  # a broken connection, or anything else: never leave the run hanging
            with self.cond:
                self.lost = self.lost or f"connection to the dashboard lost: {exc}"
                self.pending.clear()
                self.cond.notify_all()
            return False


def listen(ws: ClientConnection, control: Control) -> None:
    """Apply controls from the dashboard until the connection ends; losing it stops the run.

    A consumer stuck inside ``next()`` never sees the stop, and a dashboard that died cannot end
    our process group: so if we are still alive ORPHAN_GRACE seconds later, we end it ourselves.
    """
    try:
        for message in ws:
            apply_message(control, message)
    except (ConnectionClosed, OSError):
        pass
    control.stop()
    time.sleep(ORPHAN_GRACE)
    if os.getpgrp() == os.getpid():  # our own group, as the dashboard starts us: take the workers along
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(3)


def apply_message(control: Control, message: str | bytes) -> None:
    """A control message from the dashboard; anything that is not a JSON object is ignored."""
    try:
        command = json.loads(message)
    except ValueError:
        return
    if isinstance(command, dict):
        apply(control, command)


def apply(control: Control, command: dict[str, Any]) -> None:
    action = command.get("action")
    if action in ("pause", "resume", "step", "stop", "inspect"):
        getattr(control, action)()
    delay = command.get("delay")
    if isinstance(delay, (int, float)) and not isinstance(delay, bool):
        control.set_delay(delay)


def run(args: argparse.Namespace, uplink: Uplink, control: Control) -> None:
    plan = plan_of(args)
    if args.mode == "sim":
        simulate(args, plan, uplink, control)
        return
    from loaderscope.runner import run_plan

    run_plan(plan, uplink, control=control, run_id=args.run)


def plan_of(args: argparse.Namespace) -> Plan:
    """This process's edge: the scenario (a torch.hub entry registered first) and its parameters."""
    if args.hub:
        register(hub_scenario(HubEntry.from_json(args.hub)))
    return resolve(args.scenario, json.loads(args.params))


def simulate(args: argparse.Namespace, plan: Plan, uplink: Uplink, control: Control) -> None:
    from loaderscope import sim

    costs = sim.CostModel.model_validate_json(args.costs) if args.costs else None
    events = sim.simulate(plan.build(), run_id=args.run, scenario=plan.name, params=plan.values(), costs=costs)
    for start in range(0, len(events), FRAME_EVENTS):
        if not control.gate():
            break
        uplink.sink(events[start:start + FRAME_EVENTS])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loaderscope.server.processes.runproc",
                                     description="Run one scenario and stream its events to a dashboard.")
    parser.add_argument("--url", required=True, help="the dashboard's ws://HOST:PORT/ws/ingest")
    parser.add_argument("--run", required=True, help="the run id the dashboard gave this run")
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--mode", choices=("real", "sim"), default="real")
    parser.add_argument("--params", default="{}", help="the scenario's parameters as a JSON object")
    parser.add_argument("--costs", help="mode sim: the simulator's cost model as a JSON object")
    parser.add_argument("--hub", help="the torch.hub entry the scenario loads (scenarios.hub.HubEntry as JSON)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    token = os.environ.get("LOADERSCOPE_TOKEN")
    if not token:
        print("runproc: set $LOADERSCOPE_TOKEN to the dashboard's token", file=sys.stderr)
        return 2
    url = f"{args.url}?run={args.run}"
    headers = {"Authorization": f"Bearer {token}"}
    secret = os.environ.get(SECRET_ENV)
    if secret:  # the dashboard created the run: the secret proves this process is the one it started
        headers[SECRET_HEADER] = secret
    with connect(url, additional_headers=headers, compression=None,
                 open_timeout=CONNECT_TIMEOUT, max_size=MAX_MESSAGE) as ws:
        hello = json.loads(ws.recv(timeout=CONNECT_TIMEOUT))  # the dashboard has attached us to the run
        return stream_run(args, ws, hello.get("controls") or [])


QUEUED_CONTROLS_WAIT = 0.05  # a control sent just as a spare run process attached comes right after the hello


def take_queued_controls(ws: ClientConnection, control: Control) -> None:
    """Apply controls that reach us within QUEUED_CONTROLS_WAIT of the hello (a pause clicked as the run
    started) before the consumer's first next(): the listening thread might see them one batch late."""
    while True:
        try:
            message = ws.recv(timeout=QUEUED_CONTROLS_WAIT)
        except TimeoutError:
            return
        apply_message(control, message)


def stream_run(args: argparse.Namespace, ws: ClientConnection, held: list[dict[str, Any]]) -> int:
    """Run the scenario, streaming up ``ws``; ``held``: the controls sent before we connected (a pause
    while the run was starting), in force before the consumer's first next()."""
    control = Control()
    for command in held:
        if isinstance(command, dict):
            apply(control, command)
    take_queued_controls(ws, control)
    uplink = Uplink(ws)
    threading.Thread(target=listen, args=(ws, control), name="loaderscope-control", daemon=True).start()
    code = 0
    try:
        run(args, uplink, control)
    except BaseException as exc:  # report everything, then exit non-zero
        traceback.print_exc()
        uplink.meta({"type": "failed", "error": f"{type(exc).__name__}: {exc}"})
        code = 1
    uplink.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
