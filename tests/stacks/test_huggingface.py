"""Hugging Face stacks, vanilla against watched: ``datasets`` (built locally with Dataset.from_dict, never
downloaded) through a DataLoader, map-style ``with_format("torch")`` and ``to_iterable_dataset(num_shards=4)``
read by two workers; accelerate's ``prepare()`` (1 process, 2 torchrun ranks), watched after or before it;
and the ``Trainer`` (a tiny model built here) under ``loaderscope record``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import loaderscope
from loaderscope.model import conformance
from loaderscope.probe.loader import ProbeMixin
from loaderscope.traces.jsonl import read_trace
from tests.stacks import checks as stacks
from tests.stacks.tiny_trainer import PAIRS_AND_LINE

# nothing comes from the hub: every dataset here is built in memory
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
datasets = pytest.importorskip("datasets")

ROWS, BATCH = 32, 4


def table() -> Any:
    return datasets.Dataset.from_dict({
        "id": list(range(ROWS)),
        "features": [[float(i), float(i) / 2, float(-i)] for i in range(ROWS)],
        "text": [f"row {i}" for i in range(ROWS)],
    })


def run(make: Any, events: stacks.Events | None, epochs: int = 2) -> list[list[Any]]:
    loader = make()
    if events is not None:
        stacks.watch(loader, events)
    got = [stacks.collect(loader) for _ in range(epochs)]
    if events is not None:
        loader.close()
    return got


@pytest.mark.parametrize("num_workers", [0, 2])
def test_hf_map_style_with_torch_format(num_workers: int) -> None:
    dataset = table().with_format("torch")

    def make() -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=num_workers,
                          generator=torch.Generator().manual_seed(3))

    events = stacks.Events()
    expected, got = stacks.compare(lambda: run(make, None), lambda: run(make, events))
    assert [len(epoch) for epoch in expected] == [ROWS // BATCH] * 2
    assert isinstance(expected[0][0]["features"], torch.Tensor)
    for got_epoch, expected_epoch in zip(got, expected, strict=True):
        stacks.assert_same(got_epoch, expected_epoch)
    stacks.assert_trace(events.only_run(), consumed=[ROWS // BATCH] * 2)


def test_hf_iterable_dataset_sharded_over_two_workers() -> None:
    dataset = table().to_iterable_dataset(num_shards=4).with_format("torch")

    def make() -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=BATCH, num_workers=2)

    events = stacks.Events()
    expected, got = stacks.compare(lambda: run(make, None), lambda: run(make, events))
    ids = sorted(int(i) for batch in expected[0] for i in batch["id"])
    assert ids == list(range(ROWS))  # every row once, across both workers' shards
    for got_epoch, expected_epoch in zip(got, expected, strict=True):
        stacks.assert_same(got_epoch, expected_epoch)
    stacks.assert_trace(events.only_run(), consumed=[len(epoch) for epoch in got])


# --- accelerate's prepare() and the Trainer: adapters and rebuilt loaders ------------------------

accelerate = pytest.importorskip("accelerate")
PYTHON = sys.executable
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def numbers() -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.arange(40.0)), batch_size=4, shuffle=True,
                      generator=torch.Generator().manual_seed(5))


def prepared_epochs(watch_it: str | None, events: stacks.Events) -> list[list[Any]]:
    """Two epochs of ``accelerator.prepare(loader)``; ``watch_it``: watch the prepared adapter
    ("after"), or the loader before prepare() ("before"), or nothing."""
    torch.manual_seed(0)
    loader = numbers()
    if watch_it == "before":
        assert loaderscope.watch(loader, sink=events) is loader
    prepared = accelerate.Accelerator(cpu=True).prepare(loader)
    if watch_it == "after":
        assert loaderscope.watch(prepared, sink=events) is prepared
    got = [stacks.collect(prepared) for _ in range(2)]
    if watch_it is not None:
        watched = [inner for inner in (prepared.base_dataloader, loader) if isinstance(inner, ProbeMixin)]
        for inner in watched:
            inner.close()
    return got


@pytest.mark.parametrize("when", ["after", "before"])
def test_accelerate_prepare_watched_after_or_before_records_as_vanilla_runs(
        when: str, capfd: pytest.CaptureFixture[str]) -> None:
    events = stacks.Events()
    expected, got = stacks.compare(lambda: prepared_epochs(None, stacks.Events()),
                                   lambda: prepared_epochs(when, events))
    for got_epoch, expected_epoch in zip(got, expected, strict=True):
        stacks.assert_same(got_epoch, expected_epoch)
    run = events.only_run()  # the loader prepare() dropped, never iterated, left no run
    stacks.assert_trace(run, consumed=[10, 10])
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("loaderscope:")]
    if when == "after":
        assert said == ["loaderscope: watch() watches the DataLoader inside the DataLoaderShard: "
                        "DataLoaderShard.base_dataloader"]
        assert run[0]["name"] == "prepared"
    else:
        assert len(said) == 1 and "'loader' was rebuilt before it was iterated" in said[0]
        assert "accelerate/data_loader.py" in said[0]
        assert run[0]["name"] == "loader"


class Slotted(DataLoader[Any]):
    """A loader whose class cannot be switched: watch() must say so and leave it running."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return DataLoader

    @__class__.setter
    def __class__(self, value: type) -> None:
        raise TypeError("this class is fixed")


def test_a_loader_that_cannot_be_instrumented_runs_on_and_is_said_once(capfd: pytest.CaptureFixture[str]) -> None:
    loader = Slotted(list(range(8)), batch_size=4)
    assert loaderscope.watch(loader, sink=stacks.Events()) is loader
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("loaderscope:")]
    assert said == ["loaderscope: cannot watch the Slotted (this class is fixed); it runs on as it is, unobserved"]


ACCELERATE_RANKS = '''
import sys
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.arange(40.0)), batch_size=4, shuffle=True)
train_loader = accelerator.prepare(loader)
if sys.argv[1] == "watched":
    import loaderscope
    loaderscope.watch(train_loader, logdir=sys.argv[2])
for epoch in range(2):
    seen = [int(x) for (batch,) in train_loader for x in batch]
    print(f"rank {accelerator.process_index} epoch {epoch} {seen}", flush=True)
'''


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")}
    return env | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.mark.timeout(600)  # torchrun twice, each starting two ranks that import torch and accelerate
@pytest.mark.slow
def test_accelerate_under_torchrun_two_ranks_watched_as_vanilla(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(ACCELERATE_RANKS)

    def launch(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TORCHRUN, "--nproc-per-node", "2", "--standalone", str(script), *args],
                              cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=300)

    vanilla, watched = launch("vanilla"), launch("watched", str(tmp_path / "runs"))
    assert vanilla.returncode == watched.returncode == 0, watched.stderr
    # Two ranks print to one pipe: their lines may interleave without a newline between them.
    lines = sorted(re.findall(r"rank \d+ epoch \d+ \[[^\]]*\]", vanilla.stdout))
    assert len(lines) == 4 and lines == sorted(re.findall(r"rank \d+ epoch \d+ \[[^\]]*\]", watched.stdout))
    found = sorted((tmp_path / "runs").rglob("*.trace.jsonl"))
    assert len(found) == 2 and found[0].parent == found[1].parent, found
    for path in found:
        head, events = read_trace(path)
        assert conformance.check(events) == [] and head["name"] == "train_loader" and head["world_size"] == 2
        assert [e["batches"] for e in events if e["kind"] == "epoch_end"] == [5, 5]
        assert events[-1]["kind"] == "run_end" and events[-1]["reason"] == "done"
    assert sorted(read_trace(path)[0]["rank"] for path in found) == [0, 1]


TRAINER = '''
import sys
import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments
''' + PAIRS_AND_LINE + '''

torch.manual_seed(0)
args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=4, per_device_eval_batch_size=8,
                         num_train_epochs=2, eval_strategy="epoch", save_strategy="no", report_to=[], use_cpu=True,
                         logging_strategy="no", dataloader_num_workers=int(sys.argv[2]), disable_tqdm=True, seed=0)
trainer = Trainer(model=Line(), args=args, train_dataset=Pairs(32), eval_dataset=Pairs(16))
result = trainer.train()
print("train_loss", round(result.training_loss, 6), flush=True)
print("eval_loss", round(trainer.evaluate()["eval_loss"], 6), flush=True)
'''


def warning_lines(stderr: str) -> list[str]:
    return sorted(line for line in stderr.splitlines() if "Warning" in line)


@pytest.mark.timeout(600)  # transformers imports slowly, twice
@pytest.mark.slow
def test_the_trainers_loaders_recorded_and_named_as_vanilla_runs(tmp_path: Path) -> None:
    script = tmp_path / "finetune.py"
    script.write_text(TRAINER)
    command = [PYTHON, str(script), str(tmp_path / "out"), "2"]
    env = environment() | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    vanilla = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    recorded = subprocess.run([PYTHON, "-m", "loaderscope.record", "--logdir", str(tmp_path / "runs"), "--",
                               *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert vanilla.returncode == recorded.returncode == 0, recorded.stderr
    results = [line for line in vanilla.stdout.splitlines() if line.startswith(("train_loss", "eval_loss"))]
    assert len(results) == 2
    assert results == [line for line in recorded.stdout.splitlines() if line.startswith(("train_loss", "eval_loss"))]
    assert warning_lines(recorded.stderr) == warning_lines(vanilla.stderr)
    runs: dict[str, list[int]] = {}
    for path in sorted((tmp_path / "runs").rglob("*.trace.jsonl")):
        head, events = read_trace(path)
        assert conformance.check(events) == [] and events[-1]["kind"] == "run_end"
        assert path.name.startswith(f"{head['name']}-DataLoader-rank0-")
        runs.setdefault(head["name"], []).append(sum(e["kind"] == "yield" for e in events))
    # one train loader of 2 epochs x 8 batches; an evaluation loader per epoch and one at the end, 2 batches each
    assert runs == {"get_train_dataloader": [16], "get_eval_dataloader": [2, 2, 2]}
