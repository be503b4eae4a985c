"""The recorder's frames: a big flush goes out as several frames the dashboard parses quickly; a run's
last event is its run_end."""

from __future__ import annotations

from typing import Any

import orjson

from loaderscope.events import BATCH_ROW, MAX_FRAME_BYTES, decode_frame
from loaderscope.probe.recorder import SEND_FRAME_BYTES, Recorder
from loaderscope.probe.worker import CODE_END, CODE_START, Ring, RingReader


class Frames:
    takes_frames = True

    def __init__(self) -> None:
        self.frames: list[tuple[bytes, int]] = []

    def frame(self, data: bytes, count: int) -> None:
        self.frames.append((data, count))


def test_a_big_flush_is_split_into_frames_under_the_cap_with_contiguous_seq() -> None:
    sink = Frames()
    recorder = Recorder(sink, run_id="r")
    index = list(range(256))  # a batch's sample indices: big rows
    for idx in range(20_000):
        recorder.pending.append((BATCH_ROW, 1.0, idx, 0.5, 0.6, 1024, 0, index))
    recorder.flush(rings=False)
    assert len(sink.frames) > 1 and all(len(data) <= SEND_FRAME_BYTES < MAX_FRAME_BYTES for data, _ in sink.frames)
    events: list[dict[str, Any]] = [e for data, _ in sink.frames for e in decode_frame(data)]
    assert [e["seq"] for e in events] == list(range(100_000))  # five events per batch row, none lost
    assert sum(count for _, count in sink.frames) == 100_000 == recorder.seq
    assert orjson.loads(sink.frames[0][0])["seq"] == 0


def test_run_end_is_the_last_event_whatever_a_worker_or_thread_adds_after_it() -> None:
    """What a worker's ring holds when the run ends comes before run_end; a record its worker writes
    after it (a fetch that finishes while the main process raises on a dead sibling: CI caught that
    fetch_end after run_end) and a note from another thread are left out."""
    sink = Frames()
    recorder = Recorder(sink, run_id="r")
    ring = Ring()  # a worker's shared ring, read in this process as the probe thread reads it
    recorder.readers[0] = RingReader(0, ring, dump_path="")
    ring.write(CODE_START, 5, 1.0, 21)
    recorder.end(reason="error", stats={})
    ring.write(CODE_END, 5, 1.5, 1024, 0)
    recorder.note("probe_error", where="a liveness check", type="OSError", message="late")
    recorder.flush()
    recorder.flush()
    events = [e for data, _ in sink.frames for e in decode_frame(data)]
    assert [e["kind"] for e in events] == ["fetch_start", "run_end"]
    assert [e["seq"] for e in events] == [0, 1]
