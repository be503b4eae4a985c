"""The job view: a job of 12 ranks is a table of ranks, names the slowest, and drills into one;
the rank drilled into carries the diagnosis, the run picker and the URL with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderscope import sim
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import summary
from loaderscope.scenarios.catalog import get
from loaderscope.traces.jsonl import read_trace, write_trace
from tests.browser.pages import VIEWPORT, WAIT_MS
from tests.conftest import wait_for

pytestmark = pytest.mark.browser


def _rank_traces(directory: Path, ranks: int) -> list[str]:
    """Simulated ranks of one job; rank r is a little slower than rank r-1, so the last one is slowest."""
    files = []
    for rank in range(ranks):
        plan = get("uniform").plan({"num_workers": 4, "dataset_size": 160, "sample_ms": 5 + rank})
        events = sim.simulate(plan, run_id=f"r{rank}", scenario="uniform", params={})
        for event in events:
            event["rank"] = rank
            if event["kind"] == "run_start":
                event.update(job="job8", world_size=ranks, wall_start=1000.0, name="train.py")
        files.append(str(write_trace(directory / f"rank{rank}.jsonl", events, f"r{rank}", mode="sim")))
    return files


def test_job_view_names_the_slowest_rank_and_drills_in(browser: Any, start_server: Any, tmp_path: Path) -> None:
    ranks = 12
    live = start_server(traces=_rank_traces(tmp_path, ranks))
    with live.client() as http:
        runs = http.get("/api/runs").json()
    assert sorted(r["rank"] for r in runs) == list(range(ranks)) and {r["job"] for r in runs} == {"job8"}
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(f"{live.page_url}&run={next(r['id'] for r in runs if r['rank'] == 0)}")
    rows = page.get_by_test_id("rank-card")
    rows.nth(ranks - 1).wait_for(timeout=WAIT_MS)
    assert rows.count() == ranks, "a row per rank"
    page.wait_for_function("() => document.querySelector('[data-testid=slowest-rank]')"
                           "?.textContent.includes('step 39')",
                           timeout=WAIT_MS)
    assert page.get_by_test_id("slowest-rank").get_attribute("data-rank") == str(ranks - 1)
    last = page.locator(f"[data-testid=rank-card][data-rank='{ranks - 1}']")
    assert "slowest in 40 of 40" in (last.text_content() or "")
    # past a handful of ranks the timeline draws the rank shown and the slowest one, not all 12
    page.wait_for_function("() => window.loaderscope.timeline.tracks.map(t => t.label).join()"
                           f" === 'rank 0,rank {ranks - 1}'")
    page.get_by_test_id("job-table").locator("th", has_text="last to deliver").click()
    assert rows.first.get_attribute("data-rank") == str(ranks - 1), "sorted: the slowest rank first"
    # rows that move keep the keyboard's focus: a click that does not take it sorts them again
    last.focus()
    page.get_by_test_id("job-table").locator("th", has_text="rank").first.dispatch_event("click")
    assert rows.first.get_attribute("data-rank") == "0", "sorted by rank again"
    assert page.evaluate("() => document.activeElement?.dataset.rank") == str(ranks - 1)
    page.get_by_test_id("job-table").locator("th", has_text="last to deliver").click()
    last.click()
    page.wait_for_function(f"() => window.loaderscope.track.rank === {ranks - 1}")
    page.wait_for_function(f"() => document.querySelector(\"[data-testid=rank-card][data-rank='{ranks - 1}']\")"
                           ".textContent.includes('shown')")
    page.wait_for_function(f"() => window.loaderscope.timeline.tracks.map(t => t.label).join() === 'rank {ranks - 1}'")
    page.screenshot(path=str(tmp_path / "ranks12.png"), full_page=True)
    page.close()


def test_the_selected_rank_carries_diagnosis_picker_and_url(browser: Any, start_server: Any, tmp_path: Path) -> None:
    """Clicking a rank's row moves everything that speaks of one rank onto it; the rates are the
    terminal's; an ended job without shard digests says the shards were not checked, and why."""
    files = _rank_traces(tmp_path, 3)
    live = start_server(traces=files)
    with live.client() as http:
        runs = {r["rank"]: r["id"] for r in http.get("/api/runs").json()}
        diagnoses = {rank: http.get(f"/api/runs/{run}").json()["diagnosis"] for rank, run in runs.items()}
    assert diagnoses[0] != diagnoses[2], "the ranks' diagnoses differ: following the selection is visible"
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{live.page_url}&run={runs[0]}")
    rows = page.get_by_test_id("rank-card")
    rows.nth(2).wait_for(timeout=WAIT_MS)
    page.wait_for_function("() => document.querySelector('[data-testid=shards]').textContent.includes('not checked')",
                           timeout=WAIT_MS)
    assert "no rank reported which samples it read" in (page.get_by_test_id("shards").text_content() or "")
    for rank, path in enumerate(files):
        state = LoaderState()
        for event in read_trace(path)[1]:
            state.apply(event)
        rate = summary(state)["batches_per_s"]
        cell = page.locator(f"[data-testid=rank-card][data-rank='{rank}'] td").nth(2)
        wait_for(lambda: cell.text_content() == f"{rate:.1f}",  # noqa: B023 (called within the iteration)
                 what=f"rank {rank}'s batches/s {rate:.1f}")

    def diagnosis_shown() -> str:
        return page.locator("#diagnosis").text_content() or ""

    wait_for(lambda: diagnoses[0][0] in diagnosis_shown(), what="rank 0's diagnosis")
    page.locator("[data-testid=rank-card][data-rank='2']").click()
    page.wait_for_function("() => window.loaderscope.track.rank === 2")
    wait_for(lambda: f"run={runs[2]}" in page.url, what="the URL names rank 2's run")
    assert page.locator("#run-picker").input_value() == runs[2]
    wait_for(lambda: diagnoses[2][0] in diagnosis_shown() and diagnoses[0][0] not in diagnosis_shown(),
             what="rank 2's diagnosis")
    page.screenshot(path=str(tmp_path / "rank2_selected.png"), full_page=True)
    page.go_back()  # back to rank 0, within the job: nothing is opened again
    page.wait_for_function("() => window.loaderscope.track.rank === 0")
    assert page.evaluate("() => window.loaderscope.tracks.length") == 3
    wait_for(lambda: page.locator("#run-picker").input_value() == runs[0], what="the picker back on rank 0")
    wait_for(lambda: diagnoses[0][0] in diagnosis_shown(), what="rank 0's diagnosis again")
    page.close()
    assert not errors, errors
