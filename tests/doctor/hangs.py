"""Real hung training scripts for the doctor tests (started without loaderscope, in a session of their
own), and the real command run on them: the scripts, ``Hung`` (the ``hung`` fixture of tests/conftest.py
starts one), ``doctor`` and what a verdict must point at."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson

from loaderscope.doctor.sample import children, py_spy
from tests.conftest import wait_for

HEAD = '''\
import os, signal, sys, threading, time
import torch
from torch.utils.data import DataLoader, Dataset

MARK = sys.argv[1]


def mark(text):
    with open(MARK, "a") as f:
        f.write(text + "\\n")
'''

# A dataset whose sample 13 sleeps for an hour: the plainest hang, under more than one loop.
SLEEPING_DATA = '''
class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 13:
            mark("hang")
            time.sleep(3600)  # HANG
        return torch.tensor([i])

'''

SLEEPS = HEAD + SLEEPING_DATA + '''
for batch in DataLoader(Data(), batch_size=4, num_workers=2):
    pass
'''

BUSY = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 6:
            mark("hang")
            n = 0
            while n >= 0:
                n += 1  # HANG
        return torch.tensor([i])


for batch in DataLoader(Data(), batch_size=4, num_workers=2):
    pass
'''

FORK_LOCK = HEAD + '''
LOCK = threading.Lock()


class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        mark("hang")
        with LOCK:  # HANG
            return torch.tensor([i])


held, forked = threading.Event(), threading.Event()


def hold():  # a thread holds the lock while the loader forks its workers, then lets go in this process only
    with LOCK:
        held.set()
        forked.wait()


threading.Thread(target=hold, daemon=True).start()
held.wait()
it = iter(DataLoader(Data(), batch_size=4, num_workers=2, multiprocessing_context="fork"))
forked.set()
for batch in it:
    pass
'''

# A thread of the main process is half-way through an import (a logger's or uploader's lazy import;
# pyarrow's first pa.array importing pandas) when the loader forks: the workers' copy of that module's
# import lock stays taken. slow_module.py says when its import has begun, then takes its time.
IMPORT_AT_FORK = HEAD + '''
import builtins

builtins.importing = threading.Event()


def init(worker_id):
    mark("hang")
    import slow_module  # HANG


threading.Thread(target=lambda: __import__("slow_module"), daemon=True).start()
builtins.importing.wait()
for batch in DataLoader(list(range(8)), batch_size=2, num_workers=2, worker_init_fn=init,
                        multiprocessing_context="fork"):
    pass
'''

SLOW_MODULE = '''
import builtins, time

builtins.importing.set()
time.sleep(600)
'''

STOPS = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 16:
            mark("hang")
            os.kill(os.getpid(), signal.SIGSTOP)  # HANG
        return torch.tensor([i])


for batch in DataLoader(Data(), batch_size=4, num_workers=2):
    pass
'''

NOT_READING = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return bytes(2_000_000)  # not a tensor: it crosses the pipe pickled by value


it = iter(DataLoader(Data(), batch_size=4, num_workers=2, collate_fn=lambda b: b))
next(it)
mark("hang")
time.sleep(3600)  # HANG
'''

IN_PROCESS = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 9:
            mark("hang")
            time.sleep(3600)  # HANG
        return torch.tensor([i])


for batch in DataLoader(Data(), batch_size=4, num_workers=0):
    pass
'''

MOVING = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        time.sleep(0.05)
        return torch.tensor([i])


for n, batch in enumerate(DataLoader(Data(), batch_size=2, num_workers=2)):
    if n == 1:
        mark("hang")
'''

NO_LOADER = '''\
import sys, time
open(sys.argv[1], "w").write("hang\\n")
time.sleep(3600)  # HANG
'''

UNEVEN = HEAD + '''
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


class Shard(Dataset):  # rank 0 holds 8 samples, rank 1 holds 12: one more batch, and it hangs
    def __len__(self):
        return 8 if rank == 0 else 12

    def __getitem__(self, i):
        if rank == 1 and i == 9:
            mark("hang")
            time.sleep(3600)  # HANG
        return torch.tensor([float(i)])


def train():
    loader = DataLoader(Shard(), batch_size=4, num_workers=1)
    total = torch.zeros(1)
    for batch in loader:
        total += batch.sum()
        dist.all_reduce(total)  # STEP
    dist.all_reduce(total)  # DONE
    return loader


train()
'''

RECORDS = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 960  # 24 s: still running when doctor, started on a busy machine, is done

    def __getitem__(self, i):
        time.sleep(0.05)
        return torch.tensor([i * 7 % 11])


for n, batch in enumerate(DataLoader(Data(), batch_size=4, num_workers=2)):
    if n == 1:
        mark("hang")
    print(batch.tolist(), flush=True)
'''


class Hung:
    """A training script running in its own session; ended (with all its workers) on exit."""

    def __init__(self, tmp: Path, source: str, name: str = "train.py", argv: list[str] | None = None) -> None:
        self.script = tmp / name
        self.script.write_text(source)
        self.marker = tmp / f"mark-{uuid.uuid4().hex[:6]}"
        command = argv if argv is not None else [sys.executable, str(self.script)]
        self.proc = subprocess.Popen([*command, str(self.marker)], start_new_session=True, cwd=tmp,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"},
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def line(self, tag: str) -> int:
        return next(n for n, text in enumerate(self.script.read_text().splitlines(), 1) if f"# {tag}" in text)

    def wait(self, count: int = 1) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, self.proc.communicate()[1].decode()[-2000:]
            return self.marker.exists() and self.marker.read_text().count("hang") >= count
        wait_for(ready, timeout=120, what="the script's hang")

    def end(self) -> None:
        """Kill the script and every process under it (torchrun starts its ranks in sessions of their own)."""
        family, todo = [], [self.proc.pid]
        while todo:
            family.append(todo.pop())
            todo += children(family[-1])
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.communicate(timeout=60)


def reading(pid: int) -> bool:
    """doctor (process ``pid``) is sampling: its main thread is in sample.record, as py-spy sees it."""
    done = subprocess.run([py_spy(), "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, timeout=60,
                          check=False)
    return b"record (loaderscope/doctor/sample.py" in done.stdout


def doctor(*args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "loaderscope.cli", "doctor", *args, "--json"],
                          capture_output=True, timeout=180, check=False)
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.returncode, orjson.loads(done.stdout)


def assert_where(v: dict[str, Any], h: Hung, tag: str = "HANG") -> None:
    assert v["where"]["file"] == str(h.script) and v["where"]["line"] == h.line(tag), v
