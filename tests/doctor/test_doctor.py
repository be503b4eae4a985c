"""`loaderscope doctor PID` against real hung training processes started without loaderscope.

Each test writes a small training script, starts it in its own session, waits until the script says
its hang is in place (a marker file), runs the real command (py-spy over ptrace) and ends the
process group. The verdict must name the worker, the task, the sample and the user's line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loaderscope.doctor.sample import EXIT_NO_LOADER, EXIT_NO_PROCESS, EXIT_NOT_PYTHON
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.traces.jsonl import read_trace
from tests.doctor.hangs import (
    BUSY,
    FORK_LOCK,
    HEAD,
    IMPORT_AT_FORK,
    IN_PROCESS,
    MOVING,
    NO_LOADER,
    NOT_READING,
    RECORDS,
    SLEEPS,
    SLOW_MODULE,
    STOPS,
    UNEVEN,
    assert_where,
    doctor,
)


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
    plain = hung(RECORDS, name="plain.py")  # beside the doctored one: each spends its 24 s asleep in its samples
    h = hung(RECORDS)
    h.wait()
    rc, out = doctor(str(h.proc.pid), "--duration", "1")
    assert rc == 0 and out["verdict"]["cause"] == "moving", out
    assert h.proc.poll() is None, "the script ended before doctor was done: make it longer"
    doctored_out, plain_out = h.proc.communicate(timeout=180)[0], plain.proc.communicate(timeout=180)[0]
    assert h.proc.returncode == plain.proc.returncode == 0
    assert doctored_out == plain_out and doctored_out.count(b"\n") == 240


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
