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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from rich.console import Console
from rich.table import Table
from websockets.sync.client import ClientConnection, connect

from loaderscope import sim
from loaderscope.events import COMMON_FIELDS, ROW_FIELDS, encode_frame, to_json
from loaderscope.scenarios.catalog import get
from loaderscope.traces.jsonl import chrome_json

FRAME = 1000
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


GROWTH = [(8, 10_000), (32, 50_000), (64, 50_000), (64, 100_000)]  # (workers, live events/s)


def events_for(count: int, workers: int = 32) -> list[dict[str, Any]]:
    samples = count // 5 + 64  # about five events per batch of one
    epochs = -(-samples // 100_000)  # the scenarios' dataset_size is capped: longer streams take more epochs
    plan = get("uniform").plan({"num_workers": workers, "batch_size": 1, "dataset_size": -(-samples // epochs),
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
    """``loaderscope serve`` in a child process; ``root``: a checkout to run the server and page of
    instead of this one (A/B runs); ``token``: shared by servers one browser talks to (one cookie);
    ``logdir``: served with ``--logdir``."""

    def __init__(self, root: Path | None = None, token: str | None = None, logdir: Path | None = None) -> None:
        self.token = token or secrets.token_urlsafe(24)
        path = {"PYTHONPATH": str(root / "backend")} if root else {}
        self.log = Path(tempfile.mkdtemp(prefix="loaderscope-bench-")) / "server.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "loaderscope.cli", "serve", "--port", "0", "--no-browser",
                 *(["--logdir", str(logdir)] if logdir is not None else [])],
                env={**os.environ, **path, "LOADERSCOPE_TOKEN": self.token}, stdout=out, stderr=subprocess.STDOUT)
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
        # no keepalive pings: on a machine loaded past its cores a starved server answers late, and
        # the run would end with a ping timeout instead of a measure of how far behind it fell
        return connect(f"{self.url.replace('http', 'ws')}/ws/ingest", additional_headers=headers,
                       compression=None, max_size=None, ping_interval=None)

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
  const s = app.stream, split = app.perf.split, frames = Math.max(1, app.perf.frames);
  return {fps: app.perf.frames / ((performance.now() - window._t0) / 1000), p50: fm[fm.length >> 1],
          p95: fm[Math.floor(fm.length * 0.95)], messages: s.messages - window._m0, chars: s.chars - window._c0,
          received: s.lastSeq + 1 - window._r0, resyncs: s.resyncs - window._s0,
          split: Object.fromEntries(Object.entries(split).map(([k, v]) => [k, v / frames]))}; }"""

# Counted in the page: received (over the websocket), applied (in the player) and drawn (by the
# last frame: a frame callback registered after the page's own runs once it has drawn).
PAGE_SETUP = """() => { const app = window.loaderscope, p = app.perf, s = app.stream;
  p.frames = 0; p.frameMs.length = 0; for (const k in p.split) p.split[k] = 0;
  window._t0 = performance.now(); window._m0 = s.messages; window._c0 = s.chars; window._r0 = s.lastSeq + 1;
  window._s0 = s.resyncs; window._drawn = app.eventCount;
  if (!window._hooked) { window._hooked = true; app.scheduler.onFrame(() => { window._drawn = app.eventCount; }); } }"""
PAGE_COUNTS = "() => [window.loaderscope.stream.lastSeq + 1, window.loaderscope.eventCount, window._drawn]"
STAGES = ("ingest", "deliver", "apply", "draw")
ROLES = ("server", "bench", "renderer", "gpu", "browser")  # where the machine's CPU goes in a live run


def role(process: psutil.Process, server: Server) -> str:
    """Which part of the live path a process of this bench is: the server, the bench itself (the
    producer and Playwright's client), chromium's renderer (the page), its GPU process (software
    compositing) or the rest of the browser (with Playwright's driver)."""
    if process.pid == server.process.pid:
        return "server"
    if process.pid == os.getpid():
        return "bench"
    command = " ".join(process.cmdline())
    return "renderer" if "--type=renderer" in command else "gpu" if "--type=gpu-process" in command else "browser"


def cpu_by_role(server: Server) -> Counter[str]:
    """CPU seconds so far of this process and its children, by ``role``."""
    seconds: Counter[str] = Counter()
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
            seconds[role(process, server)] += times.user + times.system
        except psutil.Error:  # gone meanwhile
            continue
    return seconds  # producer -> server -> page socket -> player -> frame


def lag_stages(points: list[int], rate: float) -> dict[str, float]:
    """Seconds of stream between each pair of points on the path (events sent, held, received,
    applied, drawn): where the lag is, stage by stage."""
    return {stage: (points[i] - points[i + 1]) / rate for i, stage in enumerate(STAGES)}


def live(server: Server, page: Any, frames: list[bytes], rate: float, seconds: float,
         profile: bool = False) -> dict[str, Any]:
    """A producer paced at ``rate`` events/s with the page open on its run: lag, frames, server CPU.

    Lag is events sent but not yet drawn, in seconds of the stream, split into where they are:
    sent but not yet held by the server (GET /api/runs, the cheap listing), held but not yet
    received by the page, received but not applied, applied but not drawn. The maximum total is
    reported with its split at that moment, and the mean of each stage."""
    with server.producer() as ws:
        run = orjson.loads(ws.recv())["run"]
        page.goto(f"{server.url}/?token={server.token}&run={run}")  # each server's own cookie
        page.wait_for_function("() => !!(window.loaderscope && window.loaderscope.stream)", timeout=30_000)
        page.evaluate(PAGE_SETUP)
        sent = frames[: int(rate * seconds / FRAME)]
        progress = [0]
        sender = threading.Thread(target=server.send, args=(ws, sent, rate, progress))
        profiler = Profiler(page) if profile else None
        cpu0, roles0, start = server.cpu_seconds(), cpu_by_role(server), time.perf_counter()
        sender.start()
        samples = []
        while sender.is_alive():
            time.sleep(0.25)
            count = progress[0]
            held = next(r["events"] for r in server.http.get("/api/runs").json() if r["id"] == run)
            samples.append(lag_stages([count, held, *page.evaluate(PAGE_COUNTS)], rate))
        sender.join()
        cpu = server.cpu_seconds() - cpu0
        roles = cpu_by_role(server)
        roles.subtract(roles0)
        elapsed = time.perf_counter() - start
        hot = profiler.stop() if profiler else []
    stats: dict[str, Any] = page.evaluate(FRAME_STATS)
    worst = max(samples, key=lambda s: sum(s.values()), default=dict.fromkeys(STAGES, 0.0))
    mean = {stage: statistics.fmean(s[stage] for s in samples) for stage in STAGES} if samples else worst
    return {"lag": sum(worst.values()), "worst": worst, "mean": mean, "cpu_us": cpu / (len(sent) * FRAME) * 1e6,
            "events_per_message": stats["received"] / max(1, stats["messages"]),
            "bytes_per_message": stats["chars"] / max(1, stats["messages"]), "hot": hot,
            "cores": {name: roles[name] / elapsed for name in ROLES}} | stats


class Profiler:
    """The page's CPU profile over the Chrome DevTools Protocol, summed by function."""

    def __init__(self, page: Any) -> None:
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.send("Profiler.enable")
        self.cdp.send("Profiler.setSamplingInterval", {"interval": 500})  # µs
        self.cdp.send("Profiler.start")

    def stop(self, top: int = 18) -> list[tuple[str, float, float]]:
        """(function, self share, inclusive share) of the page's samples, idle included, for the
        ``top`` functions by inclusive share."""
        profile = self.cdp.send("Profiler.stop")["profile"]
        self.cdp.detach()
        nodes = {node["id"]: node for node in profile["nodes"]}
        parent = {child: node["id"] for node in profile["nodes"] for child in node.get("children", ())}
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        for node_id in profile["samples"]:
            own[self.name(nodes[node_id])] += 1
            chain = {self.name(nodes[node_id])}
            while node_id in parent:
                node_id = parent[node_id]
                chain.add(self.name(nodes[node_id]))
            inclusive.update(chain - {"(root)"})
        total = max(1, len(profile["samples"]))
        return [(name, own[name] / total, count / total) for name, count in inclusive.most_common(top)]

    @staticmethod
    def name(node: dict[str, Any]) -> str:
        frame = node["callFrame"]
        where = frame["url"].rsplit("/", 1)[-1]
        function = frame["functionName"] or "(anonymous)"
        return f"{function} {where}:{frame['lineNumber'] + 1}" if where else function


def open_page(pw: Any, server: Server) -> Any:
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{server.url}/?token={server.token}")  # the token becomes the page's cookie
    return page


def load_rate(page: Any, server: Server, run: str, total: int) -> float:
    """Events/s at which the page loads a finished run."""
    page.goto(f"{server.url}/?run={run}")
    start = time.perf_counter()
    page.wait_for_function(f"() => window.loaderscope && window.loaderscope.eventCount >= {total}",
                           timeout=120_000, polling=50)
    return total / (time.perf_counter() - start)


Row = tuple[str, int, int]  # (which server's tree, workers, live events/s)


def growth_runs(page: Any, servers: dict[str, Server], growth: list[tuple[int, int]], seconds: float,
                repeat: int, profile: bool) -> dict[Row, list[dict[str, Any]]]:
    """``repeat`` live runs of each (workers, rate) on each server, taken in turn so that load from
    elsewhere on the machine falls on all of them alike."""
    frames = {(workers, rate): frames_of(events_for(int(rate * seconds), workers)) for workers, rate in growth}
    results: dict[Row, list[dict[str, Any]]] = {}
    for _ in range(repeat):
        for workers, rate in growth:
            for tree, server in servers.items():
                run = live(server, page, frames[workers, rate], rate, seconds, profile)
                results.setdefault((tree, workers, rate), []).append(run)
    return results


def spread(values: list[float], fmt: str) -> str:
    """The median, and the range when there are several values."""
    middle = format(statistics.median(values), fmt)
    return middle if len(values) < 2 else f"{middle} [{min(values):{fmt}}–{max(values):{fmt}}]"


def growth_tables(results: dict[Row, list[dict[str, Any]]]) -> list[Table]:
    costs = Table("tree", "workers", "live events/s", "server CPU per event", "page CPU per event", "page max lag",
                  "page fps", "page frame p50 / p95", "events / bytes per message", "resyncs",
                  title="cost growth: live runs with the page open (median [range] of the runs)")
    where = Table("tree", "workers", "live events/s", *(f"{stage} (mean / at max)" for stage in STAGES),
                  "frame: apply / pipeline / timeline / panels ms", "cores: " + " / ".join(ROLES),
                  title="where the lag is: seconds of stream between producer, server, page socket, player, frame")
    for (tree, workers, rate), runs in results.items():
        cpu = [r["cpu_us"] for r in runs]
        page_us = [(r["cores"]["renderer"] + r["cores"]["gpu"]) / rate * 1e6 for r in runs]
        costs.add_row(tree, str(workers), f"{rate:,}",
                      f"{spread(cpu, '.1f')} µs ({statistics.median(cpu) * rate / 1e4:.0f}% of a core)",
                      f"{spread(page_us, '.1f')} µs",
                      spread([r["lag"] for r in runs], ".2f") + " s", spread([r["fps"] for r in runs], ".0f"),
                      f"{statistics.median(r['p50'] for r in runs):.1f} / "
                      f"{statistics.median(r['p95'] for r in runs):.1f} ms",
                      f"{statistics.median(r['events_per_message'] for r in runs):.0f} / "
                      f"{statistics.median(r['bytes_per_message'] for r in runs) / 1024:.0f} KiB",
                      spread([r["resyncs"] for r in runs], ".0f"))
        split = " / ".join(f"{statistics.median(r['split'][k] for r in runs):.1f}"
                           for k in ("apply", "pipeline", "timeline", "panels"))
        where.add_row(tree, str(workers), f"{rate:,}",
                      *(f"{statistics.median(r['mean'][s] for r in runs):.2f} / "
                        f"{statistics.median(r['worst'][s] for r in runs):.2f}" for s in STAGES), split,
                      " / ".join(f"{statistics.median(r['cores'][name] for r in runs):.2f}" for name in ROLES))
    return [costs, where]


def profile_tables(results: dict[Row, list[dict[str, Any]]]) -> list[Table]:
    tables = []
    for (tree, workers, rate), runs in results.items():
        table = Table("function", "self", "inclusive",
                      title=f"page CPU profile, {tree}: {workers} workers at {rate:,}/s "
                            "(share of the first run's samples)")
        for name, own, inclusive in runs[0]["hot"]:
            table.add_row(name, f"{own:.1%}", f"{inclusive:.1%}")
        tables.append(table)
    return tables


def parse_growth(text: str) -> list[tuple[int, int]]:
    """'64:50000,8:10000' -> [(64, 50000), (8, 10000)]."""
    return [(int(w), int(r)) for w, r in (item.split(":") for item in text.split(","))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-page", action="store_true")
    parser.add_argument("--live-only", action="store_true", help="only the live runs with the page open")
    parser.add_argument("--growth", type=parse_growth, default=GROWTH, help="workers:rate,... (default: %(default)s)")
    parser.add_argument("--seconds", type=float, help="length of each live run (default 8, 3 with --quick)")
    parser.add_argument("--repeat", type=int, default=1, help="live runs of each growth row, taken in turn")
    parser.add_argument("--profile", action="store_true", help="record the page's CPU profile in each live run")
    parser.add_argument("--baseline", type=Path, help="a checkout whose server and page also run each live run (A/B)")
    parser.add_argument("--events", type=int, default=200_000)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    total = 20_000 if args.quick else args.events
    seconds = args.seconds or (3 if args.quick else 8)
    events = events_for(total)
    rows: list[tuple[str, str]] = []
    tables: list[Table] = []
    server = Server()
    servers = {"this": server} | ({"baseline": Server(args.baseline, server.token)} if args.baseline else {})
    try:
        if not args.live_only:
            run, rate, cpu_us = ingest(server, frames_of(events), total)
            _, compact_rate, compact_cpu_us = ingest(server, frames_of(events, compact_frame), total)
            rows += [("ingest, frames of full events", f"{rate:,.0f} events/s, server CPU {cpu_us:.1f} µs per event"),
                     ("ingest, frames of compact rows (as the probe sends)",
                      f"{compact_rate:,.0f} events/s, server CPU {compact_cpu_us:.1f} µs per event")]
            rows.append(("Python websocket viewer (replay of the run)",
                         f"{viewer_rate(server, run, total):,.0f} events/s"))
        if not args.no_page:
            with sync_playwright() as pw:
                page = open_page(pw, server)
                if not args.live_only:
                    rows.append(("page: load a finished run", f"{load_rate(page, server, run, total):,.0f} events/s"))
                results = growth_runs(page, servers, args.growth, seconds, args.repeat, args.profile)
                page.context.browser.close()
            tables += growth_tables(results) + (profile_tables(results) if args.profile else [])
    finally:
        for each in servers.values():
            each.stop()
    if not args.live_only:
        start = time.perf_counter()
        chrome = chrome_json(events)
        elapsed = time.perf_counter() - start
        rows.append(("Chrome-trace export (chrome_json)", f"{len(events) / elapsed:,.0f} events/s "
                     f"({len(orjson.loads(chrome)['traceEvents']):,} trace events)"))
    console = Console(width=200)
    table = Table("measure", "result")
    for row in rows:
        table.add_row(*row)
    for t in ([table] if rows else []) + tables:
        console.print(t)
    console.print(f"{total:,} events in frames of {FRAME}; live runs of {seconds:g} s; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
