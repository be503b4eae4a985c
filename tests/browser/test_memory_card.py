"""The page's memory card on a real copy-on-read run: a script whose dataset keeps its metadata in a list
of Python strings is recorded into a logdir and opened from a real dashboard in chromium; the card gives
each process's figures as ``stats.summary`` gives them for the same events, and the diagnosis names
copy-on-read. The timeline's memory lanes draw the same samples: hovering one gives that sample's figures,
and a run without memory samples has no memory lanes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.state import reduce
from tests.browser.memory_runs import QUIET, ROWS, RUN_TIMELINE, hover, light_or_full, mb, memory_rows, record, seconds
from tests.browser.pages import Page, shoot
from tests.browser.views import canvas_text, opened

pytestmark = pytest.mark.browser

STRINGS = r'''
import sys
from torch.utils.data import DataLoader, Dataset
from loaderscope import watch

class Paths(Dataset):
    def __init__(self):
        self.items = [f"/data/shard-{i % 997:04d}/sample-{i:08d}.jpg" for i in range(600_000)]
    def __len__(self):
        return len(self.items)
    def __getitem__(self, i):
        return len(self.items[i])

train = watch(DataLoader(Paths(), batch_size=4000, num_workers=2, shuffle=True, persistent_workers=True),
              logdir=sys.argv[1], name=sys.argv[2])
for epoch in range(2):  # the second epoch's samples see what the first one copied
    for batch in train:
        pass
'''


def recorded_into(root: Path, source: str, **env: str) -> Path:
    """``source``'s run (named train, as ``opened`` finds it) in ``root/runs``."""
    record(root, root / "runs", source, "train", **env)
    return root / "runs"


@pytest.fixture(scope="module")
def recorded(made_once: Any) -> Path:
    return Path(made_once("memory-card", lambda root: recorded_into(root, STRINGS))) / "runs"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_memory_card_gives_each_process_and_the_diagnosis_names_copy_on_read(
        start_server: Any, page: Page, recorded: Path, tmp_path: Path) -> None:
    pg = page.page
    _, _, stats, _ = opened(start_server, pg, recorded)
    memory = stats["memory"]
    procs = [memory["main"], *memory["workers"]]
    card = pg.locator('[data-testid="memory-card"]')
    card.wait_for(state="visible")
    rows = [[cell.strip() for cell in row.split("\t")] for row in
            card.locator("tbody tr").evaluate_all("rows => rows.map((r) => r.innerText)")]
    assert rows == [["main" if p["worker"] is None else f"worker {p['worker']}", mb(p["uss"]),
                     mb(p["shared"]), mb(p["rss"]), mb(p["high_rss"])] for p in procs], rows
    titles = card.locator("tbody tr td:first-child").evaluate_all("cells => cells.map((c) => c.title)")
    assert titles == [f"pid {p['pid']}" for p in procs]  # the pid in the tooltip: the panel has no room for it
    text = card.inner_text()
    assert f"host headroom {mb(memory['headroom'])} MB now, {mb(memory['headroom_low'])} MB at the lowest" in text
    diagnosis = pg.locator("#diagnosis").inner_text()
    assert "copy-on-read: the workers' private memory (USS) grew" in diagnosis, diagnosis
    shoot(pg, tmp_path, "memory_copy_on_read")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_timelines_memory_lanes_hover_the_samples_figures_legibly_in_both_themes(
        start_server: Any, page: Page, recorded: Path, tmp_path: Path) -> None:
    pg = page.page
    pg.set_viewport_size({"width": 800, "height": 900})
    _, _, stats, events = opened(start_server, pg, recorded)
    series = reduce(events).memory.series
    assert len(series) >= 2, series  # samples are paced by their cost: a busy machine takes fewer
    rows = memory_rows(pg)
    lanes = {r["key"]: r for r in rows if r["kind"] == "memory"}
    assert sorted(lanes) == [-1, *[w["worker"] for w in stats["memory"]["workers"]]], rows
    headroom = next(r for r in rows if r["kind"] == "headroom")
    for i in sorted({0, len(series) // 2 - 1, len(series) - 2}):  # between two samples: the earlier one holds
        t = (series[i][0] + series[i + 1][0]) / 2
        for key, lane in lanes.items():
            sampled = next((p for p in series[i][4] if p[0] == key), None)
            if sampled is None:  # a process this sample did not read (a worker not started yet, or gone)
                continue
            _, uss, shared, rss = sampled
            who = "main process" if key == -1 else f"worker {key}"
            text = hover(pg, lane, t)
            assert text.startswith(f"{who} at "), text
            assert light_or_full(series, i, key) in text, (text, series[i])
            assert f"sampled at {seconds(series[i][0])}" in text, text
        text = hover(pg, headroom, t)
        assert f"headroom {mb(series[i][1])} MB\nsampled at {seconds(series[i][0])}" in text, text
    # the worker's last sample's figures are the summary's: its RSS, and the USS and shared of its last full one
    # (a sample may come after the workers exited, of the main process alone)
    last = stats["memory"]["workers"][0]
    at = max(point[0] for point in series if any(p[0] == last["worker"] for p in point[4]))
    text = hover(pg, lanes[last["worker"]], at + 1e-4)
    assert f"RSS {mb(last['rss'])} MB" in text and f"USS {mb(last['uss'])} MB · shared {mb(last['shared'])}" in text
    assert any(point[3] is None for point in series), "light samples between the full ones"
    pg.mouse.move(0, 0)
    for scheme in ("light", "dark"):
        if pg.evaluate("() => window.loaderscope.theme.effective") != scheme:
            pg.click("#btn-theme")
        labels = [lab for lab in canvas_text(pg) if lab["canvas"] == "timeline-canvas"]
        texts = [lab["text"] for lab in labels]
        assert "main memory" in texts and "host headroom" in texts, texts
        assert any(t.startswith("memory lanes 0 to ") for t in texts), texts
        bad = [lab for lab in labels if lab["px"] < 11 or lab["ratio"] < 4.5 or lab["overlaps"]]
        assert not bad, (scheme, bad)
        pg.evaluate("() => window.loaderscope.timeline.canvas.scrollIntoView({block: 'center'})")
        shoot(pg, tmp_path, f"memory_lanes_{scheme}_800")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_memory_lanes_come_with_memory_samples_only(start_server: Any, page: Page, recorded: Path,
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    pg = page.page
    opened(start_server, pg, recorded)
    assert [r["kind"] for r in memory_rows(pg)] == ["memory", "memory", "scale", "memory", "headroom"]
    quiet = recorded_into(tmp_path_factory.mktemp("quiet"), QUIET, LOADERSCOPE_MEMORY="0")
    _, _, stats, events = opened(start_server, pg, quiet)
    assert stats["memory"] is None and not any(e["kind"] == "memory" for e in events)
    kinds = [r["kind"] for r in pg.evaluate(ROWS, RUN_TIMELINE)["rows"]]
    assert kinds.count("worker") == 2 and not memory_rows(pg), kinds
