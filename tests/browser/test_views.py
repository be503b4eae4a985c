"""The page a Perfetto user expects, in a real chromium against a real dashboard and real runs:
timeline keys (W/A/S/D), search, range selection with its summary (checked against the Python
core on the same events), and the view in the URL (reload, Back). Themes, compare, findings, the demo
and axe-core: test_views_themes_and_axe.py.

Screenshots land in the test's tmp dir; ``LOADERSCOPE_SHOTS=dir`` copies them there.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderscope.model.state import reduce
from loaderscope.model.stats import _percentile
from tests.browser.pages import WAIT_MS, drawn
from tests.browser.views import events_of, finished, open_run, plot_x, query, shoot, view
from tests.conftest import wait_for

pytestmark = pytest.mark.browser


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
def test_a_job_tables_rows_and_sort_headers_act_on_the_keyboard(
        start_server: Any, view_page: Any, tmp_path: Path) -> None:
    from tests.jobs import served_job

    server, runs = served_job(start_server, tmp_path / "logs", 4, {2: 3.0})
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
    # the opened rank's row is marked, and keeps the keyboard's focus: the next key acts from it
    # (rows drawn anew when a rank was shown took it, and with it a second Enter's target)
    opened = pg.locator("[data-testid=job-row][data-rank='2']")
    assert "selected" in (opened.get_attribute("class") or "")
    assert pg.evaluate("() => document.activeElement?.dataset.rank") == "2"


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
                        " return {time: a.player.time, worker: t && t.worker,"
                        " fetching: t && t.fetch_start !== null}; }")
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
        workers[tr.dataset.worker] = { fetches: Number(tr.dataset.fetches),
                                       p50: num(tr.dataset.p50), p95: num(tr.dataset.p95) };
      return { from: Number(d.from), to: Number(d.to), events: Number(d.events), workers, batches: Number(d.batches),
        wait: Number(d.wait), parked: Number(d.parked), parked_cost: Number(d.parkedCost),
        sel: { ...window.loaderscope.timeline.selection } }; }""")


def test_a_range_selections_summary_equals_the_same_figures_from_python(
        server: Any, view_page: Any, tmp_path: Path) -> None:
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
