"""Ingest cost: the server's CPU per event beside the cost of merely parsing the same bytes; and the
cost of a run's summary (GET /api/runs/{id}) at 1M events.

    .venv/bin/python bench/ingest.py             # 5 alternating repeats of ~200,000 events each way
    .venv/bin/python bench/ingest.py --quick     # a smoke run (one small repeat, a 50,000-event summary)
    .venv/bin/python bench/ingest.py --baseline /tmp/main   # and the same frames into another checkout's server

With ``--baseline CHECKOUT`` (e.g. ``git worktree add /tmp/main main``), each repeat also sends the frames
to that checkout's server, started beside this one, in the same alternating order, and reports this
server's CPU per event as a ratio to it (before/after, measured under the same load).

The frames come from a real run: a 4-worker DataLoader through the probe's own Recorder, whose sink
keeps the compact frames the probe sends (``events.ROW_FIELDS`` rows, ``BATCH_ROW``...). The same
events, expanded, make the frames of full events (1,000 per frame). Each repeat sends both, in
alternating order, over a real websocket to a real uvicorn server on 127.0.0.1, as fast as it takes
them; the server process's CPU (user + system, from /proc) per event is set beside
``orjson.loads`` of the same bytes, timed in this process in the same repeat (the parse floor).
Reports the median of the repeats and their range, and the ratio to the floor; and beside it the CPU of
``events.decode_frame`` in this process (the contract's decoding and validation, and the expansion of
compact rows: the part of the server's work that the event schema decides).

Where the server's time goes: the same frames through the ingest route's own ``take`` in this process
(into a run whose log writes a trace file), and each of its stages alone: ``decode_message``, the
store's ``encode_each`` and the reducer (``fastpath.apply_all`` over each frame, as the store runs it, and
``apply`` event at a time); beside them the floors of any
per-event design in Python: one call per event, and one dict per event (a copy of each parsed event).

The summary part feeds a simulated 4-worker run into a run's event log in this process, in frames
of 1,000, and times what the route computes (``Run.detail()`` and its JSON) after each of the last
frames, one incremental update of the statistics, the finished run, and beside them a summary
computed from scratch (every fetch sorted again), which is what an update cost before the
statistics were kept incrementally.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import torch
from pipeline import FRAME, Server, events_for  # bench/pipeline.py: the same server under test
from rich.console import Console
from rich.table import Table
from torch.utils.data import Dataset

from loaderscope.events import decode_frame, decode_message, encode_frame
from loaderscope.model.diagnosis import diagnosis
from loaderscope.model.fastpath import apply_all
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import FetchOrder, summary
from loaderscope.probe.loader import InstrumentedDataLoader
from loaderscope.server.runs.run import Run
from loaderscope.server.runs.spill import TraceSpill
from loaderscope.server.runs.store import EventLog, encode_each
from loaderscope.server.web.ingest import SLICE_EVENTS, take

WORKERS = 4


class Frames:
    """A probe sink that keeps the compact frames the Recorder sends to a transport."""

    takes_frames = True

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def frame(self, data: bytes, count: int) -> None:
        self.frames.append(data)


class Tiny(Dataset[torch.Tensor]):
    """Samples that cost nothing to make: the run is all protocol, as many events per second as it gets."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((4,), index)


def record(batches: int) -> list[bytes]:
    """The compact frames of one real 4-worker run of ``batches`` batches."""
    sink = Frames()
    loader = InstrumentedDataLoader(Tiny(batches), batch_size=1, num_workers=WORKERS, sink=sink, run_id="bench")
    for _ in loader:
        pass
    loader.close()
    return sink.frames


def full_frames(compact: list[bytes]) -> list[bytes]:
    """The same events as frames of FRAME full events."""
    events = [event for data in compact for event in decode_frame(data)]
    return [encode_frame(events[i:i + FRAME]) for i in range(0, len(events), FRAME)]


def cpu_per_event(parse: Any, frames: list[bytes], events: int) -> float:
    """µs of this process's CPU per event to ``parse`` every frame (``orjson.loads``: the floor)."""
    start = time.process_time()
    for data in frames:
        parse(data)
    return (time.process_time() - start) / events * 1e6


def held(http: httpx.Client, run: str) -> int:
    """Events the server holds for ``run``, from the run listing (not the run's detail, whose
    statistics would add to the CPU measured)."""
    return next((r["events"] for r in http.get("/api/runs").json() if r["id"] == run), 0)


def server_cost(server: Server, frames: list[bytes], events: int) -> float:
    """µs of the server's CPU per event to take ``frames`` on a fresh run, sent as fast as it reads them."""
    cpu0 = server.cpu_seconds()
    with server.producer() as ws:
        run = orjson.loads(ws.recv())["run"]
        for data in frames:
            ws.send(data)
        while held(server.http, run) < events:
            time.sleep(0.02)
    return (server.cpu_seconds() - cpu0) / events * 1e6


def cpu_of(work: Any, events: int) -> float:
    """µs of this process's CPU per event for ``work()``."""
    start = time.process_time()
    work()
    return (time.process_time() - start) / events * 1e6


def stage_costs(frames: list[bytes], events: int, directory: Path) -> dict[str, float]:
    """µs of CPU per event, in this process, of the whole ingest of ``frames`` and of each of its stages."""
    decoded = [[event for part in decode_message(data) for event in part] for data in frames]
    for seq, event in enumerate(event for part in decoded for event in part):
        event["seq"], event["run"] = seq, "bench"

    def ingest() -> None:
        spill = TraceSpill(directory / f"{time.monotonic_ns()}.jsonl", {"type": "header"})
        run = Run(id="bench", scenario=None, mode=None, params={}, origin="external",
                  log=EventLog("bench", memory_events=FRAME * 100, spill=spill))

        async def send() -> None:
            for data in frames:
                await take(run, data)

        asyncio.run(send())
        run.log.close()

    def reduce() -> None:
        state = LoaderState()
        for part in decoded:
            apply_all(state, part)

    def reduce_each() -> None:
        state = LoaderState()
        for part in decoded:
            for event in part:
                state.apply(event)

    def each(work: Any, parts: Any) -> Any:  # what a stage makes is dropped at once, as the server drops it
        return lambda: collections.deque(map(work, parts), maxlen=0)

    def noop(event: Any) -> None:
        pass

    return {"take: the whole ingest (decode, store, reducer, trace file)": cpu_of(ingest, events),
            "decode_message: parse, validate, expand rows": cpu_of(
                each(lambda data: collections.deque(decode_message(data, slice_events=SLICE_EVENTS), maxlen=0), frames),
                events),
            "encode_each: the stored lines": cpu_of(each(encode_each, decoded), events),
            "fastpath.apply_all: the reducer, a frame at once (the store's)": cpu_of(reduce, events),
            "LoaderState.apply: the reducer, event at a time": cpu_of(reduce_each, events),
            "floor: one dict per event (a copy)": cpu_of(each(lambda part: [dict(e) for e in part], decoded), events),
            "floor: one call per event": cpu_of(each(lambda part: [noop(e) for e in part], decoded), events)}


def summary_costs(total: int) -> dict[str, list[float]]:
    """µs of CPU per call at ``total`` events, over the last tenth of the run with a frame between calls:
    of the route's work (``Run.detail()`` and its JSON; a live run's statistics are updated at most
    once a second, so most calls find them cached), of one update of the statistics and diagnosis
    (what EventLog.summary does when it recomputes), then on the finished run, and from scratch."""
    events = events_for(total, WORKERS)
    run = Run(id="bench", scenario=None, mode="sim", params={}, origin="external",
              log=EventLog("bench", memory_events=FRAME))
    state, order = run.log.state, FetchOrder()

    def timed(call: Any) -> float:  # CPU time: the other processes on the box must not count
        start = time.thread_time()
        call()
        return (time.thread_time() - start) * 1e6

    def detail() -> None:
        orjson.dumps(run.detail(), option=orjson.OPT_NON_STR_KEYS)

    def update() -> None:
        diagnosis(state, summary(state, order))

    calls, updates = [], []
    for start in range(0, len(events), FRAME):
        run.log.append(events[start:start + FRAME])
        if start >= 0.9 * len(events):
            calls.append(timed(detail))
            updates.append(timed(update))
    return {"GET while events arrive (updated at most once a second)": calls,
            "one update while events arrive (a frame between updates)": updates,
            "GET on the finished run": [timed(detail) for _ in range(20)],
            "from scratch (every fetch sorted again)": [timed(lambda: diagnosis(state, summary(state)))
                                                         for _ in range(3)]}


def interval(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, default=40_000, help="batches of the recorded run (5 events each)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--summary-events", type=int, default=1_000_000)
    parser.add_argument("--baseline", type=Path, help="a checkout whose server to measure beside this one's")
    args = parser.parse_args()
    batches, repeats = (2_000, 1) if args.quick else (args.batches, args.repeats)
    compact = record(batches)
    full = full_frames(compact)
    events = sum(len(decode_frame(data)) for data in compact)
    ways: dict[str, list[bytes]] = {"full events": full, "compact rows": compact}
    cost: dict[str, list[float]] = {way: [] for way in ways}
    floor: dict[str, list[float]] = {way: [] for way in ways}
    decode: dict[str, list[float]] = {way: [] for way in ways}
    stages: dict[str, dict[str, list[float]]] = {way: {} for way in ways}
    before: dict[str, list[float]] = {way: [] for way in ways}
    server = Server()
    baseline = Server(root=args.baseline) if args.baseline else None
    try:
        with tempfile.TemporaryDirectory(prefix="loaderscope-bench-") as directory:
            for repeat in range(repeats):
                for way in (list(ways) if repeat % 2 == 0 else list(reversed(ways))):
                    floor[way].append(cpu_per_event(orjson.loads, ways[way], events))
                    decode[way].append(cpu_per_event(decode_frame, ways[way], events))
                    cost[way].append(server_cost(server, ways[way], events))
                    if baseline is not None:
                        before[way].append(server_cost(baseline, ways[way], events))
                    for stage, cpu in stage_costs(ways[way], events, Path(directory)).items():
                        stages[way].setdefault(stage, []).append(cpu / floor[way][-1])
    finally:
        server.stop()
        if baseline is not None:
            baseline.stop()
    table = Table("frames", "bytes/event", "server CPU µs/event", "orjson.loads µs/event", "ratio to the floor",
                  "decode_frame µs/event", "its ratio to the floor")
    for way, frames in ways.items():
        ratios = [c / f for c, f in zip(cost[way], floor[way], strict=True)]
        decoded = [d / f for d, f in zip(decode[way], floor[way], strict=True)]
        table.add_row(f"{way} ({len(frames)} frames)", f"{sum(map(len, frames)) / events:.0f}",
                      interval(cost[way]), interval(floor[way]), interval(ratios), interval(decode[way]),
                      interval(decoded))
    console = Console(width=200)
    console.print(table)
    console.print(f"{events:,} events of a real {WORKERS}-worker run per way and repeat; {repeats} repeats, "
                  f"alternating; median (min-max); {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    if baseline is not None:
        table = Table("frames", f"{args.baseline}: server CPU µs/event", "its ratio to the floor",
                      "this server / that one", title="before/after: the same frames, the same repeats")
        for way in ways:
            table.add_row(way, interval(before[way]),
                          interval([b / f for b, f in zip(before[way], floor[way], strict=True)]),
                          interval([c / b for c, b in zip(cost[way], before[way], strict=True)]))
        console.print(table)
    table = Table("in this process: CPU per event, as a ratio to orjson.loads of the same bytes",
                  *(f"{way}: median (min-max)" for way in ways), title="where the ingest's time goes")
    for stage in stages["full events"]:
        table.add_row(stage, *(interval(stages[way][stage]) for way in ways))
    console.print(table)
    summary_events = 50_000 if args.quick else args.summary_events
    table = Table("GET /api/runs/{id}", "µs per call: median (min-max)",
                  title=f"a run's summary at {summary_events:,} events")
    for case, times in summary_costs(summary_events).items():
        table.add_row(case, interval(times))
    console.print(table)


if __name__ == "__main__":
    main()
