"""The first five minutes: a demo that teaches, a lost server said loudly, a page that
fits narrow windows, legible text, state per run, and findings that stay after the run ends.

Every wait is on a condition (the page's own state, or a number of animation frames), never on a
fixed sleep. Screenshots land in the test's tmp dir; ``LOADERSCOPE_SHOTS=dir`` copies them there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.browser.pages import WAIT_MS, Page, drawn
from tests.browser.views import CONTRAST, FRAMES, NO_SIDEWAYS, shoot, sim_events, write
from tests.conftest import wait_for

pytestmark = pytest.mark.browser


CLOCKS = """() => { const a = window.loaderscope;
  return { now: a.clock(performance.now()).now,
    elapsed: [...document.querySelectorAll('[data-testid=worker-lane]')].map((l) => l.dataset.elapsed ?? '') }; }"""


@pytest.mark.slow
def test_lost_server_is_said_loudly_and_freezes_the_view(start_server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    page.expected_status.add(404)  # the new server does not know the run: said so, by a 404
    first = start_server()
    run = first.start_run("uniform", num_workers=2, dataset_size=4000, sample_ms=10.0)
    pg.goto(f"{first.page_url}&run={run['id']}")
    pg.wait_for_function("() => window.loaderscope.player.length > 60 && window.loaderscope.isLiveRun()",
                         timeout=WAIT_MS)
    pg.wait_for_function("() => !document.getElementById('btn-pause').disabled", timeout=WAIT_MS)
    assert pg.get_attribute("#conn-notice", "hidden") is not None  # nothing to say while connected

    first.stop()  # the server goes away mid-run
    notice = pg.get_by_test_id("connection-notice")
    notice.wait_for(state="visible", timeout=WAIT_MS)
    assert notice.get_attribute("role") == "alert"
    text = notice.text_content() or ""
    assert "lost connection to the dashboard server — view frozen at event" in text
    frozen_at = pg.evaluate("() => window.loaderscope.offline.row")
    assert f"event {frozen_at:,}" in text
    # the badge stops saying running; the controls are shown but cannot be clicked
    assert pg.text_content("#run-status") == "disconnected"
    for button in ("#btn-pause", "#btn-step", "#btn-stop", "#speed"):
        assert pg.is_visible(button) and pg.is_disabled(button), button
    # clocks do not tick on: the same clock and the same elapsed times 30 frames later
    before = pg.evaluate(CLOCKS)
    pg.evaluate(FRAMES, 30)
    assert pg.evaluate(CLOCKS) == before
    shoot(pg, tmp_path, "lost_connection")

    # a new server on the same address that does not know the run: said plainly, the trace stays
    port = urlparse(first.url).port
    second = start_server(port=port, token=first.token)
    pg.wait_for_function("() => document.getElementById('conn-notice').textContent.includes('does not know run')",
                         timeout=WAIT_MS)
    assert pg.text_content("#run-status") == "unknown"
    assert pg.evaluate("() => window.loaderscope.player.length") >= frozen_at
    assert pg.is_disabled("#btn-stop")
    # what arrived is still a trace to replay: back to the start and forward one batch
    pg.click("#pb-start")
    assert pg.evaluate("() => window.loaderscope.player.cursor") == 0
    pg.click("#pb-batch")
    pg.wait_for_function("() => window.loaderscope.state.batches === 1", timeout=WAIT_MS)
    # the run list was refreshed from the new server: the unknown run is listed only as itself
    pg.wait_for_function("() => [...document.querySelectorAll('#run-picker option')]"
                         f".some((o) => o.value === '{run['id']}')",
                         timeout=WAIT_MS)
    shoot(pg, tmp_path, "unknown_run")
    page.close()  # before its server goes: an open page logs each refused reconnect, later on a busy box
    second.stop()
    # chromium logs each refused reconnect while the server was down: expected here, and only here
    page.errors[:] = [e for e in page.errors if "ERR_CONNECTION_REFUSED" not in e and "/ws/runs/" not in e]


@pytest.mark.slow
def test_reconnect_resumes_the_run(start_server: Any, page: Page) -> None:
    """A dropped socket (the server still there): the notice comes and goes, events resume after the last seq."""
    pg = page.page
    srv = start_server()
    run = srv.start_run("uniform", num_workers=2, dataset_size=1200, sample_ms=10.0)
    pg.goto(f"{srv.page_url}&run={run['id']}")
    pg.wait_for_function("() => window.loaderscope.player.length > 30", timeout=WAIT_MS)
    # close the page's socket as a network hiccup would: an open one (on a loaded machine the page may be
    # between two sockets already)
    pg.wait_for_function("""() => { const socket = window.loaderscope.stream.socket;
      if (!socket || socket.readyState !== WebSocket.OPEN) return false;
      socket.close();
      return true; }""", timeout=WAIT_MS)
    pg.wait_for_function("() => !document.getElementById('conn-notice').hidden || window.loaderscope.player.length > 0",
                         timeout=WAIT_MS)
    pg.wait_for_function("() => document.getElementById('conn-notice').hidden && window.loaderscope.offline === null",
                         timeout=WAIT_MS)
    srv.wait_status(run["id"])
    pg.wait_for_function("() => ['done', 'stopped'].includes(document.getElementById('run-status').textContent)",
                         timeout=WAIT_MS)
    total = srv.run(run["id"])["events"]
    pg.wait_for_function(f"() => window.loaderscope.player.length === {total}", timeout=WAIT_MS)
    assert pg.evaluate("() => window.loaderscope.stream.duplicates") >= 0


# Every visible text: its computed size, and its contrast against the background it is drawn on
# (the nearest ancestor with a background, alpha composited over the ones below).
def open_finished_run(server: Any, pg: Any, scenario: str = "out_of_order", mode: str = "sim",
                      **params: Any) -> dict[str, Any]:
    run = server.start_run(scenario, mode, **params)
    server.wait_status(run["id"])
    pg.goto(f"{server.page_url}&run={run['id']}")
    pg.wait_for_function("() => window.loaderscope.player.length > 0 && window.loaderscope.complete()", timeout=WAIT_MS)
    return run


@pytest.mark.parametrize("size", [(800, 900), (1024, 700), (1440, 900), (1920, 1080)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_fits_the_window_and_every_text_is_legible(
        server: Any, page: Page, tmp_path: Path, size: tuple[int, int]) -> None:
    pg = page.page
    width, height = size
    pg.set_viewport_size({"width": width, "height": height})
    open_finished_run(server, pg, num_workers=4, dataset_size=96)
    pg.click("#pb-end")
    pg.wait_for_function("() => window.loaderscope.pipeline.settled()", timeout=WAIT_MS)
    drawn(pg)  # the panels show the state the page is at
    assert pg.evaluate(NO_SIDEWAYS), f"horizontal scroll at {width} px"
    # the controls that matter are within the window's width
    for sel in ("#btn-start", "#pb-play", "#run-picker", "#btn-stop"):
        box = pg.locator(sel).bounding_box()
        if box:  # hidden controls (no live run) have none
            assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, sel
    # labels that a narrow window cuts carry their whole text as a tooltip
    assert pg.get_attribute("#scenario", "title")
    assert pg.evaluate("() => [...document.querySelectorAll('.counter .k')].every((k) => k.title === k.textContent)")
    shoot(pg, tmp_path, f"layout_{width}x{height}")
    shoot(pg, tmp_path, f"layout_{width}x{height}_full", full_page=True)
    # down to 1000 px the side panel stays beside the picture: Start and the Diagnosis heading are in
    # the first screen, without scrolling
    if width >= 1000:
        assert pg.evaluate("() => window.scrollY") == 0
        for sel in ("#btn-start", "h2:has(#diagnosis-scope)"):
            box = pg.locator(sel).bounding_box()
            assert box, sel
            assert 0 <= box["y"] and box["y"] + box["height"] <= height, (sel, box, height)
            assert 0 <= box["x"] and box["x"] + box["width"] <= width, (sel, box, width)
    # the picture is drawn at full size (slim columns, not scaled down) from 800 px up
    assert pg.evaluate("() => window.loaderscope.pipeline.scale") == 1
    result = pg.evaluate(CONTRAST)
    assert result["checked"] > 50
    assert not result["bad"], result["bad"][:12]  # every text >= 11 px and >= 4.5:1, at 800 px too


def test_inspector_and_panels_reset_when_the_run_changes(server: Any, page: Page) -> None:
    pg = page.page
    real = server.start_run("uniform", num_workers=2, dataset_size=64, sample_ms=2.0)
    server.wait_status(real["id"])
    sim = server.start_run("out_of_order", "sim", num_workers=4, dataset_size=64)
    server.wait_status(sim["id"])
    pg.goto(f"{server.page_url}&run={real['id']}")
    pg.wait_for_selector("#inspector-card:not([hidden])", timeout=WAIT_MS)
    pg.wait_for_function("() => document.getElementById('inspector').textContent.includes('fetched')", timeout=WAIT_MS)
    pg.evaluate("(id) => window.loaderscope.openRun(id)", sim["id"])
    pg.wait_for_function("() => window.loaderscope.player.length > 0 && window.loaderscope.complete()", timeout=WAIT_MS)
    drawn(pg)  # the panels show the state the page is at
    assert pg.is_hidden("#inspector-card")
    assert pg.text_content("#inspector") == ""
    assert pg.text_content("#inspector-count") == ""
    assert pg.is_hidden("#worker-card")
    assert pg.evaluate("() => window.loaderscope.selectedWorker") is None


def test_findings_stay_after_the_run_ends(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    run = server.start_run("stuck_worker", num_workers=2, dataset_size=48,
                           stuck_index=13, stuck_seconds=3.0, stuck_after=1.0)
    pg.goto(f"{server.page_url}&run={run['id']}")
    server.wait_status(run["id"], timeout=90)
    pg.wait_for_function("() => window.loaderscope.complete()"
                         " && window.loaderscope.player.cursor === window.loaderscope.player.length",
                         timeout=WAIT_MS)
    finding = pg.locator("[data-testid=findings] button[data-kind=worker_stuck]").first
    finding.wait_for(state="visible", timeout=WAIT_MS)
    assert "stuck on task" in (finding.text_content() or "")
    worker = finding.get_attribute("data-worker")
    # the slider has a mark for it
    assert int(pg.get_attribute("#pb-marks", "data-alarms") or 0) >= 1
    finding.click()
    pg.wait_for_function("() => window.loaderscope.player.cursor < window.loaderscope.player.length", timeout=WAIT_MS)
    pg.wait_for_selector("#worker-card:not([hidden])", timeout=WAIT_MS)
    assert pg.get_attribute("#worker-card", "data-status") == "stuck"
    assert pg.text_content("#worker-title") == f"worker {worker}"
    pg.wait_for_selector("#worker-stack:not([hidden]) li", timeout=WAIT_MS)
    lane = pg.locator(f"[data-testid=worker-lane][data-worker='{worker}']")
    assert lane.get_attribute("data-status") == "stuck"
    shoot(pg, tmp_path, "finding_reopened", full_page=True)


def test_time_slider_seeks_by_time(server: Any, page: Page) -> None:
    pg = page.page
    open_finished_run(server, pg, num_workers=4, dataset_size=96)
    end = pg.evaluate("() => window.loaderscope.player.table.t[window.loaderscope.player.length - 1]")
    pg.fill("#pb-time", str(end / 2))
    t = pg.evaluate("() => window.loaderscope.player.time")
    assert abs(t - end / 2) <= end * 0.05
    # out_of_order parks results: the slider's marks say so once the findings panel has drawn them
    pg.wait_for_function("() => Number(document.getElementById('pb-marks').dataset.parked || 0) > 0", timeout=WAIT_MS)


@pytest.mark.slow
def test_demo_keeps_parking_and_says_its_pace(start_server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    srv = start_server(demo="out_of_order", demo_params={"dataset_size": 200, "sample_ms": 15, "hold_every": 5},
                       demo_delay=0.15)
    with srv.client() as http:
        runs = wait_for(lambda: http.get("/api/runs").json(), what="the demo run")
    runs = runs if isinstance(runs, list) else runs["runs"]
    pg.goto(f"{srv.page_url}&run={runs[0]['id']}")
    pace = pg.get_by_test_id("demo-pace")
    pace.wait_for(state="visible", timeout=WAIT_MS)
    assert pace.text_content() == "demo pace: one batch per 0.15 s"
    pg.get_by_test_id("demo-caption").wait_for(state="visible", timeout=WAIT_MS)
    # results keep parking, not only in the first window: some park after 3 s of run time
    pg.wait_for_function("() => window.loaderscope.track.parked.some((t) => t > 3)", timeout=60_000)
    pg.wait_for_function("() => document.querySelector('[data-testid=reorder-buffer]').dataset.size !== '0'",
                         timeout=WAIT_MS)
    shoot(pg, tmp_path, "demo_parked")
    srv.wait_status(runs[0]["id"], timeout=90)
    pg.wait_for_function("() => window.loaderscope.complete() && document.querySelectorAll('#diagnosis li').length > 0",
                         timeout=WAIT_MS)
    pg.wait_for_function("() => !document.getElementById('diagnosis').textContent"
                         ".includes('training step is the bottleneck')",
                         timeout=WAIT_MS)
    # the caption's button pauses at the first parked result
    pg.click("#btn-first-parked")
    assert pg.evaluate("() => window.loaderscope.state.parked.length") > 0


def test_pinned_run_mid_flight_is_legible_at_800(server: Any, page: Page, tmp_path: Path) -> None:
    """The widest picture (a pin column) in the narrowest window, seeked to a moment with fetches,
    parked results and the pin thread busy: slim columns at full size, every text legible."""
    events = sim_events("out_of_order", {"num_workers": 4, "batch_size": 4, "dataset_size": 96, "pin_memory": True},
                        pin_ms_per_mb=40, sample_bytes=100_000)
    path = write(tmp_path / "pinned.trace.jsonl", events)
    pg = page.page
    pg.set_viewport_size({"width": 800, "height": 900})
    pg.goto(server.page_url)
    pg.set_input_files("#file-input", str(path))
    pg.wait_for_function("() => window.loaderscope.perf.load", timeout=WAIT_MS)
    pg.locator('[data-testid="pin-stage"][data-state="active"]').wait_for(timeout=WAIT_MS)
    # the first moment with results parked in the reorder buffer
    row = pg.evaluate("""() => { const a = window.loaderscope;
      for (let i = 1; i <= a.player.length; i++) {
        a.moveTo(i); if (a.state.parked.length >= 2) return i; }
      return -1; }""")
    assert row > 0
    pg.wait_for_function("() => window.loaderscope.pipeline.settled()", timeout=WAIT_MS)
    drawn(pg)  # the panels show the state the page is at
    assert pg.evaluate(NO_SIDEWAYS)
    assert pg.evaluate("() => window.loaderscope.pipeline.scale") == 1
    shoot(pg, tmp_path, "layout_800x900_pinned")
    result = pg.evaluate(CONTRAST)
    assert not result["bad"], result["bad"][:12]


def test_start_and_diagnosis_in_the_first_screen_of_a_real_run_at_1024x700(
        server: Any, page: Page, tmp_path: Path) -> None:
    """A real run also opens the batch inspector in the side panel: it goes under the diagnosis, so
    Start and the Diagnosis heading stay in a 1024x700 window without scrolling."""
    pg = page.page
    pg.set_viewport_size({"width": 1024, "height": 700})
    open_finished_run(server, pg, "out_of_order", "real", num_workers=2, dataset_size=32)
    pg.locator("#inspector-card").wait_for(state="visible", timeout=WAIT_MS)
    drawn(pg)  # the panels show the state the page is at
    assert pg.evaluate(NO_SIDEWAYS)
    assert pg.evaluate("() => window.scrollY") == 0
    shoot(pg, tmp_path, "layout_1024x700_real")
    for sel in ("#btn-start", "h2:has(#diagnosis-scope)"):
        box = pg.locator(sel).bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= 700, (sel, box)
