"""A loader's name (``probe/names.py``, ``probe/statements.py``): the name the user's code gives it, read
from real scripts run under ``loaderscope record`` and ``watch()``: loaders kept in a dict, a list, an
attribute through a conditional expression, returned by factories, built in a ``Trainer`` subclass, and
rebuilt (or not) by accelerate's ``prepare()``. Each loader of a script has a batch size of its own, so
that its trace says which loader it is."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import loaderscope
from loaderscope.model import conformance
from loaderscope.traces.jsonl import read_trace
from loaderscope.traces.paths import safe_name
from tests.stacks import checks as stacks
from tests.stacks.tiny_trainer import PAIRS_AND_LINE

PYTHON = sys.executable

SHAPES = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.arange(24.0))


def make(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size)


def build_loader(dataset, batch_size):
    loader = DataLoader(dataset, batch_size=batch_size)
    return loader


class Experiment:
    def __init__(self, dataset):
        self.train_loader = make(dataset, 3)
        self.test_loader = make(dataset, 4) if dataset else None


def evaluate():
    loader = DataLoader(data, batch_size=12)  # `loader` again, in another place: EVALUATE_LINE
    return sum(1 for _ in loader)


loader = DataLoader(data, batch_size=24)
loaders = {"train": DataLoader(data, batch_size=1, num_workers=2), "val": DataLoader(data, batch_size=2)}
pair = [DataLoader(data, batch_size=5), DataLoader(data, batch_size=6)]
experiment = Experiment(data)
train_dl = build_loader(data, 8)
for epoch in range(2):
    for each in [loader, *loaders.values(), *pair, experiment.train_loader, experiment.test_loader, train_dl]:
        for batch in each:
            pass
    evaluate()  # a new loader each epoch, built by the same line
print("done", flush=True)
'''


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")}
    return env | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                  "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run_script(tmp_path: Path, text: str, *, recorded: bool, name: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / name
    script.write_text(text)
    record = [PYTHON, "-m", "loaderscope.record", "--logdir", str(tmp_path / "runs"), "--"] if recorded else []
    done = subprocess.run([*record, PYTHON, str(script), str(tmp_path / "runs")], cwd=tmp_path,
                          env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def names_by_batch_size(logdir: Path) -> Counter[tuple[int, str]]:
    """(batch size, name) of every run under ``logdir``, each trace conformant and named by its name."""
    found: Counter[tuple[int, str]] = Counter()
    for path in sorted(logdir.rglob("*.trace.jsonl")):
        head, events = read_trace(path)
        assert conformance.check(events) == [] and events[-1]["kind"] == "run_end", path
        assert path.name.startswith(f"{safe_name(head['name'])}-"), (path.name, head["name"])
        found[events[0]["config"]["batch_size"], head["name"]] += 1
    return found


@pytest.mark.slow  # a recorded script of ten loaders, one with two workers
def test_each_loader_of_a_recorded_script_takes_the_name_its_code_gives_it(tmp_path: Path) -> None:
    run_script(tmp_path, SHAPES, recorded=True, name="shapes.py")
    evaluate_line = next(i for i, line in enumerate(SHAPES.splitlines(), start=1) if "EVALUATE_LINE" in line)
    assert names_by_batch_size(tmp_path / "runs") == Counter({
        (24, "loader"): 1,
        (1, "train"): 1, (2, "val"): 1,  # {"train": DataLoader(data), "val": DataLoader(data)}
        (5, "pair[0]"): 1, (6, "pair[1]"): 1,
        (3, "train_loader"): 1,
        (4, "test_loader"): 1,  # self.test_loader = make(dataset, 4) if dataset else None
        (8, "train_dl"): 1,  # train_dl = build_loader(...): the caller's name, not the factory's `loader`
        # `loader` was the first place's: another place's `loader` says where it is; the same line's
        # loader of each epoch keeps that name
        (12, f"loader@shapes.py:{evaluate_line}"): 2,
    })


ACCELERATE = '''
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=True)
data = TensorDataset(torch.arange(40.0))
eval_dl = DataLoader(data, batch_size=8)  # over the same dataset, not iterated yet
for batch in DataLoader(data, batch_size=10):  # over it too, by the user's code: not a rebuild of eval_dl
    pass
train_dl = accelerator.prepare(DataLoader(data, batch_size=4, shuffle=True))  # rebuilt by prepare()
for epoch in range(2):
    for batch in train_dl:
        pass
for batch in eval_dl:
    pass
print("done", flush=True)
'''


@pytest.mark.slow  # imports accelerate in a recorded subprocess
def test_only_a_loader_accelerate_rebuilt_takes_the_name_of_the_one_it_rebuilt(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    run_script(tmp_path, ACCELERATE, recorded=True, name="accel.py")
    loop_line = next(i for i, line in enumerate(ACCELERATE.splitlines(), start=1) if "batch_size=10" in line)
    assert names_by_batch_size(tmp_path / "runs") == Counter({
        (8, "eval_dl"): 1,
        (10, f"accel.py:{loop_line}"): 1,  # `for batch in DataLoader(...)` names it by its place alone
        (4, "train_dl"): 1,  # the loader prepare() built and the loop iterated: the user's loader's name
    })


IGNITE = '''
import torch
import ignite.distributed as idist
from torch.utils.data import TensorDataset


def training(local_rank, config):
    data = TensorDataset(torch.arange(32.0))
    train_loader = idist.auto_dataloader(data, batch_size=4, shuffle=True)  # 2 a rank
    val_loader = idist.auto_dataloader(data, batch_size=8)  # over the same dataset: 4 a rank
    for epoch in range(2):
        for batch in train_loader:
            pass
    for batch in val_loader:
        pass


if __name__ == "__main__":
    with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
        parallel.run(training, {})
'''


@pytest.mark.timeout(300)  # two spawned ranks, each importing torch and ignite
@pytest.mark.slow
def test_loaders_a_library_factory_returns_take_the_names_the_callers_store_them_in(tmp_path: Path) -> None:
    """ignite's ``auto_dataloader`` builds the loader in a local of its own and returns it: the name is
    the caller's variable, on each of two spawned ranks."""
    pytest.importorskip("ignite")
    run_script(tmp_path, IGNITE, recorded=True, name="spawned.py")
    assert names_by_batch_size(tmp_path / "runs") == Counter({(2, "train_loader"): 2, (4, "val_loader"): 2})


TRAINER = '''
import sys
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from transformers import Trainer, TrainingArguments

import loaderscope
''' + PAIRS_AND_LINE + '''

class Finetune(Trainer):
    def get_train_dataloader(self):
        return loaderscope.watch(DataLoader(self.train_dataset, batch_size=4, shuffle=True, num_workers=2),
                                 logdir=sys.argv[1])

    def get_eval_dataloader(self, eval_dataset=None):
        loader = DataLoader(eval_dataset or self.eval_dataset, batch_size=8)
        return loaderscope.watch(loader, logdir=sys.argv[1])


torch.manual_seed(0)
args = TrainingArguments(output_dir=sys.argv[1] + "-out", num_train_epochs=2, eval_strategy="epoch",
                         save_strategy="no", report_to=[], use_cpu=True, logging_strategy="no",
                         disable_tqdm=True, seed=0)
trainer = Finetune(model=Line(), args=args, train_dataset=Pairs(32), eval_dataset=Pairs(16))
trainer.train()
print("done", flush=True)
'''


@pytest.mark.timeout(300)  # transformers imports slowly
@pytest.mark.slow
def test_loaders_a_trainer_subclass_builds_and_watches_take_its_methods_names(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    run_script(tmp_path, TRAINER, recorded=False, name="finetune.py")
    # one train loader of 2 epochs; an evaluation loader built by the same line at each epoch's end
    assert names_by_batch_size(tmp_path / "runs") == Counter({(4, "get_train_dataloader"): 1,
                                                               (8, "get_eval_dataloader"): 2})


def fit(train_dataloaders: DataLoader[Any]) -> list[DataLoader[Any]]:
    return [train_dataloaders]


def test_watched_loaders_take_their_keys_targets_and_keywords() -> None:
    events = stacks.Events()
    data = TensorDataset(torch.arange(8.0))
    loaders = {"train": loaderscope.watch(DataLoader(data, batch_size=2), sink=events),
               "val": loaderscope.watch(DataLoader(data, batch_size=4), sink=events)}
    first, second = (loaderscope.watch(DataLoader(data, batch_size=1), sink=events),
                     loaderscope.watch(DataLoader(data, batch_size=8), sink=events))
    by_split = {}
    for split, size in (("a", 3), ("b", 5)):
        by_split[split] = loaderscope.watch(DataLoader(data, batch_size=size), sink=events)
    given = fit(train_dataloaders=loaderscope.watch(DataLoader(data, batch_size=6), sink=events))
    unwatched = DataLoader(data, batch_size=7)  # the user's own, over the same dataset: no watched loader's rebuild
    for loader in [*loaders.values(), first, second, *by_split.values(), *given, unwatched]:
        assert sum(1 for _ in loader) == -(-8 // loader.batch_size)
        getattr(loader, "close", lambda: None)()
    starts = [e for run in events.runs().values() for e in run if e["kind"] == "run_start"]
    assert sorted((e["config"]["batch_size"], e["name"]) for e in starts) == [
        (1, "first"), (2, "train"), (3, "a"), (4, "val"), (5, "b"), (6, "train_dataloaders"), (8, "second")]
