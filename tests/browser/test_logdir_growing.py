"""The page on a logdir trace that another node is still writing: the batch count rises as the file grows.

Debian's chromium via Playwright (tests/browser/test_live_run.py's fixture). The screenshot (mid-growth) lands in
the test's tmp dir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderscope.traces.jsonl import TraceWriter
from tests.browser.pages import VIEWPORT, WAIT_MS
from tests.conftest import wait_for
from tests.logdirs import real_run

pytestmark = pytest.mark.browser

BATCHES = 60
STEP = 5  # batches per flush


def batches_shown(page: Any) -> int:
    text = page.text_content('[data-counter="batches"] .v') or ""
    return int(text) if text.strip().isdigit() else -1


@pytest.mark.slow
def test_the_page_animates_a_trace_file_as_it_grows(browser: Any, start_server: Any, tmp_path: Path) -> None:
    events = real_run(4 * BATCHES, num_workers=2)
    first_yields = [i for i, e in enumerate(events) if e["kind"] == "yield"]
    head, rest = events[: first_yields[9] + 1], events[first_yields[9] + 1:]  # 10 batches written so far
    path = tmp_path / "logs" / "node2" / "DataLoader-rank0-pid77-x.trace.jsonl"
    writer = TraceWriter(path, "producer-run", mode="real")
    writer.write(head)
    writer.flush()
    server = start_server(logdir=str(tmp_path / "logs"), logdir_poll=0.1)
    with server.client() as http:
        run = next(r for r in http.get("/api/runs").json()
                   if r.get("path") == "node2/DataLoader-rank0-pid77-x.trace.jsonl")
    assert run["status"] == "running"

    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{server.page_url}&run={run['id']}")
        wait_for(lambda: batches_shown(page) == 10, timeout=30, what="the 10 batches already on disk")
        seen = [batches_shown(page)]
        # The job goes on, a few batches per flush as the probe's sink writes; each step is awaited on
        # the page before the next is written, so every one is seen however busy the machine.
        yields = [i for i, e in enumerate(rest) if e["kind"] == "yield"]
        cuts = [i + 1 for i in yields[STEP - 1::STEP]]
        cuts[-1] = len(rest)  # run_end and whatever follows the last batch go with it
        for start, cut in zip([0, *cuts], cuts, strict=False):
            writer.write(rest[start:cut])
            writer.flush()
            expected = seen[-1] + STEP
            seen.append(wait_for(lambda n=expected: batches_shown(page) == n and n, timeout=30,
                                 what=f"{expected} batches shown after {seen}"))
            if len(seen) == 3:
                page.screenshot(path=str(tmp_path / "logdir_growing.png"))
        writer.close()
        wait_for(lambda: page.text_content("#run-status") == "done", timeout=30, what="run_end shown as done")
        page.screenshot(path=str(tmp_path / "logdir_done.png"))
    finally:
        context.close()
    assert seen == list(range(10, BATCHES + 1, STEP)), \
        f"the count should rise step by step as the file grows, saw {seen}"
    assert not errors, errors


def test_a_recorded_runs_timeline_starts_at_its_loaders_first_event(browser: Any, start_server: Any,
                                                                     tmp_path: Path) -> None:
    """The probe's clock starts when the loader is built; a Trainer's first iter() comes seconds later.
    The timeline shows the loader's events, not 8.7 s of nothing before them."""
    events = real_run(48, num_workers=2)
    for event in events:
        event["t"] += 8.7
    # the earliest event after run_start (a memory sample, taken as the first iter() starts, is drawn in its
    # lanes; a worker's events are written at the flush after their time, so the file is not in time order)
    first = min(e["t"] for e in events[1:])
    path = tmp_path / "logs" / "DataLoader-rank0-pid9-late.trace.jsonl"
    writer = TraceWriter(path, "late", mode="real")
    writer.write(events)
    writer.close()
    server = start_server(logdir=str(tmp_path / "logs"), logdir_poll=0.1)
    with server.client() as http:
        run = http.get("/api/runs").json()[0]
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{server.page_url}&run={run['id']}")
    wait_for(lambda: page.text_content("#run-status") == "done", timeout=30, what="the run read to its end")
    page.wait_for_function(f"() => window.loaderscope.timeline.view.t0 === {first!r}", timeout=WAIT_MS)
    span = page.evaluate("() => window.loaderscope.timeline.view.t1 - window.loaderscope.timeline.view.t0")
    assert span < 1.1 * (events[-1]["t"] - first) + 0.05, "the view is the loader's run, not the 8.7 s before it"
    page.screenshot(path=str(tmp_path / "timeline_late_start.png"))
    page.close()
