"""What one job table may read, hold and take (``JobBudget``, its clock ``Deadline``), and the error
every part of the job table raises (``JobQueryError``): the floor the job table's other modules stand on.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: duckdb is the optional `job` extra, never imported at run time here
    import duckdb


class JobQueryError(ValueError):
    """A job's traces could not be read; the message names the directory or file, and the fix."""


# What one job table may read, hold and take, each raised or lowered by its environment variable.
BUDGET_ENV = {
    "trace_bytes": "LOADERSCOPE_JOB_TABLE_TRACE_BYTES",
    "job_bytes": "LOADERSCOPE_JOB_TABLE_BYTES",
    "memory_bytes": "LOADERSCOPE_JOB_TABLE_MEMORY",
    "shard_bytes": "LOADERSCOPE_JOB_TABLE_SHARD_BYTES",
    "seconds": "LOADERSCOPE_JOB_TABLE_SECONDS",
}
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


@dataclass(frozen=True)
class JobBudget:
    """What one job table may read, hold and take, fixed before it starts (docs/DESIGN.md §16).

    Bytes of trace are counted on each file's descriptor as it is opened (a Parquet trace: its parts
    together); DuckDB's own memory is its ``memory_limit``, with nothing spilled to disk; shard digests
    decoded count a byte per index per rank; past ``seconds`` the query is interrupted."""

    trace_bytes: int = 1 << 30  # one run's trace (the most the dashboard itself writes: max_run_bytes)
    job_bytes: int = 4 << 30  # every trace of the table
    memory_bytes: int = 2 << 30  # DuckDB's memory: a 1,024-rank job's table peaked at 445-495 MiB (bench/job_table.py)
    shard_bytes: int = 1 << 30  # shard digests decoded, every check together
    seconds: float = 600.0

    def from_environment(self, environ: Mapping[str, str] = os.environ) -> JobBudget:
        """These budgets, each replaced by its variable (``BUDGET_ENV``) where one is set.

        Raises:
            JobQueryError: a variable that is not a positive size (``2GiB``, ``512MiB``, bytes) or number.
        """
        changed: dict[str, Any] = {}
        for field in fields(self):
            text = environ.get(BUDGET_ENV[field.name], "").strip()
            if text:
                changed[field.name] = _budget_value(BUDGET_ENV[field.name], text, field.name == "seconds")
        return replace(self, **changed)

    def refusal(self, field: str, what: str, needed: int = 0) -> str:
        """A refusal's words: what is over which budget, and the variable that raises it (to twice the
        budget, or to the power of two above what was ``needed``)."""
        limit = getattr(self, field)
        shown = f"{limit:g} s" if field == "seconds" else size_text(limit)
        example = f"{limit * 2:g}" if field == "seconds" else \
            size_text(max(int(limit) * 2, 1 << max(needed - 1, 0).bit_length())).replace(" ", "")
        return f"{what}, over the job table's budget of {shown}; {BUDGET_ENV[field]} raises it (e.g. " \
               f"{BUDGET_ENV[field]}={example})"


def _budget_value(name: str, text: str, seconds: bool) -> float | int:
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)", text)
    unit = found.group(2).lower() if found else ""
    if found is None or (seconds and unit not in ("", "s")) or (not seconds and unit not in _UNITS):
        kind = "seconds (e.g. 900)" if seconds else "a size in bytes, KiB, MiB, GiB or TiB (e.g. 2GiB)"
        raise JobQueryError(f"{name}={text!r}: not {kind}")
    value = float(found.group(1)) * (1 if seconds else _UNITS[unit])
    if value <= 0:
        raise JobQueryError(f"{name}={text!r}: a budget must be more than 0")
    return value if seconds else int(value)


def size_text(n: int) -> str:
    """Bytes as a person reads them: ``1 GiB``, ``1.5 MiB``, ``300 B``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


class Deadline:
    """The table's time budget: DuckDB is interrupted once it is spent (and again, until the table gives
    up), so its thread and the server's slot are freed; the Python steps check it between them."""

    def __init__(self, budget: JobBudget, label: str) -> None:
        self.budget, self.label = budget, label
        self.at = time.monotonic() + budget.seconds
        self.done = threading.Event()
        self.con: duckdb.DuckDBPyConnection | None = None
        threading.Thread(target=self._watch, name="loaderscope-job-deadline", daemon=True).start()

    def _watch(self) -> None:
        if self.done.wait(self.budget.seconds):
            return
        while not self.done.wait(0.05):  # a query started after an interrupt is interrupted too
            if self.con is not None:
                self.con.interrupt()

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def error(self) -> JobQueryError:
        return JobQueryError(f"{self.label}: " + self.budget.refusal("seconds", "the job table took longer"))

    def check(self) -> None:
        if self.passed():
            raise self.error()
