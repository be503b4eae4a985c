"""Ingest's fast path against the reference: what the server holds and says for a recorded run must be
byte for byte what the event-at-a-time path (parse, validate each event, number it, encode it, reduce
it) makes of the same frames, in memory, in the trace file and over REST.

The frames come from a real 2-worker DataLoader through the probe's Recorder (compact rows), the same
events as full-event frames, and a frame of the rare cases: an unknown kind, an unknown field, a
config with non-string keys, an event over the reducer's budget and one over the store's.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from torch.utils.data import Dataset

from loaderscope.events import Event, expand, validate
from loaderscope.model.state import LoaderState
from loaderscope.probe.loader import InstrumentedDataLoader
from loaderscope.server.budgets import MAX_EVENT_BYTES, STATE_EVENT_BYTES, encode, fitted, state_view
from loaderscope.server.runs.run import Run
from loaderscope.server.runs.spill import TraceSpill
from loaderscope.server.runs.store import EventLog, encode_each
from loaderscope.server.web.ingest import take
from tests.conftest import LiveServer, wait_for
from tests.frames import Frames

RUN = "reference"


class Squares(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((2,), index * index)


def rare_frame(t: float) -> bytes:
    return orjson.dumps([
        {"kind": "custom_marker", "t": t, "rank": 0, "note": "kept, not refused"},
        {"kind": "yield", "t": t, "rank": 0, "idx": 10**6, "wait": 0.0, "extra": {"nested": [1, 2.5, None]}},
        {"kind": "batch_info", "t": t, "rank": 0, "idx": 3, "worker": 0,
         "structure": {"text": "x" * (2 * STATE_EVENT_BYTES)}},
        {"kind": "error", "t": t, "rank": 0, "type": "ValueError", "message": "big",
         "traceback": "y" * MAX_EVENT_BYTES},
        {"kind": "custom_marker", "t": t, "rank": 0, "text": "z" * (2 * STATE_EVENT_BYTES)},
        {"kind": "run_end", "t": t, "rank": 0, "reason": "done"},
    ])


@pytest.fixture(scope="module")
def recorded() -> dict[str, list[bytes]]:
    """The frames of one real run, compact and full, each way ending with the rare cases."""
    sink = Frames()
    loader = InstrumentedDataLoader(Squares(), batch_size=3, num_workers=2, sink=sink, run_id="recorded")
    for _ in loader:
        pass
    loader.close()
    events = [event for data in sink.frames for event in expand(orjson.loads(data))]
    full = [orjson.dumps(events[i:i + 50], option=orjson.OPT_NON_STR_KEYS) for i in range(0, len(events), 50)]
    last = events[-1]["t"] + 1.0
    assert len(sink.frames) > 1 and any(b'"rows"' in data for data in sink.frames)
    return {"compact": [*sink.frames, rare_frame(last)], "full": [*full, rare_frame(last)]}


def reference(frames: list[bytes]) -> tuple[list[bytes], LoaderState]:
    """The stored lines and the reducer's state, one event at a time, as the store did before it
    encoded a frame at once: every event parsed, validated, numbered, encoded, cut, reduced."""
    state, lines = LoaderState(), []
    for data in frames:
        value = orjson.loads(data)
        events: list[Event] = expand(value, validated=True) if isinstance(value, dict) else [validate(e) for e in value]
        for event in events:
            event["seq"], event["run"] = len(lines), RUN
            line, view = encode(event), event
            if len(line) > STATE_EVENT_BYTES:
                if len(line) > MAX_EVENT_BYTES:
                    event, line = fitted(event, line, MAX_EVENT_BYTES)
                view = state_view(event, line)
            state.apply(view)
            lines.append(line)
    return lines, state


def ingested(frames: list[bytes], spill: TraceSpill) -> Run:
    """The frames through the ingest route's own ``take``, into a run whose log spills to ``spill``."""
    run = Run(id=RUN, scenario=None, mode=None, params={}, origin="external",
              log=EventLog(RUN, memory_events=10**6, spill=spill))

    async def send() -> None:
        for data in frames:
            await take(run, data)

    # a thread of its own: a browser test before this one in the same pytest worker leaves
    # Playwright's event loop on this thread, where asyncio.run() refuses to start another
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, send()).result()
    run.log.flush()
    return run


@pytest.mark.parametrize("way", ["compact", "full"])
def test_the_store_holds_what_the_event_at_a_time_path_makes(recorded: dict[str, list[bytes]], way: str,
                                                             tmp_path: Path) -> None:
    lines, state = reference(recorded[way])
    header = {"type": "header", "run": RUN}
    run = ingested(recorded[way], TraceSpill(tmp_path / "run.jsonl", header))
    held, gap = run.log.read(0, len(lines) + 1)
    assert gap is None and held == lines
    written = orjson.dumps(header) + b"\n" + b"".join(line + b"\n" for line in lines)
    assert (tmp_path / "run.jsonl").read_bytes() == written
    assert run.log.state == state
    assert run.log.cut_events == 1 and run.log.ended
    assert run.log.state_problems == []
    run.log.close()


def test_compact_and_full_frames_of_the_same_run_are_held_alike(recorded: dict[str, list[bytes]],
                                                              tmp_path: Path) -> None:
    compact = ingested(recorded["compact"], TraceSpill(tmp_path / "compact.jsonl", {}))
    full = ingested(recorded["full"], TraceSpill(tmp_path / "full.jsonl", {}))
    assert compact.log.read(0, 10**6) == full.log.read(0, 10**6)
    assert compact.log.summary() == full.log.summary()
    compact.log.close()
    full.log.close()


def test_a_frame_encoded_at_once_is_each_event_encoded_alone() -> None:
    events: list[dict[Any, Any]] = [
        {"kind": "run_start", "t": 0.0, "config": {1: 2.0, "x": [None, True]}},
        {"kind": "note", "t": 1e-300, "text": "\"},{\" \u2028 \U0001F600 \\", "n": -(2**53)},
        {"kind": "note", "t": float("nan"), "inf": float("-inf")},  # orjson writes null for both
        {},
    ]
    assert encode_each(events) == [encode(event) for event in events]


def test_an_event_orjson_cannot_write_fails_as_it_did_event_at_a_time() -> None:
    with pytest.raises(TypeError):  # orjson.JSONEncodeError
        encode_each([{"kind": "note", "t": 0.0}, {"kind": "note", "t": 0.0, "value": object()}])


def test_rest_serves_the_reference_lines(server: LiveServer, recorded: dict[str, list[bytes]]) -> None:
    lines, _ = reference(recorded["compact"])
    with server.connect("/ws/ingest") as ws:
        run = orjson.loads(ws.recv(timeout=5))["run"]
        for data in recorded["compact"]:
            ws.send(data)
        wait_for(lambda: server.run(run)["events"] >= len(lines), timeout=30)
    with server.client() as http:
        page = http.get(f"/api/runs/{run}/events", params={"after": -1, "limit": len(lines)}).json()
        trace = http.get(f"/api/runs/{run}/trace").content.splitlines()
    renamed = [orjson.loads(line) | {"run": run} for line in lines]
    assert page["events"] == renamed
    assert trace[1:1 + len(lines)] == [orjson.dumps(event, option=orjson.OPT_NON_STR_KEYS) for event in renamed]


@pytest.mark.parametrize("frames", [
    [list(range(10)), list(range(13, 30)), [None], [31, 32]],  # whole frames, a jump between two
    [[0, 1, 5, 6], [None, 9, True, 12], [3], [4.0, 20], ["x", 21]],  # jumps inside, seqs that are not integers
    [[], [7, 8], [8, 9], [2, 10]],  # a frame sent again, a seq going back
])
def test_dropped_events_are_counted_as_event_at_a_time(frames: list[list[Any]]) -> None:
    run = Run(id=RUN, scenario=None, mode=None, params={}, origin="external", log=EventLog(RUN, memory_events=10))
    dropped, last = 0, None
    for produced in frames:
        run._count_dropped(produced)
        for seq in produced:
            if isinstance(seq, int) and not isinstance(seq, bool):
                expected = 0 if last is None else last + 1
                dropped += max(0, seq - expected)
                last = seq
        assert (run.dropped, run.last_producer_seq) == (dropped, last)
