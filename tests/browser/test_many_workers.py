"""Many workers: 64 simulated workers drawn as compact lanes in two columns.

A simulated run with one stalled fetch and one killed worker, watched in Debian's chromium: every
worker gets a lane, the lane labels do not overlap, the stuck and the dead lane read as such.
``LOADERSCOPE_SCREENSHOT_DIR=docs`` copies the screenshot there (docs/workers64.png).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import FRAMES, WAIT_MS, Page, applied

pytestmark = pytest.mark.browser


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] < b["x"] + b["width"] - 0.5 and b["x"] < a["x"] + a["width"] - 0.5
            and a["y"] < b["y"] + b["height"] - 0.5 and b["y"] < a["y"] + a["height"] - 0.5)


def test_64_workers_render_legibly(server: Any, page: Page, tmp_path: Path) -> None:
    pg = page.page
    body = {"scenario": "uniform", "mode": "sim",
            "params": {"num_workers": 64, "dataset_size": 4000, "batch_size": 4},
            "costs": {"worker_factor": {"5": 4}, "die": {"task": 100, "after_ms": 15000}}}
    with server.client() as http:
        answer = http.post("/api/runs", json=body)
    assert answer.status_code == 201, answer.text
    run = answer.json()
    final = server.wait_status(run["id"], timeout=90)
    pg.goto(f"{server.page_url}&run={run['id']}")
    applied(pg, final)
    lanes = pg.locator('[data-testid="worker-lane"]')
    assert lanes.count() == 64
    # the moment the worker fetching task 100 is killed (a stalled fetch would show the same way,
    # but the server's run detail currently fails on the simulator's worker_stuck stack: see the report)
    at = pg.evaluate("""() => { const p = window.loaderscope.player;
        for (let i = 0; i < p.length; i++) if (p.event(i).kind === 'worker_died') return i + 1;
        return -1; }""")
    assert at > 1, "the run has a dead worker"
    pg.evaluate(f"window.loaderscope.pause(); window.loaderscope.moveTo({at})")
    pg.wait_for_function("() => document.querySelector('[data-testid=worker-lane][data-status=died]')", timeout=WAIT_MS)
    pg.evaluate("document.getElementById('params-box').open = false")
    pg.wait_for_function("() => window.loaderscope.pipeline.settled()", timeout=WAIT_MS)
    # every label is on screen, at least 16 px tall, and no two overlap (once the layout has settled:
    # closing the form resizes the picture, and the labels move with it)
    boxes: list[Any] = []
    for _ in range(50):
        previous, boxes = boxes, [lanes.nth(i).locator(".lane-label").bounding_box() for i in range(64)]
        if boxes == previous:
            break
        pg.evaluate(FRAMES, 2)  # a layout step runs at an animation frame
    assert all(b is not None and b["height"] >= 16 and b["width"] >= 50 for b in boxes), boxes[:3]
    for i in range(64):
        for j in range(i + 1, 64):
            assert not overlap(boxes[i], boxes[j]), f"labels of lanes {i} and {j} overlap"
    names = [lanes.nth(i).locator(".lane-label b").text_content() for i in range(64)]
    assert names == [f"worker {i}" for i in range(64)]
    dead = pg.locator('[data-testid="worker-lane"][data-status="died"]')
    assert "DIED" in (dead.first.text_content() or "")
    assert "100" in (dead.first.text_content() or "")
    # the dead lane's name is drawn red, not in the ordinary ink
    red = pg.evaluate("getComputedStyle(document.querySelector("
                      "'[data-testid=worker-lane][data-status=died] .lane-label b')).color")
    ink = pg.evaluate("getComputedStyle(document.querySelector("
                      "'[data-testid=worker-lane][data-status=idle] .lane-label b,"
                      " [data-testid=worker-lane][data-status=fetching] .lane-label b')).color")
    assert red != ink
    shot = tmp_path / "workers64.png"
    pg.screenshot(path=str(shot), full_page=True)
    if os.environ.get("LOADERSCOPE_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["LOADERSCOPE_SCREENSHOT_DIR"]) / shot.name)


PACED = """() => {
  const tl = window.loaderscope.timeline, clock = { now: 1, live: false, paced: true };
  tl.fit();
  const forced = tl.draw(clock);             // asked for (fit): drawn at once, paced or not
  tl.hover = { x: 300, y: 40 };              // something visible changed...
  const second = tl.draw(clock);             // ...but a paced redraw waits for its turn
  const deferred = tl.deferred;
  tl.lastDrawWall -= 10_000;                 // its turn has come
  const later = tl.draw(clock);
  tl.hover = null;
  const unpaced = tl.draw({ now: 1, live: false, paced: false });  // not following: at once
  return { forced, second, deferred, later, unpaced, afterDeferred: tl.deferred };
}"""


def test_following_a_stream_paces_the_timeline(server: Any, page: Page) -> None:
    """Following a server stream, the timeline redraws a few times a second, not every
    frame, and says so (``deferred``) so that the page asks for the frame that draws it later."""
    page.page.goto(server.page_url)
    page.page.wait_for_function("() => !!window.loaderscope")
    r = page.page.evaluate(PACED)
    assert r == {"forced": True, "second": False, "deferred": True, "later": True, "unpaced": True,
                 "afterDeferred": False}, r
