"""watch() across a loader's life as libraries lead it: re-created, copied, epochs that overlap,
wrapped, in ranks the launcher names, and in a script that dies."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import loaderscope
from loaderscope import conformance
from loaderscope.probe.loader import distributed_identity, job_id


class Squares(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, index * index])


def runs(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_run.setdefault(event["run"], []).append(event)
    return by_run


def epoch_ends(events: list[dict[str, Any]]) -> list[tuple[int, int, bool]]:
    return [(e["epoch"], e["batches"], e["abandoned"]) for e in events if e["kind"] == "epoch_end"]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loader_re_created_from_its_class_is_instrumented_as_a_run_of_its_own(num_workers: int) -> None:
    events: list[dict[str, Any]] = []
    loader = loaderscope.watch(DataLoader(Squares(), batch_size=4, num_workers=num_workers), sink=events.extend)
    rebuilt = type(loader)(Squares(), batch_size=8, num_workers=num_workers)  # as Lightning re-creates loaders
    assert [b.tolist() for b in rebuilt] == [b.tolist() for b in DataLoader(Squares(), batch_size=8)]
    list(loader)
    rebuilt.close()
    loader.close()
    by_run = runs(events)
    assert set(by_run) == {loader.run_id, rebuilt.run_id}
    for run in by_run.values():
        assert conformance.check(run) == []
    assert epoch_ends(by_run[rebuilt.run_id]) == [(0, 4, False)]


def test_copies_and_pickles_report_to_the_same_place_as_new_runs() -> None:
    events: list[dict[str, Any]] = []
    loader = loaderscope.watch(DataLoader(Squares(), batch_size=4), sink=events.extend)
    copied = copy.copy(loader)
    deep = copy.deepcopy(loader)
    assert type(copied) is type(loader) and isinstance(deep, DataLoader)
    for each in (loader, copied, deep):
        assert len(list(each)) == 8
        each.close()
    assert len(runs(events)) == 3  # each its own run, all in the one list given to watch()

    shipped = pickle.loads(pickle.dumps(loaderscope.watch(DataLoader(Squares(), batch_size=4),
                                                          url="http://127.0.0.1:9/?token=x")))
    assert len(list(shipped)) == 8 and type(shipped).__name__ == "WatchedDataLoader"
    shipped.close()


@pytest.mark.parametrize("persistent", [False, True])
def test_epochs_stay_exact_when_the_old_iterator_dies_after_the_next_iter(persistent: bool) -> None:
    """Lightning's fit loop takes exactly len(loader) batches and never asks for StopIteration, so
    the old iterator (and its workers) die only after the next epoch's iter()."""
    events: list[dict[str, Any]] = []
    loader = loaderscope.watch(DataLoader(Squares(), batch_size=4, num_workers=2, persistent_workers=persistent),
                               sink=events.extend)
    old = iter(loader)
    first = [next(old) for _ in range(len(loader))]
    new = iter(loader)  # the old iterator is still alive here
    del old  # ...and is shut down now, with the new epoch's workers running
    second = [next(new) for _ in range(len(loader))]
    del new
    loader.close()
    assert len(first) == len(second) == 8
    assert epoch_ends(events) == [(0, 8, False), (1, 8, False)]
    assert conformance.check(events) == []
    from loaderscope.state import LoaderState

    state = LoaderState()
    yields_seen = 0
    for event in events:
        state.apply(event)
        if event["kind"] == "yield" and event["seq"] > [e["seq"] for e in events if e["kind"] == "epoch_start"][1]:
            yields_seen += 1
            assert all(w.status != "exited" for w in state.workers.values()), "the old workers' exit hit the new ones"
    assert yields_seen == 8


def test_a_loop_that_breaks_early_is_abandoned_and_the_next_epoch_is_not() -> None:
    events: list[dict[str, Any]] = []
    loader = loaderscope.watch(DataLoader(Squares(), batch_size=4, num_workers=2), sink=events.extend)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    list(loader)
    loader.close()
    assert epoch_ends(events) == [(0, 3, True), (1, 8, False)]
    assert conformance.check(events) == []


@pytest.mark.parametrize(("env", "expected"), [
    ({"RANK": "3", "WORLD_SIZE": "4"}, (3, 4)),
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (1, 2)),  # Lightning's launcher, before its group is up
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8"}, (5, 8)),
    ({"RANK": "not-a-number"}, (0, 1)),
    ({}, (0, 1)),
])
def test_rank_from_the_launchers_environment(env: dict[str, str], expected: tuple[int, int],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert distributed_identity() == expected


def test_lightning_style_ranks_share_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29511")
    assert job_id(2) == "127.0.0.1:29511" and job_id(1) is None
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert job_id(2) == "4242"


SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
import loaderscope

events = []
import atexit  # registered before watch(): atexit runs last-in first-out, so this runs after the run ends
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps(events)))
if sys.argv[2] == "group":  # a process group up, as under Lightning DDP: its rank wins over the environment
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3], RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    os.environ["RANK"] = "7"
loader = loaderscope.watch(DataLoader(list(range(16)), batch_size=4, num_workers=1), sink=events.extend)
for i, batch in enumerate(loader):
    if sys.argv[2] == "crash" and i == 2:
        raise ValueError("bad batch 2")
"""


def run_script(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    script, out = tmp_path / "train.py", tmp_path / "events.json"
    script.write_text(SCRIPT)
    port = str(29500 + os.getpid() % 400)
    done = subprocess.run([sys.executable, str(script), str(out), mode, port], capture_output=True, text=True,
                          timeout=120)
    return done, json.loads(out.read_text())


def test_a_script_that_dies_of_an_exception_ends_its_run_with_error(tmp_path: Path) -> None:
    done, events = run_script(tmp_path, "crash")
    assert done.returncode == 1 and "ValueError: bad batch 2" in done.stderr
    end = [e for e in events if e["kind"] == "run_end"]
    assert end and end[0]["reason"] == "error"
    assert end[0]["error"] == {"type": "ValueError", "message": "bad batch 2"}
    assert epoch_ends(events) == [(0, 3, True)]


def test_the_process_groups_rank_wins(tmp_path: Path) -> None:
    done, events = run_script(tmp_path, "group")
    assert done.returncode == 0, done.stderr
    assert {e["rank"] for e in events} == {0}
    start = next(e for e in events if e["kind"] == "run_start")
    assert start["world_size"] == 1


class Wrapper:
    """Stands for webdataset's WebLoader / Lightning's CombinedLoader: DataLoaders held inside."""

    def __init__(self, *loaders: DataLoader[Any]) -> None:
        self.pipeline = list(loaders)

    def __iter__(self) -> Any:
        for loader in self.pipeline:
            yield from loader


def test_wrappers_get_the_dataloaders_inside_watched() -> None:
    events: list[dict[str, Any]] = []
    inner = [DataLoader(Squares(), batch_size=8), DataLoader(Squares(), batch_size=16)]
    wrapper = loaderscope.watch(Wrapper(*inner), sink=events.extend)
    assert wrapper.pipeline == inner and all(type(d).__name__ == "WatchedDataLoader" for d in inner)
    assert len(list(wrapper)) == 6
    for loader in inner:
        loader.close()
    assert len(runs(events)) == 2


def test_something_without_a_dataloader_gets_told_what_to_pass() -> None:
    with pytest.raises(TypeError, match=r"holds none\. Pass the DataLoader itself"):
        loaderscope.watch([1, 2, 3], sink=print)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loader_dropped_as_soon_as_its_iterator_exists_records_every_batch(num_workers: int) -> None:
    """`for batch in watch(DataLoader(...))`: nothing but the iterator holds the loader; the run ends
    when both are gone, after the last batch, not when the loader is."""
    events: list[dict[str, Any]] = []
    consumed = sum(1 for _ in loaderscope.watch(DataLoader(Squares(), batch_size=4, num_workers=num_workers),
                                                sink=events.extend))
    assert consumed == 8
    kinds = [e["kind"] for e in events]
    assert kinds.count("yield") == 8 and kinds[-1] == "run_end"
    assert epoch_ends(events) == [(0, 8, False)] and conformance.check(events) == []
