"""Frame time of the page under load, measured in Debian's chromium (headless, software rendering).

The page is fed synthetic events (``/?demo=synth``, no run process needed) at a fixed rate; it
applies them in batches once per animation frame and draws at most once per frame. We record the
frame times the page measures itself and check it keeps up (no backlog) without long frames.
Numbers are printed for the closing note; bounds are loose because CI machines are shared.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.test_browser import ARGS, CHROMIUM, VIEWPORT, browser  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MEASURE = """() => {
  const app = window.loaderscope, fm = [...app.perf.frameMs].sort((a, b) => a - b);
  return {frames: app.perf.frames, applied: app.perf.applied, backlog: app.queue.length - app.queueHead,
          avg: fm.reduce((a, b) => a + b, 0) / fm.length, p50: fm[fm.length >> 1],
          p95: fm[Math.floor(fm.length * 0.95)], max: fm[fm.length - 1], mode: app.timeline.mode,
          lanes: document.querySelectorAll('[data-testid=worker-lane]').length,
          split: Object.fromEntries(Object.entries(app.perf.split).map(([k, v]) => [k, +(v / app.perf.frames).toFixed(2)]))};
}"""


def measure(browser: Any, server: Any, workers: int, rate: int, seconds: float = 4.0) -> dict[str, Any]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    batches = int(rate * (seconds + 2) / 6) + 50  # about 6 events per batch
    page.goto(f"{server.url}/?demo=synth&workers={workers}&rate={rate}&batches={batches}&step=0.0001")
    page.wait_for_function("() => window.loaderscope && window.loaderscope.perf.frames > 10", timeout=30_000)
    page.wait_for_timeout(1000)  # warm up, then measure a clean window
    page.evaluate("() => { const p = window.loaderscope.perf; p.frameMs.length = 0; p.applied = 0; p.frames = 0;"
                  " for (const k in p.split) p.split[k] = 0; }")
    page.wait_for_timeout(seconds * 1000)
    result = page.evaluate(MEASURE)
    result["events_per_s"] = result.pop("applied") / seconds
    result["fps"] = result["frames"] / seconds
    context.close()
    assert not errors, errors
    print(f"\nperf workers={workers} rate={rate}/s: " + json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                                                 for k, v in result.items()}))
    return result


def test_eight_workers_thousands_of_events(browser: Any, server: Any) -> None:  # noqa: F811
    r = measure(browser, server, workers=8, rate=3000)
    assert r["lanes"] == 8
    assert r["events_per_s"] > 2500, "the page keeps up with the stream"
    assert r["backlog"] < 3000
    assert r["p50"] < 16, "half the frames fit in a 60 Hz budget"


def test_thirty_two_workers_fifty_thousand_events(browser: Any, server: Any) -> None:  # noqa: F811
    r = measure(browser, server, workers=32, rate=50_000)
    assert r["lanes"] == 32
    assert r["events_per_s"] > 40_000, "the page keeps up with the stream"
    assert r["p50"] < 33, "frames stay under two 60 Hz budgets"
