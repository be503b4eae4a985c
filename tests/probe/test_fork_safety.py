"""loaderscope's threads in a training process import nothing.

torch forks its DataLoader workers from the training process while our threads (the probe's, the
trace writer's, the dashboard uplink's) run beside it. A module that one of our threads is half-way
through importing at that instant stays locked in the forked worker, whose next import of it waits
forever: torch's worker loop imports ``numpy.random`` to seed it, so the worker, and then training,
hang. pyarrow imports pandas (and with it ``numpy.random``) on its first ``pa.array``; on a loaded box a
worker forked during that import hung for good (a CI run's orphaned workers held its pipes 60 s).

The check is deterministic where the hang is not: an audit hook in a real recorded job notes every
module loaded in a thread named ``loaderscope-*``, in every format and with a live dashboard.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loaderscope.traces.jsonl import read_trace_tolerant
from tests.live import LiveServer
from tests.recording import PYTHON, TRAIN, environment, script

# Each test runs real jobs (Python processes importing torch, workers forked each epoch, a live dashboard's
# close receipt): 5-30 s here, and in CI under load one outran pytest's 120 s. The jobs' own timeouts
# still end a hang.
pytestmark = pytest.mark.timeout(300)

# Runs the user's script (argv[1:]) under an audit hook that lists imports made by our threads.
AUDITED = '''
import os, runpy, sys, threading

def noted(event, args):
    if event == "import" and threading.current_thread().name.startswith("loaderscope"):
        with open(os.environ["IMPORTS_SEEN"], "a") as seen:
            seen.write(f"{args[0]} in {threading.current_thread().name}\\n")

sys.addaudithook(noted)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


# The probe's rarer paths: a stuck worker (its stack asked for), a worker that dies, a timeout.
TROUBLE = '''
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset
import loaderscope

class Trouble(Dataset):
    def __init__(self, stuck=-1, dies=-1):
        self.stuck, self.dies = stuck, dies

    def __len__(self):
        return 16

    def __getitem__(self, index):
        if index == self.stuck:
            time.sleep(2.5)
        if index == self.dies:
            os._exit(1)
        return torch.tensor([index])

def watched(dataset, **options):
    loader = DataLoader(dataset, batch_size=2, num_workers=2, **options)
    return loaderscope.watch(loader, url=sys.argv[1], logdir=sys.argv[2], trace_format=sys.argv[3], stuck_after=0.5)

print("stuck", sum(1 for _ in watched(Trouble(stuck=5))), flush=True)
for dataset, options in ((Trouble(dies=5), {}), (Trouble(stuck=5), {"timeout": 1})):
    raised = []
    try:
        try:
            sum(1 for _ in watched(dataset, **options))
        except (RuntimeError, ConnectionResetError, EOFError) as exc:  # tests.conftest.TORCH_DEATH_ERRORS
            raised.append(type(exc).__name__)
    except RuntimeError as exc:  # torch's SIGCHLD handler, raising again while the hand-over's error unwinds
        raised.append(type(exc).__name__)
    print("raised", raised[0], flush=True)
'''


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_no_module_is_imported_by_loaderscope_threads(tmp_path: Path, fmt: str, server: LiveServer) -> None:
    pytest.importorskip("pyarrow") if fmt == "parquet" else None
    seen = tmp_path / "imports.txt"
    argv = [PYTHON, "-m", "loaderscope.record", "--format", fmt, "--logdir", str(tmp_path / "runs"),
            "--url", server.page_url, "--", PYTHON, script(tmp_path, AUDITED, "audited.py"),
            script(tmp_path, TRAIN), "workers=2", "epochs=2"]
    env = environment() | {"IMPORTS_SEEN": str(seen), "LOADERSCOPE_PART_SECONDS": "0.1"}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "consumed 24 in all" in done.stdout
    assert list((tmp_path / "runs").rglob(f"*.trace.{fmt}")), done.stderr
    assert not seen.exists(), f"imported by loaderscope's threads:\n{seen.read_text()}"


def test_a_stuck_dying_or_timed_out_worker_makes_no_loaderscope_thread_import(tmp_path: Path,
                                                                               server: LiveServer) -> None:
    seen = tmp_path / "imports.txt"
    argv = [PYTHON, script(tmp_path, AUDITED, "audited.py"), script(tmp_path, TROUBLE, "trouble.py"),
            server.page_url, str(tmp_path / "runs"), "parquet"]
    done = subprocess.run(argv, cwd=tmp_path, env=environment() | {"IMPORTS_SEEN": str(seen)},
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    # a dying worker: torch's RuntimeError, or (a busy machine, the worker gone mid hand-over of a tensor)
    # the ConnectionResetError vanilla torch raises then; a timeout: RuntimeError
    said = done.stdout.split("\n")[:3]
    assert said[0] == "stuck 8" and said[1].split()[0] == "raised" and said[2] == "raised RuntimeError", done.stdout
    traces = list((tmp_path / "runs").rglob("*.trace.parquet"))
    kinds = {event["kind"] for path in traces for event in read_trace_tolerant(path)[1]}
    assert len(traces) == 3 and {"worker_stuck", "worker_died", "timeout"} <= kinds, (kinds, done.stderr)
    assert not seen.exists(), f"imported by loaderscope's threads:\n{seen.read_text()}"


# An iterator that is garbage in a reference cycle (torch's reraise leaves one after a worker's error) lives
# on in every worker forked before the training process collects it; the worker's collector may get there
# first, and torch's __del__ then shuts it down in the worker. The spy notes any of the probe's shutdown
# bookkeeping (the parent's queues and files) done in a process other than the training process.
INHERITED = '''
import gc, os, sys
from torch.utils.data import DataLoader
from loaderscope import watch
import loaderscope.probe.iterators as iterators

TRAINING = os.getpid()
for step in ("_before_shutdown", "_after_shutdown"):
    def spy(self, _original=getattr(iterators.MultiProcessProbe, step), _step=step):
        if os.getpid() != TRAINING:
            print("in a worker:", _step, flush=True)
        return _original(self)
    setattr(iterators.MultiProcessProbe, step, spy)

gc.disable()  # only the workers forked below collect the cycle
first = watch(DataLoader(list(range(64)), batch_size=4, num_workers=2), sink=lambda events: None)
it = iter(first)
next(it)
cycle = [it, None]
cycle[1] = cycle
del it, cycle

def collect(worker):
    gc.collect()

second = watch(DataLoader(list(range(64)), batch_size=4, num_workers=2, worker_init_fn=collect),
               sink=lambda events: None)
print("batches", sum(1 for _ in second), flush=True)
gc.enable()
gc.collect()
'''


def test_a_worker_that_collects_an_inherited_iterator_leaves_its_bookkeeping_alone(tmp_path: Path) -> None:
    done = subprocess.run([PYTHON, script(tmp_path, INHERITED, "inherited.py")], cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["batches 16"], done.stdout
