"""Python stacks of live processes, as lists of frames the page can show.

A stuck worker is asked for its stack with a signal: ``faulthandler`` (registered in the worker
before torch's loop starts) dumps every thread from a C signal handler, so it answers even while
the worker is blocked in ``time.sleep``, a lock or a C extension, and the worker keeps running.
"""

from __future__ import annotations

import atexit
import faulthandler
import linecache
import os
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

STACK_SIGNAL = signal.SIGUSR1
Frame = dict[str, Any]

_LIBRARY_DIRS = tuple(
    {str(Path(p).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
     if (p := sysconfig.get_paths().get(key))}
)
_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)", re.IGNORECASE)
_FRAME_LINE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


_OWN_DIR = str(Path(__file__).resolve().parents[1])
_SCENARIOS_DIR = str(Path(_OWN_DIR) / "scenarios")
_TRAINING_LOOP = str(Path(_OWN_DIR) / "runner.py")


def is_user_file(path: str) -> bool:
    """Code the user wrote: not the standard library, an installed package or loaderscope's machinery.

    The built-in scenarios count as user code: their datasets stand in for the user's, and the
    training loop that runs them (``runner.consume``) for the user's loop, so that a training loop
    stuck in ``next()`` is shown at the line that called it, as a stuck worker is at its dataset's.
    """
    if not path or path.startswith("<"):
        return False
    resolved = str(Path(path).resolve())
    if resolved.startswith(_SCENARIOS_DIR) or resolved == _TRAINING_LOOP:
        return True
    return not resolved.startswith(_LIBRARY_DIRS) and not resolved.startswith(_OWN_DIR)


def worker_frames(frames: list[Frame]) -> list[Frame]:
    """Drop the frames a forked worker inherited from its parent: keep torch's worker loop and below."""
    for i in range(len(frames) - 1, -1, -1):
        if frames[i]["function"] == "probed_worker_loop":
            return frames[i + 1 :]
    return frames


def frame(path: str, line: int, function: str) -> Frame:
    return {"file": path, "line": line, "function": function,
            "code": linecache.getline(path, line).strip(), "user": is_user_file(path)}


def parse_faulthandler(text: str, thread_id: int) -> list[Frame]:
    """Frames (outermost first) of one thread in a faulthandler dump; empty if it is not there."""
    frames: list[Frame] = []
    current: int | None = None
    for line in text.splitlines():
        header = _THREAD_HEADER.match(line)
        if header:
            current = int(header.group(1), 16)
            continue
        match = _FRAME_LINE.match(line)
        if match and current == thread_id:
            frames.append(frame(match.group(1), int(match.group(2)), match.group(3)))
    return frames[::-1]  # faulthandler prints the most recent call first


def frames_of(python_frame: FrameType | None) -> list[Frame]:
    return [frame(f.filename, f.lineno or 0, f.name) for f in traceback.extract_stack(python_frame)]


def main_thread_stack(thread_id: int) -> list[Frame]:
    """Stack of a thread of this process, read from another thread without stopping it."""
    return frames_of(sys._current_frames().get(thread_id))


STACK_DIR_PREFIX = "loaderscope-stacks-"  # + the pid of the process whose workers dump there
_own_stack_dir: Path | None = None


def new_dump_path(worker: int) -> str:
    """A file for one worker's stack dumps, in this process's own directory under the temp dir.

    The directory goes at interpreter exit; one left by a killed process is removed by the next
    process that starts workers here (``remove_stale_stack_dirs``), or by the dashboard that ran it.
    """
    global _own_stack_dir
    if _own_stack_dir is None:
        remove_stale_stack_dirs()
        _own_stack_dir = Path(tempfile.mkdtemp(prefix=f"{STACK_DIR_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, _own_stack_dir, True)
    fd, path = tempfile.mkstemp(prefix=f"worker{worker}-", suffix=".txt", dir=_own_stack_dir)
    os.close(fd)
    return path


def remove_stale_stack_dirs(pid: int | None = None) -> None:
    """Remove the stack directories of processes that no longer run (or of ``pid``, which ended)."""
    for directory in Path(tempfile.gettempdir()).glob(f"{STACK_DIR_PREFIX}*"):
        try:
            owner = int(directory.name[len(STACK_DIR_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner == pid or (pid is None and not _alive(owner)):
            shutil.rmtree(directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to clean
        return True
    return True


def install_in_worker(dump_path: str) -> None:
    """Worker side: dump every thread's stack to ``dump_path`` on STACK_SIGNAL (never exits)."""
    dump = open(dump_path, "a")  # kept open for the life of the worker
    faulthandler.register(STACK_SIGNAL, file=dump, all_threads=True, chain=False)


def ask_worker(pid: int, dump_path: str, thread_id: int, wait: float = 0.5) -> list[Frame]:
    """Signal a worker for its stack and read its main thread's frames from the dump file."""
    start = os.path.getsize(dump_path)
    os.kill(pid, STACK_SIGNAL)
    deadline = time.monotonic() + wait
    size = start
    while time.monotonic() < deadline:
        time.sleep(0.02)
        grown = os.path.getsize(dump_path)
        if grown > start and grown == size:  # the dump has stopped growing: it is complete
            break
        size = grown
    with open(dump_path) as dump:
        dump.seek(start)
        return worker_frames(parse_faulthandler(dump.read(), thread_id))


def exit_status(pid: int) -> tuple[str, int] | None:
    """("Z", waitpid status) for a dead, not yet reaped child; None while it runs.

    Reads /proc instead of calling waitpid, so torch's own reaping (and its SIGCHLD check)
    still sees the child: the probe must never change what torch observes.
    """
    try:  # os.open and os.read: a third of the cost of a text file object, on every probe tick that checks
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            fields = os.read(fd, 4096).decode().rsplit(")", 1)[1].split()
        finally:
            os.close(fd)
    except (OSError, IndexError):
        return ("gone", 0)
    if fields[0] not in ("Z", "X"):
        return None
    return (fields[0], int(fields[-1]) if len(fields) >= 50 else 0)


def describe_status(status: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) from a waitpid status word."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return -sig, signal.Signals(sig).name
        except ValueError:
            return -sig, f"signal {sig}"
    return (os.WEXITSTATUS(status) if os.WIFEXITED(status) else None), None
