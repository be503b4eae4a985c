"""Event pipeline: producer -> server -> (a) a Python websocket viewer, (b) the real page in chromium.

    .venv/bin/python bench/pipeline.py              # 200,000 events, page at 50,000 events/s for 8 s
    .venv/bin/python bench/pipeline.py --quick      # a smoke run
    .venv/bin/python bench/pipeline.py --no-page    # without a browser

Events come from the simulator (a 32-worker run, so they are a real protocol stream) and are sent
in frames of 1,000 over WS /ws/ingest, as a probe or run process does. Reports ingest rate, the
server's CPU per event, a Python viewer's rate, the page's load rate for a finished run, and for a
live run paced at --rate: how far the page falls behind and its frames per second (measured in the
page with requestAnimationFrame). Also the Chrome-trace export rate.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from rich.console import Console
from rich.table import Table
from websockets.sync.client import ClientConnection, connect

from loaderscope import scenarios, sim
from loaderscope.events import encode_frame
from loaderscope.trace import to_chrome

FRAME = 1000
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def events_for(count: int) -> list[dict[str, Any]]:
    plan = scenarios.get("uniform").plan({"num_workers": 32, "batch_size": 1, "dataset_size": count // 5 + 64,
                                          "sample_ms": 1.0})
    return sim.simulate(plan, run_id="bench", scenario="uniform", params={})[:count]


class Server:
    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(24)
        self.log = Path(tempfile.mkdtemp(prefix="loaderscope-bench-")) / "server.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "loaderscope.cli", "serve", "--port", "0", "--no-browser"],
                env={**os.environ, "LOADERSCOPE_TOKEN": self.token}, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (match := re.search(r"(http://[\d.]+:\d+)/", self.log.read_text())):
            if time.monotonic() > deadline:
                raise RuntimeError(self.log.read_text())
            time.sleep(0.05)
        self.url = match.group(1)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def producer(self) -> ClientConnection:
        headers = {"Authorization": f"Bearer {self.token}"}
        return connect(f"{self.url.replace('http', 'ws')}/ws/ingest", additional_headers=headers,
                       compression=None, max_size=None)

    @staticmethod
    def send(ws: ClientConnection, frames: list[bytes], rate: float | None = None) -> None:
        """Send frames, paced to ``rate`` events/s if given."""
        start = time.perf_counter()
        for number, frame in enumerate(frames):
            if rate:
                time.sleep(max(0.0, start + number * FRAME / rate - time.perf_counter()))
            ws.send(frame)

    def held(self, run: str) -> int:
        return self.http.get(f"/api/runs/{run}").json()["events"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def viewer_rate(server: Server, run: str, total: int) -> float:
    """A viewer replaying the whole run: frames over the websocket, and ranges it is told to fetch
    over REST when it falls more than the server's max lag behind (``resync``), as the page does."""
    headers = {"Authorization": f"Bearer {server.token}"}
    received, start = 0, time.perf_counter()
    with connect(f"{server.url.replace('http', 'ws')}/ws/runs/{run}?after=-1", additional_headers=headers,
                 compression=None, max_size=None) as ws:
        while received < total:
            message = ws.recv(timeout=60)
            if message.startswith("["):
                received += message.count('"seq"')
                continue
            meta = orjson.loads(message)
            if meta.get("type") == "resync":
                after = meta["from"] - 1
                while after < meta["to"]:
                    page = server.http.get(f"/api/runs/{run}/events", params={"after": after, "limit": 10_000}).json()
                    received += len(page["events"])
                    after = page["events"][-1]["seq"] if page["events"] else meta["to"]
    return total / (time.perf_counter() - start)


def page_numbers(server: Server, run_done: str, total: int, frames: list[bytes], rate: float,
                 seconds: float) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{server.url}/?token={server.token}&run={run_done}")
        start = time.perf_counter()
        page.wait_for_function(f"() => window.loaderscope && window.loaderscope.eventCount >= {total}",
                               timeout=120_000, polling=50)
        load = time.perf_counter() - start
        # live: a paced producer, the page open on its run
        with server.producer() as ws:
            live = orjson.loads(ws.recv())["run"]
            page.goto(f"{server.url}/?run={live}")
            page.wait_for_function("() => !!window.loaderscope", timeout=30_000)
            page.evaluate("() => { window.loaderscope.perf.frames = 0; window._t0 = performance.now(); }")
            sender = threading.Thread(target=server.send, args=(ws, frames[: int(rate * seconds / FRAME)], rate))
            sender.start()
            lags = []
            while sender.is_alive():
                time.sleep(0.5)
                lags.append((server.held(live) - page.evaluate("() => window.loaderscope.eventCount")) / rate)
            sender.join()
        fps = page.evaluate("() => window.loaderscope.perf.frames / ((performance.now() - window._t0) / 1000)")
        browser.close()
    return {"load_events_per_s": total / load, "live_max_lag_s": max(lags, default=0.0), "live_fps": fps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-page", action="store_true")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=50_000, help="live events/s for the page")
    args = parser.parse_args()
    total = 20_000 if args.quick else args.events
    events = events_for(max(total, int(args.rate * 8)))
    frames = [encode_frame(events[i:i + FRAME]) for i in range(0, len(events), FRAME)]
    rows: list[tuple[str, str]] = []
    server = Server()
    try:
        cpu0, start = server.cpu_seconds(), time.perf_counter()
        with server.producer() as ws:
            run = orjson.loads(ws.recv())["run"]
            server.send(ws, frames[: total // FRAME])
        while server.held(run) < total:
            time.sleep(0.01)
        elapsed, cpu = time.perf_counter() - start, server.cpu_seconds() - cpu0
        rows += [("ingest (producer -> server store)", f"{total / elapsed:,.0f} events/s"),
                 ("server CPU per event", f"{cpu / total * 1e6:.1f} µs")]
        rows.append(("Python websocket viewer (replay of the run)", f"{viewer_rate(server, run, total):,.0f} events/s"))
        if not args.no_page:
            page = page_numbers(server, run, total, frames, args.rate, 3 if args.quick else 8)
            rows += [("page: load a finished run", f"{page['load_events_per_s']:,.0f} events/s"),
                     (f"page: live at {args.rate:,.0f} events/s, max lag", f"{page['live_max_lag_s']:.2f} s"),
                     (f"page: live at {args.rate:,.0f} events/s, frames", f"{page['live_fps']:.0f} fps")]
    finally:
        server.stop()
    start = time.perf_counter()
    chrome = to_chrome(events)
    rows.append(("Chrome-trace export", f"{len(events) / (time.perf_counter() - start):,.0f} events/s "
                 f"({len(chrome['traceEvents']):,} trace events)"))
    table = Table("measure", "result")
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    Console().print(f"{total:,} events in frames of {FRAME}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
