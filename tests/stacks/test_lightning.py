"""pytorch-lightning, vanilla against watched: fit, validate and predict on the CPU, and DDP with
two CPU processes (gloo) launched the way Lightning launches them (it re-runs the script per rank).

Lightning re-creates loaders as ``type(loader)(*args, **kwargs)`` in predict (to wrap the batch
sampler) and under DDP (to inject a DistributedSampler): the re-created loader must stay
instrumented and report to the same sink.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from loaderscope.probe.loader import ProbeMixin
from tests.stacks import checks as stacks

pl = pytest.importorskip("pytorch_lightning")

TRAIN, VAL, PREDICT, BATCH = 24, 12, 10, 4  # 6, 3 and 3 batches


class Indexed(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"index": torch.tensor(index), "x": torch.tensor([float(index)])}


class Module(pl.LightningModule):
    """Builds its loaders in its hooks (as users do) through ``make``; records what it was given."""

    def __init__(self, make: Callable[[str, int, bool], DataLoader[Any]]) -> None:
        super().__init__()
        self.make = make
        self.layer = torch.nn.Linear(1, 1)
        self.seen: dict[str, list[list[torch.Tensor]]] = {"train": [], "val": [], "predict": []}

    def _see(self, stage: str, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        if batch_idx == 0:
            self.seen[stage].append([])
        self.seen[stage][-1].append(batch["index"].clone())

    def train_dataloader(self) -> DataLoader[Any]:
        return self.make("train", TRAIN, True)

    def val_dataloader(self) -> DataLoader[Any]:
        return self.make("val", VAL, False)

    def predict_dataloader(self) -> DataLoader[Any]:
        return self.make("predict", PREDICT, False)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self._see("train", batch, batch_idx)
        return self.layer(batch["x"]).pow(2).mean()

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._see("val", batch, batch_idx)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self._see("predict", batch, batch_idx)
        return batch["index"]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer() -> Any:
    return pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)


@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_lightning_fit_validate_predict(persistent: bool) -> None:
    sinks = {stage: stacks.Events() for stage in ("train", "val", "predict")}
    made: list[DataLoader[Any]] = []

    def run(watch: bool) -> tuple[dict[str, Any], list[Any]]:
        def make(stage: str, length: int, shuffle: bool) -> DataLoader[Any]:
            loader = DataLoader(Indexed(length), batch_size=BATCH, shuffle=shuffle, num_workers=2,
                                persistent_workers=persistent)
            if watch:
                stacks.watch(loader, sinks[stage])
                made.append(loader)
            return loader

        pl.seed_everything(0, verbose=False)
        model = Module(make)
        fit = trainer()
        fit.fit(model)  # the module's val_dataloader() runs at the end of each epoch
        validate = trainer()
        validate.validate(model, verbose=False)
        predict = trainer()
        predictions = predict.predict(model)
        if watch:  # Lightning's loaders, re-created or not, must be instrumented
            used = [fit.train_dataloader, *_listed(fit.val_dataloaders), *_listed(validate.val_dataloaders),
                    *_listed(predict.predict_dataloaders)]
            assert all(isinstance(loader, ProbeMixin) for loader in used), [type(x) for x in used]
            for loader in made + used:
                loader.close()
        return model.seen, [p.clone() for p in predictions]

    (v_seen, v_pred), (w_seen, w_pred) = stacks.compare(lambda: run(False), lambda: run(True))
    assert [len(epoch) for epoch in v_seen["train"]] == [TRAIN // BATCH] * 2
    for stage in v_seen:
        assert len(w_seen[stage]) == len(v_seen[stage]), stage
        for got, expected in zip(w_seen[stage], v_seen[stage], strict=True):
            stacks.assert_same(got, expected)
    stacks.assert_same(w_pred, v_pred)

    train = stacks.only_iterated(sinks["train"])
    stacks.assert_trace(train, consumed=[len(epoch) for epoch in w_seen["train"]])
    # validation: one epoch after each training epoch (fit's loader), then validate()'s loader
    val_runs = stacks.iterated_runs(sinks["val"])
    assert sum(len(stacks.epoch_ends(run)) for run in val_runs) == 3, [stacks.epoch_ends(r) for r in val_runs]
    for run in val_runs:
        stacks.assert_trace(run, consumed=[VAL // BATCH] * len(stacks.epoch_ends(run)))
    predict = stacks.only_iterated(sinks["predict"])
    stacks.assert_trace(predict, consumed=[len(w_seen["predict"][0])])


def _listed(loaders: Any) -> list[Any]:
    if loaders is None:
        return []
    return list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]


DDP_SCRIPT = '''
import json, os, sys, warnings
import psutil, torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, Dataset
import loaderscope
from loaderscope.probe.loader import ProbeMixin

OUT, WATCH = sys.argv[1], sys.argv[2] == "watched"
events, watched = [], []


def sink(batch):
    events.extend([batch] if isinstance(batch, dict) else batch)


class Indexed(Dataset):
    def __len__(self):
        return 20

    def __getitem__(self, index):
        return {"index": torch.tensor(index), "x": torch.tensor([float(index)])}


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = []

    def train_dataloader(self):
        loader = DataLoader(Indexed(), batch_size=2, shuffle=True, num_workers=2)
        if WATCH:
            loaderscope.watch(loader, sink=sink)
            watched.append(loader)
        return loader

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen.append([])
        self.seen[-1].append(batch["index"].tolist())
        return self.layer(batch["x"]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    pl.seed_everything(0, verbose=False)
    model = Module()
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_epochs=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    loader = trainer.train_dataloader
    instrumented = isinstance(loader, ProbeMixin)
    for each in watched + ([loader] if instrumented else []):
        each.close()
    ranks = {p.pid for p in getattr(trainer.strategy.launcher, "procs", [])}  # rank 0 started the others
    left = [c.pid for c in psutil.Process().children(recursive=True)
            if c.pid not in ranks and c.status() != psutil.STATUS_ZOMBIE and c.ppid() == os.getpid()]
    result = {"rank": trainer.global_rank, "env_rank": os.environ.get("RANK"), "seen": model.seen,
              "loader": type(loader).__name__, "instrumented": instrumented,
              "sampler": type(loader.sampler).__name__, "events": events, "left": left,
              "warnings": sorted({f"{w.category.__name__}: {w.message}" for w in caught})}
    with open(os.path.join(OUT, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(result, f)
'''


def _run_ddp(tmp_path: Path, mode: str) -> dict[int, dict[str, Any]]:
    script = tmp_path / f"ddp_{mode}.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT))
    out = tmp_path / mode
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOADERSCOPE_URL")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, str(script), str(out), mode], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=330)
    assert done.returncode == 0, f"{mode} DDP run failed:\n{done.stderr[-2500:]}"
    # every rank's and every worker's process is gone once the launch returns
    deadline = time.monotonic() + 15
    while _running(script):
        assert time.monotonic() < deadline, f"processes of {script.name} left over: {_running(script)}"
        time.sleep(0.05)
    results = {}
    for path in sorted(out.glob("rank*.json")):
        result = json.loads(path.read_text())
        results[result["rank"]] = result
    assert sorted(results) == [0, 1], f"{mode}: results from ranks {sorted(results)}\n{done.stderr[-3000:]}"
    return results


def _running(script: Path) -> list[int]:
    psutil = pytest.importorskip("psutil")
    pids = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] != psutil.STATUS_ZOMBIE and str(script) in (process.info["cmdline"] or []):
            pids.append(process.pid)
    return pids


@pytest.mark.slow
@pytest.mark.timeout(720)  # two DDP launches: 71 s in all at load 5, 193 s at load 12, one launch past 140 s once
def test_lightning_ddp_two_cpu_ranks(tmp_path: Path) -> None:
    vanilla = _run_ddp(tmp_path, "vanilla")
    watched = _run_ddp(tmp_path, "watched")
    for rank in (0, 1):
        v, w = vanilla[rank], watched[rank]
        assert v["env_rank"] is None or v["env_rank"] == str(rank)
        assert v["sampler"] == w["sampler"] == "DistributedSampler"  # Lightning injected it: a re-created loader
        assert w["instrumented"], f"rank {rank}: Lightning's re-created loader is a plain {w['loader']}"
        assert w["seen"] == v["seen"], f"rank {rank} saw other batches when watched"
        assert v["left"] == [] and w["left"] == [], f"rank {rank}: worker processes left {v['left']} {w['left']}"
        new = set(w["warnings"]) - set(v["warnings"])
        assert not new, f"rank {rank}: watching added warnings {sorted(new)}"
    # the DistributedSampler gives each rank disjoint indices, together the whole dataset, every epoch
    for epoch in range(2):
        shards = [{i for batch in watched[rank]["seen"][epoch] for i in batch} for rank in (0, 1)]
        assert not shards[0] & shards[1] and shards[0] | shards[1] == set(range(20)), shards
    # one run per rank, each event carrying its rank (read from torch.distributed: Lightning sets no $RANK)
    runs: dict[str, list[dict[str, Any]]] = {}
    for rank in (0, 1):
        for event in watched[rank]["events"]:
            runs.setdefault(event["run"], []).append(event)
    iterated = {run: sorted(events, key=lambda e: e["seq"]) for run, events in runs.items()
                if any(e["kind"] == "epoch_start" for e in events)}
    assert len(iterated) == 2, f"expected one run per rank, got {len(iterated)}"
    assert sorted(events[0]["rank"] for events in iterated.values()) == [0, 1], \
        f"runs carry ranks {sorted(events[0]['rank'] for events in iterated.values())}, expected [0, 1]"
    for rank in (0, 1):
        [events] = [e for e in iterated.values() if e[0]["rank"] == rank]
        stacks.assert_trace(events, rank=rank, consumed=[len(epoch) for epoch in watched[rank]["seen"]])
        start = events[0]
        assert start["kind"] == "run_start" and start.get("world_size") == 2, start.get("world_size")


def test_combined_loader_gets_the_dataloaders_inside_watched() -> None:
    """Lightning's CombinedLoader is a wrapper: watch() instruments the DataLoaders it holds."""
    from pytorch_lightning.utilities import CombinedLoader

    import loaderscope

    def loaders() -> dict[str, DataLoader[Any]]:
        return {"a": DataLoader(list(range(8)), batch_size=2), "b": DataLoader(list(range(12)), batch_size=3,
                                                                              num_workers=1)}

    expected = list(CombinedLoader(loaders(), mode="max_size_cycle"))
    events: list[dict[str, Any]] = []
    inner = loaders()
    combined = loaderscope.watch(CombinedLoader(inner, mode="max_size_cycle"), sink=events.extend)
    got = list(combined)
    for loader in inner.values():
        assert isinstance(loader, ProbeMixin)
        loader.close()
    assert [str(x) for x in got] == [str(x) for x in expected]
    assert len({e["run"] for e in events}) == 2
