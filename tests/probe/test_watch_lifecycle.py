"""watch() across a loader's life as libraries lead it: re-created, copied, epochs that overlap,
wrapped, in ranks the launcher names, and in a script that dies."""

from __future__ import annotations

import copy
import gc
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
from loaderscope.model import conformance
from loaderscope.probe.loader import distributed_identity, job_id
from loaderscope.traces.jsonl import read_trace
from tests.conftest import free_port, wait_for


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
    from loaderscope.model.state import LoaderState

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
    port = str(free_port())
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
    wait_for(lambda: events and events[-1]["kind"] == "run_end", what="run_end, on the probe's next tick")
    kinds = [e["kind"] for e in events]
    assert kinds.count("yield") == 8
    assert epoch_ends(events) == [(0, 8, False)] and conformance.check(events) == []


# --- how a run ended, whatever path the process takes to exit ---------------------------------

ENDINGS = """
import sys
import torch.multiprocessing as mp
from torch.utils.data import DataLoader
import loaderscope

kept = []  # held to the end: the run ends at interpreter exit (test_record's scripts drop theirs on the way)

def train(index, logdir, how):
    loader = loaderscope.watch(DataLoader(list(range(16)), batch_size=4, num_workers=1), logdir=logdir,
                               name=f"process{index}")
    kept.append(loader)
    if how == "own-excepthook":  # the script's own hook, set after watch(): the run still ends with the error
        sys.excepthook = lambda *exc: print("own hook", exc[1], file=sys.stderr)
    for batch, _ in enumerate(loader):
        if how in ("spawn-raise", "own-excepthook") and index == 1 and batch == 1:
            raise ValueError(f"process {index} failed")
    if how == "exit3":
        sys.exit(3)

if __name__ == "__main__":
    logdir, how = sys.argv[1], sys.argv[2]
    if how.startswith("spawn"):
        mp.spawn(train, args=(logdir, how), nprocs=2)  # torch/multiprocessing/spawn.py, _wrap: sys.exit(1)
    else:
        train(1, logdir, how)
"""


def ended(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """Run ENDINGS; the last event of each run by the run's name."""
    script, logdir = tmp_path / "endings.py", tmp_path / "runs"
    script.write_text(ENDINGS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script), str(logdir), how], capture_output=True, text=True,
                          timeout=280, env=env, cwd=tmp_path)
    last = {}
    for path in logdir.rglob("*.trace.jsonl"):
        head, events = read_trace(path)
        assert conformance.check(events) == []
        last[head["name"]] = events[-1]
    return done, last


@pytest.mark.timeout(300)  # three interpreters import torch (spawn), on a shared box
@pytest.mark.slow
def test_a_rank_that_dies_inside_torch_multiprocessing_spawn_ends_with_its_exception(tmp_path: Path) -> None:
    done, last = ended(tmp_path, "spawn-raise")
    assert done.returncode == 1 and "ValueError: process 1 failed" in done.stderr
    assert last["process1"]["kind"] == "run_end" and last["process1"]["reason"] == "error"
    assert last["process1"]["error"] == {"type": "ValueError", "message": "process 1 failed"}
    assert last["process1"]["exitcode"] == 1
    if "process0" in last:  # the rank still running may be killed by spawn before it ends
        assert last["process0"]["kind"] != "run_end" or last["process0"]["reason"] == "done"


def test_sys_exit_ends_the_run_with_the_exit_status(tmp_path: Path) -> None:
    done, last = ended(tmp_path, "exit3")
    assert done.returncode == 3, done.stderr
    end = last["process1"]
    assert end["kind"] == "run_end" and end["reason"] == "error" and end["exitcode"] == 3
    assert end["error"] == {"type": "SystemExit", "message": "exit status 3"}


def test_a_scripts_own_excepthook_does_not_hide_the_error(tmp_path: Path) -> None:
    done, last = ended(tmp_path, "own-excepthook")
    assert done.returncode == 1 and "own hook process 1 failed" in done.stderr
    end = last["process1"]
    assert end["reason"] == "error" and end["error"] == {"type": "ValueError", "message": "process 1 failed"}
    assert end["exitcode"] == 1


def test_a_normal_end_says_done_with_exit_status_0(tmp_path: Path) -> None:
    done, last = ended(tmp_path, "done")
    assert done.returncode == 0, done.stderr
    assert last["process1"]["reason"] == "done" and last["process1"]["exitcode"] == 0
    assert "error" not in last["process1"]


def test_leaving_with_loader_on_an_exception_ends_the_run_with_it() -> None:
    events: list[dict[str, Any]] = []
    with pytest.raises(ValueError, match="mid-epoch"):
        with loaderscope.watch(DataLoader(Squares(), batch_size=4), sink=events.extend) as loader:
            for _ in loader:
                raise ValueError("mid-epoch")
    end = events[-1]
    assert end["kind"] == "run_end" and end["reason"] == "error"
    assert end["error"] == {"type": "ValueError", "message": "mid-epoch"}


# --- no empty ghost runs ----------------------------------------------------------------------

def test_loaders_never_iterated_leave_no_run(tmp_path: Path) -> None:
    """Lightning re-creates loaders as type(loader)(...) and iterates the new one: the one it dropped,
    never iterated, leaves neither a run nor a trace file."""
    events: list[dict[str, Any]] = []
    original = loaderscope.watch(DataLoader(Squares(), batch_size=4), sink=events.extend, logdir=tmp_path)
    recreated = type(original)(Squares(), batch_size=8)
    assert len(list(recreated)) == 4
    recreated.close()
    original.close()
    assert set(runs(events)) == {recreated.run_id}
    assert len(list(tmp_path.rglob("*.trace.jsonl"))) == 1


def test_a_loader_dropped_while_its_events_are_flushed_still_ends_its_run() -> None:
    """The collector may free a loader on the probe thread while it holds the flush lock (here the sink
    drops the last references, the loader's and its iterator's): the run still ends, and nothing hangs."""
    events: list[dict[str, Any]] = []
    held: list[Any] = []

    def take(batch: list[dict[str, Any]]) -> None:
        events.extend(batch)
        if any(e["kind"] == "epoch_end" for e in batch):
            held.clear()
            gc.collect()

    held.append(loaderscope.watch(DataLoader(Squares(), batch_size=4, num_workers=2), sink=take))
    recorder = held[0]._probe
    held.append(iter(held[0]))
    assert sum(1 for _ in held[1]) == 8  # epoch_end is flushed, and the loader dropped, on the probe thread
    wait_for(lambda: any(e["kind"] == "run_end" for e in events), what="run_end after the drop")
    assert recorder.closed and conformance.check(events) == []


def test_a_loader_never_iterated_opens_no_dashboard_run(server: Any) -> None:
    def ids() -> set[str]:
        with server.client() as http:
            return {run["id"] for run in http.get("/api/runs").json()}

    before = ids()
    loader = loaderscope.watch(DataLoader(Squares(), batch_size=4), url=server.page_url)
    del loader  # never iterated, then dropped: no `disconnected` run with 0 events
    gc.collect()
    iterated = loaderscope.watch(DataLoader(Squares(), batch_size=4), url=server.page_url)
    recreated = type(iterated)(Squares(), batch_size=8)  # as Lightning re-creates loaders, then drops this one
    with iterated:
        list(iterated)
    recreated.close()
    run_id = iterated._probe_transport.run
    wait_for(lambda: run_id in ids(), what="the iterated run")
    assert ids() - before == {run_id}


# --- every loader named from the code that made it ------------------------------------------------

def make_loader() -> DataLoader[Any]:
    return DataLoader(Squares(), batch_size=4)  # returned as is: the caller's variable names it


class Holder:
    val_loader: Any


def test_runs_are_named_by_the_variable_the_function_or_the_line_that_made_them() -> None:
    events: list[dict[str, Any]] = []
    train_loader = loaderscope.watch(DataLoader(Squares(), batch_size=4), sink=events.extend)
    holder = Holder()
    holder.val_loader = loaderscope.watch(make_loader(), sink=events.extend)
    given = loaderscope.watch(DataLoader(Squares(), batch_size=4), sink=events.extend, name="given")
    for loader in (train_loader, holder.val_loader, given):
        list(loader)
        loader.close()
    line = sys._getframe().f_lineno + 1
    for _ in loaderscope.watch(DataLoader(Squares(), batch_size=4), sink=events.extend):
        pass
    wait_for(lambda: sum(e["kind"] == "run_end" for e in events) == 4, what="the dropped loader's run_end")
    names = [e["name"] for e in events if e["kind"] == "run_start"]
    assert names == ["train_loader", "val_loader", "given", f"test_watch_lifecycle.py:{line}"]
