"""The recorder's frames: a big flush goes out as several frames the dashboard parses quickly."""

from __future__ import annotations

from typing import Any

import orjson

from loaderscope.events import BATCH_ROW, MAX_FRAME_BYTES, decode_frame
from loaderscope.probe.recorder import SEND_FRAME_BYTES, Recorder


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
