"""The page's memory card on a real copy-on-read run: a script whose dataset keeps its metadata in a list
of Python strings is recorded into a logdir and opened from a real dashboard in chromium; the card gives
each process's figures as ``state.summary`` gives them for the same events, and the diagnosis names
copy-on-read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_browser import Page, browser, page  # noqa: F401 (fixtures)
from tests.test_browser_numbers import opened
from tests.test_browser_playback import shoot

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
              logdir=sys.argv[1], name="train")
for epoch in range(2):  # the second epoch's samples see what the first one copied
    for batch in train:
        pass
'''


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("memory")
    script, logdir = root / "strings.py", root / "runs"
    script.write_text(STRINGS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {"OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(script), str(logdir)], env=env, check=True, timeout=240, capture_output=True)
    return logdir


def mb(value: int | None) -> str:
    return "–" if value is None else f"{value / 1e6:.1f}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_memory_card_gives_each_process_and_the_diagnosis_names_copy_on_read(
        start_server: Any, page: Page, recorded: Path, tmp_path: Path) -> None:  # noqa: F811
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
