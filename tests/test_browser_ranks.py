"""The job view: a job of 12 ranks is a table of ranks, names the slowest, and drills into one (issue 17)."""

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


def test_job_view_names_the_slowest_rank_and_drills_in(browser: Any, start_server: Any, tmp_path: Path) -> None:  # noqa: F811
    ranks = 12
    live = start_server(traces=_rank_traces(tmp_path, ranks))
    with live.client() as http:
        runs = http.get("/api/runs").json()
    assert sorted(r["rank"] for r in runs) == list(range(ranks)) and {r["job"] for r in runs} == {"job8"}
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live.page_url}&run={next(r['id'] for r in runs if r['rank'] == 0)}")
    rows = page.get_by_test_id("rank-card")
    rows.nth(ranks - 1).wait_for(timeout=30_000)
    assert rows.count() == ranks, "a row per rank"
    page.wait_for_function("() => document.querySelector('[data-testid=slowest-rank]')?.textContent.includes('step 39')",
                           timeout=30_000)
    assert page.get_by_test_id("slowest-rank").get_attribute("data-rank") == str(ranks - 1)
    last = page.locator(f"[data-testid=rank-card][data-rank='{ranks - 1}']")
    assert "slowest in 40 of 40" in (last.text_content() or "")
    # past a handful of ranks the timeline draws the rank shown and the slowest one, not all 12
    page.wait_for_function(f"() => window.loaderscope.timeline.tracks.map(t => t.label).join() === 'rank 0,rank {ranks - 1}'")
    page.get_by_test_id("job-table").locator("th", has_text="last to deliver").click()
    assert rows.first.get_attribute("data-rank") == str(ranks - 1), "sorted: the slowest rank first"
    last.click()
    page.wait_for_function(f"() => window.loaderscope.track.rank === {ranks - 1}")
    page.wait_for_function(f"() => document.querySelector(\"[data-testid=rank-card][data-rank='{ranks - 1}']\")"
                           ".textContent.includes('shown')")
    page.wait_for_function(f"() => window.loaderscope.timeline.tracks.map(t => t.label).join() === 'rank {ranks - 1}'")
    page.screenshot(path=str(tmp_path / "ranks12.png"), full_page=True)
    page.close()
