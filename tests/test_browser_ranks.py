"""Eight ranks of one job, side by side (issue 8: 8 ranks render legibly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderscope import scenarios, sim
from loaderscope.trace import write_trace
from tests.test_browser import VIEWPORT, browser  # noqa: F401 (fixture)

pytestmark = pytest.mark.browser


def _rank_traces(directory: Path, ranks: int) -> list[str]:
    """Simulated ranks of one job; rank r is a little slower than rank r-1, so the last one is slowest."""
    files = []
    for rank in range(ranks):
        plan = scenarios.get("uniform").plan({"num_workers": 4, "dataset_size": 160, "sample_ms": 5 + rank})
        events = sim.simulate(plan, run_id=f"r{rank}", scenario="uniform", params={})
        for event in events:
            event["rank"] = rank
            if event["kind"] == "run_start":
                event.update(job="job8", world_size=ranks, wall_start=1000.0, name="train.py")
        files.append(str(write_trace(directory / f"rank{rank}.jsonl", events, f"r{rank}", mode="sim")))
    return files


def test_eight_ranks_side_by_side(browser: Any, start_server: Any, tmp_path: Path) -> None:  # noqa: F811
    live = start_server(traces=_rank_traces(tmp_path, 8))
    with live.client() as http:
        runs = http.get("/api/runs").json()
    assert sorted(r["rank"] for r in runs) == list(range(8)) and {r["job"] for r in runs} == {"job8"}
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live.page_url}&run={next(r['id'] for r in runs if r['rank'] == 0)}")
    cards = page.get_by_test_id("rank-card")
    cards.nth(7).wait_for(timeout=30_000)
    assert cards.count() == 8
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=rank-card]')]"
                           ".some(c => /slowest in 40 of 40/.test(c.textContent))", timeout=30_000)
    assert "slowest in 40 of 40" in cards.nth(7).text_content()  # the slowest rank is named
    boxes = [cards.nth(i).bounding_box() for i in range(8)]
    for i, a in enumerate(boxes):  # legible: no two cards overlap
        for b in boxes[i + 1:]:
            assert a["x"] + a["width"] <= b["x"] + 1 or b["x"] + b["width"] <= a["x"] + 1 or \
                a["y"] + a["height"] <= b["y"] + 1 or b["y"] + b["height"] <= a["y"] + 1
    page.screenshot(path=str(tmp_path / "ranks8.png"), full_page=True)
    page.close()
