"""Event frames and trace files are parsed as data and refuse bad input with a clear message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from loaderscope.events import (
    ROW_FIELDS,
    EventError,
    decode_frame,
    decode_message,
    encode_frame,
    event_count,
    expand,
    to_json,
    validate,
)
from loaderscope.traces.jsonl import TraceError, read_trace, to_chrome, write_trace
from tests.core.worked_example import EXAMPLE

GOOD = {"seq": 0, "t": 0.5, "run": "r", "rank": 0, "kind": "dispatch", "idx": 3, "worker": 1, "indices": [6, 7]}


def test_frames_round_trip() -> None:
    assert decode_frame(encode_frame([GOOD, GOOD | {"seq": 1}])) == [GOOD, GOOD | {"seq": 1}]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"42", "JSON array"),
        (b'[{"t": 1}]', "'kind'"),
        (json.dumps([{**GOOD, "idx": "3"}]).encode(), "'idx' must be an integer"),
        (json.dumps([{"t": 0, "kind": "dispatch", "idx": 1}]).encode(), "missing its 'worker'"),
        (b"[" + b"1," * 10 + b"1]", "must be a JSON object"),
    ],
)
def test_bad_frames_name_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(EventError, match=message):
        decode_frame(data)


def test_an_in_process_batch_row_expands_to_its_five_events_in_order() -> None:
    rows = [["epoch_start", 10.0, {"epoch": 0}],
            ["batch", 10.5, 0, 10.1, 10.2, 16, 0, [7]],
            ["batch", 11.0, 1, 10.6, 10.7, 16, 0, [3, 4]]]
    frame = {"run": "r", "rank": 0, "seq": 40, "t0": 10.0, "rows": rows}
    events = decode_frame(to_json(frame))
    assert event_count(rows) == len(events) == 11
    assert [e["seq"] for e in events] == list(range(40, 51))
    assert [e["kind"] for e in events[1:6]] == ["dispatch", "fetch_start", "fetch_end", "arrive", "yield"]
    dispatch, start, end, arrive, released = events[6:]
    assert dispatch["indices"] == [3, 4] and dispatch["n"] == start["n"] == 2 and dispatch["worker"] == 0
    assert start["t"] == pytest.approx(0.7) and end["t"] == arrive["t"] == released["t"] == pytest.approx(1.0)
    assert end["dt"] == pytest.approx(0.3) and released["wait"] == pytest.approx(0.4)
    assert released["from_parked"] is False and end["nbytes"] == 16


def test_a_short_batch_row_is_refused_by_position() -> None:
    with pytest.raises(EventError, match="row 1"):
        expand({"seq": 0, "t0": 0.0, "rows": [["epoch_start", 1.0, {"epoch": 0}], ["batch", 1.0, 0]]})


# Values at and past every limit validate() draws, for the row checks to be compared against it.
EDGES = [0, 1, -1, 4095, 4096, 2**53, 2**53 + 1, -(2**53) - 1, 0.5, 1e300, float("inf"), float("nan"), True, None,
         "3", [1], {"a": 1}]


def outcome(check: Any, *args: Any) -> str:
    """What a check gives (on ``args``): the events (repr), or the start of its error (where the frame adds its
    position)."""
    try:
        return repr(check(*args))
    except EventError as exc:
        return str(exc).split(" (", 1)[0]


def assert_validated_as_its_events(frame: dict[str, Any]) -> None:
    """Decoding a compact frame (the decoder's one pass, or the full check) gives what validating each
    expanded event gives: the same events, or the same error."""
    sent = orjson.loads(to_json(frame))  # what a producer's bytes hold (NaN as null)
    assert outcome(lambda: decode_frame(to_json(frame))) == outcome(lambda: [validate(e) for e in expand(sent)]), frame


@pytest.mark.parametrize("kind", ["dispatch", "fetch_start", "fetch_end", "arrive", "parked", "yield", "skip"])
def test_a_compact_row_is_valid_exactly_when_its_expanded_event_is(kind: str) -> None:
    names = ROW_FIELDS[kind]
    for position in range(len(names) + 1):  # the row's t, then each field in turn
        for edge in EDGES:
            values: list[Any] = [1.0, *([2] * len(names))]
            values[position] = edge
            assert_validated_as_its_events({"run": "r", "rank": 0, "seq": 5, "t0": 0.0, "rows": [[kind, *values]]})


def test_a_compact_frame_with_odd_common_fields_is_validated_as_its_events_are() -> None:
    for common in ({"run": 3}, {"run": 2**60}, {"rank": 2**60}, {"rank": True}, {"seq": 2**53 - 1}, {"seq": 2**53},
                   {"t0": -(2**53)}, {"t0": 2**52 + 1}):
        frame = {"run": "r", "rank": 0, "seq": 5, "t0": 0.0, "rows": [["arrive", 1.0, 0, 1]]}
        assert_validated_as_its_events(frame | common)


def test_rows_of_other_kinds_are_validated_as_their_events_are() -> None:
    for fields in ({"epoch": 0}, {"epoch": None}, {"epoch": 0, "note": [1]}, {"epoch": "0"}, {}):
        assert_validated_as_its_events({"seq": 0, "t0": 0.0, "rows": [["epoch_start", 1.0, fields]]})
    for structure in (_nested(10), _nested(70), None, 3):
        row = ["batch_info", 1.0, {"idx": 0, "worker": 0, "structure": structure}]
        assert_validated_as_its_events({"seq": 0, "t0": 0.0, "rows": [row]})


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_the_one_pass_decoder_accepts_exactly_what_the_full_check_accepts() -> None:
    from loaderscope.events import _explain

    for name in [*GOOD, "from_parked", "epoch", "elapsed", "note"]:
        for edge in [*EDGES, "", "dispatch", _nested(70)]:
            event = GOOD | {name: edge}
            data = to_json([event])  # NaN and infinities as a producer's orjson writes them: null
            sent = orjson.loads(data)
            assert outcome(decode_frame, data) == outcome(list, map(_explain, sent)), (name, edge)
            assert outcome(validate, dict(event)) == outcome(_explain, dict(event)), (name, edge)


def test_a_bad_event_is_named_by_its_place_in_the_frame() -> None:
    with pytest.raises(EventError, match=r"'worker' must not be null \(event 2 of the frame\)"):
        decode_frame(encode_frame([GOOD, GOOD, GOOD | {"worker": None}]))


DEEP_INFO = {"kind": "batch_info", "t": 1.0, "idx": 0, "worker": 0, "structure": _nested(70)}
ARRIVE_ROWS = [["arrive", 1.0 + i, i, 0] for i in range(5)]


@pytest.mark.parametrize("frame", [
    [GOOD] * 5 + [GOOD | {"worker": None}],  # refused by the one-pass decoder: the full check
    [GOOD] * 5 + [DEEP_INFO],  # passed by it: only the depth is left to check
    {"seq": 0, "t0": 0.0, "rows": [*ARRIVE_ROWS, ["arrive", 9.0, "x", 0]]},  # compact, the full check
    {"seq": 0, "t0": 0.0,
     "rows": [*ARRIVE_ROWS, ["batch_info", 9.0, {k: DEEP_INFO[k] for k in ("idx", "worker", "structure")}]]},
], ids=["events-checked", "events-decoded", "rows-checked", "rows-decoded"])
def test_the_events_before_a_bad_one_come_out_before_its_error(frame: Any) -> None:
    # slices of two events (two rows): the bad one is in the third, after one good event of its own
    decoded = decode_message(json.dumps(frame), slice_events=2 if isinstance(frame, list) else 10)
    assert not isinstance(decoded, dict)
    kept: list[Any] = []
    with pytest.raises(EventError):
        for part in decoded:
            kept += part
    assert len(kept) == 5 and [e["t"] for e in kept] == [e["t"] for e in decode_frame(json.dumps(
        frame[:5] if isinstance(frame, list) else frame | {"rows": ARRIVE_ROWS}))]


def test_oversized_frame_is_refused() -> None:
    with pytest.raises(EventError, match="exceeds"):
        decode_frame(b"[" + b" " * 100 + b"]", max_bytes=50)


def test_trace_round_trip_and_header(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "a.trace.jsonl", [GOOD], "r", scenario="x")
    head, events = read_trace(path)
    assert head["format"] == "loaderscope-trace" and head["version"] == 1 and head["scenario"] == "x"
    assert events == [GOOD]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"PK\x03\x04 a zip file\n", "not a loaderscope trace"),
        (b'{"format": "other"}\n', "not a loaderscope trace"),
        (b'{"format": "loaderscope-trace", "version": 99}\n', "version 99"),
        (b'{"format": "loaderscope-trace", "version": 1}\n{"t": 0, "kind": "yield", "idx": 1}\n', "line 2"),
        (b'{"format": "loaderscope-trace", "version": 1}\n{"t": 0, "kind"\n', "line 2: not valid JSON"),
    ],
)
def test_bad_traces_are_refused_clearly(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_trace(path)


def test_chrome_export_is_valid_trace_event_format() -> None:
    chrome = to_chrome(EXAMPLE)["traceEvents"]
    for event in chrome:
        assert {"ph", "ts", "pid", "tid"} <= event.keys()
        assert event["ts"] >= 0 and event.get("dur", 0) >= 0
    fetches = [e for e in chrome if e["ph"] == "X" and e["cat"] == "fetch"]
    waits = [e for e in chrome if e["ph"] == "X" and e["cat"] == "consumer"]
    flows = [e for e in chrome if e["ph"] in "sf"]
    assert len(fetches) == 2 and len(waits) == 2 and len(flows) == 5 + 2
    assert {e["tid"] for e in fetches} == {2, 3}


def test_a_trace_left_by_a_killed_writer_reads_up_to_its_torn_last_line(tmp_path: Path) -> None:
    """`loaderscope export`, `compare` and `sim --from-trace` read what a killed job left in a logdir."""
    events = [{"seq": i, "t": float(i), "run": "r", "rank": 0, "kind": "epoch_start", "epoch": i} for i in range(3)]
    path = write_trace(tmp_path / "killed.trace.jsonl", events, run="r")
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"seq": 3, "t": 3.0, "ki')  # the write the kill cut short
    assert [e["seq"] for e in read_trace(path)[1]] == [0, 1, 2]
    path.write_bytes(whole.rstrip(b"\n"))  # a complete last line without its newline is kept
    assert [e["seq"] for e in read_trace(path)[1]] == [0, 1, 2]
