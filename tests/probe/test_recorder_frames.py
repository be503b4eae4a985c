"""The recorder's frames: a big flush goes out as several frames the dashboard parses quickly; a run's
last event is its run_end."""

from __future__ import annotations

from typing import Any

import orjson

from loaderscope.events import BATCH_ROW, MAX_FRAME_BYTES, decode_frame
from loaderscope.probe.recorder import SEND_FRAME_BYTES, Recorder
from loaderscope.probe.worker import CAPACITY, CODE_END, CODE_START, Ring, RingReader


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


def test_ring_records_drained_at_a_flush_go_among_the_others_by_time() -> None:
    """The training thread no longer takes a worker's ring at each arrival: the probe thread drains the
    rings when it flushes and puts their records among the others by time, so a task's fetch_start
    follows its dispatch and its fetch_end precedes its arrival, however the records were appended."""
    sink = Frames()
    recorder = Recorder(sink, run_id="r")
    rings = [Ring(), Ring()]
    for worker, ring in enumerate(rings):
        recorder.readers[worker] = RingReader(worker, ring, dump_path="")
    append = recorder.pending.append
    append(("dispatch", 1.0, 0, 0, [7]))
    append(("dispatch", 1.1, 1, 1, [8]))
    rings[0].write(CODE_START, 0, 1.2, 1)
    rings[1].write(CODE_START, 1, 1.3, 1)
    rings[1].write(CODE_END, 1, 1.4, 16, 0)
    append(("arrive", 1.5, 1, 1))  # out of order: worker 1's task came first
    append(("parked", 1.5, 1, 1, 0))
    rings[0].write(CODE_END, 0, 1.6, 16, 0)
    append(("arrive", 1.7, 0, 0))
    recorder.flush()
    events = [e for data, _ in sink.frames for e in decode_frame(data)]
    assert [(e["kind"], e.get("idx")) for e in events] == [
        ("dispatch", 0), ("dispatch", 1), ("fetch_start", 0), ("fetch_start", 1), ("fetch_end", 1),
        ("arrive", 1), ("parked", 1), ("fetch_end", 0), ("arrive", 0)]
    assert [e["seq"] for e in events] == list(range(9))


def test_a_ring_that_overflowed_before_a_flush_is_said_with_what_was_lost() -> None:
    """A probe thread held off long enough for a worker to write more than its ring holds: the records
    overwritten are counted and said once (a probe_error naming the worker), never silently dropped."""
    sink = Frames()
    recorder = Recorder(sink, run_id="r")
    ring = Ring()
    recorder.readers[3] = RingReader(3, ring, dump_path="")
    for idx in range(CAPACITY // 2 + 5):  # a start and an end record each: 10 records past the capacity
        ring.write(CODE_START, idx, 1.0 + idx, 1)
        ring.write(CODE_END, idx, 1.5 + idx, 16, 0)
    recorder.flush()
    events = [e for data, _ in sink.frames for e in decode_frame(data)]
    errors = [e for e in events if e["kind"] == "probe_error"]
    assert len(errors) == 1 and "worker 3 wrote 10 fetch records more than its ring holds" in errors[0]["message"]
    fetches = [e for e in events if e["kind"].startswith("fetch_")]
    assert len(fetches) == CAPACITY and fetches[0]["idx"] == 5 and fetches[-1]["idx"] == CAPACITY // 2 + 4
