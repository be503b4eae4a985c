"""The run picker in a real browser: an open page lists runs as they start, with no reload
and no click, each loader by name, rank, epochs, batches and start time, a job's loaders grouped.

Debian's chromium via Playwright (tests/browser/test_live_run.py's fixture); the screenshot lands in the
test's tmp dir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderscope.traces.jsonl import TraceWriter
from tests.browser.pages import VIEWPORT
from tests.conftest import wait_for
from tests.logdirs import real_run

pytestmark = pytest.mark.browser

PICKER = """() => [...document.querySelectorAll('#run-picker option')].filter(o => o.value)
  .map(o => ({id: o.value, text: o.textContent, group: o.parentElement.label ?? null}))"""


def write(path: Path, name: str, rank: int, wall_start: float, samples: int) -> None:
    """A real loader's run as `loaderscope record` writes it for one rank of job `train`."""
    events = real_run(samples, num_workers=0)
    events[0].update(name=name, job="train", rank=rank, world_size=2, wall_start=wall_start)
    writer = TraceWriter(path, "producer", mode="real")
    writer.write(events)
    writer.close()


def test_the_picker_lists_new_runs_by_name_as_they_start(browser: Any, start_server: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "train").mkdir(parents=True)
    server = start_server(logdir=str(logs), logdir_poll=0.1)
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.page_url)
    page.wait_for_function("() => document.querySelector('#run-picker').dataset.runs === '0'")

    def listed() -> list[dict[str, Any]]:
        return page.evaluate(PICKER)

    write(logs / "train" / "rank1-train.trace.jsonl", "get_train_dataloader", 1, 1_000_000.0, 40)
    first = wait_for(lambda: listed(), timeout=30, what="the first run pushed to the open page")
    assert "get_train_dataloader" in first[0]["text"] and "rank 1" in first[0]["text"]
    write(logs / "train" / "rank0-eval.trace.jsonl", "get_eval_dataloader", 0, 1_000_030.0, 8)
    write(logs / "train" / "rank0-train.trace.jsonl", "get_train_dataloader", 0, 1_000_000.0, 40)
    runs = wait_for(lambda: len(listed()) == 3 and listed(), timeout=30, what="three runs listed without a reload")
    assert [r["text"].split(" · ")[:2] for r in runs] == [
        ["get_train_dataloader", "rank 0"], ["get_train_dataloader", "rank 1"], ["get_eval_dataloader", "rank 0"]]
    assert {r["group"] for r in runs} == {runs[0]["group"]}
    assert runs[0]["group"].startswith("job train · 2 loaders × 2 ranks")
    # the counts come from each file's index until a viewer opens it: batches now, epochs once read
    assert " · 10 batches · " in runs[0]["text"] and " · 2 batches · " in runs[2]["text"]
    page.select_option("#run-picker", runs[2]["id"])
    wait_for(lambda: "1 epoch · 2 batches" in next(r["text"] for r in listed() if r["id"] == runs[2]["id"]),
             timeout=30, what="the opened run's epochs in the picker")
    # a logdir job: its table comes from the traces (GET /api/jobs/{job}/table), a row per loader of each
    # rank (the eval loader's rank 0 shown, the train loader's two ranks beside it); no other rank is opened
    eval_row = "[data-testid=job-row][data-loader='get_eval_dataloader'][data-rank='0']"
    page.wait_for_selector(eval_row + ".selected")  # marked once the viewed run's own table row is known
    assert page.locator("[data-testid=job-row]").count() == 3
    assert page.evaluate("() => window.loaderscope.tracks.map(t => t.runId)") == [runs[2]["id"]]
    page.select_option("#run-picker", runs[0]["id"])
    page.wait_for_function("() => document.querySelector('[data-testid=job-row].selected')?.dataset.loader === "
                           "'get_train_dataloader'")
    page.locator("[data-testid=job-row][data-rank='1']").click()  # a rank of the open loader opens on demand
    page.wait_for_function("() => window.loaderscope.tracks.length === 2")
    assert page.evaluate("() => window.loaderscope.tracks.map(t => t.runId)") == [runs[0]["id"], runs[1]["id"]]
    page.screenshot(path=str(tmp_path / "picker.png"))
    page.close()
    assert not errors, errors
