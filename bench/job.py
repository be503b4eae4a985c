"""One job of many ranks into one dashboard: 8, 16, 32 and 64 ranks of 8 workers each.

    .venv/bin/python bench/job.py                     # 8/16/32/64 ranks, 100 batches/s per rank, 12 s, 2 repeats
    .venv/bin/python bench/job.py --quick             # a smoke run (8 and 16 ranks, 3 s, no page)
    .venv/bin/python bench/job.py --ranks 64 --rate 200 --no-page
    .venv/bin/python bench/job.py --ranks 64 --page-only --repeat 1 --screenshot docs/job64.png

The frames are the real probe's: a real DataLoader (8 worker processes whose samples sleep, so that
it delivers --rate batches/s) is recorded through ``watch()`` 4 times; one of the recordings has a
worker 1.5x slower than the others. On two shared cores a recorded loader reaches only part of the
rate it aims at, so each rank stretches its recording's times to the stated rate (give or take
0.2 %; rank 5, which replays the one with the slow worker, 3 % slower). Each rank of the job sends
its frames over a websocket of its own at the times the probe sent them (every 50 ms), with its
own run id, ``rank``, ``world_size`` and the job's ``job`` in run_start. All producers are one
asyncio process with one real websocket per rank: the server sees 64 producer connections.

For each number of ranks a fresh server (real uvicorn on 127.0.0.1), without and then with the page
(headless chromium) open on rank 0 of the job, which finds the other ranks and opens a websocket
per rank; every configuration ``--repeat`` times in turn. Reported (median and range): events/s
sent, events the server held against those sent, the server's CPU per event and share of a core,
who else used the cores, its RSS, /api/health latency (p50/p99, polled every 50 ms during the run)
and, with the page, how far behind it was, its own backlog and its frame rate.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import pickle
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psutil
from pipeline import CHROMIUM_ARGS, Server  # bench/pipeline.py: the same server start and CPU reading
from rich.console import Console
from rich.table import Table

WORKERS = 8
BATCH = 4
RECORDINGS = 4  # distinct ranks recorded; the job's ranks replay them in turn
SLOW_RANK = 5  # the rank that replays the recording with a slow worker
SLOW_WORKER, SLOW_FACTOR = 3, 1.5
HEALTH_EVERY = 0.05
Recording = list[tuple[float, dict[str, Any], int]]  # (seconds after the first frame, frame, events)
DURATIONS = {"fetch_end": 4, "yield": 3}  # the row position of each kind's duration (events.ROW_FIELDS)
PAGE_STATS = """() => { const app = window.loaderscope, fm = [...app.perf.frameMs].sort((a, b) => a - b);
  return {fps: app.perf.frames / ((performance.now() - window._t0) / 1000), p50: fm[fm.length >> 1],
          p95: fm[Math.floor(fm.length * 0.95)], tracks: app.tracks.length}; }"""
PAGE_APPLIED = "() => window.loaderscope.tracks.reduce((n, tr) => n + tr.player.length, 0)"
PAGE_QUEUED = "() => window.loaderscope.backlog()"


# --- recording the probe's frames -------------------------------------------------------------------

def record(out: Path, batches: int, rate: float, slow: bool) -> None:
    """A real DataLoader watched by the probe; its frames and when each was sent, pickled to ``out``."""
    import torch
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    from loaderscope import watch

    sample_s = WORKERS / (rate * BATCH)  # 8 workers in turn deliver `rate` batches/s

    class Sleepy(Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return batches * BATCH

        def __getitem__(self, index: int) -> torch.Tensor:
            info = get_worker_info()
            time.sleep(sample_s * (SLOW_FACTOR if slow and info is not None and info.id == SLOW_WORKER else 1))
            return torch.zeros(16)

    class Frames:
        """A probe sink that keeps the encoded frames as the probe hands them to its transport."""
        takes_frames = True

        def __init__(self) -> None:
            self.frames: list[tuple[float, bytes, int]] = []

        def __call__(self, events: Any) -> None:
            raise AssertionError("the probe sends frames to a sink that takes them")

        def frame(self, data: bytes, count: int) -> None:
            self.frames.append((time.monotonic(), data, count))

        def close(self) -> None:
            pass

    sink = Frames()
    loader = watch(DataLoader(Sleepy(), batch_size=BATCH, num_workers=WORKERS), sink=sink)
    for _ in loader:
        pass
    loader.close()
    t0 = sink.frames[0][0]
    out.write_bytes(pickle.dumps([(at - t0, orjson.loads(data), count) for at, data, count in sink.frames]))


def recordings(batches: int, rate: float) -> list[Recording]:
    """RECORDINGS real runs, recorded at once (their workers mostly sleep); the last has a slow worker."""
    directory = Path(tempfile.mkdtemp(prefix="loaderscope-job-"))
    outs = [directory / f"rank{k}.pickle" for k in range(RECORDINGS)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [subprocess.Popen([sys.executable, __file__, "--record", str(out), "--batches", str(batches),
                               "--rate", str(rate), *(["--slow"] if k == RECORDINGS - 1 else [])], env=env)
             for k, out in enumerate(outs)]
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"recording failed: {proc.args!r}")
    return [pickle.loads(out.read_bytes()) for out in outs]


# --- the producers: one asyncio process, a websocket per rank ---------------------------------------



def warp(recording: Recording, rate: float) -> Recording:
    """The recording slowed or sped up to deliver ``rate`` batches/s: every time in it, the send
    times and the fetch and wait durations stretched alike. On two shared cores the recorded loaders
    reach 50-90 % of the rate they aim at, each a different share; stretched, every rank runs at the
    stated rate with its own recorded jitter, as the ranks of a job do (they step together)."""
    factor = delivered(recording) / rate
    out = []
    for at, frame, count in recording:
        t0, rows = frame["t0"], []
        for row in frame["rows"]:
            row = [row[0], t0 + (row[1] - t0) * factor, *row[2:]]
            if row[0] in DURATIONS:
                row[DURATIONS[row[0]]] *= factor
            rows.append(row)
        out.append((at * factor, {**frame, "rows": rows}, count))
    return out


def delivered(recording: Recording) -> float:
    """Batches/s the recorded loader delivered, from its first yield to its last."""
    times = [row[1] for _, frame, _ in recording for row in frame["rows"] if row[0] == "yield"]
    return float((len(times) - 1) / (times[-1] - times[0]))


def first_yield(recording: Recording) -> float:
    """Run time of the first batch handed out (the run's t, from the probe's t0)."""
    return float(next(row[1] - frame["t0"] for _, frame, _ in recording for row in frame["rows"] if row[0] == "yield"))


def rank_frames(recording: Recording, run: str, rank: int, ranks: int, job: str,
                wall_start: float) -> list[tuple[float, bytes, int]]:
    """The recording as rank ``rank`` of ``job`` sends it: its run id, rank and the job in run_start."""
    out = []
    for at, frame, count in recording:
        rows = frame["rows"]
        if rows and rows[0][0] == "run_start":
            fields = {**rows[0][2], "job": job, "rank": rank, "world_size": ranks, "wall_start": wall_start,
                      "pid": 10_000 + rank, "name": "train.py"}
            rows = [[rows[0][0], rows[0][1], fields], *rows[1:]]
        out.append((at, orjson.dumps({**frame, "run": run, "rank": rank, "rows": rows}), count))
    return out


def rank_recording(recs: list[Recording], rank: int, rate: float) -> Recording:
    """What rank ``rank`` replays: the recording with the slow worker for SLOW_RANK (3 % slower), the
    others in turn, each stretched to the rate give or take 0.2 % (ranks that replay one recording
    would otherwise tie at every step)."""
    jitter = 1 + 0.004 * (random.Random(rank).random() - 0.5)
    if rank == SLOW_RANK:
        return warp(recs[-1], rate * 0.97 * jitter)
    return warp(recs[rank % (len(recs) - 1)], rate * jitter)


async def produce(url: str, token: str, recs: list[Recording], rate: float, ranks: int, job: str, runs: Any,
                  go: Any, done: Any, sent: Any) -> None:
    """Connect a websocket per rank, send each rank's frames on time once ``go`` is set, and close
    once ``done`` is; ``sent`` counts the events sent."""
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Bearer {token}"}
    # no keepalive pings: a server starved by a loaded machine must show up as lag, not as a ping timeout
    sockets = [await connect(f"{url.replace('http', 'ws')}/ws/ingest", additional_headers=headers,
                             compression=None, max_size=None, ping_interval=None) for _ in range(ranks)]
    ids = [orjson.loads(await ws.recv())["run"] for ws in sockets]
    # each rank's wall_start puts its first batch at the same instant, as ranks that start together
    mine = [rank_recording(recs, r, rate) for r in range(ranks)]
    wall = time.time() + max(first_yield(rec) for rec in mine)
    frames = [rank_frames(mine[r], ids[r], r, ranks, job, wall - first_yield(mine[r])) for r in range(ranks)]
    runs.send(ids)
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    start = time.perf_counter()

    async def one(r: int) -> None:
        phase = 0.05 * r / ranks  # the ranks' probes flush at their own moments
        for at, data, count in frames[r]:
            await asyncio.sleep(max(0.0, start + phase + at - time.perf_counter()))
            await sockets[r].send(data)
            with sent.get_lock():
                sent.value += count

    await asyncio.gather(*(one(r) for r in range(ranks)))
    runs.send(time.perf_counter() - start)
    # Stay connected until the server holds every event: a client's close waits 10 s for the server's
    # answer and then drops the connection, and with it what the server had not yet read.
    await asyncio.get_running_loop().run_in_executor(None, done.wait)
    for ws in sockets:
        await ws.close()


def producer_main(url: str, token: str, recs: list[Recording], rate: float, ranks: int, job: str, runs: Any,
                  go: Any, done: Any, sent: Any) -> None:
    asyncio.run(produce(url, token, recs, rate, ranks, job, runs, go, done, sent))


# --- measuring one job ------------------------------------------------------------------------------

def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {name: int(fields[name].split()[0]) for name in ("VmRSS", "VmHWM")}


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User and system CPU of these processes (those gone count nothing)."""
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def others(exclude: set[int]) -> list[psutil.Process]:
    """This bench's other processes (producer, chromium), not the server: who shares the cores."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in exclude]


def poll_health(server: Server, stop: threading.Event, latencies: list[float]) -> None:
    while not stop.wait(HEALTH_EVERY):
        start = time.perf_counter()
        server.http.get("/api/health").raise_for_status()
        latencies.append(time.perf_counter() - start)


def busy(times: Any) -> float:
    """CPU seconds the whole machine spent busy (every core)."""
    return float(times.user + times.nice + times.system + times.irq + times.softirq + times.steal)


def held(server: Server, ids: list[str]) -> tuple[int, int]:
    """Events the server holds for these runs, and those their producers' seq showed as dropped."""
    runs = [r for r in server.http.get("/api/runs").json() if r["id"] in set(ids)]
    return sum(r["events"] for r in runs), sum(r["dropped"] for r in runs)


class CpuMeter:
    """CPU shares (of one core) since it was made: the server, this bench's other processes
    (producers, chromium, this script) and everything else on the machine (other people's work)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.bench = [psutil.Process(), *others({server.process.pid})]
        self.wall, self.box = time.perf_counter(), busy(psutil.cpu_times())
        self.cpu, self.mine = server.cpu_seconds(), cpu_seconds(self.bench)

    def shares(self) -> dict[str, float]:
        wall = time.perf_counter() - self.wall
        cpu, mine = self.server.cpu_seconds() - self.cpu, cpu_seconds(self.bench) - self.mine
        box = busy(psutil.cpu_times()) - self.box
        return {"cpu": cpu / wall, "bench_cpu": mine / wall, "other_cpu": max(0.0, box - mine - cpu) / wall,
                "cpu_s": cpu}


def run_job(recs: list[Recording], rate: float, ranks: int, page: Any | None, shot: Path | None) -> dict[str, Any]:
    """One job into a fresh server; with ``page``, a browser tab open on it the whole time."""
    server = Server()
    ctx = multiprocessing.get_context("spawn")  # the producer starts clean: no browser threads forked
    runs_rx, runs_tx = ctx.Pipe(duplex=False)
    go, done, sent = ctx.Event(), ctx.Event(), ctx.Value("q", 0)
    producer = ctx.Process(target=producer_main, args=(server.url, server.token, recs, rate, ranks,
                                                       f"job-{uuid.uuid4().hex[:6]}", runs_tx, go, done, sent))
    try:
        producer.start()
        ids = runs_rx.recv()
        if page is not None:
            open_page(page, server, ids[0])
        stop, latencies = threading.Event(), list[float]()
        pinger = threading.Thread(target=poll_health, args=(server, stop, latencies))
        meter = CpuMeter(server)
        go.set()
        pinger.start()
        behind = watch_page(page, sent, runs_rx, ranks) if page is not None else {}
        send_seconds = runs_rx.recv()
        usage = meter.shares()
        stop.set()
        pinger.join()
        total = sent.value
        drained = drain(server, ids, total)
        done.set()  # the producers may close now
        stats = page_stats(page, total, shot) if page is not None else {}
        # all the server spent on these events: ingest, and sending them to the page until it caught up
        per_event = (meter.shares()["cpu_s"]) / total * 1e6
        mem = memory_kib(server.process.pid)
        producer.join(30)
    finally:
        server.stop()
    ms = sorted(x * 1000 for x in latencies)
    return {"ranks": ranks, "page": page is not None, "sent": total, "rate": total / send_seconds,
            "held": drained["held"], "dropped": drained["dropped"], "drain_s": drained["seconds"], **usage,
            "us_per_event": per_event, "rss_mib": mem["VmRSS"] / 1024, "hwm_mib": mem["VmHWM"] / 1024,
            "health_p50": statistics.median(ms), "health_p99": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
            **behind, **stats}


def drain(server: Server, ids: list[str], total: int, timeout: float = 120) -> dict[str, Any]:
    """Wait (polling) until the server holds every event sent, or ``timeout``; how long it took."""
    start = time.perf_counter()
    while True:
        count, dropped = held(server, ids)
        if count >= total or time.perf_counter() - start > timeout:
            return {"held": count, "dropped": dropped, "seconds": time.perf_counter() - start}
        time.sleep(0.1)


def open_page(page: Any, server: Server, run: str) -> None:
    page.goto(f"{server.url}/?token={server.token}&run={run}")
    page.wait_for_function("() => !!window.loaderscope", timeout=30_000)
    page.evaluate("() => { const p = window.loaderscope.perf; p.frames = 0; p.frameMs.length = 0;"
                  " window._t0 = performance.now(); }")


def watch_page(page: Any, sent: Any, runs_rx: Any, ranks: int) -> dict[str, Any]:
    """Every half second until the producers are done: how far behind the page is (events sent and not
    yet applied, in seconds of the job's stream) from the moment it has found every rank (by their
    run_start), and how many events it had received but not yet applied (its own backlog)."""
    start, found, lags, queued = time.perf_counter(), None, [], [0]
    while not runs_rx.poll(0.5):
        tracks, applied, waiting = page.evaluate(
            f"() => [window.loaderscope.tracks.length, ({PAGE_APPLIED})(), ({PAGE_QUEUED})()]")
        elapsed = time.perf_counter() - start
        if found is None and tracks == ranks:
            found = elapsed
        if found is not None:
            lags.append(max(0, sent.value - applied) / (sent.value / elapsed))
            queued.append(waiting)
    return {"lag": max(lags, default=0.0), "lag_end": lags[-1] if lags else 0.0, "found": found,
            "queued": max(queued)}


def page_stats(page: Any, total: int, shot: Path | None, timeout: float = 60) -> dict[str, Any]:
    """The page's frame rate over the run, then how long it took to show every event sent (None:
    not within ``timeout``; ``shown`` says how many it had)."""
    stats: dict[str, Any] = page.evaluate(PAGE_STATS)
    start = time.perf_counter()
    while (shown := page.evaluate(PAGE_APPLIED)) < total and time.perf_counter() - start < timeout:
        time.sleep(0.2)
    stats |= {"shown": shown, "catch_up": time.perf_counter() - start if shown >= total else None}
    if shot is not None:  # the ranks most often last to deliver a step on top
        page.get_by_test_id("job-table").locator("th", has_text="last to deliver").click()
        page.wait_for_timeout(600)  # the job table refreshes a few times a second
        page.screenshot(path=str(shot))
    return stats


# --- the report ---------------------------------------------------------------------------------------

def spread(runs: list[dict[str, Any]], key: str, spec: str, scale: float = 1.0) -> str:
    """The median of the repeats, with their range when there are several."""
    values = sorted(r[key] * scale for r in runs if r.get(key) is not None)
    if not values:
        return "not all"
    median = format(statistics.median(values), spec)
    return median if len(values) == 1 else f"{median} [{values[0]:{spec}}–{values[-1]:{spec}}]"


def row(runs: list[dict[str, Any]]) -> list[str]:
    """One (ranks, page) configuration over its repeats."""
    first, sent, held = runs[0], sum(r["sent"] for r in runs), sum(r["held"] for r in runs)
    dropped = sum(r["dropped"] for r in runs)
    needs = [{"needs": r["us_per_event"] * r["rate"] / 1e6} for r in runs]
    page = [spread(runs, "found", ".1f"), spread(runs, "lag", ".2f"), spread(runs, "lag_end", ".2f"),
            spread(runs, "queued", ",.0f"), spread(runs, "fps", ".0f"), spread(runs, "p95", ".1f"),
            spread(runs, "tracks", ".0f"), spread(runs, "catch_up", ".1f")] if first["page"] else ["–"] * 8
    return [str(first["ranks"]), "open" if first["page"] else "–", spread(runs, "rate", ",.0f"),
            f"{held:,} / {sent:,}" + (f" ({dropped} dropped)" if dropped else ""), spread(runs, "drain_s", ".1f"),
            spread(runs, "us_per_event", ".1f"), spread(needs, "needs", ".0f", 100), spread(runs, "cpu", ".0f", 100),
            spread(runs, "bench_cpu", ".0f", 100), spread(runs, "other_cpu", ".0f", 100),
            spread(runs, "rss_mib", ".0f"), spread(runs, "health_p50", ".1f"), spread(runs, "health_p99", ".1f"), *page]


COLUMNS = ["ranks", "page", "events/s sent", "held / sent (all repeats)", "drain s", "server CPU µs/event",
           "server needs % core", "server got % core", "bench % core", "other % core", "server RSS MiB",
           "health p50 ms", "health p99 ms", "page found all ranks s", "page lag max s", "page lag end s",
           "page backlog max", "page fps", "page frame p95 ms", "page ranks", "page showed all after s"]


def report(results: list[dict[str, Any]], args: argparse.Namespace, rates: list[float]) -> None:
    groups: dict[tuple[int, bool], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["ranks"], r["page"]), []).append(r)
    table = Table(*COLUMNS, title=f"one job, {WORKERS} workers per rank, {args.rate:g} batches/s per rank, "
                                  f"{args.seconds:g} s; median [range] of {args.repeat} alternating repeats")
    for key in sorted(groups):
        table.add_row(*row(groups[key]))
    console = Console(width=420)
    console.print(table)
    console.print(f"each rank delivers {args.rate:g} batches/s (rank {SLOW_RANK}, with a slow worker, 3 % less): "
                  f"recorded loaders that delivered {', '.join(f'{r:.0f}' for r in rates)} batches/s, their times "
                  "stretched")
    console.print(f"{os.cpu_count()} CPUs shared by the server, the producers (one asyncio process), chromium and "
                  "whatever else runs. drain: from the last frame sent until the server held every event. Page lag: "
                  "events sent and not yet applied by the page, in seconds of the stream, from when it had found "
                  "every rank; its backlog: events received and not yet applied; showed all: from the last frame "
                  "sent until the page held every event (not all: not within 60 s). % core while the producers sent: "
                  "got = the server's share; bench = producers, chromium and this script; other = everything else "
                  "(other people's work). µs/event: the server's CPU until every event was held (and shown by the "
                  "page) over the events; needs = that at the rate sent.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 16, 32, 64])
    parser.add_argument("--rate", type=float, default=100.0, help="batches/s each rank's loader delivers")
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--no-page", action="store_true", help="only without the page")
    parser.add_argument("--page-only", action="store_true", help="only with the page")
    parser.add_argument("--repeat", type=int, default=2, help="alternating repeats of every configuration")
    parser.add_argument("--screenshot", type=Path, help="a screenshot of the page on the largest job")
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--slow", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.record:
        record(args.record, args.batches, args.rate, args.slow)
        return
    if args.quick:
        args.ranks, args.seconds, args.no_page, args.repeat = [8, 16], 3.0, True, 1
    recs = recordings(int(args.rate * args.seconds), args.rate)
    modes = [False] if args.no_page else [True] if args.page_only else [False, True]
    results = with_browser(recs, args, modes)
    report(results, args, [delivered(r) for r in recs])


def with_browser(recs: list[Recording], args: argparse.Namespace, modes: list[bool]) -> list[dict[str, Any]]:
    """Every number of ranks without, then with, the page, all of them ``--repeat`` times in turn
    (one chromium for the whole bench); the screenshot is of the last job with the page."""
    configs = [(n, with_page) for _ in range(args.repeat) for n in args.ranks for with_page in modes]
    if True not in modes:
        return [run_job(recs, args.rate, n, None, None) for n, _ in configs]  # no page: nothing to lose
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
        for k, (n, with_page) in enumerate(configs):
            page = browser.new_page(viewport={"width": 1440, "height": 1000}) if with_page else None
            last = k == max(i for i, (_, p) in enumerate(configs) if p)
            results.append(run_job(recs, args.rate, n, page, args.screenshot if last else None))
            print(orjson.dumps(results[-1]).decode(), file=sys.stderr, flush=True)  # kept if a later one fails
            if page is not None:
                page.close()
        browser.close()
    return results


if __name__ == "__main__":
    main()
