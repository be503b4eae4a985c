"""The page a Perfetto user expects, in a real chromium against a real dashboard and real runs:
timeline keys (W/A/S/D), search, range selection with its summary (checked against the Python
core on the same events), the view in the URL (reload, Back), light and dark themes (contrast
measured from the pixels, canvas text included), compare opened on the right pair, findings that
stay in sight, axe-core with nothing to report, and a demo that waits for its page.

Screenshots land in the test's tmp dir; ``LOADERSCOPE_SHOTS=dir`` copies them there.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from loaderscope.model.state import reduce
from loaderscope.model.stats import _percentile
from tests.conftest import wait_for
from tests.browser.pages import WAIT_MS, Page, drawn
from tests.browser.test_demo_and_layout import CONTRAST, FRAMES, NO_SIDEWAYS, shoot

pytestmark = pytest.mark.browser

AXE = Path(__file__).parents[2] / "node_modules" / "axe-core" / "axe.min.js"
PLOT_X = 112  # timeline-view.js GUTTER: where the plot starts


@pytest.fixture
def view_page(browser: Any) -> Any:  # noqa: F811
    """A page factory: ``open(scheme, width, height)``; every page's errors fail the test."""
    pages: list[Page] = []

    def open_page(scheme: str = "dark", width: int = 1440, height: int = 900) -> Any:
        p = Page(browser, color_scheme=scheme)
        p.page.set_viewport_size({"width": width, "height": height})
        pages.append(p)
        return p.page

    yield open_page
    errors = [e for p in pages for e in p.errors]
    for p in pages:
        p.close()
    assert not errors, "\n".join(errors)


def events_of(server: Any, run_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = -1
    with server.client() as http:
        while True:
            page = http.get(f"/api/runs/{run_id}/events", params={"after": after, "limit": 10_000}).json()
            out += page["events"]
            if not page["events"] or page["events"][-1]["seq"] >= page["last_seq"]:
                return out
            after = page["events"][-1]["seq"]


def finished(server: Any, scenario: str = "out_of_order", mode: str = "sim", **params: Any) -> dict[str, Any]:
    run = server.start_run(scenario, mode, **params)
    return server.wait_status(run["id"], timeout=120)


def stalled(server: Any, num_workers: int = 3) -> dict[str, Any]:
    """A simulated run whose task 5 hangs 2 s: reported stuck (after 20 times the median fetch), a finding to show."""
    body = {"scenario": "out_of_order", "mode": "sim", "params": {"num_workers": num_workers, "dataset_size": 96},
            "costs": {"stalls": [{"task": 5, "seconds": 2.0}], "stuck_after_s": 0.15}}
    with server.client() as http:
        answer = http.post("/api/runs", json=body)
    assert answer.status_code == 201, answer.text
    return server.wait_status(answer.json()["id"], timeout=120)


def open_run(pg: Any, server: Any, run_id: str, extra: str = "") -> None:
    pg.goto(f"{server.page_url}&run={run_id}{extra}")
    pg.wait_for_function("() => window.loaderscope.player.length > 0 && window.loaderscope.complete()"
                         " && window.loaderscope.queue.length === window.loaderscope.queueHead", timeout=WAIT_MS)
    drawn(pg)


def view(pg: Any) -> dict[str, float]:
    return pg.evaluate("() => ({...window.loaderscope.timeline.view})")


def query(pg: Any) -> dict[str, list[str]]:
    """The address bar's parameters now (asked of the page: the sync API's page.url is only brought up to
    date while Playwright runs a call)."""
    return parse_qs(urlparse(pg.evaluate("() => location.href")).query)


def plot_x(box: dict[str, float], share: float) -> float:
    return box["x"] + PLOT_X + (box["width"] - PLOT_X) * share


# --- 1. keys ----------------------------------------------------------------------------------------


def test_timeline_keys_zoom_and_pan_and_every_part_acts_on_the_keyboard(server: Any, view_page: Any) -> None:
    run = finished(server, num_workers=4, dataset_size=400)
    pg = view_page()
    open_run(pg, server, run["id"])
    canvas = pg.locator("#timeline .timeline-canvas")
    cursor = pg.evaluate("() => window.loaderscope.player.cursor")
    # Tab reaches the timeline (from the search box, through the page's controls)
    pg.keyboard.press("/")
    assert pg.evaluate("() => document.activeElement.id") == "search"
    for _ in range(120):
        pg.keyboard.press("Tab")
        if pg.evaluate("() => document.activeElement.classList.contains('timeline-canvas')"):
            break
    else:
        raise AssertionError("Tab never reached the timeline")
    v0 = view(pg)
    span = v0["t1"] - v0["t0"]
    pg.keyboard.press("w")  # the pointer is not over it: around the middle
    v1 = view(pg)
    assert abs((v1["t1"] - v1["t0"]) - 0.8 * span) < 1e-9 * span
    assert abs((v1["t0"] + v1["t1"]) - (v0["t0"] + v0["t1"])) < 1e-6 * span
    pg.keyboard.press("d")
    v2 = view(pg)
    assert abs(v2["t0"] - (v1["t0"] + 0.15 * (v1["t1"] - v1["t0"]))) < 1e-9 * span
    pg.keyboard.press("ArrowLeft")  # the timeline's: pans back, the playhead stays
    assert abs(view(pg)["t0"] - v1["t0"]) < 1e-9 * span
    assert pg.evaluate("() => window.loaderscope.player.cursor") == cursor
    pg.keyboard.press("s")
    v3 = view(pg)
    assert abs((v3["t1"] - v3["t0"]) - span) < 1e-6 * span
    # around the pointer: the time under it stays where it is
    box = canvas.bounding_box()
    assert box is not None
    x = plot_x(box, 0.25)
    pg.mouse.move(x, box["y"] + 40)
    at = pg.evaluate(f"() => window.loaderscope.timeline.timeAt({x - box['x']})")
    pg.keyboard.press("ArrowUp")
    assert abs(pg.evaluate(f"() => window.loaderscope.timeline.timeAt({x - box['x']})") - at) < 1e-6 * span
    assert view(pg)["t1"] - view(pg)["t0"] < 0.81 * span
    # the change is in the picture, not only in the numbers: the drawn timeline differs
    drawn(pg)
    zoomed_in = canvas.screenshot()
    pg.keyboard.press("f")  # fits the whole run again
    assert pg.evaluate("() => window.loaderscope.timeline.follow")
    drawn(pg)
    assert canvas.screenshot() != zoomed_in
    # ? lists the keys; Escape closes the list
    pg.keyboard.press("?")
    pg.wait_for_selector("#keys-help[open]", timeout=WAIT_MS)
    assert "zoom in" in (pg.text_content("#keys-table") or "")
    pg.keyboard.press("Escape")
    pg.wait_for_selector("#keys-help:not([open])", state="attached", timeout=WAIT_MS)
    # Space on a focused button presses that button, and nothing else
    pg.keyboard.press("Home")
    pg.focus("#pb-event")
    pg.keyboard.press("Space")
    assert pg.evaluate("() => [window.loaderscope.player.cursor, window.loaderscope.playing]") == [1, False]
    # a worker's lane acts on Enter: its card opens
    lane = pg.locator("[data-testid=worker-lane][data-worker='2']")
    lane.focus()
    pg.keyboard.press("Enter")
    pg.wait_for_selector("#worker-card:not([hidden])", timeout=WAIT_MS)
    assert pg.text_content("#worker-title") == "worker 2"
    # the panels that scroll are reachable by Tab
    for sel in ("#event-log", "#timeline .timeline-canvas", "[data-testid=worker-lane]", "#search", "#btn-theme"):
        assert pg.locator(sel).first.evaluate("e => e.tabIndex >= 0"), sel


@pytest.mark.slow  # a simulated 4-rank job read from a logdir: ~20 s on a busy machine
def test_a_job_tables_rows_and_sort_headers_act_on_the_keyboard(start_server: Any, view_page: Any, tmp_path: Path) -> None:
    from tests.server.test_jobquery import simulated_job

    logs = tmp_path / "logs"
    simulated_job(logs, "straggler", 4, {2: 3.0})
    server = start_server(logdir=str(logs), logdir_poll=0.1)
    with server.client() as http:
        wait_for(lambda: len(http.get("/api/runs").json()) == 4, what="the job's 4 traces listed")
        runs = {r["rank"]: r["id"] for r in http.get("/api/runs").json()}
    pg = view_page()
    pg.goto(f"{server.page_url}&run={runs[0]}")
    pg.get_by_test_id("job-slowest").wait_for(timeout=WAIT_MS)
    header = pg.locator("[data-testid=job-sort][data-key=slowest_steps]")
    header.focus()
    pg.keyboard.press("Enter")
    pg.wait_for_function("() => document.querySelector('[data-testid=job-row][data-i=\"0\"]')?.dataset.rank === '2'",
                         timeout=WAIT_MS)
    row = pg.locator("[data-testid=job-row][data-rank='2']")
    row.focus()
    pg.keyboard.press("Enter")
    pg.wait_for_function("() => window.loaderscope.track.rank === 2", timeout=WAIT_MS)


# --- 2. search --------------------------------------------------------------------------------------


def test_search_finds_tasks_and_samples_and_moves_the_playhead(server: Any, view_page: Any) -> None:
    run = finished(server, num_workers=4, dataset_size=400)
    events = events_of(server, run["id"])
    pg = view_page()
    open_run(pg, server, run["id"])
    pg.keyboard.press("Control+k")
    assert pg.evaluate("() => document.activeElement.id") == "search"
    pg.keyboard.type("task 17")
    pg.wait_for_function("() => document.querySelectorAll('[data-testid=search-hit]').length > 0", timeout=WAIT_MS)
    ends = [e for e in events if e["kind"] == "fetch_end" and e["idx"] == 17]
    assert pg.locator("[data-testid=search-hit]").count() == len(ends) == 1
    assert pg.evaluate("() => window.loaderscope.timeline.hits.length") == 1
    assert pg.evaluate("() => window.loaderscope.pipeline.highlight.has('0:17')")
    pg.keyboard.press("Enter")
    start = next(e for e in events if e["kind"] == "fetch_start" and e["idx"] == 17)
    moved = pg.evaluate("() => { const a = window.loaderscope; const t = a.state.tasks.get(17);"
                        " return {time: a.player.time, worker: t && t.worker, fetching: t && t.fetch_start !== null}; }")
    assert moved == {"time": start["t"], "worker": start["worker"], "fetching": True}
    wait_for(lambda: "at" in query(pg) and query(pg).get("batch") == ["0.17"], what="the jump in the URL")
    # a sample by its index: the task whose batch held it
    held = next(e for e in events if e["kind"] == "dispatch" and 213 in (e.get("indices") or []))
    pg.fill("#search", "sample 213")
    pg.wait_for_function("() => document.querySelector('[data-testid=search-hit]')?.dataset.kind === 'sample'",
                         timeout=WAIT_MS)
    assert f"task {held['idx']} " in (pg.locator("[data-testid=search-hit]").first.text_content() or "")
    pg.keyboard.press("Enter")
    assert pg.evaluate("() => window.loaderscope.selectedBatch") == [0, held["idx"]]
    first = next(e for e in events if e["kind"] == "fetch_start" and e["idx"] == held["idx"])
    assert pg.evaluate("() => window.loaderscope.player.time") == first["t"]
    # words of a finding: none in this run, said so
    pg.fill("#search", "stuck")
    pg.wait_for_function("() => document.getElementById('search-count').textContent === 'no match'", timeout=WAIT_MS)


# --- 3. range selection -----------------------------------------------------------------------------


def range_in_python(events: list[dict[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    """DESIGN §21's figures of [t0, t1]: the state before the range's first event and after its last."""
    clock = list(itertools.accumulate((e["t"] for e in events), max))
    first = next((i for i, c in enumerate(clock) if c > t0), len(events))
    last = next((i for i, c in enumerate(clock) if c > t1), len(events))
    a, b = reduce(events[:first]), reduce(events[:last])
    workers = {}
    for wid, w in b.workers.items():
        times = np.sort(np.asarray(w.fetch_times[len(a.workers[wid].fetch_times) if wid in a.workers else 0:]))
        p50, p95 = (_percentile(times, 0.5), _percentile(times, 0.95)) if len(times) else (None, None)
        workers[wid] = {"fetches": len(times), "p50": p50, "p95": p95}  # as summary()'s fetch_p50, fetch_p95
    return {"from": first, "to": last, "events": last - first, "workers": workers, "batches": b.batches - a.batches,
            "wait": b.consumer_wait - a.consumer_wait, "parked": b.out_of_order - a.out_of_order,
            "parked_cost": b.head_of_line_wait - a.head_of_line_wait}


def range_on_page(pg: Any) -> dict[str, Any]:
    return pg.evaluate("""() => { const r = document.getElementById('range'), d = r.dataset;
      const num = (v) => (v === '' ? null : Number(v));
      const workers = {}; for (const tr of r.querySelectorAll('[data-testid=range-worker]'))
        workers[tr.dataset.worker] = { fetches: Number(tr.dataset.fetches), p50: num(tr.dataset.p50), p95: num(tr.dataset.p95) };
      return { from: Number(d.from), to: Number(d.to), events: Number(d.events), workers, batches: Number(d.batches),
        wait: Number(d.wait), parked: Number(d.parked), parked_cost: Number(d.parkedCost),
        sel: { ...window.loaderscope.timeline.selection } }; }""")


def test_a_range_selections_summary_equals_the_same_figures_from_python(server: Any, view_page: Any, tmp_path: Path) -> None:
    run = finished(server, num_workers=4, dataset_size=400)
    events = events_of(server, run["id"])
    pg = view_page()
    open_run(pg, server, run["id"])
    box = pg.locator("#timeline .timeline-canvas").bounding_box()
    assert box is not None
    y = box["y"] + 40
    pg.keyboard.down("Shift")
    pg.mouse.move(plot_x(box, 0.3), y)
    pg.mouse.down()
    pg.mouse.move(plot_x(box, 0.5), y, steps=4)
    pg.mouse.move(plot_x(box, 0.7), y, steps=4)
    pg.mouse.up()
    pg.keyboard.up("Shift")
    pg.wait_for_selector("#range:not([hidden])", timeout=WAIT_MS)
    got = range_on_page(pg)
    want = range_in_python(events, got["sel"]["t0"], got["sel"]["t1"])
    assert 0 < want["events"] < len(events) and want["parked"] > 0 and want["batches"] > 0, want
    assert {k: got[k] for k in ("from", "to", "events", "batches", "parked")} == \
        {k: want[k] for k in ("from", "to", "events", "batches", "parked")}
    assert got["wait"] == pytest.approx(want["wait"], abs=1e-9)
    assert got["parked_cost"] == pytest.approx(want["parked_cost"], abs=1e-9)
    assert {int(k): v for k, v in got["workers"].items()} == want["workers"]
    text = pg.text_content("#range") or ""
    assert f"{want['batches']} batches handed over" in text and f"{want['parked']} results parked" in text
    # the selection and the playhead are in the URL, and come back with it
    wait_for(lambda: "range" in query(pg), what="the range in the URL")
    pg.keyboard.press("Home")
    pg.keyboard.press("Shift+ArrowRight")
    cursor = pg.evaluate("() => window.loaderscope.player.cursor")
    wait_for(lambda: query(pg).get("at") == [str(cursor)], what="the playhead in the URL")
    pg.reload()
    pg.wait_for_selector("#range:not([hidden])", timeout=WAIT_MS)
    again = range_on_page(pg)
    assert {k: again[k] for k in ("from", "to", "events", "batches", "parked")} == \
        {k: want[k] for k in ("from", "to", "events", "batches", "parked")}
    pg.wait_for_function(f"() => window.loaderscope.player.cursor === {cursor}", timeout=WAIT_MS)
    # the README's pictures: a search hit and a range, in both themes
    pg.fill("#search", "task 17")
    pg.wait_for_function("() => window.loaderscope.timeline.hits.length > 0", timeout=WAIT_MS)
    pg.keyboard.press("Enter")
    pg.mouse.move(0, 0)
    drawn(pg)
    at = pg.evaluate("() => window.loaderscope.player.cursor")  # the diagnosis (a slower panel) says it too
    pg.wait_for_function(f"() => document.getElementById('diagnosis-scope').textContent === '(at event {at})'",
                         timeout=WAIT_MS)
    shoot(pg, tmp_path, "views_dark", full_page=True)
    pg.click("#btn-theme")
    drawn(pg)
    shoot(pg, tmp_path, "views_light", full_page=True)
    # Escape on the timeline drops the selection
    pg.locator("#timeline .timeline-canvas").focus()
    pg.keyboard.press("Escape")
    pg.wait_for_selector("#range", state="hidden", timeout=WAIT_MS)


# --- 4. the URL is the view -------------------------------------------------------------------------


def test_a_reload_restores_the_view_and_back_goes_to_the_one_before(server: Any, view_page: Any) -> None:
    run = finished(server, num_workers=4, dataset_size=400)
    pg = view_page()
    open_run(pg, server, run["id"])
    canvas = pg.locator("#timeline .timeline-canvas")
    canvas.focus()
    pg.keyboard.press("w")
    pg.keyboard.press("w")
    wait_for(lambda: "view" in query(pg), what="the zoom in the URL")
    zoomed = view(pg)
    pg.locator("[data-testid=worker-lane][data-worker='1']").click()
    wait_for(lambda: query(pg).get("worker") == ["1"], what="the worker in the URL")
    box = canvas.bounding_box()
    assert box is not None
    pg.mouse.click(plot_x(box, 0.4), box["y"] + 8)  # the axis: a seek
    cursor = pg.evaluate("() => window.loaderscope.player.cursor")
    wait_for(lambda: query(pg).get("at") == [str(cursor)], what="the playhead in the URL")
    url = pg.evaluate("() => location.href")
    # a shared link: another tab (the dashboard's cookie: a link for another browser needs ?token=) opens the same view
    other = pg.context.new_page()
    other.goto(url)
    other.wait_for_function(f"() => window.loaderscope.player.cursor === {cursor}", timeout=WAIT_MS)
    got = view(other)
    assert got["t0"] == pytest.approx(zoomed["t0"], abs=1e-6) and got["t1"] == pytest.approx(zoomed["t1"], abs=1e-6)
    assert other.evaluate("() => [window.loaderscope.selectedWorker, window.loaderscope.timeline.follow]") == [1, False]
    other.wait_for_selector("#worker-card:not([hidden])", timeout=WAIT_MS)
    # Back: the view before the worker was chosen; again: before the zoom
    pg.go_back()
    pg.wait_for_function("() => window.loaderscope.selectedWorker === null", timeout=WAIT_MS)
    assert view(pg)["t0"] == pytest.approx(zoomed["t0"], abs=1e-6)
    pg.go_back()
    pg.wait_for_function("() => window.loaderscope.timeline.follow", timeout=WAIT_MS)
    pg.go_forward()
    pg.wait_for_function("() => !window.loaderscope.timeline.follow", timeout=WAIT_MS)
    assert view(pg)["t0"] == pytest.approx(zoomed["t0"], abs=1e-6)


# --- 5. themes and legibility -----------------------------------------------------------------------


# Every label a canvas drew (canvas-text.js records them when asked): its size, its contrast measured
# from the pixels (the box's most common colour is the background, the pixel farthest from it the ink),
# and whether two labels of one canvas overlap.
CANVAS_TEXT = """async () => {
  const { labelsOf } = await import('/js/views/canvas-text.js');
  const lum = (r, g, b) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const ratio = (a, b) => (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  const out = [];
  for (const canvas of document.querySelectorAll('canvas')) {
    if (!canvas.getClientRects().length) continue;
    const labels = labelsOf(canvas);
    if (!labels.length) continue;
    const dpr = canvas.width / canvas.getBoundingClientRect().width;
    const ctx = canvas.getContext('2d');
    const name = canvas.className || canvas.id;
    labels.forEach((l, i) => {
      const x = Math.max(0, Math.floor((l.x - 1) * dpr)), y = Math.max(0, Math.floor((l.y - 1) * dpr));
      const w = Math.min(canvas.width - x, Math.ceil((l.w + 2) * dpr)), h = Math.min(canvas.height - y, Math.ceil((l.h + 2) * dpr));
      if (w < 1 || h < 1) return;
      const px = ctx.getImageData(x, y, w, h).data;
      const page = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number);
      const counts = new Map(); let bg = null, most = 0;
      const rgb = (k) => { const a = px[k + 3] / 255; return [0, 1, 2].map((c) => Math.round(px[k + c] * a + page[c] * (1 - a))); };
      for (let k = 0; k < px.length; k += 4) { const c = rgb(k).join(','); const n = (counts.get(c) || 0) + 1; counts.set(c, n);
        if (n > most) { most = n; bg = c; } }
      const B = lum(...bg.split(',').map(Number));
      let best = 1;
      for (let k = 0; k < px.length; k += 4) best = Math.max(best, ratio(lum(...rgb(k)), B));
      const overlaps = labels.slice(i + 1).filter((o) => l.x < o.x + o.w - 0.5 && o.x < l.x + l.w - 0.5 && l.y < o.y + o.h - 0.5 && o.y < l.y + l.h - 0.5)
        .map((o) => o.text);
      out.push({ canvas: name, text: l.text, px: l.px, ratio: Math.round(best * 100) / 100, overlaps });
    });
  }
  return out;
}"""


def canvas_text(pg: Any) -> list[dict[str, Any]]:
    pg.evaluate("""async () => { const { labels } = await import('/js/views/canvas-text.js'); labels.on = true;
      const a = window.loaderscope; a.timeline.invalidate(); a.hist.invalidate(); a.lastSlowPanels = 0; a.lastPanels = 0; a.wake(); }""")
    pg.evaluate(FRAMES, 3)
    drawn(pg)
    return pg.evaluate(CANVAS_TEXT)


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


def test_the_theme_follows_the_browser_and_the_toggle_is_remembered(server: Any, view_page: Any, tmp_path: Path) -> None:
    run = finished(server, num_workers=4, dataset_size=96)
    pg = view_page("light")
    open_run(pg, server, run["id"])
    assert pg.evaluate("() => [window.loaderscope.theme.effective, document.documentElement.dataset.theme ?? null]") == \
        ["light", None]
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


def test_compare_opens_on_the_viewed_run_and_its_loaders_previous_run(server: Any, view_page: Any, tmp_path: Path) -> None:
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
    assert any(re.fullmatch(r"STUCK · task \d+", lab["text"]) for lab in labels if lab["canvas"] == "timeline-canvas"), labels
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
    return [{"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]} for v in result["violations"]]


@pytest.mark.slow  # a simulated 4-rank job read from a logdir: ~20 s on a busy machine
@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_axe_finds_nothing_on_the_run_page_job_view_and_compare(server: Any, start_server: Any, view_page: Any,
                                                                 tmp_path: Path, scheme: str) -> None:
    from tests.server.test_jobquery import simulated_job

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
    from tests.live import launch
    from tests.doctor.hangs import SLEEPS, doctor

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
