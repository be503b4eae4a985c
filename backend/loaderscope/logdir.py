"""Where runs go in a logdir: ``LOGDIR/<job>/<LoaderClass>-rank<R>-pid<P>-<run>.trace.jsonl``.

Pure naming, shared by the probe's file sink (``probe/logfile.py``) and ``loaderscope record``
(which names the job directory before the command starts), so neither needs the other's imports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

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
