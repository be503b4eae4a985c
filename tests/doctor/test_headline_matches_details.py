"""doctor's headline never contradicts its details: real hangs it once named wrongly while its own
detail lines showed the truth (issue 35). Each is a real DataLoader in a process started without
loaderscope, read by the real command (py-spy over ptrace), as in tests/doctor/test_doctor.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest

from loaderscope.doctor import model, verdict
from loaderscope.doctor.sample import EXIT_NO_PROCESS
from tests.conftest import wait_for
from tests.doctor.dumps import LOADER_PY, WAITING, _f, _recording, _thread, _worker
from tests.doctor.hangs import HEAD, SLEEPING_DATA, SLEEPS, assert_where, doctor, reading

# The prefetcher pattern: a thread iterates the loader and fills a queue the training loop reads.
PREFETCHER = HEAD + "import queue\n" + SLEEPING_DATA + '''
ready = queue.Queue(maxsize=2)


def prefetch():
    for batch in DataLoader(Data(), batch_size=4, num_workers=2):
        ready.put(batch)


threading.Thread(target=prefetch, name="prefetcher", daemon=True).start()
while True:
    batch = ready.get()  # MAIN
'''

# DDP with uneven inputs: rank 0 has two batches, rank 1 four. Rank 0 leaves the loop for a barrier;
# rank 1's third backward() waits for rank 0 in DDP's gradient all-reduce (its reducer's hooks).
DDP_UNEVEN = HEAD + '''
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()


class Shard(Dataset):
    def __len__(self):
        return 8 if rank == 0 else 16

    def __getitem__(self, i):
        return torch.tensor([float(i)])


def train():
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    loader = DataLoader(Shard(), batch_size=4, num_workers=1)
    for n, batch in enumerate(loader):
        loss = model(batch).sum()
        if n == 2:
            mark("hang")
        loss.backward()  # BACKWARD
    mark("hang")
    dist.barrier()  # BARRIER


train()
'''

# A worker takes a non-reentrant lock it already holds: a deadlock on itself, whatever the start method.
SELF_DEADLOCK = HEAD + '''
LOCK = threading.Lock()


class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        with LOCK:  # TAKEN
            return self.load(i)

    def load(self, i):
        if i == 5:
            mark("hang")
            with LOCK:  # HANG
                pass
        return torch.tensor([i])


for batch in DataLoader(Data(), batch_size=4, num_workers=2, multiprocessing_context="fork"):
    pass
'''

# A job at 2 s per batch: the worker computes (state R) on each sample for 2 s.
TWO_SECONDS = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        if i == 1:
            mark("hang")
        end, n = time.monotonic() + 2.0, 0
        while time.monotonic() < end:  # WORK
            n += 1
        return torch.tensor([i])


for batch in DataLoader(Data(), batch_size=1, num_workers=1):
    pass
'''


@pytest.mark.slow
def test_a_loader_iterated_in_a_prefetcher_thread_is_read_in_that_thread(hung: Any) -> None:
    h = hung(PREFETCHER)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "stuck_sample", v  # before: "not a DataLoader problem" (the main thread's get)
    assert (v["worker"], v["task"], v["indices"], v["sample"]) == (1, 3, [12, 13, 14, 15], 13)
    assert_where(v, h)
    assert 'thread "prefetcher" (it iterates the DataLoader) waits for it in next()' in v["text"], v["text"]
    assert v["details"][0].startswith('thread "prefetcher" (it iterates the DataLoader): in next()')
    assert v["details"][1].startswith(f"main thread: at train.py:{h.line('MAIN')} in <module>: batch = ready.get()")
    assert out["training"]["place"] == "next"


@pytest.mark.slow
@pytest.mark.timeout(300)  # torchrun, two ranks and their workers each import torch
def test_ddp_uneven_inputs_with_a_rank_waiting_in_backward_names_the_rank_that_ran_out(hung: Any) -> None:
    h = hung(DDP_UNEVEN, argv=[sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "train.py"])
    h.wait(count=2)
    rc, out = doctor("--job", str(h.proc.pid), "--duration", "1")
    line = out["verdict"]
    assert rc == 0 and out["rank"] == 0, line  # before: rank 1, "not a DataLoader problem", no "uneven"
    assert line.startswith("DDP uneven inputs: rank 0 (pid ") and "has run out of batches" in line, line
    assert f"train.py:{h.line('BARRIER')}" in line and f"train.py:{h.line('BACKWARD')}" in line
    assert "`model` in train is a DistributedDataParallel" in line
    assert "model.join()" in out["advice"] and "drop_last=True" in out["advice"]
    by_rank = {r["rank"]: r["verdict"] for r in out["ranks"]}
    assert by_rank[0]["cause"] == "uneven" and by_rank[0]["where"]["line"] == h.line("BARRIER")
    one = by_rank[1]
    assert one["cause"] == "ddp_backward" and one["text"].startswith("likely waiting for another rank"), one
    assert one["where"]["line"] == h.line("BACKWARD") and "model.join()" in one["advice"]


@pytest.mark.slow
def test_a_worker_deadlocked_on_its_own_lock_is_a_deadlock_not_a_lock_held_at_fork(hung: Any) -> None:
    h = hung(SELF_DEADLOCK)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "self_deadlock", v  # before: fork_lock, advising spawn
    assert (v["worker"], v["task"], v["sample"]) == (1, 1, 5)
    assert_where(v, h)
    assert v["text"].startswith("deadlock: worker 1 (pid ") and "fork" not in v["text"], v["text"]
    assert f"which its own thread holds: it took it at train.py:{h.line('TAKEN')} in __getitem__" in v["text"]
    assert "RLock" in v["advice"] and "would not help" in v["advice"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_job_at_two_seconds_per_batch_is_still_moving_in_every_read(hung: Any) -> None:
    h = hung(TWO_SECONDS)
    h.wait()
    for read in range(10):  # before: "busy loop" in about one read of four (its window was 1.5 s)
        rc, out = doctor(str(h.proc.pid), "--duration", "2")
        assert rc == 0 and out["verdict"]["cause"] == "moving", (read, out["verdict"])
        assert out["duration"] >= 2.0


@pytest.mark.slow
def test_a_process_that_exits_while_read_says_so(hung: Any) -> None:
    h = hung(SLEEPS)
    h.wait()
    run = subprocess.Popen([sys.executable, "-m", "loaderscope.cli", "doctor", str(h.proc.pid), "--duration", "30",
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: run.poll() is not None or reading(run.pid), timeout=60, what="doctor's first read")
        os.killpg(h.proc.pid, signal.SIGKILL)  # the script and its workers, while doctor reads them
        out, err = run.communicate(timeout=60)
    finally:
        run.kill()
        run.wait()
    assert b"Traceback" not in err, err.decode()
    result = orjson.loads(out)
    assert run.returncode == EXIT_NO_PROCESS == result["exit_code"], result
    assert result["error"].startswith(f"process {h.proc.pid} exited while being read (killed by signal 9)"), result


@pytest.mark.slow
def test_a_long_wait_is_said_as_long_as_proc_says_it_slept(hung: Any) -> None:
    h = hung(SLEEPS)
    h.wait()
    marked = h.marker.stat().st_mtime
    wait_for(lambda: time.time() - marked > 4, timeout=30, what="the hang to be older than doctor's window")
    rc, out = doctor(str(h.proc.pid), "--duration", "1")
    since = time.time() - marked
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "stuck_sample", v
    stuck = next(w for w in out["workers"] if w["worker"] == 1)
    # the kernel's account, not the window's: more than doctor's 1 s, never more than since the hang began
    assert out["duration"] + 2 < stuck["held"] <= since, (stuck["held"], since)
    assert f"for at least {stuck['held']:.1f} s" in v["text"]
    assert any("asleep all that time" in line for line in v["details"] if line.startswith("worker 1 ")), v["details"]


# --- never "None": each cause with what the samples may lack (no locals, no exit status) ---------------

def _bare_worker(state: str, code: str, wchan: str = "hrtimer_nanosleep", *inner: dict[str, Any]) -> dict[str, Any]:
    """A worker whose loop's locals were not read (no worker_id, idx, index)."""
    w = _worker(0, *inner, code=code, wchan=wchan)
    w["state"] = state
    loop = w["threads"][0]["frames"][-2]
    loop["locals"] = []
    return w


def test_no_sentence_says_none() -> None:
    fetch = _f("_MapDatasetFetcher.fetch", "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py",
               54, "")
    user = _f("Data.__getitem__", "/home/me/data.py", 7, "with LOCK:")
    recordings = {
        "dead_worker": _recording(WAITING, {200: {"state": "Z", "cpu": 0, "comm": "pt_data_worker"}}),
        "stuck_sample": _recording(WAITING, {200: _bare_worker("S", "data = fetcher.fetch(index)", "pipe_read",
                                                               _f("Data.__getitem__", "/home/me/data.py", 7,
                                                                  "f.read()"),
                                                               fetch)}),
        "fork_lock": _recording(WAITING, {200: _bare_worker("S", "data = fetcher.fetch(index)", "futex_wait_queue",
                                                            user, fetch)}),
        "stopped": _recording(WAITING, {200: _bare_worker("T", "data = fetcher.fetch(index)", "do_signal_stop", user,
                                                          fetch)}),
        "collate": _recording(WAITING, {200: _bare_worker("S", "data = fetcher.fetch(index)", "pipe_read",
                                                          _f("collate", "/home/me/data.py", 9, "x.wait()"),
                                                          _f("_MapDatasetFetcher.fetch", fetch["filename"], 58,
                                                             "return self.collate_fn(data)"))}),
        "not_loader": _recording([_thread(100, _f("?", "/home/me/train.py", 3, ""),
                                          _f("<module>", LOADER_PY, 1, ""))], {}),
    }
    for cause, rec in recordings.items():
        p = model.build(rec)
        v = verdict.decide(p)
        said = " ".join([v.text, v.advice, *v.details, *(verdict.describe_worker(w) for w in p.workers)])
        assert v.cause == cause and "None" not in said, (cause, said)
