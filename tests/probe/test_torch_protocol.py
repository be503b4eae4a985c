"""The private torch names the probe follows (``probe/protocol.py``): checked once, at the first attach.

Under a torch that lacks one, a watched loader yields exactly what plain torch yields, records
nothing, and loaderscope says so once, naming torch's version and the missing name. The torch here
is changed for real in a child process (a class deleted, a function replaced by one with other
parameters), and the same script runs there with and without loaderscope.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from loaderscope.probe import protocol
from loaderscope.probe.protocol import Need

SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, dataloader
from torch.utils.data._utils import worker

case, watched = sys.argv[1], sys.argv[2] == "watched"
if case == "class":  # a torch whose in-process iterator class is gone (workers never need it)
    del dataloader._SingleProcessDataLoaderIter
else:  # a torch whose worker loop takes its queues under other names
    original = worker._worker_loop
    def _worker_loop(*args, **kwargs):
        return original(*args, **kwargs)
    worker._worker_loop = _worker_loop

events = []
for name in ("train", "val"):  # two loaders, two epochs each: the warning comes once all the same
    loader = DataLoader(list(range(40)), batch_size=4, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(3))
    if watched:
        import loaderscope
        loaderscope.watch(loader, sink=events.extend)
    for epoch in range(2):
        print(name, epoch, [batch.tolist() for batch in loader], flush=True)
    if watched:
        loader.close()
print("events:", len(events), file=sys.stderr)
"""


def _run(case: str, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, case, mode], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize(("case", "named"), [
    ("class", "torch.utils.data.dataloader:_SingleProcessDataLoaderIter"),
    ("params", "torch.utils.data._utils.worker:_worker_loop: no parameter index_queue, data_queue, worker_id"),
])
def test_a_torch_without_a_name_trains_as_vanilla_and_says_so_once(case: str, named: str) -> None:
    vanilla, watched = _run(case, "vanilla"), _run(case, "watched")
    assert vanilla.returncode == 0, vanilla.stderr
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout == vanilla.stdout
    assert len(vanilla.stdout.splitlines()) == 4
    said = [line for line in watched.stderr.splitlines() if line.startswith("loaderscope:")]
    assert len(said) == 1, watched.stderr
    assert f"torch {torch.__version__} lacks private names the probe follows" in said[0]
    assert named in said[0]
    assert "DataLoaders run unwatched" in said[0]
    assert "events: 0" in watched.stderr
    assert "loaderscope" not in vanilla.stderr


def test_this_torch_has_every_name_the_probe_follows() -> None:
    assert protocol.missing() == []
    assert protocol.followable()


def _function(index_queue: Any, data_queue: Any) -> None:
    held = index_queue._task_info
    data_queue._send_idx = held


@pytest.mark.parametrize(("need", "said"), [
    (Need("torch.utils.data.dataloader:_NoSuchIter"), "torch.utils.data.dataloader:_NoSuchIter"),
    (Need("no_such_module_here:thing"), "no_such_module_here:thing"),
    (Need(f"{__name__}:_function", params=("index_queue", "worker_id")), "no parameter worker_id"),
    (Need(f"{__name__}:_function", uses=("_task_info", "_rcvd_idx")), "its code no longer uses _rcvd_idx"),
    (Need(f"{__name__}:_function", uses=("_task_info",), only=True), "its code also uses _send_idx"),
])
def test_each_kind_of_need_is_checked(need: Need, said: str) -> None:
    [problem] = protocol.missing((need,))
    assert problem.startswith(need.path)
    assert said in problem


def test_a_need_that_holds_says_nothing() -> None:
    exact = Need(f"{__name__}:_function", params=("index_queue", "data_queue"),
                 uses=("_task_info", "_send_idx"), only=True)
    assert protocol.missing((exact,)) == []


def test_private_stands_in_for_a_missing_name() -> None:
    assert protocol.private("torch.utils.data.dataloader:_NoSuchIter") is protocol.Absent
    assert protocol.private("torch._utils:ExceptionWrapper") is torch._utils.ExceptionWrapper
    assert not isinstance(object(), protocol.private("torch.utils.data.dataloader:_NoSuchIter"))


IN_ORDER = """
import sys, traceback
from torch.utils.data import DataLoader
make = DataLoader
if sys.argv[1] == "instrumented":
    from loaderscope import InstrumentedDataLoader
    events = []
    make = lambda *args, **kwargs: InstrumentedDataLoader(*args, sink=events.extend, **kwargs)
try:
    loader = make(list(range(24)), batch_size=4, num_workers=2, in_order=False)  # the user's line
except TypeError as exc:
    print("refused:", type(exc).__name__, exc)
    print("frames:", [frame.name for frame in traceback.extract_tb(exc.__traceback__)])
else:
    print("batches:", sorted(batch.tolist() for batch in loader))
"""


@pytest.mark.parametrize("how", ["instrumented", "logdir"])
def test_in_order_false_gets_exactly_what_this_torch_says(tmp_path: Path, how: str) -> None:
    """``in_order`` is an argument from torch 2.6 on (``DataLoader.__init__`` in
    ``torch/utils/data/dataloader.py``): an older torch refuses it with its own TypeError, which
    loaderscope passes on unchanged, recording no run of a loader that was never built; a newer torch
    runs it, watched."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")}
    vanilla = subprocess.run([sys.executable, "-c", IN_ORDER, "vanilla"], capture_output=True, text=True,
                             timeout=120, check=True, env=env)
    if how == "logdir":
        env["LOADERSCOPE_LOGDIR"] = str(tmp_path / "runs")
    ours = subprocess.run([sys.executable, "-c", IN_ORDER, how], capture_output=True, text=True, timeout=120,
                          check=True, env=env)
    said, ours_said = vanilla.stdout.splitlines(), ours.stdout.splitlines()
    assert ours_said[0] == said[0]
    refused = said[0].startswith("refused:")
    assert refused == ("in_order" not in inspect.signature(DataLoader.__init__).parameters)
    if refused:
        assert "in_order" in said[0]
        assert "<module>" in ours_said[1]  # the user's line is in the traceback
        assert "loaderscope" not in ours.stderr
        assert not list((tmp_path / "runs").rglob("*.jsonl*"))
    elif how == "logdir":
        assert list((tmp_path / "runs").rglob("*.jsonl*"))
