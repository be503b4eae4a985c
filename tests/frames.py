"""Frames: a probe sink that keeps the compact frames the Recorder sends, for the tests that compare the
server's and the reducer's fast paths with the event-at-a-time reference."""

from __future__ import annotations


class Frames:
    """A probe sink that keeps the compact frames the Recorder sends to a transport."""

    takes_frames = True

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def frame(self, data: bytes, count: int) -> None:
        self.frames.append(data)
