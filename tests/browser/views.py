"""What the tests of the page's views share: a run finished or stalled on the dashboard, its events over
REST, the page opened on it, where the timeline's plot and view are, the labels its canvases drew, the text's
contrast, and screenshots. Also a recorded logdir's run opened with its Python summary, and a simulated run
written as a trace file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.traces.jsonl import read_trace
from tests.browser.pages import WAIT_MS, applied, drawn
from tests.conftest import wait_for

PLOT_X = 112  # timeline-view.js GUTTER: where the plot starts


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


# Every label a canvas drew (canvas-text.js records them when asked): its size, its contrast measured
# from the pixels (the box's most common colour is the background, the pixel farthest from it the ink),
# and whether two labels of one canvas overlap.
CANVAS_TEXT = """async () => {
  const { labelsOf } = await import('/js/views/canvas-text.js');
  const lum = (r, g, b) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
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
      const w = Math.min(canvas.width - x, Math.ceil((l.w + 2) * dpr)),
        h = Math.min(canvas.height - y, Math.ceil((l.h + 2) * dpr));
      if (w < 1 || h < 1) return;
      const px = ctx.getImageData(x, y, w, h).data;
      const page = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number);
      const counts = new Map(); let bg = null, most = 0;
      const rgb = (k) => { const a = px[k + 3] / 255;
        return [0, 1, 2].map((c) => Math.round(px[k + c] * a + page[c] * (1 - a))); };
      for (let k = 0; k < px.length; k += 4) {
        const c = rgb(k).join(','); const n = (counts.get(c) || 0) + 1; counts.set(c, n);
        if (n > most) { most = n; bg = c; } }
      const B = lum(...bg.split(',').map(Number));
      let best = 1;
      for (let k = 0; k < px.length; k += 4) best = Math.max(best, ratio(lum(...rgb(k)), B));
      const overlaps = labels.slice(i + 1)
        .filter((o) => l.x < o.x + o.w - 0.5 && o.x < l.x + l.w - 0.5
          && l.y < o.y + o.h - 0.5 && o.y < l.y + l.h - 0.5)
        .map((o) => o.text);
      out.push({ canvas: name, text: l.text, px: l.px, ratio: Math.round(best * 100) / 100, overlaps });
    });
  }
  return out;
}"""


def canvas_text(pg: Any) -> list[dict[str, Any]]:
    pg.evaluate("""async () => { const { labels } = await import('/js/views/canvas-text.js'); labels.on = true;
      const a = window.loaderscope; a.timeline.invalidate(); a.hist.invalidate();
      a.lastSlowPanels = 0; a.lastPanels = 0; a.wake(); }""")
    pg.evaluate(FRAMES, 3)
    drawn(pg)
    return pg.evaluate(CANVAS_TEXT)


def shoot(pg: Any, tmp_path: Path, name: str, full_page: bool = False) -> None:
    path = tmp_path / f"{name}.png"
    pg.screenshot(path=str(path), full_page=full_page)
    out = os.environ.get("LOADERSCOPE_SHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / path.name)


# Resolves after n animation frames: "time passed on the page" without a wall-clock sleep.
FRAMES = """(n) => new Promise((done) => { let k = 0;
  const tick = () => (++k >= n ? done() : requestAnimationFrame(tick)); requestAnimationFrame(tick); })"""

# What a frozen view shows: the clock the picture draws with, and every fetching lane's elapsed time.


CONTRAST = """() => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const over = (top, under) => { const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat(1); };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const background = (el) => { const layers = [];
    for (let e = el; e; e = e.parentElement) { const b = parse(getComputedStyle(e).backgroundColor);
      if (b[3] > 0) { layers.push(b); if (b[3] >= 1) break; } }
    let c = [11, 16, 22, 1]; for (let i = layers.length - 1; i >= 0; i--) c = over(layers[i], c); return c; };
  const opacity = (el) => { let o = 1;
    for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity); return o; };
  const scale = (el) => { let s = 1; for (let e = el; e; e = e.parentElement) { const t = getComputedStyle(e).transform;
    const m = t && t !== 'none' && t.match(/matrix\\(([^,]+)/); if (m) s *= Number(m[1]); } return s; };
  const bad = []; let checked = 0;
  const all = document.querySelectorAll('body *');
  for (const el of all) {
    if (['SCRIPT', 'STYLE', 'OPTION', 'OPTGROUP', 'CANVAS'].includes(el.tagName)) continue;
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())
      || (['SELECT', 'BUTTON'].includes(el.tagName) && el.textContent.trim())
      || (el.tagName === 'INPUT' && ['text', 'number', ''].includes(el.type) && (el.value || el.placeholder));
    if (!own) continue;
    if (el.closest('[hidden]') || el.closest(':disabled') || el.getClientRects().length === 0) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility !== 'visible' || opacity(el) < 0.99) continue;
    const r = el.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;
    checked += 1;
    const size = parseFloat(cs.fontSize) * scale(el);
    const bg = background(el);
    const fg = over(parse(cs.color), bg);
    const L1 = lum(fg), L2 = lum(bg);
    const ratio = (Math.max(L1, L2) + 0.05) / (Math.min(L1, L2) + 0.05);
    if (size < 11 - 0.01 || ratio < 4.5) {
      bad.push({ text: (el.textContent || el.value || '').trim().slice(0, 50),
        tag: el.tagName, id: el.id, cls: String(el.className),
        size: Math.round(size * 10) / 10, ratio: Math.round(ratio * 100) / 100, color: cs.color });
    }
  }
  return { checked, bad };
}"""

NO_SIDEWAYS = "() => document.documentElement.scrollWidth <= window.innerWidth"


def opened(
        start_server: Any, pg: Any, logdir: Path) -> tuple[Any, dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The run served from ``logdir`` and opened in the page, every event applied: the server, the run's
    brief, the Python summary of its events, and the events."""
    server = start_server(logdir=str(logdir))
    with server.client() as http:
        run = wait_for(lambda: next((r for r in http.get("/api/runs").json()
                                     if r.get("name") == "train" and r["status"] == "done"), None),
                       what="the recorded run listed")
    _, events = read_trace(next(logdir.rglob("*.trace.jsonl")))
    pg.goto(f"{server.page_url}&run={run['id']}")
    applied(pg, run)
    drawn(pg)
    return server, run, summary(reduce(events)), events  # type: ignore[arg-type]


def sim_events(scenario: str, params: dict[str, Any], **costs: Any) -> list[dict[str, Any]]:
    from loaderscope import sim
    from loaderscope.scenarios.catalog import get
    from loaderscope.sim.costs import CostModel

    sc = get(scenario)
    validated = sc.params.model_validate(params)
    return sim.simulate(sc.build(validated), run_id=f"{scenario}-trace", scenario=scenario,
                        params=validated.model_dump(), costs=CostModel(**costs))


def write(path: Path, events: list[dict[str, Any]], **meta: Any) -> Path:
    from loaderscope.traces import jsonl as trace

    return trace.write_trace(path, events, run=events[0]["run"], scenario=events[0].get("scenario"), mode="sim", **meta)
