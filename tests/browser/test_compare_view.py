"""The compare view in chromium: two real runs of the dashboard, 1 worker against 2, side by side.

The numbers, settings, histogram counts and diagnosis the page shows must be those of
``compare.py`` on the same events. The screenshot (1440×900, the first screen of the view) goes to
``test-artifacts/compare.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loaderscope.model.compare import compare
from tests.browser.pages import FRAMES, WAIT_MS, Page

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def events_of(server: Any, run_id: str) -> list[dict[str, Any]]:
    """Every event of a finished run, through the same REST route the page reads."""
    with server.client() as http:
        body = http.get(f"/api/runs/{run_id}/events", params={"after": -1, "limit": 10_000}).json()
    assert body["events"][-1]["seq"] == body["last_seq"]
    return body["events"]


def shown(pg: Any) -> dict[str, Any]:
    """What the view shows, read back from its elements."""
    return pg.evaluate("""() => {
      const texts = (id) => [...document.querySelectorAll(`#${id} li:not(.muted)`)].map((li) => li.textContent);
      return {
        metrics: [...document.querySelectorAll('[data-testid=compare-metric]')].map((r) => ({
          key: r.dataset.key, a: Number(r.dataset.a), b: Number(r.dataset.b),
          cells: [...r.cells].map((c) => c.textContent)})),
        settings: [...document.querySelectorAll('[data-testid=compare-setting]')]
          .map((r) => [...r.cells].map((c) => c.textContent)),
        hist: [...document.querySelectorAll('[data-testid=compare-hist]')].map((c) => JSON.parse(c.dataset.counts)),
        onlyA: texts('compare-only-a'), onlyB: texts('compare-only-b'),
        both: [...document.querySelectorAll('#compare-both li:not(.muted)')].map((li) => li.dataset.changed),
        bothText: texts('compare-both'),
        overflow: document.getElementById('compare').scrollWidth - document.getElementById('compare').clientWidth,
      };
    }""")


def test_compare_two_real_runs(server: Any, page: Page) -> None:
    runs = [server.start_run("uniform", num_workers=n) for n in (1, 2)]
    for run in runs:
        server.wait_status(run["id"])
    expected = compare(*(events_of(server, run["id"]) for run in runs))
    pg = page.page
    pg.goto(server.page_url)
    pg.click("#btn-compare")
    pg.wait_for_selector(f'#compare-b option[value="run:{runs[1]["id"]}"]', state="attached", timeout=WAIT_MS)
    pg.select_option("#compare-a", f"run:{runs[0]['id']}")
    pg.select_option("#compare-b", f"run:{runs[1]['id']}")
    pg.wait_for_function("() => document.getElementById('compare').dataset.ready === 'true'", timeout=WAIT_MS)
    view = shown(pg)

    assert view["settings"] == [["num_workers", "1", "2"]]
    assert [m["key"] for m in view["metrics"]] == [m["key"] for m in expected["metrics"]]
    for got, want in zip(view["metrics"], expected["metrics"], strict=True):
        assert got["a"] == pytest.approx(want["a"], rel=1e-9) and got["b"] == pytest.approx(want["b"], rel=1e-9)
    throughput = view["metrics"][0]["cells"]
    assert throughput[1] == f"{expected['metrics'][0]['a']:.1f} batches/s"
    assert throughput[3] == f"×{expected['metrics'][0]['ratio']:.2f}"
    assert view["hist"] == [[w["counts"] for w in expected["histograms"][side]] for side in ("a", "b")]
    diff = expected["diagnosis"]
    assert view["onlyA"] == diff["only_a"] and view["onlyB"] == diff["only_b"]
    assert view["both"] == [str(p["changed"]).lower() for p in diff["both"]]
    assert all(p["a"] in text for p, text in zip(diff["both"], view["bothText"], strict=True))
    assert view["overflow"] <= 0, "nothing sticks out sideways at 1440 px"

    # both timelines on one axis from 0 s: each run's first fetch lies near the left edge
    geo = pg.evaluate("() => { const tl = window.loaderscope.compare.timeline;"
                      " return {t0: tl.view.t0, offsets: tl.tracks.map((t) => t.offset),"
                      " labels: tl.tracks.map((t) => t.label)}; }")
    # The axis starts at the loaders' first events (after their run_start: spawning workers takes a
    # few tens of ms, more on a busy machine), not at 0 s of either process's clock.
    first = pg.evaluate("() => Math.min(...window.loaderscope.compare.timeline.tracks.map((t) =>"
                        " t.store.tfirst + t.offset))")
    assert 0 <= geo["t0"] <= first + 1e-6 and len(geo["offsets"]) == 2
    assert geo["labels"][0].startswith("A · uniform") and geo["labels"][1].startswith("B · uniform")

    ARTIFACTS.mkdir(exist_ok=True)
    pg.evaluate(FRAMES, 2)  # the timeline draws at the next animation frame
    pg.screenshot(path=str(ARTIFACTS / "compare.png"))
    pg.evaluate("document.getElementById('compare').scrollTop = 10000")
    pg.evaluate(FRAMES, 2)
    pg.screenshot(path=str(ARTIFACTS / "compare-bottom.png"))
    (ARTIFACTS / "compare.json").write_bytes(orjson.dumps(expected, option=orjson.OPT_INDENT_2))

    pg.keyboard.press("Escape")  # back to the page as it was
    pg.wait_for_function("() => document.getElementById('compare').hidden", timeout=WAIT_MS)
    pg.screenshot(path=str(ARTIFACTS / "compare-closed.png"), clip={"x": 0, "y": 0, "width": 1440, "height": 120})

    # /?compare=A,B opens the same view directly, B before A this time
    pg.goto(f"{server.page_url}&compare={runs[1]['id']},{runs[0]['id']}")
    pg.wait_for_function("() => document.getElementById('compare').dataset.ready === 'true'", timeout=WAIT_MS)
    assert shown(pg)["settings"] == [["num_workers", "2", "1"]]
