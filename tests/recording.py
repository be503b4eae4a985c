"""What the tests of ``loaderscope record`` and ``$LOADERSCOPE_LOGDIR`` share: training scripts that never
import loaderscope, the command and its environment, and the traces it leaves in the logdir; and bench/cached_loop.py
recorded while streamed to a dashboard (the advice tests, server and page)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderscope.model import conformance
from loaderscope.traces.jsonl import read_trace
from tests.conftest import wait_for

if TYPE_CHECKING:
    from tests.live import LiveServer

PYTHON = sys.executable
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
FILE_NAME = re.compile(
    r"(?P<name>[\w.:-]+)-(?P<loader>\w+)-rank(?P<rank>\d+)-pid(?P<pid>\d+)-(?P<run>\w+)\.trace\.jsonl")
JOB_NAME = re.compile(r"(?P<command>[\w.-]+)-\d{8}-\d{6}-[0-9a-f]{4}")

# The user's script: it knows nothing of loaderscope. It prints how many batches it consumed.
TRAIN = '''
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, index):
        return torch.tensor([index, index * index])

def main(workers=0, epochs=2, context=None, then="exit0", slow=0.0):
    loader = DataLoader(Squares(), batch_size=4, num_workers=int(workers), multiprocessing_context=context)
    consumed = 0
    for epoch in range(int(epochs)):
        for batch in loader:
            consumed += 1
            print(f"consumed {consumed} pid {os.getpid()}", flush=True)
            time.sleep(float(slow))  # the workload's own pace, so a test can interrupt it mid-run
            if then == "raise" and consumed == 5:
                raise ValueError("bad batch")
    print(f"consumed {consumed} in all", flush=True)
    sys.exit(3 if then == "exit3" else 0)

if __name__ == "__main__":
    main(**dict(arg.split("=", 1) for arg in sys.argv[1:]))
'''

DISTRIBUTED = '''
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
data = TensorDataset(torch.arange(64))
loader = DataLoader(data, batch_size=4, num_workers=1, sampler=DistributedSampler(data, shuffle=False))
consumed = sum(1 for _ in loader)
print(f"rank {dist.get_rank()} consumed {consumed} in all", flush=True)
print(f"run id {os.environ['TORCHELASTIC_RUN_ID']}", flush=True)
dist.destroy_process_group()
'''

NO_TORCH = 'import sys; print("torch imported:", "torch" in sys.modules)'


def torch_accelerator() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)  # from torch 2.6 on; torch 2.4 pins only for CUDA
    return bool(accelerator.is_available()) if accelerator is not None else torch.cuda.is_available()


def pin_warns() -> bool:
    """torch warns of pin_memory without an accelerator from torch 2.6 on (torch.accelerator); 2.4 says nothing."""
    import torch

    return hasattr(torch, "accelerator")


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERSCOPE_")}
    return env | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def record_argv(logdir: Path, *command: str) -> list[str]:
    return [PYTHON, "-m", "loaderscope.record", "--logdir", str(logdir), "--", *command]


def record(tmp_path: Path, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(record_argv(tmp_path / "runs", *command), cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=timeout)


def script(tmp_path: Path, text: str = TRAIN, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def traces(logdir: Path) -> list[Path]:
    return sorted(logdir.rglob("*.trace.jsonl"))


def consumed(output: str) -> list[int]:
    return [int(n) for n in re.findall(r"consumed (\d+) in all", output)]


def yields(events: list[dict[str, Any]]) -> int:
    return sum(1 for e in events if e["kind"] == "yield")


def only_trace(logdir: Path) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    found = traces(logdir)
    assert len(found) == 1, found
    head, events = read_trace(found[0])
    assert conformance.check(events) == []
    return found[0], head, events


def kill_recorded(process: subprocess.Popen[str], pid: int) -> str:
    """SIGKILL the recorded command ``pid`` as a cluster kills a job, wait for record (``process``, started in a
    session of its own) to exit, then kill what is left of its process group; returns record's stderr.

    A DataLoader worker still setting up when its parent dies takes init for its parent, and torch's
    watchdog (torch/utils/data/_utils/worker.py, ``ManagerWatchdog``) then never sees the parent go: left
    alive, it holds record's pipes open, and reading them to their end would wait for ever."""
    os.kill(pid, signal.SIGKILL)
    process.wait(60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    return process.communicate(timeout=60)[1]


LOOP = Path(__file__).resolve().parents[1] / "bench" / "cached_loop.py"


# One worker feeding a step nine times shorter than a batch's fetch (4 samples of 9 ms against 4 ms):
# the old arithmetic, median fetch / step, said about 9 workers would keep up.
STARVED = ("workers=1", "samples=48", "batch=4", "cold=0.009", "step=0.004")


def recorded(tmp_path: Path, server: LiveServer, *loop: str) -> tuple[Path, list[dict[str, Any]], str]:
    """Run the loop under ``loaderscope record`` (streamed to ``server`` too); its trace, its events and
    the id of the run the dashboard holds of it."""
    argv = [PYTHON, "-m", "loaderscope.record", "--logdir", str(tmp_path / "runs"), "--url", server.page_url,
            "--", PYTHON, str(LOOP), *loop]
    done = subprocess.run(argv, cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    [trace] = sorted((tmp_path / "runs").rglob("*.trace.jsonl"))
    header, events = read_trace(trace)
    with server.client() as http:
        [run_id] = [run["id"] for run in http.get("/api/runs").json() if run["job"] == header["job"]]
    wait_for(lambda: server.run(run_id)["status"] == "done", what="the streamed run to end")
    return trace, events, run_id
