"""The server's pure parts, without a server: the run store, its trace spill, the security policy,
readable validation errors and log redaction."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel, Field, ValidationError

from loaderscope.server.config import ServerConfig
from loaderscope.server.runs.spill import INDEX_EVERY, TraceSpill
from loaderscope.server.runs.store import EventLog, Gap
from loaderscope.server.security.guard import Policy, checked_token, host_name, needs_token, without_token
from loaderscope.server.security.logs import RedactToken, redact
from loaderscope.server.web.errors import field_problems, readable
from loaderscope.traces.jsonl import header, read_trace


def events(n: int, start_t: float = 0.0) -> list[dict]:
    return [{"kind": "dispatch", "t": start_t + i, "idx": i, "worker": i % 3, "seq": 1000 + i, "run": "x"}
            for i in range(n)]


def seqs(lines: list[bytes]) -> list[int]:
    return [orjson.loads(line)["seq"] for line in lines]


# --- store ---------------------------------------------------------------------------------------


def test_store_numbers_events_from_zero_whatever_the_producer_said() -> None:
    log = EventLog("r1", memory_events=100)
    log.append(events(3))
    log.append(events(2))
    lines, gap = log.read(0, 100)
    assert gap is None
    assert seqs(lines) == [0, 1, 2, 3, 4]
    assert {orjson.loads(line)["run"] for line in lines} == {"r1"}
    assert log.state.seq == 4


def test_store_memory_is_bounded_and_spill_answers_for_the_rest(tmp_path: Path) -> None:
    spill = TraceSpill(tmp_path / "r.trace.jsonl", {"run": "r"})
    log = EventLog("r", memory_events=50, spill=spill)
    for _ in range(10):
        log.append(events(INDEX_EVERY // 2 + 7))
    total = 10 * (INDEX_EVERY // 2 + 7)
    assert len(log.read_memory(log.next_seq - 50, 1000)) == 50
    assert not log.in_memory(0)
    log.flush()
    for start in (0, 1, INDEX_EVERY - 1, INDEX_EVERY, INDEX_EVERY + 3, total - 60):
        lines, gap = log.read(start, 40)
        assert gap is None
        assert seqs(lines) == list(range(start, start + 40))
    assert seqs(log.read(total - 5, 40)[0]) == list(range(total - 5, total))
    log.close()


def test_the_spill_is_a_trace_file_the_reader_accepts(tmp_path: Path) -> None:
    path = tmp_path / "r.trace.jsonl"
    log = EventLog("r", memory_events=10, spill=TraceSpill(path, header("r", scenario="s")))
    log.append(events(30))
    log.close()
    head, read = read_trace(path)
    assert head["run"] == "r" and head["format"] == "loaderscope-trace"
    assert [e["seq"] for e in read] == list(range(30))


def test_without_a_spill_evicted_events_are_a_gap_not_a_silent_skip() -> None:
    log = EventLog("r", memory_events=10)
    log.append(events(25))
    lines, gap = log.read(0, 100)
    assert gap == Gap(0, 14)
    assert seqs(lines) == list(range(15, 25))
    assert log.first_held == 15


def test_a_failing_disk_turns_the_run_memory_only_with_the_reason(tmp_path: Path) -> None:
    spill = TraceSpill(tmp_path / "r.trace.jsonl", {"run": "r"})
    log = EventLog("r", memory_events=5, spill=spill)
    log.append(events(3))

    def broken(_: list[bytes]) -> None:
        raise OSError(28, "No space left on device")

    spill.write_many = broken  # type: ignore[method-assign]
    log.append(events(10))
    assert log.spill is None and "No space left" in (log.spill_error or "")
    assert log.next_seq == 13
    assert log.read(0, 100)[1] == Gap(0, 7)


def test_a_reducer_failure_keeps_the_event_and_says_so() -> None:
    log = EventLog("r", memory_events=10)
    log.append([{"kind": "run_start", "t": 0, "mode": "real", "config": 5}])  # config must be a dict
    assert log.next_seq == 1
    assert log.state_problem_count == 1 and "run_start" in log.state_problems[0]


# --- security policy -------------------------------------------------------------------------------

TOKEN = "t" * 24


def scope(path: str = "/api/runs", query: str = "", **headers: str) -> dict:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in {"host": "127.0.0.1:8000", **headers}.items()]
    return {"type": "http", "path": path, "query_string": query.encode(), "headers": raw, "method": "GET"}


def policy(**options: object) -> Policy:
    return Policy(ServerConfig(token=TOKEN, port=8000, **options))  # type: ignore[arg-type]


def test_token_is_required_on_api_and_websockets_but_not_health_or_page() -> None:
    assert needs_token("/api/runs") and needs_token("/ws/ingest") and needs_token("/api/openapi.json")
    assert not needs_token("/api/health") and not needs_token("/") and not needs_token("/js/app.js")
    p = policy()
    assert p.check(scope()).status == 401  # type: ignore[union-attr]
    assert p.check(scope(authorization="Bearer wrong")).status == 401  # type: ignore[union-attr]
    assert p.check(scope(authorization=f"Bearer {TOKEN}")) is None
    assert p.check(scope(query=f"token={TOKEN}")) is None
    assert p.check(scope(cookie=f"other=1; loaderscope_token_8000={TOKEN}")) is None
    assert p.check(scope(cookie=f"loaderscope_token_9999={TOKEN}")).status == 401  # type: ignore[union-attr]
    assert p.check(scope("/api/health")) is None


def test_host_must_be_a_loopback_name_unless_serving_remotely() -> None:
    p = policy()
    for good in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "localhost"):
        assert p.check_host(good) is None, good
    rejected = p.check_host("evil.example:8000")
    assert rejected is not None and rejected.status == 403 and "evil.example" in rejected.message
    assert p.check_host(None).status == 400  # type: ignore[union-attr]
    assert policy(host="0.0.0.0").check_host("evil.example") is None
    assert policy(allowed_hosts=("box.lan",)).check_host("box.lan:8000") is None


def test_origin_must_be_our_own_or_allowed() -> None:
    p = policy(allow_origins=("http://localhost:5173",))
    assert p.check_origin(None, "127.0.0.1:8000") is None
    assert p.check_origin("http://127.0.0.1:8000", "127.0.0.1:8000") is None
    assert p.check_origin("http://localhost:5173", "127.0.0.1:8000") is None
    for bad in ("http://evil.example", "http://127.0.0.1:9999", "null"):
        assert p.check_origin(bad, "127.0.0.1:8000").status == 403, bad  # type: ignore[union-attr]


def test_helpers_strip_ports_and_tokens() -> None:
    assert host_name("[::1]:8000") == "::1" and host_name("LOCALHOST:1") == "localhost"
    assert without_token(scope("/", f"token={TOKEN}&run=abc")) == "/?run=abc"
    assert without_token(scope("/", f"token={TOKEN}")) == "/"
    assert checked_token("a" * 16) == "a" * 16
    for bad in ("short", "has space in it......", "semi;colon;cookie;breaker"):
        with pytest.raises(ValueError, match="16 to 256"):
            checked_token(bad)


def test_the_token_is_redacted_from_log_records() -> None:
    assert redact('GET /api/runs?token=abc&x=1 HTTP/1.1') == "GET /api/runs?token=[redacted]&x=1 HTTP/1.1"
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s"', ("1.2.3.4", "GET",
                               f"/ws/ingest?token={TOKEN}"), None)
    RedactToken().filter(record)
    assert TOKEN not in record.getMessage()


# --- readable errors -------------------------------------------------------------------------------


class Params(BaseModel, extra="forbid"):
    num_workers: int = Field(4, ge=0, le=32)
    mode: bool = False


def test_validation_errors_name_the_field_and_the_allowed_range() -> None:
    with pytest.raises(ValidationError) as caught:
        Params.model_validate({"num_workers": 99, "bogus": 1})
    problems = field_problems(caught.value.errors(), Params, prefix="params.")
    text = readable(problems)
    assert "params.num_workers" in text and "from 0 to 32" in text and "99" in text
    assert "unknown parameter 'bogus'" in text and "num_workers" in text


def test_the_spill_file_is_created_with_the_first_event_and_resumed_where_its_lines_end(tmp_path: Path) -> None:
    path = tmp_path / "r.trace.jsonl"
    spill = TraceSpill(path, {"run": "r"})
    spill.flush()
    assert not path.exists()  # a producer that sends nothing leaves no file
    with spill.open() as held:
        assert held.read() == b'{"run":"r"}\n' and spill.flushed_bytes == len(b'{"run":"r"}\n')
    spill.close()
    assert not path.exists()
    log = EventLog("r", memory_events=10, spill=TraceSpill(path, {"run": "r"}))
    log.append(events(INDEX_EVERY + 10))
    log.close()
    end = path.stat().st_size
    with path.open("ab") as f:
        f.write(b'{"kind": "yie')  # the dashboard died mid-line
    offsets = [_offset_of(path, 0), _offset_of(path, INDEX_EVERY)]  # as TraceFile found them reading it back
    resumed = TraceSpill.resume(path, count=INDEX_EVERY + 10, offsets=offsets, end=end)
    log.spill = resumed
    log.append(events(5))
    log.flush()
    assert seqs(resumed.read(INDEX_EVERY, 20)) == list(range(INDEX_EVERY, INDEX_EVERY + 15))
    assert path.read_bytes().count(b"\n") == 1 + INDEX_EVERY + 15 and b'"kind": "yie' not in path.read_bytes()
    log.close()


def _offset_of(path: Path, seq: int) -> int:
    """Byte offset of event ``seq``'s line (line ``seq + 1``: the header is first)."""
    return sum(len(line) for line in path.read_bytes().splitlines(keepends=True)[:seq + 1])
