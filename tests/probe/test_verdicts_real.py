"""Every verdict true on a real job: real loaders, real worker processes, real training-loop habits."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from loaderscope import InstrumentedDataLoader
from loaderscope.model.diagnosis import diagnosis
from loaderscope.model.diagnosis import findings as findings_of
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.model.wording import JS_PATH, render_js, say
from loaderscope.runner import Collector, run_real
from tests.conftest import TORCH_DEATH_ERRORS

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")


def consistent(findings: list[str]) -> None:
    """What one finding points at, another names; no throughput verdict beside a failure; no '1 results'."""
    text = "\n".join(findings)
    if "see stragglers" in text or "(see stragglers" in text:
        assert any(f.startswith("straggler: ") for f in findings), findings
    if "reorder cost)" in text:
        assert any(f.startswith("reorder cost: ") for f in findings), findings
    failed = any(f.startswith(("stuck: worker", "error", "timeout:")) or " died by " in f for f in findings)
    assert not (failed and "is the bottleneck" in text), findings
    for singular in ("1 results", "about 1 workers", "1 batches", "1 indices", "1 iterators"):
        assert f" {singular}" not in text and not text.startswith(singular), (singular, findings)


@pytest.fixture
def busy_cpus() -> Iterator[None]:
    """Two processes spinning for the whole test: the contention of a shared machine."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_straggler_is_named_under_cpu_contention(busy_cpus: None) -> None:
    # the page's straggler run, as it runs: default parameters, 4 workers, worker 0 4× slower
    collector = Collector()
    run_real("straggler", {}, collector)
    stats = summary(collector.state)
    assert [slow["worker"] for slow in stats["stragglers"]] == [0], stats["workers"]
    findings = diagnosis(collector.state)
    assert any(f.startswith("straggler: worker 0 ") for f in findings), findings
    consistent(findings)


def test_a_dead_worker_leaves_no_throughput_verdict() -> None:
    # 2 workers × prefetch 2 dispatch tasks 0-3 at once; task 5 (sample 21) goes out only after batch 1
    # is yielded (torch's _process_data → _try_put_index), so batches precede the death on any machine.
    collector = Collector()
    with pytest.raises(TORCH_DEATH_ERRORS):
        run_real("crash_worker", {"num_workers": 2}, collector)
    assert collector.state.batches >= 2
    findings = diagnosis(collector.state)
    assert any(" died by " in f for f in findings), findings
    assert say("no_verdict", why=say("why.died")) in findings
    assert summary(collector.state)["peeks"] == 0  # an epoch cut short by a death is no peek
    consistent(findings)


def test_a_stuck_worker_has_no_verdict_until_it_recovers_and_then_is_said_to_have() -> None:
    collector = Collector()
    run_real("stuck_worker", {"num_workers": 2, "stuck_after": 0.3, "stuck_seconds": 1.0, "dataset_size": 32,
                              "sample_ms": 2}, collector)
    stuck = [e for e in collector.events if e["kind"] == "worker_stuck"]
    assert stuck, "the stuck fetch was noted"
    while_stuck = [f.text for f in findings_of(reduce(collector.events, until_seq=stuck[-1]["seq"]))]
    assert any(f.startswith("stuck: worker") for f in while_stuck), while_stuck
    assert not any("is the bottleneck" in f for f in while_stuck), while_stuck
    consistent(while_stuck)
    # the fetch ended after all and the run went on to its end: said so, and the run gets its verdict
    after = findings_of(collector.state)
    texts = [f.text for f in after]
    recovered = [f.text for f in after if f.code == "stuck_recovered"]
    assert len(recovered) == 1 and recovered[0].startswith(f"recovered: worker {stuck[-1]['worker']} was stuck "
                                                           f"on task {stuck[-1]['idx']}"), texts
    assert " then finished it: the fetch took " in recovered[0]
    assert not any(f.startswith("stuck: worker") for f in texts), texts
    assert {f.code for f in after} & {"step_bound", "input_bound", "startup_bound"}, texts
    consistent(texts)


class Pause(torch.utils.data.Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(float(index))


def test_peeks_are_not_epochs_and_evaluation_is_not_step_time() -> None:
    """The pytorch/examples habit (a look at one batch before each epoch) and an evaluation pass with
    another loader between epochs: 2 epochs and 2 peeks, and the step is the time between batches."""
    collector = Collector()
    train = InstrumentedDataLoader(Pause(), batch_size=4, num_workers=2, sink=collector)
    evaluation = torch.utils.data.DataLoader(Pause(), batch_size=4, num_workers=2)
    evaluating = []
    for _ in range(2):
        next(iter(train))  # the peek: its iterator is dropped at once
        for _ in train:
            time.sleep(0.002)
        started = time.monotonic()
        for _ in evaluation:
            time.sleep(0.02)
        evaluating.append(time.monotonic() - started)
    train.close()
    stats = summary(collector.state)
    assert (stats["epochs"], stats["peeks"], stats["peek_batches"]) == (2, 2, 1)
    assert stats["peek_worker_starts"] == 4  # each peek started both workers
    # the step: the mean of the loop's own time between two batches of one epoch
    gaps, last = [], None
    for e in collector.events:
        if e["kind"] == "epoch_start":
            last = None
        elif e["kind"] == "yield":
            if last is not None:
                gaps.append(e["t"] - e["wait"] - last)
            last = e["t"]
    assert stats["step_time"] == pytest.approx(statistics.fmean(gaps))
    # the first evaluation lies between epochs (the second one after the last batch)
    assert stats["between_epochs"] >= evaluating[0]
    findings = diagnosis(collector.state)
    assert any(f.startswith("peeks: 2 iterators left after at most 1 batch ") for f in findings), findings
    consistent(findings)


def test_plurals_read_right() -> None:
    assert say("n.results", n=1) == "1 result" and say("n.results", n=2) == "2 results"
    assert say("n.workers", n=1) == "1 worker"
    assert say("n.indices_read", n=1) == "1 index read"


def test_the_pages_wording_module_is_generated_from_the_table() -> None:
    assert JS_PATH.read_text(encoding="utf-8") == render_js(), \
        "frontend/js/model/wording.gen.js is out of date: run python -m loaderscope.model.wording --write"


def test_the_terminal_summary_uses_the_tables_words(capsys: Any, tmp_path: Path) -> None:
    from loaderscope.cli.main import main

    # the trace to a file: the writers refuse /dev/null, which is no regular file (safefiles.create_file)
    assert main(["run", "out_of_order", "--mode", "sim", "--out", str(tmp_path / "t.trace.jsonl")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert say("label.input_bound") in out
    assert "input-bound" not in out
