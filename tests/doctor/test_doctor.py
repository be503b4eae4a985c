"""`loaderscope doctor PID` against real hung training processes started without loaderscope.

Each test writes a small training script, starts it in its own session, waits until the script says
its hang is in place (a marker file), runs the real command (py-spy over ptrace) and ends the
process group. The verdict must name the worker, the task, the sample and the user's line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loaderscope.doctor import model, verdict
from loaderscope.doctor.sample import EXIT_NO_LOADER, EXIT_NO_PROCESS, EXIT_NOT_PYTHON, children, py_spy
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.traces.jsonl import read_trace
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

SLEEPS = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 13:
            mark("hang")
            time.sleep(3600)  # HANG
        return torch.tensor([i])


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


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[Any]:
    started: list[Hung] = []

    def start(source: str, **kw: Any) -> Hung:
        h = Hung(tmp_path, source, **kw)
        started.append(h)
        return h

    yield start
    for h in started:
        h.end()


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


@pytest.mark.slow
def test_a_sample_that_sleeps_names_worker_task_sample_and_line(hung: Any, tmp_path: Path) -> None:
    h = hung(SLEEPS)
    h.wait()
    out_file = tmp_path / "snap.trace.jsonl"
    rc, out = doctor(str(h.proc.pid), "--duration", "1.5", "--out", str(out_file))
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "stuck_sample", v
    # sample 13 is in task 3 (indices 12..15); torch hands tasks round-robin, so worker 1 holds it
    assert (v["worker"], v["task"], v["indices"], v["sample"]) == (1, 3, [12, 13, 14, 15], 13)
    assert_where(v, h)
    assert "sample 2 (index 13)" in v["text"] and f"train.py:{h.line('HANG')}" in v["text"]
    assert out["training"]["place"] == "next"
    head, events = read_trace(out_file)
    assert head["mode"] == "doctor"
    stuck = next(e for e in events if e["kind"] == "worker_stuck")
    assert (stuck["worker"], stuck["idx"], stuck["sample"], stuck["pos"]) == (1, 3, 13, 1)
    assert [f for f in stuck["stack"] if f["user"]][-1]["line"] == h.line("HANG")
    assert next(e for e in events if e["kind"] == "doctor_verdict")["text"] == v["text"]


@pytest.mark.slow
def test_a_busy_loop_is_told_from_a_wait_by_its_cpu(hung: Any) -> None:
    h = hung(BUSY)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "2")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "busy_loop", v
    assert (v["worker"], v["task"], v["sample"]) == (1, 1, 6)
    assert v["where"]["file"] == str(h.script) and v["where"]["line"] in (h.line("HANG"), h.line("HANG") - 1)


@pytest.mark.slow
def test_a_lock_held_at_fork_advises_spawn(hung: Any) -> None:
    h = hung(FORK_LOCK)
    h.wait(count=2)
    rc, out = doctor(str(h.proc.pid), "--duration", "1.5")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "fork_lock", v
    assert v["worker"] in (0, 1) and v["task"] == v["worker"] and v["sample"] == 4 * v["worker"]
    assert_where(v, h)
    assert 'multiprocessing_context="spawn"' in v["advice"]


@pytest.mark.slow
def test_a_stopped_worker(hung: Any) -> None:
    h = hung(STOPS)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1.5")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "stopped", v
    assert (v["worker"], v["task"], v["indices"], v["sample"]) == (0, 4, [16, 17, 18, 19], 16)
    assert_where(v, h)
    assert f"kill -CONT {v['pid']}" in v["advice"]
    # the same, as a person reads it
    done = subprocess.run([sys.executable, "-m", "loaderscope.cli", "doctor", str(h.proc.pid), "--duration", "1"],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith(f"worker 0 (pid {v['pid']}) is stopped") and f"train.py:{h.line('HANG')}" in lines[1]
    assert lines[2].startswith("what to do: resume it with `kill -CONT")
    assert any(line.strip().startswith("worker 1 (pid ") and "idle on its index queue" in line for line in lines)


@pytest.mark.slow
def test_a_stuck_sample_in_the_main_process(hung: Any) -> None:
    h = hung(IN_PROCESS)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "in_process", v
    assert (v["indices"], v["sample"]) == ([8, 9, 10, 11], 9) and "sample index 9" in v["advice"]
    assert_where(v, h)


@pytest.mark.slow
def test_a_worker_blocked_writing_while_the_main_process_does_not_read(hung: Any) -> None:
    h = hung(NOT_READING)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1.5")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "blocked_put", v
    assert v["worker"] in (0, 1)
    assert out["training"]["place"] == "step"
    assert f"train.py:{h.line('HANG')}" in v["text"] and "not reading" in v["text"]


@pytest.mark.slow
def test_slow_but_moving_is_not_a_hang(hung: Any) -> None:
    h = hung(MOVING)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "2")
    assert rc == 0 and out["verdict"]["cause"] == "moving", out
    assert out["moving"]


@pytest.mark.slow
def test_no_dataloader_and_unreadable_targets_exit_with_their_codes(hung: Any) -> None:
    h = hung(NO_LOADER)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1")
    assert rc == EXIT_NO_LOADER and out["verdict"]["cause"] == "no_loader", out
    assert_where(out["verdict"], h)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        rc, out = doctor(str(sleeper.pid))
        assert rc == EXIT_NOT_PYTHON and "not a Python process" in out["error"]
    finally:
        sleeper.kill()
        sleeper.wait()
    rc, out = doctor(str(sleeper.pid))  # reaped: that PID no longer exists
    assert rc == EXIT_NO_PROCESS and "no process" in out["error"]


@pytest.mark.slow
def test_another_users_process_says_why_it_cannot_be_read(hung: Any) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to start doctor as another user")
    h = hung(NO_LOADER)
    h.wait()
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "loaderscope.cli", "doctor", str(h.proc.pid)], capture_output=True, timeout=120, check=False)
    text = done.stderr.decode()
    assert done.returncode == 4 and "Traceback" not in text, text
    assert "another user (uid 0)" in text


@pytest.mark.slow
@pytest.mark.timeout(300)  # torchrun, two ranks and their workers each import torch
def test_ddp_uneven_inputs_names_the_rank_that_is_still_loading(hung: Any, tmp_path: Path) -> None:
    h = hung(UNEVEN, argv=[sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "train.py"])
    h.wait()
    rc, out = doctor("--job", str(h.proc.pid), "--duration", "1.5", "--out", str(tmp_path / "job.jsonl"))
    assert rc == 0 and out["rank"] == 1, out["verdict"]
    for rank in (0, 1):
        head, events = read_trace(tmp_path / f"job.rank{rank}.jsonl")
        assert head["mode"] == "doctor" and {e["rank"] for e in events} == {rank}
        assert next(e for e in events if e["kind"] == "doctor_verdict")["job"] == out["verdict"]
    by_rank = {r["rank"]: r for r in out["ranks"]}
    assert by_rank[0]["verdict"]["cause"] == "uneven"
    assert by_rank[0]["verdict"]["where"]["line"] == h.line("DONE")
    one = by_rank[1]["verdict"]
    assert one["cause"] == "stuck_sample" and (one["worker"], one["task"], one["sample"]) == (0, 2, 9)
    assert_where(one, h)
    assert out["verdict"].startswith("rank 1 (pid ") and "all_reduce" in out["verdict"]


@pytest.mark.slow
def test_an_import_half_done_at_fork_names_the_module_and_the_fix(hung: Any, tmp_path: Path) -> None:
    (tmp_path / "slow_module.py").write_text(SLOW_MODULE)
    h = hung(IMPORT_AT_FORK)
    h.wait(count=2)
    rc, out = doctor(str(h.proc.pid), "--duration", "1.5")
    v = out["verdict"]
    assert rc == 0 and v["cause"] == "import_fork_lock", v
    assert v["worker"] in (0, 1) and v["task"] is None
    assert_where(v, h)
    assert "to import slow_module" in v["text"] and "in worker_init_fn" in v["text"], v["text"]
    assert v["advice"].startswith("import slow_module in the main thread before the loader starts its workers")


@pytest.mark.slow
def test_a_doctored_process_finishes_with_the_same_batches(hung: Any) -> None:
    plain = hung(RECORDS, name="plain.py")
    plain_out = plain.proc.communicate(timeout=180)[0]
    h = hung(RECORDS)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1")
    assert rc == 0 and out["verdict"]["cause"] == "moving", out
    assert h.proc.poll() is None, "the script ended before doctor was done: make it longer"
    doctored_out = h.proc.communicate(timeout=180)[0]
    assert h.proc.returncode == plain.proc.returncode == 0
    assert doctored_out == plain_out and doctored_out.count(b"\n") == 240


# --- the pure model and verdict on recorded-shape dumps (no process, no py-spy) ---------------------

WORKER_PY = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py"
FETCH_PY = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py"
LOADER_PY = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"


def _f(name: str, file: str, line: int, code: str = "", **loc: Any) -> dict[str, Any]:
    return {"name": name, "filename": file, "line": line, "code": code,
            "locals": [{"name": k, "repr": str(v)} for k, v in loc.items()]}


def _thread(tid: int, *frames: dict[str, Any], name: str = "MainThread") -> dict[str, Any]:
    return {"os_thread_id": tid, "thread_name": name, "frames": list(frames)}  # innermost first, as py-spy


def _recording(main: list[dict[str, Any]], workers: dict[int, dict[str, Any]], times: int = 3) -> dict[str, Any]:
    procs = {"100": {"state": "S", "cpu": 0, "comm": "python", "threads": main}} | {str(k): v for k, v in workers.items()}
    return {"pid": 100, "clk_tck": 100, "samples": [{"t": i * 0.5, "procs": procs} for i in range(times)]}


WAITING = [_thread(100, _f("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
                   _f("_MultiProcessingDataLoaderIter._try_get_data", LOADER_PY, 1291),
                   _f("_MultiProcessingDataLoaderIter._next_data", LOADER_PY, 1505),
                   _f("<module>", "/home/me/train.py", 30, "for b in loader:"))]


def _worker(wid: int, *inner: dict[str, Any], state: str = "S", wchan: str = "futex_wait_queue",
            code: str = "data = fetcher.fetch(index)", **loc: Any) -> dict[str, Any]:
    loop = _f("_worker_loop", WORKER_PY, 374, code, worker_id=wid, **loc)
    above = _f("Popen._launch", "/usr/lib/python3.11/multiprocessing/popen_fork.py", 71)
    pid = 200 + wid
    return {"state": state, "cpu": 0, "comm": "pt_data_worker", "wchan": {str(pid): wchan},
            "threads": [_thread(pid, *inner, loop, above)]}


def test_model_reads_a_lock_wait_in_a_forked_worker() -> None:
    inner = [_f("Data.__getitem__", "/home/me/data.py", 12, "with LOCK:", i=8),
             _f("_MapDatasetFetcher.fetch", FETCH_PY, 54, "data = [self.dataset[idx] for idx in x]",
                possibly_batched_index=[8, 9, 10, 11], idx=8)]
    rec = _recording(WAITING, {200: _worker(0, code="r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)"),
                               201: _worker(1, *inner, idx=2, index=[8, 9, 10, 11])})
    p = model.build(rec)
    assert p.training.place == "next" and p.start_method == "fork"
    v = verdict.decide(p)
    assert (v.cause, v.worker, v.task, v.indices, v.sample) == ("fork_lock", 1, 2, [8, 9, 10, 11], 8)
    assert v.where == {"file": "/home/me/data.py", "line": 12, "function": "Data.__getitem__", "code": "with LOCK:"}
    assert "sample 1 (index 8)" in v.text and "data.py:12" in v.text and "waited at least 1.0 s" in v.text


def test_torchs_own_seeding_import_held_at_fork_is_named_in_numpy() -> None:
    """The hang loaderscope's own writer thread once caused (tests/probe/test_fork_safety.py): torch's worker
    loop seeds numpy.random, whose import another thread of the main process had begun at fork."""
    importing = _f("_lock_unlock_module", "<frozen importlib._bootstrap>", 224)
    importing["locals"] = [{"name": "name", "repr": '"numpy.random"'}]  # py-spy's repr of the str argument
    inner = [_f("_ModuleLock.acquire", "<frozen importlib._bootstrap>", 120, tid=1), importing,
             _f("__getattr__", "/venv/lib/python3.11/site-packages/numpy/__init__.py", 718,
                "import numpy.random as random", attr="'random'")]
    rec = _recording(WAITING, {200: _worker(0, *inner, code="np.random.seed(np_seed)")})
    v = verdict.decide(model.build(rec))
    assert (v.cause, v.worker, v.task) == ("import_fork_lock", 0, None)
    assert "to import numpy.random at __init__.py:718 in __getattr__" in v.text and "while starting" in v.text
    assert v.advice.startswith("import numpy.random in the main thread")
    assert "waiting to import numpy.random, while starting" in verdict.describe_worker(model.build(rec).workers[0])


def test_a_sleep_on_a_with_line_is_no_lock_without_a_futex() -> None:
    inner = [_f("Data.__getitem__", "/home/me/data.py", 12, "with open(p) as f:", i=8),
             _f("_MapDatasetFetcher.fetch", FETCH_PY, 54, "", possibly_batched_index=[8], idx=8)]
    rec = _recording(WAITING, {201: _worker(1, *inner, wchan="pipe_read", idx=2, index=[8])})
    assert verdict.decide(model.build(rec)).cause == "stuck_sample"


def test_a_zombie_worker_is_a_dead_worker_and_idle_workers_a_lost_task() -> None:
    idle = "r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)"
    rec = _recording(WAITING, {200: _worker(0, code=idle),
                               201: {"state": "Z", "cpu": 0, "comm": "pt_data_worker", "exitcode": -9}})
    v = verdict.decide(model.build(rec))
    assert v.cause == "dead_worker" and "signal 9" in v.text
    rec = _recording(WAITING, {200: _worker(0, code=idle), 201: _worker(1, code=idle)})
    assert verdict.decide(model.build(rec)).cause == "all_idle"


def test_a_collective_is_not_a_dataloader_problem() -> None:
    main = [_thread(100, _f("all_reduce", "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 2800),
                    _f("step", "/home/me/train.py", 40, "dist.all_reduce(loss)"))]
    v = verdict.decide(model.build(_recording(main, {})))
    assert v.cause == "collective" and v.text.startswith("not a DataLoader problem: this rank waits for another rank")
    assert v.where is not None and v.where["line"] == 40


def test_a_pin_thread_stuck_pinning_holds_up_next() -> None:
    pin_py = "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py"
    pin = _thread(101, _f("pin_memory", pin_py, 57, "return data.pin_memory()"),
                  _f("_pin_memory_loop", pin_py, 34, "data = pin_memory(data, device)"), name="Thread-1")
    idle = "r = index_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)"
    v = verdict.decide(model.build(_recording([*WAITING, pin], {200: _worker(0, code=idle)})))
    assert v.cause == "pin_thread" and "pin-memory thread" in v.text and "pin_memory=False" in v.advice


def test_the_job_names_the_rank_outside_the_collective() -> None:
    c10d = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    waiting = [_thread(100, _f("barrier", c10d, 4000), _f("main", "/home/me/train.py", 50, "dist.barrier()"))]
    inner = [_f("Data.__getitem__", "/home/me/data.py", 7, "time.sleep(60)"),
             _f("_MapDatasetFetcher.fetch", FETCH_PY, 54, "", possibly_batched_index=[5], idx=5)]
    loading = _recording(WAITING, {201: _worker(1, *inner, wchan="hrtimer_nanosleep", idx=5, index=[5])})
    ranks = [(r, 100 + r, p, verdict.decide(p)) for r, p in ((0, model.build(_recording(waiting, {}))),
                                                            (1, model.build(loading)))]
    line, advice, culprit = verdict.decide_job(ranks)
    assert culprit == 1 and line.startswith("rank 1 (pid 101) is not in the collective that rank(s) 0 wait in (barrier)")
    assert "stuck: worker 1" in line and "data.py:7" in line and advice == ranks[1][3].advice
    both = [(r, pid, ranks[0][2], ranks[0][3]) for r, pid in ((0, 100), (1, 101))]
    assert verdict.decide_job(both) == ("every rank waits in a collective (rank 0: barrier; rank 1: barrier): they wait "
                                        "for each other or for a rank outside this job", None, None)


HOLDS = HEAD + '''
class Data(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 13:
            held = torch.ones(50 * 2**20)  # 200 MiB, every page written
            mark("hang")
            time.sleep(3600)  # HANG
        return torch.tensor([i])


for batch in DataLoader(Data(), batch_size=4, num_workers=2):
    pass
'''


@pytest.mark.slow
def test_doctor_says_which_worker_holds_how_much_memory(hung: Any, tmp_path: Path) -> None:
    import psutil

    h = hung(HOLDS)
    h.wait()
    out_file = tmp_path / "snap.trace.jsonl"
    rc, out = doctor(str(h.proc.pid), "--duration", "1", "--out", str(out_file))
    assert rc == 0 and out["verdict"]["worker"] == 1, out["verdict"]
    memory = {proc.get("worker"): proc for proc in out["memory"]}
    assert sorted(memory, key=lambda w: -1 if w is None else w) == [None, 0, 1], out["memory"]
    for proc in memory.values():  # every process is waiting: its memory holds still
        theirs = psutil.Process(proc["pid"]).memory_full_info()
        for name in ("uss", "pss", "rss"):
            assert abs(proc[name] - getattr(theirs, name)) <= 0.1 * getattr(theirs, name), (name, proc, theirs)
    assert memory[1]["uss"] > 200 * 2**20 > memory[0]["uss"], out["memory"]
    assert out["host"]["available"] == pytest.approx(psutil.virtual_memory().available, rel=0.1)
    text = subprocess.run([sys.executable, "-m", "loaderscope.cli", "doctor", str(h.proc.pid), "--duration", "1"],
                          capture_output=True, text=True, timeout=180, check=False).stdout
    assert f"  worker 1 (pid {memory[1]['pid']}): USS " in text, text
    _, events = read_trace(out_file)
    sample = next(e for e in events if e["kind"] == "memory")
    assert [p["pid"] for p in sample["procs"]] == [p["pid"] for p in out["memory"]]
    assert summary(reduce(events))["memory"]["workers"][1]["uss"] == memory[1]["uss"]
