"""The debugger never breaks training: faults injected into every part of the probe.

Each test breaks one piece of loaderscope (with pytest's monkeypatch; workers are forked, so they
inherit the fault) and checks that the loop still gets torch's batches in torch's order, that the
failure is said once on stderr, and, where a recorder survives, that the run carries a
``probe_error`` event naming the place.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import loaderscope
from loaderscope.probe import adopt, faults, iterators, liveness, recorder, singleprocess, stacks, worker


class Squares(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, index * index])


def boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("injected fault")


@pytest.fixture(autouse=True)
def fresh_reports() -> Iterator[None]:
    faults._reported.clear()  # "once per process": each test starts as a new process would
    yield
    faults._reported.clear()


def vanilla(num_workers: int) -> list[torch.Tensor]:
    return list(DataLoader(Squares(), batch_size=4, num_workers=num_workers))


def watched_epochs(num_workers: int, epochs: int = 2, **kwargs: Any) -> tuple[list[list[torch.Tensor]], list[dict]]:
    events: list[dict[str, Any]] = []
    loader = loaderscope.watch(DataLoader(Squares(), batch_size=4, num_workers=num_workers, **kwargs),
                               sink=events.extend)
    got = [list(loader) for _ in range(epochs)]
    loader.close()
    return got, events


def assert_same_training(got: list[list[torch.Tensor]], num_workers: int) -> None:
    expected = vanilla(num_workers)
    for epoch in got:
        assert len(epoch) == len(expected)
        assert all(torch.equal(a, b) for a, b in zip(epoch, expected, strict=True))


def said_once(capfd: pytest.CaptureFixture[str], where: str) -> None:
    err = capfd.readouterr().err
    assert err.count(f"loaderscope: internal error in {where}") == 1, err


def noted(events: list[dict[str, Any]], where: str) -> bool:
    return any(e["kind"] == "probe_error" and e["where"] == where for e in events)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_failing_sink_costs_training_nothing(num_workers: int, capfd: pytest.CaptureFixture[str]) -> None:
    loader = loaderscope.watch(DataLoader(Squares(), batch_size=4, num_workers=num_workers), sink=boom)
    got = [list(loader) for _ in range(2)]
    loader.close()
    assert_same_training(got, num_workers)
    said_once(capfd, "event sink")
    assert loader._probe.sink_errors >= 1


def test_a_recorder_that_cannot_encode_reports_and_goes_on(monkeypatch: pytest.MonkeyPatch,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(recorder, "expand", boom)
    got, _ = watched_epochs(2)
    assert_same_training(got, 2)
    said_once(capfd, "event sink")


@pytest.mark.parametrize("part", ["write", "setup"])
def test_a_broken_worker_ring_leaves_the_workers_running(part: str, monkeypatch: pytest.MonkeyPatch,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    if part == "write":
        monkeypatch.setattr(worker.Ring, "write", boom)
    else:
        monkeypatch.setattr(worker, "install_in_worker", boom)
    got, events = watched_epochs(2)
    assert_same_training(got, 2)
    where = "worker index tap" if part == "write" else "worker setup"
    said_once(capfd, where)  # two workers failed; the main process says it once
    assert noted(events, where)


def test_no_ring_at_all_starts_plain_workers(monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(adopt, "Ring", boom)
    got, events = watched_epochs(2)
    assert_same_training(got, 2)
    said_once(capfd, "worker ring")
    assert [e["kind"] for e in events].count("yield") == 12  # the main process still sees the protocol


def test_failing_bookkeeping_in_the_main_process(monkeypatch: pytest.MonkeyPatch,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(iterators.EpochCounter, "dispatched", boom)
    sampler = DistributedSampler(Squares(), num_replicas=1, rank=0, shuffle=False)  # shard tracking on
    got, events = watched_epochs(2, sampler=sampler)
    assert_same_training(got, 2)
    said_once(capfd, "dispatch record")
    assert noted(events, "dispatch record")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_adoption_that_fails_falls_back_to_torch(num_workers: int, monkeypatch: pytest.MonkeyPatch,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    mixin = iterators.MultiProcessProbe if num_workers else singleprocess.SingleProcessProbe
    monkeypatch.setattr(mixin, "_probe_attach", boom)
    got, events = watched_epochs(num_workers)
    assert_same_training(got, num_workers)
    assert "loaderscope: internal error in adopting" in capfd.readouterr().err
    assert any(e["kind"] == "probe_error" for e in events)


def test_a_stack_capture_that_fails_does_not_touch_the_stuck_worker(monkeypatch: pytest.MonkeyPatch,
                                                                     capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(liveness, "ask_worker", boom)

    class Slow(Squares):
        def __getitem__(self, index: int) -> torch.Tensor:
            if index == 5:
                stacks.time.sleep(0.6)
            return super().__getitem__(index)

    events: list[dict[str, Any]] = []
    loader = loaderscope.watch(DataLoader(Slow(), batch_size=4, num_workers=2), sink=events.extend,
                               stuck_after=0.2)
    got = list(loader)
    loader.close()
    assert all(torch.equal(a, b) for a, b in zip(got, vanilla(2), strict=True))
    said_once(capfd, "liveness check")


class OwnIterator:
    """An iterator class that follows none of torch's protocol (a library's own design)."""

    def __init__(self, loader: DataLoader[Any]) -> None:
        self._inner = iter(list(DataLoader(loader.dataset, batch_size=loader.batch_size)))

    def __iter__(self) -> OwnIterator:
        return self

    def __next__(self) -> Any:
        return next(self._inner)


class OwnLoader(DataLoader[Any]):
    def _get_iterator(self) -> Any:
        return OwnIterator(self)


def test_a_loader_class_it_does_not_know_runs_unobserved(capfd: pytest.CaptureFixture[str]) -> None:
    events: list[dict[str, Any]] = []
    loader = loaderscope.watch(OwnLoader(Squares(), batch_size=4), sink=events.extend)
    got = list(loader)
    loader.close()
    assert all(torch.equal(a, b) for a, b in zip(got, vanilla(0), strict=True)) and len(got) == 6
    said_once(capfd, "observing OwnIterator")
    assert noted(events, "observing OwnIterator")


def test_torch_errors_still_reach_the_loop_unchanged() -> None:
    class Raising(Squares):
        def __getitem__(self, index: int) -> torch.Tensor:
            if index == 9:
                raise KeyError("sample 9 is missing")
            return super().__getitem__(index)

    for num_workers in (0, 2):
        with pytest.raises(KeyError, match="sample 9 is missing"):
            list(loaderscope.watch(DataLoader(Raising(), batch_size=4, num_workers=num_workers), sink=lambda _: None))


def test_a_script_that_dies_with_a_live_iterator_says_nothing_about_the_probe(tmp_path: Any) -> None:
    """torch shuts the workers down while the interpreter tears its modules down: nothing to record."""
    import subprocess
    import sys

    script = tmp_path / "dies.py"
    script.write_text(
        "import torch\n"
        "from loaderscope import InstrumentedDataLoader\n"
        "loader = InstrumentedDataLoader(torch.arange(100.0), num_workers=2, sink=lambda events: None)\n"
        "iterator = iter(loader)\n"
        "next(iterator)\n"
        "raise SystemExit('the script fails')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "the script fails" in done.stderr
    assert "loaderscope" not in done.stderr, done.stderr


def test_torchs_dead_worker_error_raised_inside_the_probe_reaches_the_loop() -> None:
    """torch's SIGCHLD handler raises in the main thread wherever it is, the probe's code too: that
    error is torch's, and neither ``report`` nor ``guard`` may swallow it (CI 53). torch's own handler
    is called here, on a real killed worker, as the signal would call it (it says a death once)."""
    import signal

    from torch.utils.data._utils import signal_handling

    handler = _torchs_sigchld_handler(signal_handling)
    with _a_dead_worker(signal_handling), pytest.raises(RuntimeError, match="killed by signal"):
        with faults.guard("a guarded probe block"):
            handler(signal.SIGCHLD, None)
    with _a_dead_worker(signal_handling), pytest.raises(RuntimeError, match="killed by signal"):
        try:
            handler(signal.SIGCHLD, None)
        except Exception as exc:
            faults.report("an explicit probe except", exc)
    assert "a guarded probe block" not in faults._reported and "an explicit probe except" not in faults._reported


def _torchs_sigchld_handler(signal_handling: Any) -> Any:
    """The handler torch installs for SIGCHLD (a fresh one), with this process's handler and torch's
    flag left as they were."""
    import signal

    previous, was_set = signal.getsignal(signal.SIGCHLD), signal_handling._SIGCHLD_handler_set
    signal_handling._SIGCHLD_handler_set = False
    signal_handling._set_SIGCHLD_handler()
    handler = signal.getsignal(signal.SIGCHLD)
    signal.signal(signal.SIGCHLD, previous)
    signal_handling._SIGCHLD_handler_set = was_set
    assert callable(handler) and handler is not previous
    return handler


@contextmanager
def _a_dead_worker(signal_handling: Any) -> Iterator[None]:
    """A forked process registered with torch as a DataLoader worker, SIGKILLed and not yet reaped.
    Its own SIGCHLD is left to the default action (dropped, the child not reaped): a handler torch set
    for earlier loaders in this process would otherwise raise at any line of the test."""
    import multiprocessing
    import signal

    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    child = multiprocessing.get_context("fork").Process(target=signal.pause)
    child.start()
    signal_handling._set_worker_pids(12345, (child.pid,))
    try:
        child.kill()
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)  # dead, not reaped: what torch's handler finds
        yield
    finally:
        signal_handling._remove_worker_pids(12345)
        child.join()
        signal.signal(signal.SIGCHLD, previous)
