"""What training reads when torch raises or warns is what it reads without loaderscope.

The probe's hooks sit in the call chain between the loop and torch (the iterators' ``_next_data``, ``_reset``,
the loader's ``_get_iterator``, the wrapped ``DataLoader.__init__``): each cuts its frames out of what passes
through it (``faults.without_probe_frames``), and none stands between torch's ``__next__`` and the loop, where
torch warns with ``stacklevel=2``. The same script runs vanilla, under ``watch()`` and under
``$LOADERSCOPE_LOGDIR``; every traceback (the chained ones too) and every warning must name the same files,
functions and lines.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch.utils.data import DataLoader, IterableDataset

import loaderscope
from loaderscope import watch
from tests.recording import PYTHON, environment, script, traces

pytestmark = pytest.mark.timeout(300)

# Each case builds a loader that fails (or warns) in one of the places a user's code or torch can: the
# dataset, an iterable dataset, collate_fn, worker_init_fn, the sampler, an argument torch refuses, a
# worker that dies, a timeout. Its line numbers are the same in every mode: `wrap` is the only difference.
CASES = '''
import faulthandler, json, os, sys, time, traceback, warnings
import torch

faulthandler.dump_traceback_later(200, exit=True)  # a hang says where, before the test's timeout
from torch.utils.data import DataLoader, Dataset, IterableDataset

MODE, LOGDIR = sys.argv[1], sys.argv[2]
if MODE == "watch":
    import loaderscope

def wrap(loader):
    return loaderscope.watch(loader, logdir=LOGDIR) if MODE == "watch" else loader

class Items(Dataset):
    def __init__(self, fail=""):
        self.fail = fail
    def __len__(self):
        return 8
    def __getitem__(self, index):
        if index == 5 and self.fail == "raise":
            raise ValueError("bad sample 5")
        if index == 5 and self.fail == "die":
            os._exit(1)
        if index == 5 and self.fail == "stall":
            time.sleep(3)
        return torch.tensor([index])

class Stream(IterableDataset):
    def __iter__(self):
        yield torch.tensor([1])
        raise ValueError("bad stream")

class ShortStream(IterableDataset):  # says 3, yields 10: torch warns from __next__ (stacklevel=2)
    def __iter__(self):
        return iter(range(10))
    def __len__(self):
        return 3

def bad_collate(batch):
    raise KeyError("collate")

def bad_init(worker):
    raise OSError("worker_init_fn")

class BadSampler:
    def __iter__(self):
        yield 0
        raise IndexError("sampler")
    def __len__(self):
        return 4

def build(case, workers):
    options = {"batch_size": 2, "num_workers": workers}
    if case == "dataset":
        return DataLoader(Items("raise"), **options)
    if case == "iterable":
        return DataLoader(Stream(), **options)
    if case == "collate":
        return DataLoader(Items(), collate_fn=bad_collate, **options)
    if case == "worker_init":
        return DataLoader(Items(), worker_init_fn=bad_init, **options)
    if case == "sampler":
        return DataLoader(Items(), sampler=BadSampler(), **options)
    if case == "argument":
        return DataLoader(Items(), prefetch_factor=-1, **options)
    if case == "death":
        return DataLoader(Items("die"), **options)
    if case == "timeout":
        return DataLoader(Items("stall"), timeout=1, **options)
    return DataLoader(ShortStream(), **options)

def frames(exc):
    seen = []
    while exc is not None:
        seen += [[frame.filename, frame.name, frame.lineno] for frame in traceback.extract_tb(exc.__traceback__)]
        exc = exc.__cause__ or exc.__context__
    return seen

def run(case, workers):
    said = {"case": f"{case}/{workers}", "raised": None, "frames": [], "warned": []}
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            loader = wrap(build(case, workers))
            len(loader)  # torch compares the length it said with the yields
            for batch in loader:
                pass
        except Exception as exc:
            said["raised"], said["frames"] = type(exc).__name__, frames(exc)
    said["warned"] = sorted({(w.filename, w.lineno, str(w.message)[:40]) for w in warned})
    return said

for case, workers in [(c, w) for c in sys.argv[3].split(",") for w in (0, 2)]:
    if workers == 0 and case in ("worker_init", "death", "timeout"):
        continue  # no worker to fail
    try:
        said = run(case, workers)
    except RuntimeError as exc:  # torch's SIGCHLD handler, raising again while the first error unwinds
        said = {"case": f"{case}/{workers}", "raised": "RuntimeError", "frames": frames(exc), "warned": []}
    print(json.dumps(said), flush=True)
'''

OURS = str(Path(loaderscope.__file__).parent)  # a venv's own path may say "loaderscope" too


def ours(frames: list[list]) -> list[list]:
    return [frame for frame in frames if frame[0].startswith(OURS)]


# The same in every mode, frame for frame and line for line.
EXACT = "dataset,iterable,collate,worker_init,sampler,argument,short"
# A dying worker and a timeout race in vanilla torch too (which error, raised from where): no frame of ours.
RACY = "death,timeout"


def said(tmp_path: Path, mode: str, cases: str) -> dict[str, dict]:
    env = environment() | ({"LOADERSCOPE_LOGDIR": str(tmp_path / mode)} if mode == "logdir" else {})
    done = subprocess.run([PYTHON, script(tmp_path, CASES, "cases.py"), mode, str(tmp_path / mode), cases],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    cases_said = [json.loads(line) for line in done.stdout.splitlines()]
    return {case["case"]: case for case in cases_said}


def read_as(case: dict) -> dict:
    """A case's frames as they can be compared: the user's with their lines, torch's without (which line of
    torch's ``_next_data`` hands a worker's error on depends on whether its batch came early and was parked).
    With ``num_workers=0`` the probe does torch's four-line ``_next_data`` itself, to keep its per-batch cost
    down (``TorchSingleProcessProbe``): that one frame of torch's is not in the traceback (DESIGN §11,
    "warnings and tracebacks")."""
    in_process = case["case"].endswith("/0")
    frames = [(file, name) if "torch" in file else (file, name, line) for file, name, line in case["frames"]
              if not (in_process and file.endswith("dataloader.py") and name == "_next_data")]
    return case | {"frames": frames}


@pytest.mark.parametrize("mode", ["watch", "logdir"])
def test_tracebacks_and_warnings_name_the_frames_vanilla_torch_names(tmp_path: Path, mode: str) -> None:
    vanilla, watched = said(tmp_path, "vanilla", EXACT), said(tmp_path, mode, EXACT)
    assert len(vanilla) == 13 and watched.keys() == vanilla.keys()
    for case, expected in vanilla.items():
        assert read_as(watched[case]) == read_as(expected), case
        assert not ours(watched[case]["frames"]), case
    assert vanilla["short/2"]["warned"] and vanilla["dataset/2"]["frames"]  # the comparison compared something
    assert len(traces(tmp_path / mode)) >= 8  # and these loaders were watched


@pytest.mark.parametrize("mode", ["watch", "logdir"])
def test_a_dead_or_timed_out_worker_raises_without_a_frame_of_the_probe(tmp_path: Path, mode: str) -> None:
    watched = said(tmp_path, mode, RACY)
    assert watched.keys() == {"death/2", "timeout/2"}
    for case in watched.values():
        assert case["raised"] in ("RuntimeError", "ConnectionResetError", "EOFError"), case
        assert case["frames"] and not ours(case["frames"]), case
    assert len(traces(tmp_path / mode)) == 2


class ShortStream(IterableDataset):
    """Says 3, yields 10 (in each worker): torch warns from ``__next__`` once the yields pass the length."""

    def __iter__(self) -> Iterator[int]:
        return iter(range(10))

    def __len__(self) -> int:
        return 3


def warned_each_epoch(loader: DataLoader) -> list[set[tuple[str, int]]]:
    """Two epochs, ``len()`` asked before the second: where torch's warnings came from, in each."""
    warned = []
    for epoch in range(2):
        if epoch == 1:
            len(loader)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert sum(1 for _ in loader) == 10
        warned.append({(w.filename, w.lineno) for w in caught})
    return warned


def test_an_epoch_after_len_is_asked_warns_where_vanilla_torch_does_and_is_recorded_whole() -> None:
    """torch reads ``len()`` into the iterator at each ``_reset``: a persistent iterator moves to the class
    whose ``__next__`` is torch's for the epochs after the loop asked. torch 2.13 warns with ``stacklevel=2``
    (the loop's line), torch 2.4 without (its own line): either way, where vanilla torch does."""
    def short_loader() -> DataLoader:
        return DataLoader(ShortStream(), batch_size=2, num_workers=2, persistent_workers=True)

    vanilla = warned_each_epoch(short_loader())
    events: list[dict] = []
    loader = watch(short_loader(), sink=events.extend)
    watched = warned_each_epoch(loader)
    loader.close()
    assert vanilla[0] == set() and vanilla[1] and watched == vanilla
    kinds = [event["kind"] for event in events]
    assert kinds.count("yield") == 20 and kinds.count("epoch_end") == 2
