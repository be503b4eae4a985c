"""The loop model on real training loops: every loader a thread iterates is a lane of one loop, the time
inside any loader's ``next()`` is waiting for that loader, and the step is the time inside none.

Each loop runs in a process of its own with real DataLoader workers, its loaders watched into a logdir,
and measures itself (its own step, its own time in each loader's ``next()``): the probe's figures are
checked against the loop's, and its verdicts against what the loop really did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loaderscope.model.diagnosis import findings
from loaderscope.model.state import LoaderState, reduce
from loaderscope.model.stats import summary
from loaderscope.runner import Collector, run_real
from loaderscope.traces.jsonl import read_trace

LOOPS = r'''
import json, sys, threading, queue, time
import torch
from torch.utils.data import DataLoader, Dataset
from loaderscope import watch

LOGDIR = sys.argv[2]
clock = time.perf_counter


class Timed(Dataset):
    """n samples, each taking ``ms`` milliseconds to fetch."""
    def __init__(self, n, ms=0.0):
        self.n, self.ms = n, ms
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.ms:
            time.sleep(self.ms / 1000)
        return torch.tensor([float(i)])


def loader(name, n, ms=0.0, batch_size=1, **kwargs):
    return watch(DataLoader(Timed(n, ms), batch_size=batch_size, **kwargs), logdir=LOGDIR, name=name)


class Meter:
    """What the loop itself measured: its steps, and its time inside each loader's next()."""
    def __init__(self):
        self.steps, self.inside = [], {}
    def next(self, name, it):
        start = clock()
        try:
            return next(it)
        finally:
            self.inside[name] = self.inside.get(name, 0.0) + clock() - start
    def step(self, seconds):
        start = clock()
        time.sleep(seconds)
        self.steps.append(clock() - start)


def zipped(meter):
    # train is quick, val slow: the loop's time in val's next() is neither train's wait nor the step
    train = loader("train", 24, num_workers=2)
    val = loader("val", 24, ms=30, num_workers=1)
    train_it, val_it = iter(train), iter(val)
    for _ in range(24):
        meter.next("train", train_it)
        meter.next("val", val_it)
        meter.step(0.004)


def accumulation(meter):
    # gradient accumulation: every 4th batch the optimizer steps, ten times as long as a micro-batch (in
    # process: no worker start-up, which on a busy machine could outweigh these 32 steps)
    train = loader("train", 32)
    it = iter(train)
    for i in range(32):
        meter.next("train", it)
        meter.step(0.040 if i % 4 == 3 else 0.004)


def init_slowly(worker_id):
    time.sleep(0.6)


def startup(meter):
    # every epoch starts its workers again, each taking 0.6 s to set up: start-up is the time
    train = loader("train", 12, batch_size=3, num_workers=2, worker_init_fn=init_slowly)
    for _ in range(3):
        it = iter(train)
        for _ in range(4):
            meter.next("train", it)
            meter.step(0.002)


def rebuilt(meter):
    # persistent workers, but the loader is built again each epoch: they persist for nothing
    for _ in range(2):
        train = loader("train", 8, num_workers=2, persistent_workers=True, worker_init_fn=init_slowly)
        it = iter(train)
        for _ in range(8):
            meter.next("train", it)
            meter.step(0.002)


def threaded(meter):
    # the prefetcher pattern: one loader iterated by a background thread into a queue, another by the
    # loop itself; each thread's clock is its own, so neither loader's time is taken for the other's
    background = loader("background", 16, ms=10, num_workers=1)
    main = loader("main", 16, ms=10, num_workers=1)
    ready = queue.Queue(maxsize=2)
    def fill():
        for batch in background:
            ready.put(batch)
        ready.put(None)
    filler = threading.Thread(target=fill)
    filler.start()
    it = iter(main)
    while ready.get() is not None:
        meter.next("main", it)
        meter.step(0.004)
    filler.join()


meter = Meter()
globals()[sys.argv[1]](meter)
print(json.dumps({"steps": meter.steps, "inside": meter.inside}), flush=True)
'''


def run_loop(tmp_path: Path, shape: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Run one loop shape; what it measured itself, and each watched loader's events by name (a loader
    built again is listed once per run, in the order they started)."""
    script, logdir = tmp_path / "loops.py", tmp_path / "runs"
    script.write_text(LOOPS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script), shape, str(logdir)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(logdir.rglob("*.trace.jsonl"), key=lambda p: p.stat().st_mtime):
        _, events = read_trace(path)
        name = next(e["name"] for e in events if e["kind"] == "run_start")
        runs.setdefault(name, []).append(events)  # type: ignore[arg-type]
    return measured, runs


def stats_of(events: list[dict[str, Any]]) -> tuple[LoaderState, dict[str, Any]]:
    state = reduce(events)
    return state, summary(state)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def codes(state: LoaderState) -> list[str]:
    return [finding.code for finding in findings(state)]


def near(probe: float, loop: float) -> bool:
    """Two measures of one stretch of time, the probe's and the loop's own: they differ by the loop's
    overhead (zip, a queue) and by when each read its clock, not by another stretch."""
    return abs(probe - loop) <= 0.25 * loop + 0.002


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_zipped_loaders_time_in_the_other_loaders_next_is_neither_wait_nor_step(tmp_path: Path) -> None:
    measured, runs = run_loop(tmp_path, "zipped")
    state, train = stats_of(runs["train"][0])
    _, val = stats_of(runs["val"][0])
    assert near(train["step_time"], mean(measured["steps"][:-1])), (train["step_time"], measured["steps"])
    # Between two of train's batches the loop sat in val's next(): each of val's waits but the last (after
    # train's last batch) is train's other loaders' time; and train's waits but its first (before val's
    # first next()) are val's.
    waits = {name: [e["wait"] for e in runs[name][0] if e["kind"] == "yield"] for name in ("train", "val")}
    assert train["other_wait"] == pytest.approx(sum(waits["val"][:-1]), rel=0.01, abs=0.001)
    assert val["other_wait"] == pytest.approx(sum(waits["train"][1:]), rel=0.01, abs=0.001)
    assert near(train["consumer_wait"], measured["inside"]["train"])
    assert codes(state)[-1:] != ["step_bound"] and "other_loaders_bound" in codes(state), findings(state)
    text = " ".join(f.text for f in findings(state))
    assert "other loaders are the bottleneck" in text and "inside other loaders' next()" in text


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gradient_accumulation_the_step_is_the_mean_that_pays_for_the_optimizer(tmp_path: Path) -> None:
    measured, runs = run_loop(tmp_path, "accumulation")
    state, train = stats_of(runs["train"][0])
    steps = measured["steps"][:-1]  # the last step has no batch after it
    assert near(train["step_time"], mean(steps)), (train["step_time"], mean(steps))
    assert train["step_time"] > 1.5 * sorted(steps)[len(steps) // 2]  # a median would hide the optimizer step
    assert train["batches_per_s"] == pytest.approx(train["batches"] / train["epoch_wall"])
    assert "step_bound" in codes(state)
    assert f"{train['step_time'] * 1000:.1f} ms per batch (mean)" in " ".join(f.text for f in findings(state))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_worker_start_up_each_epoch_is_named_with_persistent_workers_as_the_fix(tmp_path: Path) -> None:
    _, runs = run_loop(tmp_path, "startup")
    state, train = stats_of(runs["train"][0])
    assert train["epochs"] == 3 and train["worker_starts"] == 6
    assert train["startup_share"] > 0.5, train
    found = findings(state)
    verdict = next(f for f in found if f.code == "startup_bound")
    assert "worker start-up is the bottleneck" in verdict.text and "6 worker start-ups" in verdict.text
    assert "persistent_workers=True keeps the workers between epochs" in verdict.text
    assert not any("training step is the bottleneck" in f.text for f in found), found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_loader_built_again_each_epoch_is_told_to_build_it_once(tmp_path: Path) -> None:
    _, runs = run_loop(tmp_path, "rebuilt")
    assert len(runs["train"]) == 2  # one run per loader built
    for events in runs["train"]:
        state, train = stats_of(events)
        verdict = next(f for f in findings(state) if f.code == "startup_bound")
        assert "if this loader is built again for each epoch, build it once" in verdict.text, verdict


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_loader_iterated_in_another_thread_is_not_counted_as_the_loops_other_loader(tmp_path: Path) -> None:
    measured, runs = run_loop(tmp_path, "threaded")
    _, main = stats_of(runs["main"][0])
    _, background = stats_of(runs["background"][0])
    assert main["other_wait"] == 0.0 and main["between_others"] == 0.0
    assert background["other_wait"] == 0.0 and background["between_others"] == 0.0
    assert near(main["consumer_wait"], measured["inside"]["main"])


def test_a_verdict_waits_for_enough_batches() -> None:
    events: list[dict[str, Any]] = [
        {"t": 0.0, "kind": "run_start", "mode": "real", "config": {"num_workers": 0}},
        {"t": 0.0, "kind": "epoch_start", "epoch": 0}]
    t = 0.0
    for idx in range(7):
        events += [{"t": t, "kind": "dispatch", "idx": idx, "worker": 0},
                   {"t": t, "kind": "fetch_start", "idx": idx, "worker": 0},
                   {"t": t + 0.01, "kind": "fetch_end", "idx": idx, "worker": 0, "dt": 0.01},
                   {"t": t + 0.01, "kind": "arrive", "idx": idx, "worker": 0},
                   {"t": t + 0.01, "kind": "yield", "idx": idx, "wait": 0.01}]
        t += 0.02
    state = reduce(events)
    assert [f.code for f in findings(state)] == ["too_early"]
    assert findings(state)[0].text == "too early to tell what limits the loop: 7 batches so far, a verdict needs 8"


def test_the_reorder_cost_is_the_wait_after_a_later_batch_had_parked_not_the_whole_wait() -> None:
    """An input-bound loop whose even fetches merely finish unordered: its wait is slow loading; only the
    part of a wait after a later batch had arrived and parked is what in_order=False would have saved."""
    collector = Collector()
    run_real("uniform", {"num_workers": 4, "sample_ms": 5, "dataset_size": 384}, collector)
    state, stats = collector.state, summary(collector.state)
    parked: dict[int, float] = {}  # parked task -> when it arrived
    arrived: dict[int, float] = {}
    bound = 0.0
    for e in collector.events:
        if e["kind"] == "epoch_start":
            parked.clear()
        elif e["kind"] == "arrive":
            arrived[e["idx"]] = e["t"]
        elif e["kind"] == "parked":
            parked[e["idx"]] = arrived[e["idx"]]
        elif e["kind"] == "yield":
            if e["wait"] > 0 and not e.get("from_parked") and parked:
                bound += min(e["wait"], max(0.0, e["t"] - min(parked.values())))
            parked.pop(e["idx"], None)
    assert stats["head_of_line_wait"] == pytest.approx(bound)
    assert stats["head_of_line_wait"] < stats["consumer_wait"] - stats["startup_wait"]
    if stats["out_of_order"]:
        reorder = next(f.text for f in findings(state) if f.code == "reorder")
        assert f"{stats['head_of_line_wait']:.2f} s of the loop's wait came after a later batch had arrived" in reorder


def test_the_gpu_sentences_step_holds_its_copy_and_compute() -> None:
    """gpu_step (on the CPU here: its copy is a no-op) times its own copy and compute inside the step: the
    sentence's step, a mean like them, is at least their sum, never a median beside their means."""
    collector = Collector()
    run_real("gpu_step", {"dataset_size": 640, "batch_size": 32, "num_workers": 2}, collector)
    split = summary(collector.state)["consumer_split"]
    assert split is not None and split["step"] is not None
    assert split["step"] >= split["h2d"] + split["compute"]
    text = next(f.text for f in findings(collector.state) if f.code == "step_split")
    assert f"spent {split['step'] * 1000:.2f} ms in its step" in text
    assert f"the compute at {split['compute'] * 1000:.2f} ms" in text
