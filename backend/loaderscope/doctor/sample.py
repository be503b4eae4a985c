"""Reading a live process from outside: py-spy dumps of it and its DataLoader workers, and /proc.

py-spy reads the target's memory over ptrace (``--nonblocking``: the target is never stopped) and
runs no code in it, so a process started without loaderscope goes on exactly as before. What comes
back is a recording: plain JSON that ``model.build`` turns into the loader's state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from loaderscope.doctor import source
from loaderscope.doctor.model import Recording
from loaderscope.procmem import meminfo, smaps_rollup

# Exit codes of `loaderscope doctor` (DESIGN.md §20): each way of not getting an answer has its own.
EXIT_NO_PROCESS = 3
EXIT_NO_PERMISSION = 4
EXIT_NOT_PYTHON = 5
EXIT_NO_LOADER = 6
EXIT_READ_FAILED = 7
DUMP_TIMEOUT = 20.0  # seconds one py-spy dump may take (a large process's locals)
_PF_EXITING = 0x4  # /proc/PID/stat's flags: the process has begun to exit (include/linux/sched.h)


class DoctorError(Exception):
    """Why doctor cannot answer, and what to do; ``code`` is the command's exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def py_spy() -> str:
    """The py-spy binary installed with loaderscope (its wheel puts it beside this Python)."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise DoctorError(EXIT_READ_FAILED, "py-spy is not installed: pip install py-spy (loaderscope depends on it)")
    return found


def proc_stat(pid: int, tid: int | None = None) -> dict[str, Any] | None:
    """State, parent, CPU ticks, name, flags, start time and last CPU from /proc/PID/stat (readable for
    any process), or a thread's from /proc/PID/task/TID/stat; None once gone."""
    try:
        raw = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1: raw.rindex(")")]
    fields = raw.rsplit(")", 1)[1].split()  # fields[0] is proc(5)'s field 3, state
    out: dict[str, Any] = {"state": fields[0], "ppid": int(fields[1]), "cpu": int(fields[11]) + int(fields[12]),
                           "comm": comm, "flags": int(fields[6]), "start": int(fields[19]),
                           "processor": int(fields[36])}
    if fields[0] in ("Z", "X") and len(fields) >= 50:
        out["exitcode"] = _exit_code(int(fields[-1]))
    return out


def _exit_code(status: int) -> int | None:
    """A waitpid status as multiprocessing's exitcode: negative for a signal."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status) if os.WIFEXITED(status) else None


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (DataLoader workers, torchrun's ranks)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := proc_stat(int(entry))) is not None and st["ppid"] == pid:
            out.append(int(entry))
    return sorted(out)


def _wchans(pid: int) -> dict[str, str]:
    """What each thread sleeps on in the kernel (e.g. ``futex_wait_queue``): tells a lock from a sleep."""
    out: dict[str, str] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            out[tid] = Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip()
        except OSError:
            pass
    return out


def environ(pid: int) -> dict[str, str]:
    """A process's environment as it started (``RANK`` under torchrun); empty where unreadable."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def no_process(pid: int) -> DoctorError:
    st = proc_stat(pid)
    if st is not None and st["state"] in ("Z", "X"):
        return DoctorError(EXIT_NO_PROCESS,
                           f"process {pid} has exited ({_how(st)}); its parent has not collected it yet")
    return DoctorError(EXIT_NO_PROCESS, f"no process {pid} exists (it has ended, or the PID is wrong): "
                       "find the training process with `ps -ef | grep python` or `pgrep -af train`")


def _how(st: dict[str, Any]) -> str:
    code = st.get("exitcode")
    return "exit status unknown" if code is None else f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def exited(pid: int, start: int) -> DoctorError | None:
    """The error for a process that was running when doctor began and has since ended (gone, a
    zombie, exiting, or its PID taken by another process); None while it still runs."""
    st = proc_stat(pid)
    if st is not None and st["start"] == start and st["state"] not in ("Z", "X") and not st["flags"] & _PF_EXITING:
        return None
    settle = time.monotonic() + 1.0  # one that is exiting is a zombie within milliseconds: its status says how
    while st is not None and st["start"] == start and st["state"] not in ("Z", "X") and time.monotonic() < settle:
        time.sleep(0.02)
        st = proc_stat(pid)
    how = f" ({_how(st)})" if st is not None and st["start"] == start and st["state"] in ("Z", "X") else ""
    return DoctorError(EXIT_NO_PROCESS, f"process {pid} exited while being read{how}: it was running when doctor "
                       "began and has ended since, so nothing is stuck in it now")


def _cannot_attach(pid: int, text: str) -> DoctorError:
    """py-spy's failure, said in the user's terms with what to do about it."""
    st = proc_stat(pid)
    if st is None or st["state"] in ("Z", "X") or "Check that the process is running" in text:
        return no_process(pid)
    if "Permission" in text or "Operation not permitted" in text:
        return DoctorError(EXIT_NO_PERMISSION, _permission_advice(pid))
    if "python version" in text or "python interpreter" in text.lower():
        return DoctorError(EXIT_NOT_PYTHON, f"process {pid} ({_comm(pid)}) is not a Python process: give the PID of "
                           "the Python process that trains (for torchrun, the agent's PID with --job)")
    first = next((line for line in text.splitlines() if line.strip()), "no output")
    return DoctorError(EXIT_READ_FAILED, f"py-spy could not read process {pid}: {first}")


def _comm(pid: int) -> str:
    st = proc_stat(pid)
    return st["comm"] if st else "?"


def _permission_advice(pid: int) -> str:
    why = []
    try:
        owner = Path(f"/proc/{pid}").stat().st_uid
    except OSError:
        owner = None
    if owner is not None and owner != os.geteuid():
        why.append(f"it belongs to another user (uid {owner}): run doctor as that user, or with sudo")
    scope = _read("/proc/sys/kernel/yama/ptrace_scope")
    if scope and scope != "0":
        why.append(f"kernel.yama.ptrace_scope is {scope}: run doctor with sudo, or "
                   "`sudo sysctl kernel.yama.ptrace_scope=0` (1 only lets a parent read its children)")
    if not why:
        why.append("this process lacks CAP_SYS_PTRACE (a container started without it): run doctor inside the "
                   "container started with `--cap-add SYS_PTRACE` (docker) or `securityContext.capabilities.add: "
                   "[SYS_PTRACE]` (Kubernetes), or from the host")
    return f"not allowed to read process {pid} (ptrace): " + "; ".join(why)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def dump(pid: int, tries: int = 3) -> list[dict[str, Any]]:
    """One py-spy dump of every thread of ``pid``, with locals, without stopping it. The text of each
    frame's line is not read here: ``source.quote`` reads it as the target's user.

    A process read while it runs can change under the reader (a frame freed mid-read): such a read
    fails and is tried again; not being allowed, or not being Python, is final.
    """
    for _ in range(tries):
        out, err, code = _py_spy_dump(pid)
        if code == 0:
            break
        error = _cannot_attach(pid, err + out)
        if error.code != EXIT_READ_FAILED:
            raise error
    else:
        raise error
    threads: list[dict[str, Any]] = orjson.loads(out)
    return threads


def _py_spy_dump(pid: int) -> tuple[str, str, int]:
    """py-spy's output, its errors and its exit status; killed past ``DUMP_TIMEOUT``, and by Ctrl-C
    (``source.live``)."""
    proc = subprocess.Popen([py_spy(), "dump", "--pid", str(pid), "--locals", "--json", "--nonblocking"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    source.live.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=DUMP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise DoctorError(EXIT_READ_FAILED, f"py-spy took over {DUMP_TIMEOUT:.0f} s to read process {pid}") from None
    finally:
        source.live.discard(proc.pid)
    return out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode


def _snapshot(pid: int, pool: ThreadPoolExecutor) -> dict[str, Any]:
    """One sample: the process and each child, read side by side; ``t`` is when the reads began."""
    pids = [pid, *children(pid)]
    stats = {p: proc_stat(p) for p in pids}
    wchans = {p: _wchans(p) for p in pids}

    def read(p: int) -> dict[str, Any]:
        st = stats[p] or {}
        entry = dict(st, wchan=wchans[p])
        if st.get("state") in ("Z", "X"):
            return entry
        entry["memory"] = smaps_rollup(p)  # no ptrace: the kernel's sums, None where it has none
        try:
            entry["threads"] = dump(p)
        except DoctorError as exc:
            if p == pid:
                raise
            entry["error"] = str(exc)  # a child that is not Python (a compiler, a shell): not a worker
        return entry

    t = time.monotonic()
    procs = {str(p): r for p, r in zip(pids, pool.map(read, pids), strict=True)
             if p == pid or stats[p] is not None}
    return {"t": t, "procs": procs, "host": _host()}


def _host() -> dict[str, int] | None:
    """The host's MemAvailable and MemTotal, bytes (None without /proc/meminfo)."""
    try:
        available, total = meminfo()
    except (OSError, KeyError, ValueError):
        return None
    return {"available": available, "total": total}


def record(pid: int, duration: float, interval: float = 0.5) -> Recording:
    """Samples of ``pid`` and its workers every ``interval`` s until the last began ``duration`` s
    after the first ended: each process is seen twice at least ``duration`` s apart, so a loader that
    hands over a batch every ``duration`` s is seen to move. The frames' lines are not read yet
    (``source.quote``). A process that ends meanwhile is an error (``exited``)."""
    first = proc_stat(pid)
    if first is None or first["state"] in ("Z", "X"):
        raise _cannot_attach(pid, "")
    samples: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=16) as pool:
        until = None
        while True:
            try:
                samples.append(_snapshot(pid, pool))
            except DoctorError as exc:
                raise exited(pid, first["start"]) or exc from None
            now = time.monotonic()
            if (gone := exited(pid, first["start"])) is not None:
                raise gone
            until = until or now + duration
            if len(samples) >= 2 and samples[-1]["t"] >= until:
                break
            time.sleep(max(0.0, min(samples[-1]["t"] + interval, until) - now))
        _note_sleepers(pid, samples[-1], pool)
    origin = samples[0]["t"]
    for s in samples:
        s["t"] -= origin
    return {"pid": pid, "clk_tck": os.sysconf("SC_CLK_TCK"), "samples": samples,
            "env": {k: v for k, v in environ(pid).items() if k in ("RANK", "WORLD_SIZE")}}


def _note_sleepers(pid: int, last: dict[str, Any], pool: ThreadPoolExecutor) -> None:
    """Each thread's time asleep (``asleep``: {tid: seconds}) in the last sample's processes."""
    def note(item: tuple[str, dict[str, Any]]) -> None:
        key, proc = item
        tids = [t.get("os_thread_id") for t in proc.get("threads") or []]
        slept = {str(tid): s for tid in tids if isinstance(tid, int) and (s := asleep(int(key), tid)) is not None}
        proc["asleep"] = slept

    list(pool.map(note, last["procs"].items()))


def asleep(pid: int, tid: int) -> float | None:
    """Seconds thread ``tid`` has slept without running once, by the kernel scheduler's clock; None
    when it runs, or the kernel does not say (no /proc/PID/task/TID/sched, a CPU doctor may not use).

    A sleeping thread's ``se.exec_start`` is when it last stopped running (the scheduler's
    update_curr, kernel/sched/fair.c, as it is dequeued); the clock it is read on is that CPU's, so
    doctor's thread moves to that CPU and reads its own ``se.exec_start`` as now. That clock leaves out
    interrupt and stolen time, so the answer is at most the real time: "at least" stays true.
    """
    st = proc_stat(pid, tid)
    if st is None or st["state"] not in ("S", "D"):
        return None
    then = _exec_start(f"/proc/{pid}/task/{tid}/sched")
    allowed = os.sched_getaffinity(0)
    if then is None or st["processor"] not in allowed:
        return None
    try:
        os.sched_setaffinity(0, {st["processor"]})  # 0: this thread only (sched_setaffinity(2))
        now = _exec_start("/proc/thread-self/sched")
    except OSError:
        return None
    finally:
        os.sched_setaffinity(0, allowed)
    again = proc_stat(pid, tid)
    if now is None or again is None or again["state"] not in ("S", "D") \
            or _exec_start(f"/proc/{pid}/task/{tid}/sched") != then:
        return None  # it ran meanwhile
    return max(0.0, now - then)


def _exec_start(path: str) -> float | None:
    """``se.exec_start`` of a /proc sched file, in seconds."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("se.exec_start"):
                    return float(line.split(":", 1)[1]) / 1000.0  # printed in ms
    except (OSError, ValueError):
        return None
    return None
