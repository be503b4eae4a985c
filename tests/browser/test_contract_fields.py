"""A field the contract declares for a frequent kind reaches the page's event log, from the server's
stream and from a trace file: the simulator's `fetch_end.stop` (an iterable shard that ran out), kept
in the event table's columns (contract/columns.py gives it `bool`), beside its `dt`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderscope.traces import jsonl as trace
from tests.browser.pages import WAIT_MS, Page, applied

pytestmark = pytest.mark.browser

# Uneven shards: the first workers run out before the last, and their last fetches end with stop.
PARAMS = {"num_workers": 3, "dataset_size": 60, "batch_size": 4}
LAST_LINE = "() => document.querySelector('#event-log').textContent.split('\\n').at(-1)"


def _events(server: Any, run_id: str) -> list[dict[str, Any]]:
    with server.client() as http:
        body = http.get(f"/api/runs/{run_id}/events", params={"after": -1, "limit": 10_000}).json()
    assert not body["more"]
    events: list[dict[str, Any]] = body["events"]
    return events


def _shown(value: float) -> str:
    """A number as the event log writes it (panels.js eventLine): four decimals unless an integer."""
    return str(int(value)) if float(value).is_integer() else f"{value:.4f}"


def _shows_the_stop(pg: Any, events: list[dict[str, Any]]) -> None:
    """The event log, at the first fetch_end that carries `stop`, lists it with its own dt; its row is packed."""
    row = next(i for i, e in enumerate(events) if e["kind"] == "fetch_end" and e.get("stop"))
    pg.fill("#pb-scrub", str(row + 1))  # the playhead just after it: the log's last line
    event = events[row]
    pg.wait_for_function(f"() => ({LAST_LINE})().startsWith('#{event['seq']} ')", timeout=WAIT_MS)
    line = pg.evaluate(LAST_LINE)
    assert " fetch_end " in line and " stop=true" in line, line
    for name in ("dt", "nbytes"):  # its own, not another field's value written over them
        assert f" {name}={_shown(event[name])}" in line, line
    assert pg.evaluate(f"() => window.loaderscope.player.table.isObject({row})") is False, "kept in the columns"


def test_a_declared_field_of_fetch_end_shows_in_the_event_log_of_a_served_run(server: Any, page: Page) -> None:
    run = server.start_run("iterable_shards", mode="sim", **PARAMS)
    ended = server.wait_status(run["id"])
    events = _events(server, run["id"])
    pg = page.page
    pg.goto(f"{server.page_url}&run={run['id']}")
    applied(pg, ended)
    _shows_the_stop(pg, events)


def test_a_declared_field_of_fetch_end_shows_in_the_event_log_of_a_trace_file(server: Any, page: Page,
                                                                              tmp_path: Path) -> None:
    """A trace file's lines go straight into the columns (table-lines.js's pushLine), where a field without its
    own place was written over `dt`."""
    run = server.start_run("iterable_shards", mode="sim", **PARAMS)
    server.wait_status(run["id"])
    events = _events(server, run["id"])
    path = trace.write_trace(tmp_path / "shards.trace.jsonl", events, run=run["id"], scenario="iterable_shards",
                             mode="sim")
    pg = page.page
    pg.goto(server.page_url)
    pg.set_input_files("#file-input", str(path))
    pg.wait_for_function("() => window.loaderscope.perf.load", timeout=WAIT_MS)
    assert pg.evaluate("() => window.loaderscope.player.length") == len(events)
    _shows_the_stop(pg, events)
