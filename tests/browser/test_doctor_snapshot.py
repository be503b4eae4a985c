"""A `loaderscope doctor --out` snapshot in the page: `serve --open FILE` and the Open trace button show
the frozen picture (the stuck worker's lane, its stack with the user's line, the verdict), marked as a
doctor snapshot. The hang is real and the snapshot comes from the real command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import WAIT_MS, Page, shoot
from tests.doctor.hangs import SLEEPS, doctor

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_a_snapshot_opens_as_a_frozen_picture(hung: Any, page: Page, tmp_path: Path) -> None:
    from tests.live import launch

    h = hung(SLEEPS)
    h.wait()
    snap = tmp_path / "stuck.doctor.jsonl"
    rc, out = doctor(str(h.proc.pid), "--duration", "1", "--out", str(snap))
    assert rc == 0 and out["verdict"]["cause"] == "stuck_sample"
    h.end()
    server = launch(tmp_path / "srv", traces=[str(snap)])
    try:
        with server.client() as http:
            (run,) = http.get("/api/runs").json()
        pg = page.page
        pg.goto(f"{server.page_url}&run={run['id']}")
        badge = pg.locator('[data-testid="doctor-badge"]')
        badge.wait_for(state="visible", timeout=WAIT_MS)
        assert "stuck: worker 1" in (badge.get_attribute("title") or "")
        assert_banner_says(pg, out["verdict"])
        pg.keyboard.press("End")
        lane = pg.locator('[data-testid="worker-lane"][data-status="stuck"]')
        lane.wait_for(timeout=WAIT_MS)
        assert lane.get_attribute("data-worker") == "1"
        assert pg.locator('[data-testid="worker-lane"]').count() == 2
        finding = pg.locator('#findings button[data-kind="doctor_verdict"]')
        assert "doctor: stuck: worker 1" in (finding.text_content() or "")
        pg.locator('#findings button[data-kind="worker_stuck"]').click()
        here = pg.locator('#worker-stack [data-testid="user-frame"]')
        here.wait_for(timeout=WAIT_MS)
        assert "time.sleep(3600)" in (here.text_content() or "")
        pg.wait_for_function("() => window.loaderscope.pipeline.settled()", timeout=WAIT_MS)
        shot = shoot(pg, tmp_path, "doctor_snapshot")
        assert shot.stat().st_size > 10_000
        # the same file through the page's Open trace button
        pg.goto(server.page_url)
        pg.set_input_files("#file-input", str(snap))
        badge.wait_for(state="visible", timeout=WAIT_MS)
        assert pg.locator('#findings button[data-kind="doctor_verdict"]').count() == 1
        assert_banner_says(pg, out["verdict"])
    finally:
        page.close()  # before its server goes: an open page logs each refused reconnect
        server.stop()


def assert_banner_says(pg: Any, verdict: dict[str, Any]) -> None:
    """The banner leads with the verdict and what to do; a frozen picture has no Pause, Step or Start."""
    said = pg.locator('#banner [data-testid="doctor-verdict"]')
    said.wait_for(state="visible", timeout=WAIT_MS)
    assert said.text_content() == f"doctor: {verdict['text']}"
    assert pg.locator('#banner [data-testid="doctor-advice"]').text_content() == f"what to do: {verdict['advice']}"
    for control in ("#btn-pause", "#btn-resume", "#btn-step", "#btn-stop", "#btn-start"):
        assert not pg.locator(control).is_visible(), control
