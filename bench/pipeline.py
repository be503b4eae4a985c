"""Event pipeline: producer -> server -> (a) a Python websocket viewer, (b) the real page in chromium.

    .venv/bin/python bench/pipeline.py              # 200,000 events; live page runs of 8 s each
    .venv/bin/python bench/pipeline.py --quick      # a smoke run
    .venv/bin/python bench/pipeline.py --no-page    # without a browser

Events come from the simulator (real protocol streams of 8 to 64 workers) and are sent in frames of
1,000 over WS /ws/ingest. Reports the ingest rate for frames of full events and for the compact rows
a probe sends, the server's CPU per event, a Python viewer's rate, the page's load rate for a
finished run, then how costs grow: for live runs paced at several rates and worker counts, the
server's CPU per event, how far the page falls behind, and its frame times (measured in the page
with requestAnimationFrame). Also the Chrome-trace export rate.
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
from loaderscope.events import COMMON_FIELDS, ROW_FIELDS, encode_frame, to_json
from loaderscope.trace import chrome_json

FRAME = 1000
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


GROWTH = [(8, 10_000), (32, 50_000), (64, 50_000), (64, 100_000)]  # (workers, live events/s)


def events_for(count: int, workers: int = 32) -> list[dict[str, Any]]:
    samples = count // 5 + 64  # about five events per batch of one
    epochs = -(-samples // 100_000)  # the scenarios' dataset_size is capped: longer streams take more epochs
    plan = scenarios.get("uniform").plan({"num_workers": workers, "batch_size": 1, "dataset_size": -(-samples // epochs),
                                          "epochs": epochs, "sample_ms": 1.0})
    return sim.simulate(plan, run_id="bench", scenario="uniform", params={})[:count]


def compact_frame(events: list[dict[str, Any]]) -> bytes:
    """The frame a probe sends for these events: a row per event (``events.ROW_FIELDS``)."""
    rows: list[list[Any]] = []
    for event in events:
        names = ROW_FIELDS.get(event["kind"])
        if names is not None:
            rows.append([event["kind"], event["t"], *(event.get(name) for name in names)])
        else:
            rows.append([event["kind"], event["t"], {k: v for k, v in event.items() if k not in COMMON_FIELDS}])
    return to_json({"run": "bench", "rank": 0, "seq": events[0]["seq"], "t0": 0.0, "rows": rows})


def frames_of(events: list[dict[str, Any]], encode: Any = encode_frame) -> list[bytes]:
    return [encode(events[i:i + FRAME]) for i in range(0, len(events), FRAME)]


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
    def send(ws: ClientConnection, frames: list[bytes], rate: float | None = None,
             progress: list[int] | None = None) -> None:
        """Send frames, paced to ``rate`` events/s if given; ``progress[0]`` counts the events sent."""
        start = time.perf_counter()
        for number, frame in enumerate(frames):
            if rate:
                time.sleep(max(0.0, start + number * FRAME / rate - time.perf_counter()))
            ws.send(frame)
            if progress is not None:
                progress[0] += FRAME

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


def ingest(server: Server, frames: list[bytes], total: int) -> tuple[str, float, float]:
    """(run id, events/s, server CPU µs per event) for frames sent as fast as the server takes them."""
    cpu0, start = server.cpu_seconds(), time.perf_counter()
    with server.producer() as ws:
        run = orjson.loads(ws.recv())["run"]
        server.send(ws, frames[: total // FRAME])
    while server.held(run) < total:
        time.sleep(0.01)
    elapsed, cpu = time.perf_counter() - start, server.cpu_seconds() - cpu0
    return run, total / elapsed, cpu / total * 1e6


FRAME_STATS = """() => { const app = window.loaderscope, fm = [...app.perf.frameMs].sort((a, b) => a - b);
  return {fps: app.perf.frames / ((performance.now() - window._t0) / 1000), p50: fm[fm.length >> 1],
          p95: fm[Math.floor(fm.length * 0.95)]}; }"""


def live(server: Server, page: Any, frames: list[bytes], rate: float, seconds: float) -> dict[str, float]:
    """A producer paced at ``rate`` events/s with the page open on its run: lag, frames, server CPU.

    The lag is producer to page (events sent but not yet applied by the page, in seconds of the
    stream), read from the page only, so the bench adds no REST calls to the server's CPU."""
    with server.producer() as ws:
        run = orjson.loads(ws.recv())["run"]
        page.goto(f"{server.url}/?run={run}")
        page.wait_for_function("() => !!window.loaderscope", timeout=30_000)
        page.evaluate("() => { const p = window.loaderscope.perf; p.frames = 0; p.frameMs.length = 0;"
                      " window._t0 = performance.now(); }")
        sent = frames[: int(rate * seconds / FRAME)]
        progress = [0]
        sender = threading.Thread(target=server.send, args=(ws, sent, rate, progress))
        cpu0 = server.cpu_seconds()
        sender.start()
        lags = []
        while sender.is_alive():
            time.sleep(0.5)
            lags.append((progress[0] - page.evaluate("() => window.loaderscope.eventCount")) / rate)
        sender.join()
        cpu = server.cpu_seconds() - cpu0
    return {"lag": max(lags, default=0.0), "cpu_us": cpu / (len(sent) * FRAME) * 1e6} | page.evaluate(FRAME_STATS)


def page_numbers(server: Server, run_done: str, total: int, seconds: float) -> tuple[float, list[list[str]]]:
    """The finished run's load rate, and a row per (workers, rate) of GROWTH."""
    from playwright.sync_api import sync_playwright

    growth = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(f"{server.url}/?token={server.token}&run={run_done}")
        start = time.perf_counter()
        page.wait_for_function(f"() => window.loaderscope && window.loaderscope.eventCount >= {total}",
                               timeout=120_000, polling=50)
        load = total / (time.perf_counter() - start)
        for workers, rate in GROWTH:
            r = live(server, page, frames_of(events_for(int(rate * seconds), workers)), rate, seconds)
            growth.append([str(workers), f"{rate:,}", f"{r['cpu_us']:.1f} µs ({r['cpu_us'] * rate / 1e4:.0f}% of a core)",
                           f"{r['lag']:.2f} s", f"{r['fps']:.0f}", f"{r['p50']:.1f} / {r['p95']:.1f} ms"])
        browser.close()
    return load, growth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-page", action="store_true")
    parser.add_argument("--events", type=int, default=200_000)
    args = parser.parse_args()
    total = 20_000 if args.quick else args.events
    events = events_for(total)
    rows: list[tuple[str, str]] = []
    growth: list[list[str]] = []
    server = Server()
    try:
        run, rate, cpu_us = ingest(server, frames_of(events), total)
        _, compact_rate, compact_cpu_us = ingest(server, frames_of(events, compact_frame), total)
        rows += [("ingest, frames of full events", f"{rate:,.0f} events/s, server CPU {cpu_us:.1f} µs per event"),
                 ("ingest, frames of compact rows (as the probe sends)",
                  f"{compact_rate:,.0f} events/s, server CPU {compact_cpu_us:.1f} µs per event")]
        rows.append(("Python websocket viewer (replay of the run)", f"{viewer_rate(server, run, total):,.0f} events/s"))
        if not args.no_page:
            load, growth = page_numbers(server, run, total, 3 if args.quick else 8)
            rows.append(("page: load a finished run", f"{load:,.0f} events/s"))
    finally:
        server.stop()
    start = time.perf_counter()
    chrome = chrome_json(events)
    seconds = time.perf_counter() - start
    rows.append(("Chrome-trace export (chrome_json)", f"{len(events) / seconds:,.0f} events/s "
                 f"({len(orjson.loads(chrome)['traceEvents']):,} trace events)"))
    console = Console()
    table = Table("measure", "result")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if growth:
        table = Table("workers", "live events/s", "server CPU per event", "page max lag", "page fps",
                      "page frame p50 / p95", title="cost growth: live runs with the page open")
        for row in growth:
            table.add_row(*row)
        console.print(table)
    console.print(f"{total:,} events in frames of {FRAME}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
