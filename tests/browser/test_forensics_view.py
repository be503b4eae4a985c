"""Stuck, dead and unpinned: what the page shows when a real DataLoader goes wrong.

Real runs through the real dashboard, watched in Debian's chromium. Screenshots land in the test's
tmp dir; ``LOADERSCOPE_SCREENSHOT_DIR=docs`` also copies them there (docs/stuck_worker.png, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import WAIT_MS, Page, shoot, start_from_form

pytestmark = pytest.mark.browser


@pytest.mark.slow
def test_stuck_worker_lane_stack_and_ticking_time(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    pg.goto(server.page_url)
    # The checks below need the worker still stuck: its hang must outlast them on a busy machine too
    # (4 s did not, under two CPU burners); the run ends by itself once it recovers.
    run_id = start_from_form(pg, "stuck_worker", num_workers=2, stuck_after=1, stuck_seconds=15)
    lane = pg.locator('[data-testid="worker-lane"][data-status="stuck"]')
    lane.wait_for(timeout=WAIT_MS)
    # the lane names the task and the sample, and its elapsed time ticks as frames are drawn (30 frames
    # take at least half a second at 60 Hz, longer on a busy machine: more ticks, never fewer)
    text = lane.text_content() or ""
    assert "STUCK" in text and "task" in text
    assert "sample 2 of 4 (index 13)" in " ".join(text.split()), text
    ticks = pg.evaluate("""() => new Promise((done) => {
        const lane = document.querySelector('[data-testid=worker-lane][data-status=stuck]');
        const seen = new Set(); let frames = 30;
        const look = () => { seen.add(lane.dataset.elapsed);
          if (--frames > 0) requestAnimationFrame(look); else done(seen.size); };
        look(); })""")
    assert ticks >= 3, f"the elapsed time changed {ticks} times in 30 frames"
    # the worker's stack, with the user's innermost frame marked: the blocking line of the scenario
    here = pg.locator('#worker-stack [data-testid="user-frame"]')
    here.wait_for(timeout=WAIT_MS)
    assert "time.sleep(seconds)" in (here.text_content() or "")
    assert "scenarios/datasets.py" in (here.locator(".where").get_attribute("title") or "")
    assert "your code is here" in (here.text_content() or "")
    banner = pg.text_content("#banner") or ""
    assert "stuck on task" in banner and "datasets.py" in banner
    # tokens landed (not drawn(): the stuck lane's clock keeps its panels refreshing until the run goes on)
    pg.wait_for_function("() => window.loaderscope.pipeline.settled()", timeout=WAIT_MS)
    shot = shoot(pg, tmp_path, "stuck_worker")
    assert shot.stat().st_size > 10_000
    # scrub back on the live run: the picture shows the start; End follows the live run again
    pg.keyboard.press("Home")
    assert pg.evaluate("window.loaderscope.player.cursor") == 0
    assert pg.evaluate("window.loaderscope.state.batches") == 0
    # End: the last event, followed while more may come (a run that already ended has nothing more to follow)
    pg.keyboard.press("End")
    pg.wait_for_function("() => { const a = window.loaderscope, p = a.player;"
                         " return (p.following || a.track.complete) && p.cursor === p.length; }")
    # the fetch recovers: the lane leaves the stuck state and the run ends cleanly
    final = server.wait_status(run_id, timeout=60)
    assert final["status"] == "done"
    pg.wait_for_function("() => !document.querySelector('[data-testid=worker-lane][data-status=stuck]')",
                         timeout=WAIT_MS)
    notes = pg.text_content("#notes") or ""
    assert "stuck on task" in notes


def test_dead_worker_lane_names_signal_and_task(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    run = server.start_run("crash_worker", num_workers=2, sample_ms=5)
    pg.goto(f"{server.page_url}&run={run['id']}")
    lane = pg.locator('[data-testid="worker-lane"][data-status="died"]')
    lane.wait_for(timeout=60_000)
    text = lane.text_content() or ""
    assert "SIGKILL" in text and "held task" in text and "(index 21)" in text, text
    pg.wait_for_function("() => document.querySelector('#worker-detail').textContent.includes('DIED')", timeout=WAIT_MS)
    assert "OOM" in (pg.text_content("#worker-detail") or "")
    server.wait_status(run["id"], timeout=60)
    shoot(pg, tmp_path, "crash_worker")


def test_pin_stage_disabled_without_an_accelerator(server: Any, page: Page, tmp_path: Path) -> None:
    """pin_memory=True on a machine without CUDA: the stage is drawn, marked off, and says why."""
    pg = page.page
    run = server.start_run("uniform", num_workers=2, dataset_size=32, sample_ms=2, pin_memory=True)
    final = server.wait_status(run["id"], timeout=60)
    if final["config"].get("pin_memory_active"):
        pytest.skip("this machine has an accelerator: pinning is on (see test_browser_playback for the active stage)")
    pg.goto(f"{server.page_url}&run={run['id']}")
    stage = pg.locator('[data-testid="pin-stage"]')
    stage.wait_for(timeout=WAIT_MS)
    assert stage.get_attribute("data-state") == "disabled"
    assert "no accelerator" in (stage.text_content() or "")
    # the counters are refreshed with the slow panels, after the stage is drawn
    pg.wait_for_function("() => document.querySelector('[data-counter=\"pin\"] .v').textContent === 'disabled'",
                         timeout=WAIT_MS)
    pg.wait_for_function("() => [...document.querySelectorAll('#diagnosis li')]"
                         ".some((li) => li.textContent.includes('turned pinning off'))",
                         timeout=WAIT_MS)
