"""Where runs go in a logdir: ``LOGDIR/<job>/<LoaderClass>-rank<R>-pid<P>-<run>.trace.jsonl``.

Naming, shared by the probe's file sink (``probe/logfile.py``), ``watch()`` and ``loaderscope
record`` (which names the job before the command starts): torch-free, so that the command line and
the server import none of the probe. ``paths.py``: the names of trace files only; nothing here opens one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

JOB_ENV = "LOADERSCOPE_JOB"  # the job, named by the user (``record --job``) or by their scheduler script
RECORD_JOB_ENV = "LOADERSCOPE_RECORD_JOB"  # ``record``'s name for a job that no launcher names
# The ids a launcher gives every process of one job, on every node, in order of preference: torchrun's
# run id (``--rdzv-id``; torch/distributed/run.py sets it in each worker's environment) and SLURM's job id.
LAUNCHER_IDS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
NO_RUN_ID = "none"  # torchrun's --rdzv-id when none is given (torch/distributed/run.py): no id
LOCAL_JOB = "local"  # the directory of runs that belong to no launcher's job
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file-name part from a job id or class name (``host:29500`` → ``host_29500``)."""
    return UNSAFE.sub("_", text).strip("._") or "_"


def job_directory(logdir: Path, job: str | None) -> Path:
    """Where the runs of a job go: the ranks of one job share it."""
    return logdir / safe_name(job or LOCAL_JOB)


def trace_path(logdir: Path, start: dict[str, Any]) -> Path:
    """The file of the run whose ``run_start`` is ``start``."""
    loader = str(start.get("loader") or "DataLoader").rsplit(".", 1)[-1]
    pid = start.get("pid") or os.getpid()
    name = f"{safe_name(loader)}-rank{start.get('rank', 0)}-pid{pid}-{safe_name(str(start.get('run', 'run')))}"
    return job_directory(logdir, start.get("job")) / f"{name}.trace.jsonl"


# --- one rule for job names --------------------------------------------------------------------

def job_name(command: str, started: float, key: str) -> str:
    """``<command>-<YYYYmmdd-HHMMSS>-<4 hex>``: what the user ran (``train``, ``pkg.train``), when the
    job started, and 4 hex digits of ``key`` so two jobs started in the same second stay apart."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return f"{safe_name(command)}-{stamp}-{hashlib.sha1(key.encode()).hexdigest()[:4]}"


def this_job() -> str:
    """The job of this process's runs, the same on every node of the job: ``$LOADERSCOPE_JOB`` (``record
    --job``, or set by the user), else the launcher's id (``launcher_job``: the ranks of every node share
    it, and it is the id the cluster's other tools know the job by), else ``record``'s name for the
    command (``$LOADERSCOPE_RECORD_JOB``), else ``job_name`` of the running command and of the job's root
    process: its start time, and its host and pid for the 4 hex digits (one node's ranks share it)."""
    named = os.environ.get(JOB_ENV) or launcher_job() or os.environ.get(RECORD_JOB_ENV)
    if named:
        return named
    root, started = _root()
    return job_name(running_command(), started, f"{socket.gethostname()}:{root}:{started}")


def launcher_job() -> str | None:
    """The id the launcher gave this job (``LAUNCHER_IDS``), or None: torchrun's run id without
    ``--rdzv-id`` is ``none``, which every such job shares, so it names none."""
    for name in LAUNCHER_IDS:
        value = os.environ.get(name, "").strip()
        if value and value != NO_RUN_ID:
            return value
    return None


def running_command() -> str:
    """The command this process runs: the ``-m`` module, else the script's stem, else ``python``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name).removesuffix(".__main__")
    script = sys.argv[0] if sys.argv else ""
    return Path(script).stem if script and script != "-c" else "python"


@functools.lru_cache(maxsize=1)
def _root() -> tuple[int, float]:
    """(pid, start time in epoch seconds) of the process that started this job: torchrun's agent for its
    ranks (``$TORCHELASTIC_RUN_ID`` is set), the parent for a multiprocessing child (the ranks of
    ``torch.multiprocessing.spawn``, Lightning's ``ddp_spawn``), else this process."""
    import multiprocessing

    launched = bool(os.environ.get("TORCHELASTIC_RUN_ID")) or multiprocessing.parent_process() is not None
    pid = os.getppid() if launched else os.getpid()
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return pid, boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):  # no /proc: this process's first look
        return os.getpid(), time.time()
