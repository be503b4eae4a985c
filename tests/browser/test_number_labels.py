"""One number per quantity on the page, and each number says what it is.

A real training loop (a peek before each epoch, real workers) is recorded into a logdir and opened
from a real dashboard in chromium: the rate counter, the epoch counter, the run picker, the timeline's
epoch lines and the diagnosis give the figures ``stats.summary`` gives for the same events; stepping
event by event never moves the clock backwards, though the trace's own times do; the diagnosis at an
early playhead says it is too early to tell.
"""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import WAIT_MS, Page, shoot
from tests.browser.views import opened

pytestmark = pytest.mark.browser

PEEKING = r'''
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset
from loaderscope import watch

class Slow(Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.tensor([float(i)])

train = watch(DataLoader(Slow(), batch_size=4, num_workers=2), logdir=sys.argv[1], name="train")
for epoch in range(2):
    next(iter(train))  # the pytorch/examples habit: a look at one batch first
    for batch in train:
        time.sleep(0.002)
'''


def record_peeking(root: Path) -> None:
    script = root / "peeking.py"
    script.write_text(PEEKING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {"OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(script), str(root / "runs")], env=env, check=True, timeout=240,
                   capture_output=True)


@pytest.fixture(scope="module")
def recorded(made_once: Any) -> Path:
    """A logdir holding one real run: two epochs, two peeks."""
    return Path(made_once("numbers", record_peeking)) / "runs"


def counter(pg: Any, key: str) -> tuple[str, str]:
    cell = pg.locator(f'[data-counter="{key}"]')
    return cell.locator(".v").inner_text(), cell.locator(".k").inner_text()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_pages_numbers_are_the_summarys_and_say_what_they_are(start_server: Any, page: Page,
                                                                  recorded: Path, tmp_path: Path) -> None:
    pg = page.page
    server, run, stats, events = opened(start_server, pg, recorded)
    assert (stats["epochs"], stats["peeks"]) == (2, 2)
    rate, label = counter(pg, "rate")
    assert label == "batches / s (run)" and rate == f"{stats['batches_per_s']:.1f}", (rate, label, stats)
    epochs, _ = counter(pg, "epoch")
    assert epochs.split(" · ")[0] == "2", epochs  # the two peeks are no epochs
    assert server.run(run["id"])["epochs"] == 2  # read whole once opened
    option = f'#run-picker option[value="{run["id"]}"]'
    pg.wait_for_function(f"() => document.querySelector('{option}')?.textContent.includes('2 epochs')",
                         timeout=WAIT_MS)
    lines = pg.evaluate("() => window.loaderscope.store.epochs.map((e) => e.peek ? 'peek' : 'epoch')")
    assert lines == ["peek", "epoch", "peek", "epoch"], lines
    diagnosis = pg.locator("#diagnosis").inner_text()
    assert f"{stats['batches_per_s']:.1f} batches/s" in diagnosis, diagnosis
    shoot(pg, tmp_path, "numbers_whole_run")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stepping_never_moves_the_clock_backwards_and_an_early_playhead_is_too_early(
        start_server: Any, page: Page, recorded: Path, tmp_path: Path) -> None:
    pg = page.page
    _, _, _, events = opened(start_server, pg, recorded)
    times = [e["t"] for e in events]
    assert any(b < a for a, b in pairwise(times)), "a worker's events come after later ones"
    clock = pg.evaluate("""() => { const p = window.loaderscope.player, seen = [];
      for (let i = 1; i <= p.length; i++) { p.seek(i); seen.push(p.time); } return seen; }""")
    assert all(b >= a for a, b in pairwise(clock)), "the clock went backwards"
    assert clock[-1] == max(times)
    third = [i for i, e in enumerate(events) if e["kind"] == "yield"][2]
    pg.fill("#pb-scrub", str(third + 1))  # the event slider: the playhead just after the third batch
    pg.wait_for_function("() => document.querySelector('#diagnosis').innerText.includes('too early to tell')",
                         timeout=WAIT_MS)
    shoot(pg, tmp_path, "numbers_too_early")
