"""What the browser tests share: Debian's chromium and its flags, the page with the errors it logged, and
the waits on the page's state, a screenshot kept, and the pan/zoom/scrub run the frame-time test and
bench/bigtrace.py time. Their fixtures (``chromium``, ``browser``, ``page``) are in conftest.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1440, "height": 900}
WAIT_MS = 60_000  # the cap on a wait for the page's state (not a pace: a busy machine needs it)


class Page:
    """A page plus the errors it logged: a test fails on any uncaught page error."""

    def __init__(self, browser: Any, color_scheme: str = "dark") -> None:
        # the page follows the browser's theme; these tests see the dark one, which the README's
        # screenshots show (tests/browser/test_views_themes_and_axe.py checks both)
        self.context = browser.new_context(viewport=VIEWPORT, color_scheme=color_scheme)
        # Playwright's own waits (a click, a locator) are waits on state: on a busy machine they may
        # take longer than its 30 s default, and a cap only matters when the state never comes.
        self.context.set_default_timeout(WAIT_MS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("console", self._console)
        self.expected_status: set[int] = set()

    def _console(self, message: Any) -> None:
        # chromium logs every non-2xx fetch; a test that provokes one says which status it expects
        if message.type == "error" and not any(f"status of {s}" in message.text for s in self.expected_status):
            self.errors.append(f"console: {message.text}")

    def close(self) -> None:
        self.context.close()


# The page has drawn everything it was sent: no events queued, no worker fetching, every token landed.
SETTLED = """() => { const a = window.loaderscope;
  return a.queue.length === a.queueHead && [...a.state.workers.values()].every((w) => w.status !== 'fetching')
    && a.pipeline.settled() && [...a.pipeline.tokens.values()].every((t) => !t.dying); }"""
# Resolves after `n` animation frames.
FRAMES = ("(n) => new Promise((done) => {"
          " const f = () => (--n > 0 ? requestAnimationFrame(f) : done()); requestAnimationFrame(f); })")
# The picture's tokens have landed and no panel refresh is waiting for its turn (they are throttled).
DRAWN = "() => window.loaderscope.pipeline.settled() && !window.loaderscope.scheduler.pending"


def settle(page: Any, timeout: float = WAIT_MS) -> None:
    page.wait_for_function(SETTLED, timeout=timeout)


def applied(page: Any, run: dict[str, Any], timeout: float = WAIT_MS) -> None:
    """Wait until the page has received and applied every event of the ended ``run``.

    The stream's cursor reaches the last seq before the page applies what it queued (a frame at a
    time, within a budget): on a busy machine, well before.
    """
    page.wait_for_function(f"""() => {{ const a = window.loaderscope;
      return a.stream.lastSeq === {run['last_seq']} && a.queue.length === a.queueHead; }}""", timeout=timeout)


def drawn(page: Any, timeout: float = WAIT_MS) -> None:
    """Wait until the page shows its current state: what a screenshot should catch."""
    page.evaluate(FRAMES, 2)  # the frame that the last action asked for has run
    page.wait_for_function(DRAWN, timeout=timeout)


def rcvd(page: Any) -> int:
    return int(page.text_content('[data-testid="cursor-rcvd"]') or -1)


def start_from_form(page: Any, scenario: str, **params: Any) -> str:
    """Choose a scenario, fill parameters, press Start; returns the run id from the address bar."""
    page.wait_for_selector(f'#scenario option[value="{scenario}"]', state="attached", timeout=WAIT_MS)
    page.select_option("#scenario", scenario)
    if params:
        page.click("#params-box summary")
        for name, value in params.items():
            page.fill(f"#param-{name}", str(value))
    page.click("#btn-start")
    page.wait_for_url(lambda url: "run=" in url, timeout=WAIT_MS)
    return page.url.split("run=", 1)[1].split("&", 1)[0]


def shoot(pg: Any, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / f"{name}.png"
    pg.screenshot(path=str(shot))
    if os.environ.get("LOADERSCOPE_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["LOADERSCOPE_SCREENSHOT_DIR"]) / shot.name)
    return shot


INTERACT = """async () => {
  const app = window.loaderscope, c = document.querySelector('.timeline-canvas');
  const r = c.getBoundingClientRect(), y = r.top + 60;
  const frame = () => new Promise((done) => requestAnimationFrame(() => done()));
  const p = app.perf; p.frameMs.length = 0; p.frames = 0; for (const k in p.split) p.split[k] = 0;
  const t0 = performance.now(); const drawn = [];
  for (let i = 0; i < 40; i++) {   // zoom in around the middle, one wheel step per frame
    c.dispatchEvent(new WheelEvent('wheel', { deltaY: -120, clientX: r.left + r.width * 0.6, clientY: y,
                                              bubbles: true, cancelable: true }));
    await frame(); drawn.push(app.timeline.lastFrameMs);
  }
  c.dispatchEvent(new PointerEvent('pointerdown', { clientX: r.left + 700, clientY: y, pointerId: 1, bubbles: true }));
  for (let i = 0; i < 60; i++) {   // drag to pan, one move per frame
    c.dispatchEvent(new PointerEvent('pointermove', { clientX: r.left + 700 - i * 8, clientY: y, pointerId: 1,
                                                      bubbles: true }));
    await frame(); drawn.push(app.timeline.lastFrameMs);
  }
  c.dispatchEvent(new PointerEvent('pointerup', { clientX: r.left + 220, clientY: y, pointerId: 1, bubbles: true }));
  for (let i = 0; i < 40; i++) {   // and all the way out again
    c.dispatchEvent(new WheelEvent('wheel', { deltaY: 150, clientX: r.left + r.width * 0.6, clientY: y,
                                              bubbles: true, cancelable: true }));
    await frame(); drawn.push(app.timeline.lastFrameMs);
  }
  const seconds = (performance.now() - t0) / 1000;
  const fm = [...p.frameMs].sort((a, b) => a - b), dm = drawn.sort((a, b) => a - b);
  // scrubbing: seek to 50 random points, each a restore plus at most 4096 re-applied events
  const s0 = performance.now();
  for (let i = 0; i < 50; i++) app.moveTo(Math.floor(((i * 7919) % 50) / 50 * app.player.length));
  const seek = (performance.now() - s0) / 50;
  return { fps: 140 / seconds, frames: p.frames, p50: fm[fm.length >> 1], p95: fm[Math.floor(fm.length * 0.95)],
           max: fm[fm.length - 1], timeline_p95: dm[Math.floor(dm.length * 0.95)], seek_ms: seek,
           mode: app.timeline.mode,
           heap_mb: performance.memory ? performance.memory.usedJSHeapSize / 1e6 : null };
}"""
