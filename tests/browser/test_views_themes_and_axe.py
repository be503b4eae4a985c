"""The page a Perfetto user expects, in a real chromium against a real dashboard and real runs, part
two: light and dark themes (contrast measured from the pixels, canvas text included), compare opened on
the right pair, findings that stay in sight, a demo that waits for its page, and axe-core with nothing
to report. Keys, search, range selection and the URL: test_views.py.

Screenshots land in the test's tmp dir; ``LOADERSCOPE_SHOTS=dir`` copies them there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import WAIT_MS, drawn
from tests.browser.views import CONTRAST, NO_SIDEWAYS, canvas_text, finished, open_run, query, shoot, stalled
from tests.conftest import wait_for

pytestmark = pytest.mark.browser

AXE = Path(__file__).parents[2] / "node_modules" / "axe-core" / "axe.min.js"


# --- 5. themes and legibility -----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("size", [(1440, 900), (800, 700)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_both_themes_are_legible_canvas_text_included(server: Any, view_page: Any, tmp_path: Path, scheme: str,
                                                     size: tuple[int, int]) -> None:
    run = stalled(server)
    pg = view_page(scheme, *size)
    open_run(pg, server, run["id"])
    assert pg.evaluate("() => window.loaderscope.theme.effective") == scheme
    bg = pg.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert bg == ("rgb(255, 255, 255)" if scheme == "light" else "rgb(11, 16, 22)")
    assert pg.evaluate(NO_SIDEWAYS)
    labels = canvas_text(pg)
    where = {lab["canvas"] for lab in labels}
    assert {"timeline-canvas", "hist-canvas"} <= where, where
    assert any(lab["text"].startswith("STUCK") for lab in labels), [lab["text"] for lab in labels]
    small = [lab for lab in labels if lab["px"] < 11]
    faint = [lab for lab in labels if lab["ratio"] < 4.5]
    overlapping = [lab for lab in labels if lab["overlaps"]]
    shoot(pg, tmp_path, f"theme_{scheme}_{size[0]}", full_page=True)
    assert not small, small
    assert not faint, faint
    assert not overlapping, overlapping
    result = pg.evaluate(CONTRAST)
    assert result["checked"] > 50
    assert not result["bad"], result["bad"][:12]


def test_the_theme_follows_the_browser_and_the_toggle_is_remembered(
        server: Any, view_page: Any, tmp_path: Path) -> None:
    run = finished(server, num_workers=4, dataset_size=96)
    pg = view_page("light")
    open_run(pg, server, run["id"])
    assert pg.evaluate("() => [window.loaderscope.theme.effective,"
                       " document.documentElement.dataset.theme ?? null]") == ["light", None]
    # the canvases too: the timeline's first worker row is drawn on a light background
    box = pg.locator("#timeline .timeline-canvas").bounding_box()
    assert box is not None
    pixel = pg.evaluate("""() => { const c = document.querySelector('#timeline .timeline-canvas');
      return [...c.getContext('2d').getImageData(c.width - 2, 2, 1, 1).data].slice(0, 3); }""")
    assert min(pixel) > 200, pixel
    pg.click("#btn-theme")
    assert pg.evaluate("() => document.documentElement.dataset.theme") == "dark"
    wait_for(lambda: query(pg).get("theme") == ["dark"], what="the chosen theme in the URL")
    pixel = pg.evaluate("""() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => {
      const c = document.querySelector('#timeline .timeline-canvas');
      done([...c.getContext('2d').getImageData(c.width - 2, 2, 1, 1).data].slice(0, 3)); })))""")
    assert max(pixel) < 60, pixel
    # remembered: the same browser, a link without a theme
    pg.goto(f"{server.page_url}&run={run['id']}")
    pg.wait_for_function("() => window.loaderscope.player.length > 0", timeout=WAIT_MS)
    assert pg.evaluate("() => window.loaderscope.theme.effective") == "dark"
    pg.click("#btn-theme")
    assert pg.evaluate("() => localStorage.getItem('loaderscope.theme')") == "light"


# --- 6. compare -------------------------------------------------------------------------------------


def test_compare_opens_on_the_viewed_run_and_its_loaders_previous_run(
        server: Any, view_page: Any, tmp_path: Path) -> None:
    older = finished(server, "uniform", num_workers=2, dataset_size=64)
    finished(server, "out_of_order", num_workers=4, dataset_size=64)
    newer = finished(server, "uniform", num_workers=4, dataset_size=64)
    pg = view_page("dark", 800, 700)
    open_run(pg, server, newer["id"])
    pg.click("#btn-compare")
    pg.wait_for_selector("[data-testid=compare][data-ready=true]", timeout=WAIT_MS)
    assert [pg.locator(f"#compare-{s}").input_value() for s in "ab"] == [f"run:{newer['id']}", f"run:{older['id']}"]
    wait_for(lambda: query(pg).get("compare") == [f"{newer['id']},{older['id']}"], what="the pair in the URL")
    close = pg.get_by_test_id("compare-close")
    box = close.bounding_box()
    assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= 800 and 0 <= box["y"] <= 700, box
    assert "Close" in (close.text_content() or "") and "Esc" in (close.text_content() or "")
    # a number is on one line, whole
    broken = pg.evaluate("""() => [...document.querySelectorAll('#compare td')].filter((td) => {
        const r = document.createRange(); r.selectNodeContents(td);
        return new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1 && /\\d/.test(td.textContent)
          && !td.classList.contains('long'); }).map((td) => td.textContent)""")
    assert not broken, broken
    cut = pg.evaluate("""() => [...document.querySelectorAll('#compare .compare-table')].filter((t) =>
        t.getBoundingClientRect().right > t.closest('.card').getBoundingClientRect().right + 0.5).map((t) => t.id)""")
    assert not cut, f"tables wider than their card: {cut}"
    assert pg.evaluate("() => document.getElementById('compare').scrollWidth <= window.innerWidth")
    shoot(pg, tmp_path, "compare_800")
    pg.reload()  # the link opens the comparison again
    pg.wait_for_selector("[data-testid=compare][data-ready=true]", timeout=WAIT_MS)
    assert pg.locator("#compare-b").input_value() == f"run:{older['id']}"
    pg.click("[data-testid=compare-close]")
    pg.wait_for_selector("[data-testid=compare]", state="hidden", timeout=WAIT_MS)
    wait_for(lambda: "compare" not in query(pg), what="the pair gone from the URL")


# --- 7. findings stay in sight ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_stuck_runs_findings_stay_in_sight_after_it_ends(server: Any, view_page: Any, tmp_path: Path) -> None:
    run = server.start_run("stuck_worker", num_workers=2, dataset_size=48, stuck_index=13, stuck_seconds=3.0,
                           stuck_after=1.0)
    server.wait_status(run["id"], timeout=120)
    pg = view_page("dark", 800, 700)
    open_run(pg, server, run["id"])
    pg.keyboard.press("End")
    # the timeline keeps the stuck fetch's red mark and its words, the lane its mark, the banner the finding
    labels = canvas_text(pg)
    assert any(re.fullmatch(r"STUCK · task \d+", lab["text"])
               for lab in labels if lab["canvas"] == "timeline-canvas"), labels
    stuck = pg.evaluate("() => window.loaderscope.store.alarms.map((a) => ({...a}))")
    assert stuck and stuck[0]["kind"] == "stuck" and stuck[0]["end"] is not None
    lane = pg.locator(f"[data-testid=worker-lane][data-worker='{stuck[0]['worker']}']")
    assert "was stuck" in (lane.get_attribute("data-finding") or "")
    pg.get_by_test_id("past-finding").first.wait_for(timeout=WAIT_MS)
    # at 800 px the diagnosis and its findings come before the timeline
    diagnosis = pg.locator("#diagnosis-card").bounding_box()
    timeline = pg.locator(".timeline-wrap").bounding_box()
    assert diagnosis and timeline and diagnosis["y"] < timeline["y"], (diagnosis, timeline)
    shoot(pg, tmp_path, "stuck_ended_800", full_page=True)
    # the training loop's stack marks its own frame, as a worker's does
    finding = pg.locator("[data-testid=findings] button[data-kind=consumer_stuck]").first
    finding.click()
    here = pg.locator("#consumer-stack [data-testid=user-frame]")
    here.wait_for(timeout=WAIT_MS)
    text = here.text_content() or ""
    assert "your code is here" in text and "runner.py" in text and "consume" in text, text


# --- 8. the demo ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_waits_for_its_page_and_the_cli_finds_its_dashboard(start_server: Any, view_page: Any) -> None:
    srv = start_server(demo="out_of_order", demo_params={"dataset_size": 200, "sample_ms": 15}, demo_delay=0.05)
    run_id = re.search(r"loaderscope dashboard: http://\S+&run=(\w+)", srv.output()).group(1)  # type: ignore[union-attr]
    # the URL is printed first; the run starts after, and waits, paused, for a page
    started = wait_for(lambda: re.search(rf"demo run {run_id} started", srv.output()), what="the demo run started")
    assert srv.output().index("loaderscope dashboard:") < started.start()
    wait_for(lambda: srv.run(run_id)["status"] == "paused" and srv.run(run_id)["events"] > 0, what="the demo held")
    held = srv.run(run_id)
    assert held["batches"] <= 1, held
    # the CLI finds this dashboard as it finds serve's (published for this user)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(srv.data_dir.parent)}
    env.pop("LOADERSCOPE_URL", None)
    done = subprocess.run([sys.executable, "-m", "loaderscope.cli", "compare", run_id, run_id, "--format", "json"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout), done.stdout
    # a page opens it: the run goes on, live
    pg = view_page()
    pg.goto(f"{srv.page_url}&run={run_id}")
    pg.wait_for_function("() => window.loaderscope.isLiveRun() && window.loaderscope.player.following"
                         " && document.getElementById('run-status').textContent === 'running'", timeout=WAIT_MS)
    wait_for(lambda: srv.run(run_id)["batches"] > held["batches"] + 3, what="the demo going on")


# --- 9. axe-core ------------------------------------------------------------------------------------


def axe(pg: Any) -> list[dict[str, Any]]:
    """axe-core's violations of the page as it is (injected by the test, not loaded by the page)."""
    if not pg.evaluate("() => !!window.axe"):
        pg.evaluate(AXE.read_text())  # DevTools' evaluate: not the page's script-src, which is 'self' only
    result = pg.evaluate("() => axe.run(document, { resultTypes: ['violations'] })")
    return [{"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
            for v in result["violations"]]


@pytest.mark.slow  # a simulated 4-rank job read from a logdir: ~20 s on a busy machine
@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_axe_finds_nothing_on_the_run_page_job_view_and_compare(server: Any, start_server: Any, view_page: Any,
                                                                 tmp_path: Path, scheme: str) -> None:
    from tests.jobs import simulated_job

    a = stalled(server, 3)
    b = stalled(server, 4)
    pg = view_page(scheme)
    open_run(pg, server, b["id"])
    pg.locator("#timeline .timeline-canvas").focus()
    pg.keyboard.press("w")
    assert axe(pg) == []
    pg.fill("#search", "task 3")
    pg.wait_for_function("() => document.querySelectorAll('[data-testid=search-hit]').length > 0", timeout=WAIT_MS)
    assert axe(pg) == []
    pg.click("#btn-compare")
    pg.wait_for_selector("[data-testid=compare][data-ready=true]", timeout=WAIT_MS)
    assert pg.locator("#compare-b").input_value() == f"run:{a['id']}"
    assert axe(pg) == []
    logs = tmp_path / "logs"
    simulated_job(logs, "straggler", 4, {2: 3.0})
    job = start_server(logdir=str(logs), logdir_poll=0.1)
    with job.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == 4, what="the job's traces listed")
        first = http.get("/api/runs").json()[0]["id"]
    pg.goto(f"{job.page_url}&run={first}")
    pg.get_by_test_id("job-slowest").wait_for(timeout=WAIT_MS)
    pg.wait_for_function("() => window.loaderscope.player.length > 0", timeout=WAIT_MS)
    drawn(pg)
    assert axe(pg) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_axe_finds_nothing_in_a_doctor_snapshot(hung: Any, view_page: Any, tmp_path: Path) -> None:
    from tests.doctor.hangs import SLEEPS, doctor
    from tests.live import launch

    h = hung(SLEEPS)
    h.wait()
    snap = tmp_path / "stuck.doctor.jsonl"
    rc, _ = doctor(str(h.proc.pid), "--duration", "1", "--out", str(snap))
    assert rc == 0
    h.end()
    server = launch(tmp_path / "srv", traces=[str(snap)])
    try:
        with server.client() as http:
            (run,) = http.get("/api/runs").json()
        for scheme in ("dark", "light"):
            pg = view_page(scheme)
            pg.goto(f"{server.page_url}&run={run['id']}")
            pg.locator('[data-testid="doctor-badge"]').wait_for(state="visible", timeout=WAIT_MS)
            pg.keyboard.press("End")
            drawn(pg)
            assert axe(pg) == [], scheme
            pg.close()
    finally:
        server.stop()
