"""What the browser's memory tests share: recording a script's loader into a logdir (a real DataLoader, real
worker processes), a run without memory samples, the page's way of writing megabytes and run times, and a
timeline's memory lanes as drawn and hovered (the run page's timeline and the compare view's are the same
``TimelineView``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import wait_for

# two workers, no memory sampling asked for or not: LOADERSCOPE_MEMORY=0 records it without samples
QUIET = r'''
import sys
from torch.utils.data import DataLoader
from loaderscope import watch

train = watch(DataLoader(list(range(512)), batch_size=16, num_workers=2), logdir=sys.argv[1], name=sys.argv[2])
for batch in train:
    pass
'''


def record(root: Path, logdir: Path, source: str, *args: str, **env: str) -> None:
    """Run ``source`` as a script (``sys.argv[1]`` the logdir, then ``args``), with only ``env`` of
    loaderscope's variables set."""
    script = root / f"script-{len(list(root.glob('script-*')))}.py"
    script.write_text(source)
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {"OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(script), str(logdir), *args], env=base | env, check=True, timeout=240,
                   capture_output=True)


def mb(value: int | None) -> str:
    """Bytes as the page writes them: MB (10^6 bytes), one decimal; none as a dash."""
    return "–" if value is None else f"{value / 1e6:.1f}"


def seconds(t: float) -> str:
    """A run time as the page's fmtDuration writes it, from 1 ms to a minute."""
    assert 1e-3 <= t < 60, t
    return f"{t * 1e3:.{2 if t < 0.01 else 1}f} ms" if t < 1 else f"{t:.2f} s"


# A timeline's rows as drawn (``TIMELINE`` names it): kind, worker key (memory lanes), track label and
# clock offset, top and height, and the canvas's box.
ROWS = """(name) => { const tl = name.split('.').reduce((o, k) => o[k], window);
  const box = tl.canvas.getBoundingClientRect();
  return { left: box.left, top: box.top, rows: tl.geo.rows.map((r) => ({ kind: r.kind, key: r.key ?? null,
    wid: r.wid ?? null, track: r.track.label, offset: r.track.offset, y: r.y, h: r.h })) }; }"""

RUN_TIMELINE = "loaderscope.timeline"  # the run page's
COMPARE_TIMELINE = "loaderscope.compare.timeline"  # the compare view's


def memory_rows(pg: Any, timeline: str = RUN_TIMELINE) -> list[dict[str, Any]]:
    return [r for r in pg.evaluate(ROWS, timeline)["rows"] if r["kind"] in ("memory", "headroom", "scale")]


def hover(pg: Any, row: dict[str, Any], t: float, timeline: str = RUN_TIMELINE) -> str:
    """The timeline's tooltip with the pointer on ``row`` at ``t`` on its run's clock."""
    # off the canvas first: leaving it hides the tooltip at once, so the text waited for below is this
    # row's, not the last hover's still shown until the next frame redraws it
    pg.mouse.move(0, 0)
    pg.evaluate("(name) => name.split('.').reduce((o, k) => o[k], window).canvas.scrollIntoView({block: 'center'})",
                timeline)
    box = pg.evaluate(ROWS, timeline)
    x = pg.evaluate("([name, t]) => name.split('.').reduce((o, k) => o[k], window).X(t)",
                    [timeline, t + row["offset"]])
    pg.mouse.move(box["left"] + x, box["top"] + row["y"] + row["h"] / 2)
    tip = pg.locator(".timeline .tooltip:not([hidden])")
    wait_for(lambda: tip.count() == 1 and "sampled at" in tip.inner_text(),
             what=f"a memory lane's tooltip, not {tip.all_inner_texts()!r}")
    return str(tip.inner_text())


def light_or_full(series: list[Any], i: int, key: int) -> str:
    """What the hover says of process ``key`` at the series' point ``i``: a full sample's USS, shared and RSS, or a
    light one's RSS with the USS and shared of the last full point before it."""
    _, uss, shared, rss = next(p for p in series[i][4] if p[0] == key)
    if uss is not None:
        return f"USS {mb(uss)} MB · shared {mb(shared)} MB · RSS {mb(rss)} MB"
    full = next(p for point in reversed(series[:i]) if point[3] is not None for p in point[4] if p[0] == key)
    return f"RSS {mb(rss)} MB, sampled at {seconds(series[i][0])}\nUSS {mb(full[1])} MB · shared {mb(full[2])} MB"
