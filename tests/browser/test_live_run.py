"""The page in a real browser (Debian's chromium via Playwright) against the real dashboard.

A first-time user opens the page, starts ``out_of_order`` and watches a real DataLoader: one lane
per worker, cursors moving, results parked in the reorder buffer. Screenshots land in the test's
tmp dir; ``LOADERSCOPE_SCREENSHOT=path`` also copies the mid-run one there (docs/screenshot.png).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import WAIT_MS, Page, applied, rcvd, settle, start_from_form
from tests.conftest import wait_for

pytestmark = pytest.mark.browser


@pytest.mark.slow
def test_watch_out_of_order(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    pg.goto(server.page_url)  # the token becomes an HttpOnly cookie; the page's calls just work
    assert "token=" not in pg.url
    run_id = start_from_form(pg, "out_of_order", dataset_size=200, sample_ms=40)
    pg.wait_for_function("() => Number(document.querySelector('[data-testid=cursor-rcvd]')?.textContent) > 10",
                         timeout=60_000)
    lanes = pg.locator('[data-testid="worker-lane"]')
    assert lanes.count() == 4  # out_of_order's default num_workers
    assert [lanes.nth(i).get_attribute("data-worker") for i in range(4)] == ["0", "1", "2", "3"]
    send = int(pg.text_content('[data-testid="cursor-send"]') or -1)
    assert send >= rcvd(pg) > 10
    # pause while results sit in the reorder buffer: the picture freezes where a person can read it
    pg.wait_for_function("() => Number(document.querySelector('[data-testid=reorder-buffer]').dataset.size) > 0",
                         timeout=WAIT_MS, polling=5)
    pg.click("#btn-pause")
    pg.wait_for_function("() => document.querySelector('[data-testid=run-status]').textContent === 'paused'",
                         timeout=WAIT_MS)
    pg.evaluate("document.getElementById('params-box').open = false")  # folded: the diagnosis shows beside the picture
    settle(pg)  # workers finish what they hold, tokens land
    shot = tmp_path / "out_of_order.png"
    pg.screenshot(path=str(shot))
    if os.environ.get("LOADERSCOPE_SCREENSHOT"):
        shutil.copy(shot, os.environ["LOADERSCOPE_SCREENSHOT"])
    high = int(pg.get_attribute('[data-testid="reorder-buffer"]', "data-high") or 0)
    assert high > 0, "out_of_order parks results in the reorder buffer"
    # step: exactly one more batch reaches the training loop, then it stays paused
    before = rcvd(pg)
    pg.click("#btn-step")
    pg.wait_for_function(f"() => Number(document.querySelector('[data-testid=cursor-rcvd]').textContent) > {before}",
                         timeout=WAIT_MS)
    settle(pg)  # the freed slot is refilled and fetched: a consumer that did not stop would have gone on
    assert rcvd(pg) == before + 1
    # speed: the delay per batch reaches the run
    pg.select_option("#speed", "0.2")
    wait_for(lambda: server.run(run_id)["delay"] == 0.2, timeout=10, what="the speed control to reach the run")
    pg.select_option("#speed", "0")
    pg.click("#btn-resume")
    # the run ends; the page shows it, with everything the server has
    final = server.wait_status(run_id, timeout=90)
    pg.wait_for_function("() => document.querySelector('[data-testid=run-status]').textContent"
                         f" === {final['status']!r}",
                         timeout=WAIT_MS)
    applied(pg, final)
    assert rcvd(pg) == final["batches"] == 50
    state = pg.evaluate("({events: window.loaderscope.eventCount, violations: window.loaderscope.state.violations,"
                        " high: window.loaderscope.state.parked_high})")
    assert state["events"] == final["events"]
    assert state["violations"] == []
    assert state["high"] == final["statistics"]["parked_high"]
    assert pg.locator("#diagnosis li").count() >= 1
    settle(pg)  # released tokens finish their flight to the consumer
    pg.screenshot(path=str(tmp_path / "out_of_order_done.png"))


def test_reload_and_dropped_socket_lose_nothing(server: Any, page: Page) -> None:
    page.expected_status.add(429)  # the ended run's advice, asked while a sweep holds the slot: asked again
    pg = page.page
    run = server.start_run("out_of_order", num_workers=2, dataset_size=160, sample_ms=5)
    pg.goto(f"{server.page_url}&run={run['id']}")
    pg.wait_for_function("() => Number(document.querySelector('[data-testid=cursor-rcvd]')?.textContent) > 3",
                         timeout=60_000)
    assert pg.locator('[data-testid="worker-lane"]').count() == 2
    pg.reload()  # the page starts over from seq 0 and catches up
    pg.wait_for_function("() => window.loaderscope.eventCount > 0", timeout=WAIT_MS)
    # drop the websocket under the page; it must reconnect with after=lastSeq
    pg.evaluate("window.loaderscope.stream.socket && window.loaderscope.stream.socket.close()")
    final = server.wait_status(run["id"], timeout=90)
    applied(pg, final)
    got = pg.evaluate("({events: window.loaderscope.eventCount, dups: window.loaderscope.stream.duplicates,"
                      " batches: window.loaderscope.state.batches, violations: window.loaderscope.state.violations})")
    assert got["events"] == final["events"], "every event applied exactly once"
    assert got["batches"] == final["batches"]
    assert got["violations"] == []


def test_bad_parameter_is_shown_next_to_its_field(server: Any, page: Page) -> None:
    pg = page.page
    page.expected_status.add(422)
    pg.goto(server.page_url)
    pg.wait_for_selector('#scenario option[value="uniform"]', state="attached", timeout=WAIT_MS)
    pg.select_option("#scenario", "uniform")
    pg.click("#params-box summary")
    # the form knows the bounds, so bypass its own check to see the server's 422 placed by field
    pg.evaluate("document.getElementById('param-num_workers').removeAttribute('max')")
    pg.evaluate("window.__read = window.loaderscope.form.read; window.loaderscope.form.read = () => {"
                " const r = window.__read(); r.errors = {}; r.values.num_workers = 99; return r; }")
    pg.click("#btn-start")
    error = pg.locator('[data-field="num_workers"] .field-error')
    error.wait_for(state="visible", timeout=WAIT_MS)
    assert "num_workers" in (error.text_content() or "") or "64" in (error.text_content() or "")
    assert "run=" not in pg.url
    # the form's own check names the field too, without a round trip
    pg.evaluate("window.loaderscope.form.read = window.__read")
    pg.fill("#param-batch_size", "0")
    pg.click("#btn-start")
    assert "at least 1" in (pg.locator('[data-field="batch_size"] .field-error').text_content() or "")


def test_main_process_lane_and_timeline_hover(server: Any, page: Page) -> None:
    """num_workers=0: one lane, labelled as the main process; the timeline names a span under the mouse."""
    pg = page.page
    run = server.start_run("uniform", num_workers=0, dataset_size=48, sample_ms=5)
    final = server.wait_status(run["id"], timeout=60)
    pg.goto(f"{server.page_url}&run={run['id']}")
    applied(pg, final)
    lanes = pg.locator('[data-testid="worker-lane"]')
    assert lanes.count() == 1
    assert "main process" in (lanes.first.text_content() or "")
    assert rcvd(pg) == final["batches"] == 12
    # hover the middle of the first timeline row: a fetch span (or the gap between two) is named
    box = pg.locator("#timeline .timeline-canvas").bounding_box()
    assert box is not None
    pg.mouse.move(box["x"] + 112 + (box["width"] - 112) * 0.5, box["y"] + 20 + 11)
    tip = pg.locator("#timeline .tooltip")
    tip.wait_for(state="visible", timeout=WAIT_MS)
    assert "main process" in (tip.text_content() or "")
    # a click on a span opens its batch in the inspector (or says the probe did not describe it)
    pg.mouse.click(box["x"] + 112 + (box["width"] - 112) * 0.5, box["y"] + 22 + 11)
    pg.locator("#inspector-card").wait_for(state="visible", timeout=WAIT_MS)
    assert "not among" in (pg.text_content("#inspector-note") or "") or pg.locator("#inspector .tree").count() == 1
    # wheel zooms in: the view narrows and stops following the run
    before = pg.evaluate("() => window.loaderscope.timeline.view.t1 - window.loaderscope.timeline.view.t0")
    box = pg.locator("#timeline .timeline-canvas").bounding_box()  # the opened inspector may move the page
    assert box is not None
    pg.mouse.move(box["x"] + 112 + (box["width"] - 112) * 0.5, box["y"] + 20 + 11)
    pg.mouse.wheel(0, -400)
    pg.wait_for_function(f"() => window.loaderscope.timeline.view.t1 - window.loaderscope.timeline.view.t0 < {before}",
                         timeout=WAIT_MS)
    assert pg.evaluate("() => window.loaderscope.timeline.follow") is False
