"""The compare view's memory in chromium: two real recorded runs served from a logdir by a real dashboard,
the same 600,000 metadata paths read by two workers, once as a list of Python strings (copy-on-read,
pytorch/pytorch#13246) and once as one numpy array. The view gives each process's USS, PSS and RSS at its
last sample and at its highs, and the host's rows, as ``stats.summary()['memory']`` gives them for the same
events, and each run's memory verdicts as the run page words them: copy-on-read named for the strings, not
for the array. A run without memory samples is said so. Each run's timeline has the run page's memory lanes,
drawn and hovered with the sample in force. At 1440×900 and 800×700 nothing sticks out
sideways, no number breaks and axe-core finds nothing. The screenshots go to the test's tmp dir;
``LOADERSCOPE_SCREENSHOT_DIR=dir`` also copies them there (compare_memory_1440.png is docs/compare_memory.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.diagnosis import findings
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from tests.browser.memory_runs import COMPARE_TIMELINE, QUIET, hover, light_or_full, mb, memory_rows, record, seconds
from tests.browser.pages import FRAMES, WAIT_MS, Page, shoot
from tests.browser.test_views_themes_and_axe import axe
from tests.conftest import wait_for

pytestmark = pytest.mark.browser

# the same paths as tests/probe/memory.py's Strings; `array` keeps them in one numpy array of bytes
SCRIPT = r'''
import sys
import numpy as np
from torch.utils.data import DataLoader, Dataset
from loaderscope import watch

N = 600_000

class Paths(Dataset):
    def __init__(self, array):
        items = [f"/data/shard-{i % 997:04d}/sample-{i:08d}.jpg" for i in range(N)]
        self.items = np.array(items, dtype="S") if array else items
    def __len__(self):
        return N
    def __getitem__(self, i):
        return len(self.items[i])

name = sys.argv[2]
loader = DataLoader(Paths(name == "array"), batch_size=4000, num_workers=2, shuffle=True, persistent_workers=True)
train = watch(loader, logdir=sys.argv[1], name=name)
for epoch in range(2):  # the second epoch's samples see what the first one copied
    for batch in train:
        pass
'''

# diagnosis.py's memory findings, as memory-compare.js picks them
CODES = {"copy_on_read", "memory_leak", "headroom", "shm_low", "in_flight", "shm_full"}


def record_three(root: Path) -> None:
    runs = root / "runs"
    record(root, runs, SCRIPT, "strings")
    record(root, runs, SCRIPT, "array")
    record(root, runs, QUIET, "quiet", LOADERSCOPE_MEMORY="0")


@pytest.fixture(scope="module")
def logdir(made_once: Any) -> Path:
    return Path(made_once("compare-memory", record_three)) / "runs"


# a cap on one request, not a pace: a dashboard reading three fresh traces on a loaded 2-core box once took
# longer than the client's 30 s default to answer
READ_TIMEOUT = 120


def events_of(server: Any, run_id: str) -> list[dict[str, Any]]:
    """Every event of a finished run, through the REST route the page reads."""
    with server.client() as http:
        body = http.get(f"/api/runs/{run_id}/events", params={"after": -1, "limit": 10_000},
                        timeout=READ_TIMEOUT).json()
    assert body["events"][-1]["seq"] == body["last_seq"]
    return list(body["events"])


def runs_by_name(server: Any, names: set[str]) -> dict[str, str]:
    """The ids of the finished runs called ``names``, once the dashboard lists them all."""
    def listed() -> dict[str, str] | None:
        with server.client() as http:
            found = {r["name"]: r["id"] for r in http.get("/api/runs", timeout=READ_TIMEOUT).json()
                     if r.get("name") in names and r["status"] == "done"}
        return found if found.keys() == names else None

    ids: dict[str, str] = wait_for(listed, what=f"runs {names} listed")
    return ids


def expected(events: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    """Python's memory summary and memory verdicts of a run."""
    s = reduce(events)
    return summary(s)["memory"], [f.text for f in findings(s) if f.code in CODES]


def cells(memory: dict[str, Any] | None, name: str, at: str) -> list[str]:
    """The three figures the view shows for process ``name`` of one run at ``at``: last sample or highest."""
    procs = ([memory["main"]] if memory and memory["main"] else []) + (memory["workers"] if memory else [])
    proc = next((p for p in procs if (p["worker"] is None and name == "main") or name == f"worker {p['worker']}"),
                None)
    if proc is None:
        return ["–"] * 3
    keys = ("uss", "pss", "rss") if at == "last" else ("high_uss", "high_pss", "high_rss")
    return [mb(proc[k]) for k in keys]


SHOWN = """() => ({
  procs: [...document.querySelectorAll('[data-testid=compare-memory-proc]')].map((r) =>
    ({ name: r.dataset.name, at: r.dataset.at, cells: [...r.querySelectorAll('td')].map((c) => c.textContent) })),
  host: [...document.querySelectorAll('[data-testid=compare-memory-row]')].map((r) =>
    ({ key: r.dataset.key, cells: [...r.querySelectorAll('td')].map((c) => c.textContent) })),
  verdicts: [...document.querySelectorAll('[data-testid=compare-memory-verdicts]')].map((ul) =>
    [...ul.querySelectorAll('li')].map((li) => ({ text: li.textContent, muted: li.classList.contains('muted') }))),
  missing: document.getElementById('compare-memory-missing').hidden ? null
    : document.getElementById('compare-memory-missing').textContent,
})"""

# Within the memory card: cells whose number is drawn on more than one line, and tables wider than the card
BROKEN = """() => { const card = document.getElementById('compare-memory');
  const split = [...card.querySelectorAll('td, th')].filter((c) => { const r = document.createRange();
    r.selectNodeContents(c); return new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1; });
  const wide = [...card.querySelectorAll('table')].filter((t) =>
    t.getBoundingClientRect().right > card.getBoundingClientRect().right + 0.5);
  return { split: split.map((c) => c.textContent), wide: wide.map((t) => t.id),
    sideways: document.getElementById('compare').scrollWidth - window.innerWidth }; }"""


# the memory card at the top of the view, under the view's sticky bar
SCROLL = """() => { const view = document.getElementById('compare');
  view.scrollTop += document.getElementById('compare-memory').getBoundingClientRect().top
    - view.querySelector('.compare-bar').getBoundingClientRect().bottom - 8; }"""


def open_compare(pg: Any, server: Any, a: str, b: str) -> dict[str, Any]:
    pg.goto(f"{server.page_url}&compare={a},{b}")
    pg.wait_for_function("() => document.getElementById('compare').dataset.ready === 'true'", timeout=WAIT_MS)
    shown: dict[str, Any] = pg.evaluate(SHOWN)
    return shown


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_compare_shows_both_runs_memory_and_names_copy_on_read_for_the_strings_only(
        start_server: Any, page: Page, logdir: Path, tmp_path: Path) -> None:
    server = start_server(logdir=str(logdir))
    ids = runs_by_name(server, {"strings", "array", "quiet"})
    (mem_a, said_a), (mem_b, said_b) = (expected(events_of(server, ids[n])) for n in ("strings", "array"))
    assert mem_a is not None and mem_b is not None
    assert any(t.startswith("copy-on-read: ") for t in said_a), said_a  # the recordings show what they are for
    assert not any(t.startswith("copy-on-read: ") for t in said_b), said_b

    pg = page.page
    shown = open_compare(pg, server, ids["strings"], ids["array"])
    names = ["main", *(f"worker {w['worker']}" for w in mem_a["workers"])]
    assert [(p["name"], p["at"]) for p in shown["procs"]] == [(n, at) for n in names for at in ("last", "high")]
    for row in shown["procs"]:
        want = cells(mem_a, row["name"], row["at"]) + cells(mem_b, row["name"], row["at"])
        assert row["cells"] == want, (row, want)
    for row in shown["host"]:
        want = [mb(None if row["key"] == "shm_high" and not m["shm_total"] else m[row["key"]]) for m in (mem_a, mem_b)]
        assert row["cells"] == want, (row, want)
    assert [r["key"] for r in shown["host"]] == ["headroom", "headroom_low", "total_high", "in_flight_high",
                                                  "shm_high"]
    assert [[v["text"] for v in side] for side in shown["verdicts"]] == [said_a, said_b or ["no memory verdict"]]
    assert shown["missing"] is None
    assert axe(pg) == []  # the two-row header, the row groups: read as tables by a screen reader

    for width, height in ((1440, 900), (800, 700)):
        pg.set_viewport_size({"width": width, "height": height})
        pg.evaluate(SCROLL)
        pg.evaluate(FRAMES, 2)
        layout = pg.evaluate(BROKEN)
        assert layout == {"split": [], "wide": [], "sideways": 0}, (width, layout)
        shoot(pg, tmp_path, f"compare_memory_{width}")

    # a run recorded without memory samples: its side says so, the other keeps its figures
    shown = open_compare(pg, server, ids["quiet"], ids["strings"])
    assert shown["missing"] == "A has no memory samples: its column is empty"
    assert all(row["cells"][:3] == ["–"] * 3 for row in shown["procs"])
    assert [row["cells"][3:] for row in shown["procs"]] == [cells(mem_a, n, at) for n in names
                                                             for at in ("last", "high")]
    assert shown["verdicts"][0] == [{"text": "no memory samples", "muted": True}]
    assert [v["text"] for v in shown["verdicts"][1]] == said_a


# Per memory lane of the compare view's timeline, its pixels right of the names in the theme's USS,
# shared and headroom colours (colors.js PALETTE, the one the lanes are drawn with).
LANE_PIXELS = """async () => { const { PALETTE } = await import('/js/model/colors.js');
  const { GUTTER } = await import('/js/views/timeline-paint.js');
  const tl = window.loaderscope.compare.timeline, c = tl.canvas, ctx = c.getContext('2d');
  const k = c.width / c.getBoundingClientRect().width;
  const count = (row, hex) => { const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    const d = ctx.getImageData(Math.ceil(GUTTER * k), Math.floor(row.y * k), Math.floor(c.width - GUTTER * k),
      Math.floor(row.h * k)).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (want.every((v, j) => Math.abs(d[i + j] - v) <= 4)) n++;
    return n; };
  return tl.geo.rows.filter((r) => r.kind === 'memory' || r.kind === 'headroom').map((r) => ({ kind: r.kind,
    track: r.track.label, key: r.key ?? null, uss: count(r, PALETTE.memUss), shared: count(r, PALETTE.memShared),
    headroom: count(r, PALETTE.headroom) })); }"""

# Per process lane of the compare view's timeline: its tallest column of USS and shared pixels, in device pixels,
# with the lane's height and the canvas's device pixels per CSS pixel.
LANE_HEIGHTS = """async () => { const { PALETTE } = await import('/js/model/colors.js');
  const { GUTTER } = await import('/js/views/timeline-paint.js');
  const tl = window.loaderscope.compare.timeline, c = tl.canvas, ctx = c.getContext('2d');
  const k = c.width / c.getBoundingClientRect().width;
  const rgb = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  const fills = [rgb(PALETTE.memUss), rgb(PALETTE.memShared)];
  return tl.geo.rows.filter((r) => r.kind === 'memory').map((r) => {
    const x0 = Math.ceil(GUTTER * k), y0 = Math.floor(r.y * k), w = Math.floor(c.width - x0), h = Math.floor(r.h * k);
    const d = ctx.getImageData(x0, y0, w, h).data;
    let tallest = 0;
    for (let x = 0; x < w; x++) {
      let n = 0;
      for (let y = 0; y < h; y++) {
        const i = (y * w + x) * 4;
        if (fills.some((f) => f.every((v, j) => Math.abs(d[i + j] - v) <= 4))) n++;
      }
      tallest = Math.max(tallest, n);
    }
    return { track: r.track.label, key: r.key, tallest, h: r.h, k };
  }); }"""


def highest_full_rss(series: list[Any], key: int) -> int:
    """The highest RSS of process ``key`` in the series' full points: how tall its lane's USS and shared stand."""
    return max(p[3] for point in series if point[3] is not None for p in point[4] if p[0] == key)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_compare_timeline_draws_each_runs_memory_lanes_and_hovers_their_samples(
        start_server: Any, page: Page, logdir: Path, tmp_path: Path) -> None:
    """Each run's timeline in the compare view has the run page's memory lanes: a lane under each worker
    (USS solid, shared above it), the main process's and the host's headroom, hovered with the figures of
    the sample in force, on that run's own clock, both runs' lanes on one scale."""
    server = start_server(logdir=str(logdir))
    ids = runs_by_name(server, {"strings", "array"})
    series = {name: reduce(events_of(server, ids[name])).memory.series for name in ("strings", "array")}
    pg = page.page
    pg.set_viewport_size({"width": 1440, "height": 900})
    open_compare(pg, server, ids["strings"], ids["array"])
    pg.wait_for_function("() => window.loaderscope.compare.timeline.geo?.rows.some((r) => r.kind === 'memory')",
                         timeout=WAIT_MS)
    rows = memory_rows(pg, COMPARE_TIMELINE)
    for side in ("A", "B"):
        lanes = [r for r in rows if r["track"].startswith(f"{side} · ")]
        assert [r["kind"] for r in lanes] == ["memory", "memory", "scale", "memory", "headroom"], rows
        assert [r["key"] for r in lanes if r["kind"] == "memory"] == [0, 1, -1], lanes
    drawn = pg.evaluate(LANE_PIXELS)
    assert len(drawn) == 8, drawn
    for lane in drawn:  # each lane is drawn from the run's first sample to its end, on the run's own scale
        assert lane["headroom"] > 0 if lane["kind"] == "headroom" else lane["shared"] > 0, lane
    # the strings' workers hold tens of MB of copied pages, solid USS; the array's 14 MB is under a pixel
    assert all(lane["uss"] > 0 for lane in drawn if lane["track"].startswith("A · ") and lane["kind"] == "memory")

    for side, name in (("A", "strings"), ("B", "array")):
        points = series[name]
        # samples are paced by their cost: a busy machine takes as few as two; the last pair with worker 0
        i = max(i for i in range(len(points) - 1) if any(p[0] == 0 for p in points[i][4]))
        t = (points[i][0] + points[i + 1][0]) / 2  # between two samples: the earlier one holds
        lane = next(r for r in rows if r["track"].startswith(f"{side} · ") and r["key"] == 0)
        text = hover(pg, lane, t, COMPARE_TIMELINE)
        assert text.startswith(f"{lane['track']} · worker 0 at "), text
        assert light_or_full(points, i, 0) in text, (text, points[i])
        assert f"sampled at {seconds(points[i][0])}" in text, text
    pg.mouse.move(0, 0)
    pg.evaluate(f"() => {COMPARE_TIMELINE.replace('loaderscope', 'window.loaderscope')}.canvas"
                ".scrollIntoView({block: 'center'})")
    shoot(pg, tmp_path, "compare_memory_lanes_1440")

    # Both runs on one scale, the highest RSS of either: each lane stands as tall as its own highest RSS on it.
    # At 4 device pixels a CSS pixel a lane is 48 pixels tall, so B's lanes on A's scale (its main process at
    # 290 of A's 335 MB) stand 3-6 pixels lower than on a scale of their own. The mouse passing redraws them.
    pg.context.new_cdp_session(pg).send("Emulation.setDeviceMetricsOverride", {
        "width": 1440, "height": 900, "deviceScaleFactor": 4, "mobile": False})
    box = pg.evaluate(f"() => {COMPARE_TIMELINE.replace('loaderscope', 'window.loaderscope')}"
                      ".canvas.getBoundingClientRect().toJSON()")
    pg.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    pg.mouse.move(0, 0)
    pg.wait_for_function(f"() => {{ const c = {COMPARE_TIMELINE.replace('loaderscope', 'window.loaderscope')}.canvas;"
                         " return c.width === 4 * Math.round(c.getBoundingClientRect().width); }", timeout=WAIT_MS)
    top = max(p[3] for name in series for point in series[name] for p in point[4])
    for lane in pg.evaluate(LANE_HEIGHTS):
        name = "strings" if lane["track"].startswith("A · ") else "array"
        want = (lane["h"] - 2) * lane["k"] * highest_full_rss(series[name], lane["key"]) / top
        # the pixels at the USS's top and the shared's, part covered, blend their colours: up to two fewer
        assert want - 2.5 <= lane["tallest"] <= want + 1, (lane, want, top)
