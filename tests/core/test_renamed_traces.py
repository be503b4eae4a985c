"""Traces written before the reorder event was renamed (kind ``buffer``, yield's ``from_buffer``: now
``parked`` and ``from_parked``, contract/events.py's RENAMED_KINDS and RENAMED_FIELDS) read as if
written today, in JSON lines and in Parquet.

The old traces are real recordings checked in before the rename (frontend/tests/fixtures, written
by loaderscope 0.1.0's probe and traces/parquet.py); today's are the same lines with the new names.
"""

from __future__ import annotations

from pathlib import Path

from loaderscope.events import decode_frame
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.traces.jsonl import read_trace
from loaderscope.traces.parquet import read_parquet_trace

FIXTURES = Path(__file__).resolve().parents[2] / "frontend" / "tests" / "fixtures"


def today(old: Path, new: Path) -> Path:
    """``old``'s lines with today's names, at ``new``."""
    text = old.read_text()
    assert '"kind":"buffer"' in text and '"from_buffer":' in text, f"{old.name} was written before the rename"
    new.write_text(text.replace('"kind":"buffer"', '"kind":"parked"').replace('"from_buffer":', '"from_parked":'))
    return new


def test_an_old_json_lines_trace_reads_as_the_same_trace_with_todays_names(tmp_path: Path) -> None:
    old = FIXTURES / "gpu_step_h100.jsonl"
    _, events = read_trace(old)
    _, expected = read_trace(today(old, tmp_path / old.name))
    assert events == expected
    state = reduce(events)
    assert state.parked_high > 0 and state.out_of_order == sum(e["kind"] == "parked" for e in events) > 0
    assert any(e["kind"] == "yield" and e.get("from_parked") for e in events)
    assert summary(state) == summary(reduce(expected))


def test_an_old_parquet_trace_reads_as_the_json_lines_of_today(tmp_path: Path) -> None:
    _, events, truncated = read_parquet_trace(FIXTURES / "gpu_step_h100.trace.parquet")  # its column: from_buffer
    _, expected = read_trace(today(FIXTURES / "gpu_step_h100.jsonl", tmp_path / "today.jsonl"))
    assert not truncated and events == expected
    state = reduce(events)
    assert state.parked_high > 0 and summary(state) == summary(reduce(expected))


def test_an_older_probes_compact_rows_and_events_are_renamed() -> None:
    """What an older probe sends: rows ``[kind, t, values...]`` by position, and whole events."""
    rows = b'{"rows": [["buffer", 1.5, 3, 1, 2], ["yield", 1.6, 3, 0.0, true]], "t0": 1.0, "seq": 7}'
    parked, released = decode_frame(rows)
    assert (parked["kind"], parked["seq"], parked["waiting_for"]) == ("parked", 7, 2)
    assert released["from_parked"] is True and "from_buffer" not in released
    whole = decode_frame(b'[{"kind": "buffer", "t": 0.5, "idx": 1, "worker": 0, "waiting_for": 0},'
                         b' {"kind": "yield", "t": 0.6, "idx": 1, "wait": 0.0, "from_buffer": true}]')
    assert [e["kind"] for e in whole] == ["parked", "yield"] and whole[1] == {
        "kind": "yield", "t": 0.6, "idx": 1, "wait": 0.0, "from_parked": True}
