"""A remote logdir (fsspec) is read within the same byte budgets as a local one.

The store is real: an HTTP server on 127.0.0.1 that answers ranged GETs, read by fsspec's own
``http`` filesystem (aiohttp), whose files are ``AbstractBufferedFile``s like s3fs's, gcsfs's and
adlfs's. Their ``readline`` takes no limit: it reads to the next newline, however far.
"""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from loaderscope.server.logdir.index import MAX_INDEX_BYTES, quick_index
from loaderscope.server.logdir.storage import FsspecStorage, storage_for
from loaderscope.server.logdir.tracefile import TraceFile
from loaderscope.traces.jsonl import MAX_LINE_BYTES

pytest.importorskip("aiohttp")
HEADER = orjson.dumps({"format": "loaderscope-trace", "version": 1, "run": "r"}) + b"\n"


class Blank:
    """``size`` bytes: a header, then newlines; made as they are asked for (a 5 GiB object costs nothing)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, span: slice) -> bytes:
        start, stop = span.start, min(span.stop, self.size)
        head = HEADER[start:stop]
        return head + b"\n" * (stop - max(start, len(HEADER)))


class Store(http.server.ThreadingHTTPServer):
    """Objects by path, answered whole or by range; counts the bytes it sends."""

    daemon_threads = True

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.sent = 0
        super().__init__(("127.0.0.1", 0), Ranges)


class Ranges(http.server.BaseHTTPRequestHandler):
    server: Store

    def log_message(self, *args: Any) -> None:
        """Quiet."""

    def do_HEAD(self) -> None:
        self.answer(body=False)

    def do_GET(self) -> None:
        self.answer(body=True)

    def answer(self, body: bool) -> None:
        data = self.server.objects.get(self.path)
        if data is None:
            self.send_error(404)
            return
        start, stop = 0, len(data)
        asked = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if asked:
            start, stop = int(asked[1]), min(len(data), int(asked[2]) + 1 if asked[2] else len(data))
        self.send_response(206 if asked else 200)
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        if asked:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.end_headers()
        if body:
            self.server.sent += stop - start
            self.wfile.write(data[start:stop])


@pytest.fixture
def store() -> Iterator[tuple[Store, FsspecStorage]]:
    server = Store()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    storage = storage_for(f"http://127.0.0.1:{server.server_address[1]}/logs")
    assert isinstance(storage, FsspecStorage)
    yield server, storage
    server.shutdown()
    thread.join()
    server.server_close()  # its listening socket: shutdown() only ends the loop


def test_a_header_line_without_end_is_refused_after_a_megabyte_not_read_whole(store: Any) -> None:
    server, storage = store
    server.objects["/logs/long.trace.jsonl"] = b"{" + b"x" * (64 << 20)
    index = quick_index(storage, f"{storage.root}/long.trace.jsonl")
    assert index.problem is not None and "no header line" in index.problem
    assert server.sent < 4 * (MAX_LINE_BYTES + 1)


def test_a_remote_object_past_the_index_budget_is_refused_without_reading_it(store: Any) -> None:
    server, storage = store
    server.objects["/logs/huge.trace.jsonl"] = Blank(MAX_INDEX_BYTES + 1)
    index = quick_index(storage, f"{storage.root}/huge.trace.jsonl")
    assert index.problem is not None and "split the run" in index.problem
    assert server.sent < 4 * (MAX_LINE_BYTES + 1)


def test_a_remote_trace_is_indexed_and_tailed_line_by_line(store: Any) -> None:
    server, storage = store
    events = [{"kind": "epoch_start", "t": 0.0, "epoch": 0, "seq": 0, "run": "r"}]
    events += [{"kind": "yield", "t": n * 1e-3, "idx": n, "wait": 0.0, "seq": n + 1, "run": "r"} for n in range(50)]
    lines = [HEADER] + [orjson.dumps(e) + b"\n" for e in events]
    long_line = b'{"kind": "' + b"x" * (2 * MAX_LINE_BYTES) + b'"}\n'  # skipped, a megabyte at a time
    server.objects["/logs/r.trace.jsonl"] = b"".join(lines[:20]) + long_line + b"".join(lines[20:]) + b'{"torn'
    path = f"{storage.root}/r.trace.jsonl"
    index = quick_index(storage, path)
    assert (index.events, index.batches, index.torn, index.problem) == (52, 50, True, None)
    tail = TraceFile(storage, path, "log-r")
    read = tail.poll(1 << 30)
    assert len(read) == 51 and tail.problem_count == 1 and "longer than" in tail.problems[0] and tail.torn == 6
    assert [orjson.loads(line)["idx"] for line in tail.read(30, 3)] == [29, 30, 31]
