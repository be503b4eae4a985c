"""A whole job's table from its traces, by SQL on an embedded DuckDB: every loader's ranks and their
figures without replaying any rank's events in Python.

The SQL is the definitions of ``stats.summary`` (batches/s, the share of time waiting for data),
the page's ``ranks.slowestWorker`` with ``stats.worker_stats``' p95, and ``ranks.slowest_per_step``,
written as window functions over one table ``events`` (a row per event, columns named as the event's
top-level fields, plus ``file``: its run, as a number). Only the reading is DuckDB's (``read_json`` /
``read_parquet``); the queries are standard SQL, so the same text runs on Spark SQL or Trino over the
same Parquet files (docs/DESIGN.md §19). The shard check gathers each rank's ``epoch_end`` digest in
SQL and decodes it with ``ranks.shard_report``: a digest is zlib'd, which no SQL engine reads.

A job is ranks × loaders: a run is one loader of one rank, and its loader is the name its run_start
gives, numbered when one process has several runs of that name (``runs``' ``loader``), so two
loaders of one process are never two ranks and nothing adds two loaders together.

A job's traces may sit in a directory other users write (a team logdir): every trace is opened here,
checked on its descriptor (a regular file, or a Parquet trace's directory of regular parts, that lies
under the directory it was listed in), and DuckDB reads that descriptor (``/proc/self/fd/N``): never
a path it could expand as a glob or resolve again to another file. What a table may read, hold and
take is a ``JobBudget`` fixed before it starts.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import resource
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from loaderscope.model.ranks import MAX_SHARD_LENGTH, TIE_S, shard_report, shard_text

if TYPE_CHECKING:
    import duckdb

TRACE_SUFFIXES = (".trace.jsonl", ".parquet")  # a Parquet file of another writer, or a part of ours
PARQUET_TRACE = ".trace.parquet"  # traces/parquet.py: a loaderscope Parquet trace, a directory of parts
PART_NAME = re.compile(r"part-[0-9]+\.parquet")  # parquet.PART_GLOB: the parts of a ``NAME.trace.parquet/`` directory
GLOB_CHARACTERS = re.compile(r"[*?\[\]{}]")  # what DuckDB's and fsspec's globs expand
KINDS = ("run_start", "epoch_start", "fetch_start", "fetch_end", "yield", "epoch_end", "loop")
# Files open at once while the traces are read into ``events``: their descriptors are closed after
# each batch, so a job of 10,000 ranks needs no more than this many (and the server its sockets).
FILES_AT_ONCE = 256

# The event fields the queries read, with their SQL types; a trace without one reads it as NULL.
COLUMNS: dict[str, str] = {
    "seq": "BIGINT", "t": "DOUBLE", "run": "VARCHAR", "rank": "BIGINT", "kind": "VARCHAR", "name": "VARCHAR",
    "job": "VARCHAR", "epoch": "BIGINT", "idx": "BIGINT", "worker": "BIGINT", "wait": "DOUBLE", "dt": "DOUBLE",
    "wall_start": "DOUBLE", "host": "VARCHAR", "pid": "BIGINT", "shard": "VARCHAR", "shard_length": "BIGINT",
    "others": "DOUBLE", "world_size": "BIGINT",
}

# Tables the three queries share, made once per connection, in order: each event with its run's
# segment (epoch_starts so far: state.py resets the epoch's pace at each) and that segment's epoch
# (the latest epoch_start's: a run's epochs count up, probe/iterators.py), both from one window;
# each run's rank, loader and clock, one file per recording; its yields with the gap before each.
PREPARED: tuple[tuple[str, str], ...] = (
    ("timeline", """
SELECT e.*,
       SUM(CASE WHEN kind = 'epoch_start' THEN 1 ELSE 0 END) OVER w AS segment,
       MAX(CASE WHEN kind = 'epoch_start' THEN epoch END) OVER w AS current_epoch
FROM events e
WHERE kind IN ('run_start', 'epoch_start', 'fetch_start', 'fetch_end', 'yield', 'epoch_end', 'loop')
WINDOW w AS (PARTITION BY file ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
"""),
    # A recording (one probe: its host, pid and clock) may be in a logdir twice: a script that streams
    # to `serve --logdir DIR` and writes its own trace into DIR leaves the dashboard's copy beside its
    # own. Each recording counts once, by the file that holds most of it (a stream may have lost some).
    # A run's loader is its name, numbered from the second run of that name in one process (host, pid)
    # and rank, in the order they started: an ignite script's train and val loaders may share a name,
    # and they are two loaders of one rank, never two ranks (the n-th of each rank's runs of a name
    # are one loader across ranks).
    ("runs", """
SELECT file, run, rank, name, job, wall_start, world_size,
       COALESCE(name, '(unnamed)') || CASE WHEN serial > 0 THEN ' #' || CAST(serial + 1 AS VARCHAR) ELSE '' END
         AS loader
FROM (
  SELECT file, run, rank, name, job, world_size, COALESCE(recorded, 0.0) AS wall_start,
         ROW_NUMBER() OVER (PARTITION BY job, rank, host, pid, name ORDER BY recorded, file) - 1 AS serial
  FROM (
    SELECT r.*, ROW_NUMBER() OVER (PARTITION BY job, name, rank, host, pid, recorded
                                   ORDER BY n.events DESC, r.file) AS copy
    FROM (SELECT file, MAX(run) AS run, MAX(rank) AS rank, MAX(name) AS name, MAX(job) AS job,
                 MAX(host) AS host, MAX(pid) AS pid, MAX(wall_start) AS recorded, MAX(world_size) AS world_size
          FROM timeline WHERE kind = 'run_start' GROUP BY file) r
    JOIN (SELECT file, COUNT(*) AS events FROM timeline GROUP BY file) n ON n.file = r.file
  ) c
  WHERE copy = 1 OR recorded IS NULL
) s
"""),
    # Each yield with the gap before it and the loop's time in other loaders' next() since the run's
    # previous yield (its `loop` events: state.py's pending_others), so that the step is the gap less it.
    ("yields", """
SELECT y.file, y.seq, y.t, y.wait, y.segment, y.current_epoch, y.gap, COALESCE(o.others, 0.0) AS others
FROM (SELECT file, seq, t, wait, segment, current_epoch, batch,
             t - wait - LAG(t) OVER (PARTITION BY file, segment ORDER BY seq) AS gap
      FROM (SELECT *, COUNT(*) FILTER (WHERE kind = 'yield') OVER (PARTITION BY file ORDER BY seq
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS batch
            FROM timeline WHERE kind IN ('yield', 'loop')) b
      WHERE kind = 'yield') y
LEFT JOIN (SELECT file, batch, SUM(others) AS others
           FROM (SELECT file, kind, others, COUNT(*) FILTER (WHERE kind = 'yield') OVER (PARTITION BY file ORDER BY seq
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS batch
                 FROM timeline WHERE kind IN ('yield', 'loop')) l
           WHERE kind = 'loop' GROUP BY file, batch) o
  ON o.file = y.file AND o.batch = y.batch
"""),
)

# Per run (a loader of a rank): summary()'s batches_per_s and input_bound, over the time inside the
# loader's epochs (its waits, the loop's time in other loaders, its steps); the slowest worker by mean
# fetch time (ranks.js slowestWorker) and its p95 as worker_stats takes it
# (sorted[round(0.95 * (n - 1))], Python's round: half to even).
RANKS_SQL = """
WITH pace AS (
  SELECT y.file, COUNT(*) AS batches, SUM(y.wait) AS consumer_wait,
         SUM(CASE WHEN y.gap IS NOT NULL THEN GREATEST(y.gap - y.others, 0.0) ELSE 0.0 END) AS step_total,
         SUM(CASE WHEN y.gap IS NOT NULL THEN y.others ELSE 0.0 END) AS other_wait
  FROM yields y GROUP BY y.file
),
fetches AS (
  SELECT f.file, f.worker, COALESCE(f.dt, f.t - s.t) AS dt
  FROM timeline f
  LEFT JOIN (SELECT file, segment, idx, MAX(t) AS t FROM timeline WHERE kind = 'fetch_start'
             GROUP BY file, segment, idx) s
    ON f.file = s.file AND f.segment = s.segment AND f.idx = s.idx
  WHERE f.kind = 'fetch_end'
),
workers AS (
  SELECT file, worker, SUM(dt) / COUNT(*) AS mean, COUNT(*) AS n,
         ROW_NUMBER() OVER (PARTITION BY file ORDER BY SUM(dt) / COUNT(*) DESC, worker DESC) AS place
  FROM fetches WHERE dt IS NOT NULL GROUP BY file, worker
),
ordered AS (
  SELECT f.file, f.worker, f.dt, w.n,
         ROW_NUMBER() OVER (PARTITION BY f.file ORDER BY f.dt) - 1 AS position
  FROM fetches f JOIN workers w ON f.file = w.file AND f.worker = w.worker AND w.place = 1
  WHERE f.dt IS NOT NULL
),
p95 AS (
  SELECT o.file, o.dt AS p95 FROM ordered o
  WHERE o.position = LEAST(o.n - 1,
    CASE WHEN 0.95 * (o.n - 1) - FLOOR(0.95 * (o.n - 1)) = 0.5
         THEN FLOOR(0.95 * (o.n - 1)) + MOD(CAST(FLOOR(0.95 * (o.n - 1)) AS BIGINT), 2)
         ELSE ROUND(0.95 * (o.n - 1)) END)
)
SELECT r.file, r.run, r.rank, r.loader, r.name, r.job,
       COALESCE(p.batches, 0) AS batches,
       CASE WHEN p.consumer_wait + p.other_wait + p.step_total > 0
            THEN p.batches / (p.consumer_wait + p.other_wait + p.step_total) ELSE 0.0 END AS batches_per_s,
       CASE WHEN p.consumer_wait + p.other_wait + p.step_total > 0
            THEN p.consumer_wait / (p.consumer_wait + p.other_wait + p.step_total) ELSE 0.0 END AS input_bound,
       w.worker AS slowest_worker, w.mean AS slowest_worker_mean, q.p95 AS slowest_worker_p95
FROM runs r
LEFT JOIN pace p ON p.file = r.file
LEFT JOIN workers w ON w.file = r.file AND w.place = 1
LEFT JOIN p95 q ON q.file = r.file
ORDER BY r.job, r.loader, r.rank
"""

# Per step of every epoch of each loader: the rank whose batch came last on the wall clock
# (wall_start + t) and how much after the first; steps past the fewest any rank delivered are left
# out (ranks.slowest_per_step).
STEPS_SQL = f"""
WITH deliveries AS (
  SELECT r.job, r.loader, r.rank, y.current_epoch AS epoch, r.wall_start + y.t AS at,
         ROW_NUMBER() OVER (PARTITION BY y.file, y.current_epoch ORDER BY y.seq) - 1 AS step
  FROM yields y JOIN runs r ON r.file = y.file
  WHERE y.current_epoch IS NOT NULL
),
counted AS (
  SELECT job, loader, epoch, rank, COUNT(*) AS n FROM deliveries GROUP BY job, loader, epoch, rank
),
common AS (
  SELECT job, loader, epoch, MIN(n) AS steps FROM counted GROUP BY job, loader, epoch
),
ranked AS (
  SELECT d.job, d.loader, d.epoch, d.step, d.rank, d.at,
         ROW_NUMBER() OVER (PARTITION BY d.job, d.loader, d.epoch, d.step ORDER BY d.at DESC, d.rank) AS place,
         MAX(d.at) OVER (PARTITION BY d.job, d.loader, d.epoch, d.step)
           - MIN(d.at) OVER (PARTITION BY d.job, d.loader, d.epoch, d.step) AS lag
  FROM deliveries d
  JOIN common c ON c.job IS NOT DISTINCT FROM d.job AND c.loader = d.loader AND c.epoch = d.epoch
  WHERE d.step < c.steps
)
SELECT job, loader, epoch, step, CASE WHEN lag > {TIE_S!r} THEN rank END AS rank, lag
FROM ranked WHERE place = 1
ORDER BY job, loader, epoch, step
"""

# Each rank's shard digest per epoch of each loader (the probe's epoch_end), decoded by ranks.shard_report.
SHARDS_SQL = """
SELECT r.job, r.loader, e.epoch, r.rank, e.shard, e.shard_length
FROM timeline e JOIN runs r ON r.file = e.file
WHERE e.kind = 'epoch_end' AND e.shard IS NOT NULL
ORDER BY r.job, r.loader, e.epoch, r.rank
"""


# Per trace read: its events, the seq numbers missing before or between them (lines a reader skipped,
# or events the probe dropped), whether it has a run_start (the run's names and clock) and a run_end
# (else it is still being written, or its writer was killed), and its run's place in the table.
HEALTH_SQL = """
SELECT h.file, h.events, h.missing, h.started, h.ended, r.file IS NOT NULL AS tabled, r.rank, r.job, r.loader
FROM (SELECT file, COUNT(seq) AS events, MAX(seq) + 1 - COUNT(DISTINCT seq) AS missing,
             MAX(CASE WHEN kind = 'run_start' THEN 1 ELSE 0 END) AS started,
             MAX(CASE WHEN kind = 'run_end' THEN 1 ELSE 0 END) AS ended
      FROM events GROUP BY file) h
LEFT JOIN runs r ON r.file = h.file
"""

# Each loader's world size, as its ranks' run_starts give it (the largest: a rank may not know it).
WORLD_SQL = "SELECT job, loader, MAX(world_size) AS world_size FROM runs GROUP BY job, loader"


class JobQueryError(ValueError):
    """A job's traces could not be read; the message names the directory or file, and the fix."""


class Unreadable(JobQueryError):
    """One trace cannot be read (its permissions, a file gone since it was listed, a Parquet trace without
    parts): the table goes on without it and names it. What could make the table read another file
    than the one listed (a link, a FIFO, a path outside the directory) is a JobQueryError: refused."""

    def __init__(self, message: str, problem: str = "unreadable") -> None:
        super().__init__(message)
        self.problem = problem  # as _damage names it: ``unreadable``, or ``empty``


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
    memory_bytes: int = 2 << 30  # DuckDB's memory: a 1,024-rank job's table held 390 MiB (bench/job_table.py)
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


@dataclass(frozen=True)
class JobTable:
    """The job's answers: a row per run (a loader of a rank), a row per step of each loader, a shard
    check per epoch of a loader that every rank of it reported."""

    ranks: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    shards: list[dict[str, Any]]
    damaged: list[dict[str, Any]] = field(default_factory=list)  # _damage: each trace with something wrong
    world_sizes: dict[tuple[Any, str], int | None] = field(default_factory=dict)  # (job, loader): run_start's

    def as_json(self) -> dict[str, Any]:
        """The table as JSON values: a shard report's ``per_rank`` is keyed by the rank as text."""
        shards = [check | {"report": check["report"] | {"per_rank": {str(rank): n for rank, n in per_rank.items()}}}
                  if (per_rank := check["report"].get("per_rank")) is not None else check for check in self.shards]
        return {"ranks": self.ranks, "steps": self.steps, "shards": shards, "loaders": self.loaders(),
                "damaged": self.damaged, "notices": self.notices()}

    def notices(self) -> list[str]:
        """What the table lacks, in sentences: per loader whose ranks fall short of its world size, how
        many of how many were tabled and which are missing; per problem, the traces that have it."""
        lines = []
        for entry in self.loaders():
            if entry["world_size"] is not None and entry["missing_ranks"]:
                named = f"{entry['loader']}: " if len(self.loaders()) > 1 else ""
                lines.append(f"{named}{entry['ranks']:,} of {entry['world_size']:,} ranks tabled (world_size "
                             f"{entry['world_size']:,}); missing: {_count(len(entry['missing_ranks']), 'rank')} "
                             f"{rank_list(entry['missing_ranks'])}")
        for problem in dict.fromkeys(d["problem"] for d in self.damaged):
            mine = [d for d in self.damaged if d["problem"] == problem]
            shown = "; ".join(f"{_who(d)}: {d['detail']}" for d in mine[:NOTICE_TRACES])
            more = f"; and {len(mine) - NOTICE_TRACES:,} more" if len(mine) > NOTICE_TRACES else ""
            lines.append(f"{_count(len(mine), 'trace')} {PROBLEM_WORDS.get(problem, problem)}: {shown}{more}")
        return lines

    def loaders(self) -> list[dict[str, Any]]:
        """Per loader of each job, in the rows' order: its name, how many ranks and steps it has, and its
        slowest rank (``slowest_rank``)."""
        out: dict[tuple[Any, str], dict[str, Any]] = {}
        for row in self.ranks:
            entry = out.setdefault((row["job"], row["loader"]), {"job": row["job"], "loader": row["loader"],
                                                                  "name": row["name"], "ranks": set()})
            entry["ranks"].add(row["rank"])
        steps: dict[tuple[Any, str], int] = {}
        for step in self.steps:
            steps[(step["job"], step["loader"])] = steps.get((step["job"], step["loader"]), 0) + 1
        return [entry | {"ranks": len(entry["ranks"]), "steps": steps.get(key, 0), "slowest": self.slowest_rank(*key),
                         "world_size": (world := self.world_sizes.get(key)),
                         "missing_ranks": sorted(set(range(world)) - entry["ranks"]) if world else []}
                for key, entry in out.items()]

    def slowest_rank(self, job: Any, loader: str) -> dict[str, Any] | None:
        """The rank of this loader most often last to deliver a step (lowest rank on a tie), or None if
        none was: one rank (a single process) has none."""
        mine = [r for r in self.ranks if r["job"] == job and r["loader"] == loader]
        ranked = [r for r in mine if r["slowest_steps"]]
        if not ranked or len({r["rank"] for r in mine}) < 2:
            return None
        top = max(ranked, key=lambda r: (r["slowest_steps"], -r["rank"]))
        steps = sum(1 for s in self.steps if s["job"] == job and s["loader"] == loader)
        return {"rank": top["rank"], "steps": top["slowest_steps"], "of": steps, "worst_lag": top["worst_lag"]}


NOTICE_TRACES = 5  # traces named per problem; the rest are counted
PROBLEM_WORDS = {"events missing": "with events missing", "no run_start": "without a run_start",
                 "no run_end": "without a run_end"}


def _who(damaged: dict[str, Any]) -> str:
    rank = damaged["rank"]
    whose = "" if rank is None else f"rank {rank}{' (by its name)' if damaged['rank_from_name'] else ''}, "
    return f"{whose}{damaged['trace']}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def rank_list(ranks: Sequence[int], most: int = 12) -> str:
    """Ranks as runs (``0–3, 7, 9–12``), the first ``most`` runs and a count of the rest."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    shown = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs[:most])
    return shown + (f", … ({len(runs) - most:,} more runs)" if len(runs) > most else "")


def trace_files(root: str, fs: Any = None) -> list[str]:
    """Every trace under ``root`` (recursively), sorted; ``fs``: an fsspec filesystem for a URL."""
    if fs is None:
        base = Path(root)
        if not base.is_dir():
            raise JobQueryError(f"{root}: not a directory; give the job's directory of traces "
                                "(e.g. LOGDIR/<job>, or the --logdir of `loaderscope run --ranks`)")
        found = [str(p) for p in base.rglob("*") if _a_trace(p.name, p.parent.name, p.is_dir())]
    else:
        found = [_with_protocol(fs, path) for path, info in fs.find(root, withdirs=True, detail=True).items()
                 if _a_trace(PurePosixPath(path).name, PurePosixPath(path).parent.name,
                             info.get("type") == "directory")]
    if not found:
        raise JobQueryError(f"{root}: no traces (*.trace.jsonl or *.parquet) under it; record a job into it with "
                            "`loaderscope record --logdir DIR -- torchrun ...` or `loaderscope run SCENARIO "
                            "--mode sim --ranks N --logdir DIR`")
    return sorted(found)


@dataclass(frozen=True)
class _Read:
    """One file DuckDB reads: where it reads it (``/proc/self/fd/N``, or an fsspec path), which run it is,
    and its name (the trace, or a Parquet trace's part) for what is said of it."""

    at: str
    run: int
    parquet: bool
    name: str


class _Opener:
    """Opens a job's traces and checks each on its descriptor, within the budget: the descriptors stay
    open (DuckDB reads them) until ``close``."""

    def __init__(self, fs: Any, within: str | None, budget: JobBudget) -> None:
        self.fs = fs
        self.within = None if within is None or fs is not None else os.path.realpath(within)
        self.budget = budget
        self.total = 0
        self.descriptors: list[int] = []

    def open(self, path: str, run: int) -> list[_Read]:
        """What DuckDB reads of the trace ``path``: the file, or a Parquet trace's parts in order.

        Raises:
            JobQueryError: the trace cannot be read, is not a regular file (or a directory of them),
                lies outside the directory, or is over a budget; the message names it and the fix.
        """
        return self._local(path, run) if self.fs is None else self._remote(path, run)

    def close(self) -> None:
        for fd in self.descriptors:
            os.close(fd)
        self.descriptors = []

    def _local(self, path: str, run: int) -> list[_Read]:
        # O_NONBLOCK: opening a FIFO would wait for a writer; links are followed, and where the
        # descriptor landed is checked after (the kernel's own path of it, which no swap changes)
        fd = self._descriptor(path, lambda: os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        info = os.fstat(fd)
        real = _opened_path(fd)
        if self.within is not None and not _within(real, self.within):
            raise JobQueryError(f"{path}: it resolves to {real}, outside {self.within}: refused, never read; "
                                "remove the link, or copy the trace into the job's directory")
        if stat.S_ISDIR(info.st_mode) and path.endswith(".parquet"):
            return self._parts(path, fd, run)
        _regular(info.st_mode, path)
        self._count(path, info.st_size)
        return [_Read(f"/proc/self/fd/{fd}", run, path.endswith(".parquet"), path)]

    def _parts(self, path: str, directory: int, run: int) -> list[_Read]:
        """A loaderscope Parquet trace's parts, each opened by its name in the directory's descriptor and
        never through a link (a part is a file its writer renamed into place, traces/parquet.py)."""
        names = sorted(name for name in os.listdir(directory) if PART_NAME.fullmatch(name))
        if not names:
            raise Unreadable(f"{path}: a directory without trace parts (part-N.parquet); a Parquet trace whose "
                             "writer was killed before its first part has no events yet", "empty")
        reads, size = [], 0
        for name in names:
            part = f"{path}/{name}"
            fd = self._descriptor(part, lambda: os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                                                        dir_fd=directory))
            info = os.fstat(fd)
            _regular(info.st_mode, part)
            size += info.st_size
            reads.append(_Read(f"/proc/self/fd/{fd}", run, True, part))
        self._count(path, size)
        return reads

    def _descriptor(self, path: str, opening: Any) -> int:
        try:
            fd: int = opening()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise JobQueryError(f"{path}: cannot be read (a symbolic link, where only a regular file is read); "
                                    "move it out of the job's directory") from None
            raise Unreadable(f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions or move it out "
                             "of the job's directory") from None
        self.descriptors.append(fd)
        return fd

    def _remote(self, path: str, run: int) -> list[_Read]:
        if GLOB_CHARACTERS.search(path.split("://", 1)[-1]):
            raise JobQueryError(f"{path}: a name with a glob character (* ? [ ] {{ }}), which DuckDB's readers "
                                "would expand to other files: refused, never read; rename it")
        try:
            info = self.fs.info(path)
            if info.get("type") == "directory" and path.endswith(".parquet"):
                parts = sorted((i for i in self.fs.ls(path, detail=True)
                                if PART_NAME.fullmatch(PurePosixPath(i["name"]).name)), key=lambda i: i["name"])
                if not parts:
                    raise Unreadable(f"{path}: a directory without trace parts (part-N.parquet)", "empty")
                self._count(path, sum(int(i.get("size") or 0) for i in parts))
                return [_Read(_with_protocol(self.fs, i["name"]), run, True, i["name"]) for i in parts]
            with self.fs.open(path, "rb") as f:
                f.read(1)
        except JobQueryError:
            raise
        except Exception as exc:  # noqa: BLE001 - each fsspec backend raises its own errors: one message
            raise Unreadable(f"{path}: cannot be read ({exc}); fix its permissions or move it out of the "
                             "job's directory") from None
        self._count(path, int(info.get("size") or 0))
        return [_Read(path, run, path.endswith(".parquet"), path)]

    def _count(self, path: str, size: int) -> None:
        if size > self.budget.trace_bytes:
            raise JobQueryError(f"{path}: " + self.budget.refusal("trace_bytes", f"{size_text(size)} of trace", size))
        self.total += size
        if self.total > self.budget.job_bytes:
            raise JobQueryError(f"{path}: " + self.budget.refusal(
                "job_bytes", f"with it the job's traces hold {size_text(self.total)} or more", self.total))


def _regular(mode: int, path: str) -> None:
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a directory"
                if stat.S_ISDIR(mode) else "not a file")
        raise JobQueryError(f"{path}: {kind}, not a regular file: refused, never read; remove it from the job's "
                            "directory")


def _opened_path(fd: int) -> str:
    """Where an open descriptor's file is, as the kernel keeps it (nothing renamed or linked since changes it)."""
    return os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _a_trace(name: str, parent: str, directory: bool) -> bool:
    """Whether a listing's entry is a run's trace: a JSON lines or Parquet file, or a loaderscope Parquet
    trace's directory ``NAME.trace.parquet/`` (its parts are read with it, not as runs of their own; the
    files of another writer's ``x.parquet/`` directory are runs each, as they were). Anything else of
    such a name (a dangling link, a FIFO) is listed too: it is said by name when it is opened."""
    if name.startswith(".") or not name.endswith(TRACE_SUFFIXES):
        return False
    if directory:
        return name.endswith(PARQUET_TRACE)
    return not (PART_NAME.fullmatch(name) and parent.endswith(PARQUET_TRACE))


def _with_protocol(fs: Any, path: str) -> str:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if "://" in path else f"{protocol}://{path}"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _file_list(paths: Sequence[str]) -> str:
    return "[" + ", ".join(_quote(p) for p in paths) + "]"


def _json_source(paths: Sequence[str]) -> str:
    columns = "{" + ", ".join(f"{_quote(k)}: {_quote(v)}" for k, v in COLUMNS.items()) + "}"
    # ignore_errors: a killed writer's torn last line is skipped, as the logdir reader skips it
    return (f"SELECT {', '.join(COLUMNS)}, 'json' AS source, file_index FROM read_json({_file_list(paths)}, "
            f"format='newline_delimited', columns={columns}, ignore_errors=true)")


def _parquet_column(name: str, sql_type: str, present: set[str]) -> str:
    """A field from its column, else from loaderscope's ``extra`` JSON text (docs/DESIGN.md §5): a trace
    written before its own columns (``wall_start``, ``host``, ``pid``, ``shard``, ``shard_length``, ``others``)
    keeps them there. Only a run_start, epoch_end or loop holds one, so only theirs is parsed."""
    column = f"TRY_CAST({name} AS {sql_type})" if name in present else None
    extra = (f"CASE WHEN extra IS NOT NULL AND kind IN ('run_start', 'epoch_end', 'loop') "
             f"THEN TRY_CAST(json_extract_string(extra, '$.{name}') AS {sql_type}) END") if "extra" in present else None
    found = [c for c in (column, extra) if c]
    picked = found[0] if len(found) == 1 else f"COALESCE({', '.join(found)})" if found else f"CAST(NULL AS {sql_type})"
    return f"{picked} AS {name}"


def _parquet_source(con: duckdb.DuckDBPyConnection, paths: Sequence[str]) -> str:
    source = f"read_parquet({_file_list(paths)}, union_by_name=true)"
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    picked = [_parquet_column(k, v, present) for k, v in COLUMNS.items()]
    return f"SELECT {', '.join(picked)}, 'parquet' AS source, file_index FROM {source}"


def _duckdb() -> Any:
    try:
        import duckdb  # the optional `job` extra, not a runtime dependency: refused with its install line
    except ImportError:
        raise JobQueryError("the job table needs DuckDB: pip install 'loaderscope[job]'") from None
    return duckdb


# The fields the queries read only from a run_start (the run's names and clock) or an epoch_end (its
# shard digest): kept there and nowhere else, so a run's names are not copied into each of its events.
SPARSE = {"run": "run_start", "name": "run_start", "job": "run_start", "wall_start": "run_start",
          "host": "run_start", "pid": "run_start", "world_size": "run_start", "shard": "epoch_end",
          "shard_length": "epoch_end", "others": "loop"}


def _kept(column: str) -> str:
    kind = SPARSE.get(column)
    return f"e.{column}" if kind is None else f"CASE WHEN e.kind = '{kind}' THEN e.{column} END AS {column}"


def connect(paths: Sequence[str], fs: Any = None, *, within: str | None = None, budget: JobBudget = JobBudget(),
            threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    """An in-memory DuckDB with the table ``events`` of ``paths`` (JSON lines or Parquet, by extension;
    a loaderscope Parquet trace as its directory), its ``file`` a run's number, and the shared tables
    (``PREPARED``); and the runs' paths by number. ``within``: the directory every local trace must lie in.

    Raises:
        JobQueryError: a trace that cannot be read or is over a budget (``_Opener``).
        duckdb.Error: the traces could not be queried.
    """
    con = _connection(fs, budget, threads)
    _load(con, paths, fs, within, budget, None)
    return con, list(paths)


def _connection(fs: Any, budget: JobBudget, threads: int | None) -> duckdb.DuckDBPyConnection:
    con: duckdb.DuckDBPyConnection = _duckdb().connect(":memory:")
    con.execute("SET enable_progress_bar = false")  # a bar on stderr is noise in a CLI and a server
    con.execute("SET preserve_insertion_order = false")  # every answer has its ORDER BY
    con.execute("SET parquet_metadata_cache = true")  # the footers DESCRIBE read are not read again
    con.execute(f"SET memory_limit = '{int(budget.memory_bytes)}B'")
    con.execute("SET temp_directory = ''")  # never spill into the working directory: past the limit is an error
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if fs is not None:
        con.register_filesystem(fs)
    return con


def _load(con: duckdb.DuckDBPyConnection, paths: Sequence[str], fs: Any, within: str | None, budget: JobBudget,
          deadline: _Deadline | None) -> list[dict[str, Any]]:
    """Read the traces into ``events`` a batch of files at a time (``FILES_AT_ONCE``), then make ``PREPARED``;
    the traces that could not be read (``_unreadable``), each with why."""
    con.execute(f"CREATE TEMP TABLE events ({', '.join(f'{k} {v}' for k, v in COLUMNS.items())}, file INTEGER)")
    if fs is None and not os.path.isdir("/proc/self/fd"):
        raise JobQueryError("the job table reads each local trace through its open descriptor (/proc/self/fd), "
                            "which this system lacks: make the table on Linux, or give the traces as an fsspec URL")
    _allow_open_files(FILES_AT_ONCE)
    opener = _Opener(fs, within, budget)
    unreadable: list[dict[str, Any]] = []
    try:
        batch: list[_Read] = []
        for run, path in enumerate(paths):
            if deadline is not None:
                deadline.check()
            try:
                batch += opener.open(path, run)
            except Unreadable as exc:
                unreadable.append({"run": run, "trace": path, "problem": exc.problem,
                                   "detail": str(exc).removeprefix(f"{path}: ")})
            if batch and (len(batch) >= FILES_AT_ONCE or run == len(paths) - 1):
                unreadable += _insert_readable(con, batch, paths)
                opener.close()
                batch = []
    finally:
        opener.close()
    for name, sql in PREPARED:
        con.execute(f"CREATE TEMP TABLE {name} AS {sql}")
    return unreadable


def _insert_readable(con: duckdb.DuckDBPyConnection, reads: Sequence[_Read], paths: Sequence[str]) -> list[dict[str, Any]]:
    """``_insert`` these files; when the batch cannot be read, each run's alone, and a Parquet trace's
    parts one by one up to the first that cannot be read (its events before it are the run's, as a
    killed writer's parts are): one damaged trace never costs the table the others. Returns the
    traces left out, or cut short, each with DuckDB's reason, told by the file's name."""
    import duckdb  # the optional `job` extra: reached only once _duckdb() found it

    fatal = (duckdb.InterruptException, duckdb.OutOfMemoryException)
    try:
        _insert(con, reads)
        return []
    except fatal:
        raise
    except duckdb.Error:
        pass
    left_out = []
    for run in sorted({read.run for read in reads}):
        mine = [read for read in reads if read.run == run]
        try:
            _insert(con, mine)
            continue
        except fatal:
            raise
        except duckdb.Error as exc:
            if len(mine) == 1:
                left_out.append({"run": run, "trace": paths[run], "detail": _unreadable_text(exc, mine[0])})
                continue
        for count, read in enumerate(mine):  # a Parquet trace's parts
            try:
                _insert(con, [read])
            except fatal:
                raise
            except duckdb.Error as exc:
                after = len(mine) - count - 1
                left_out.append({"run": run, "trace": paths[run], "read_parts": count, "detail": (
                    f"{PurePosixPath(read.name).name}{f' and the {after} parts after it' if after else ''} left out: "
                    + _unreadable_text(exc, read))})
                break
    return left_out


def _unreadable_text(exc: Exception, read: _Read) -> str:
    return f"not readable ({str(exc).splitlines()[0].replace(read.at, read.name)})"


def _insert(con: duckdb.DuckDBPyConnection, reads: Sequence[_Read]) -> None:
    """Read these files into ``events``: every event (a run's count of events and its seq numbers tell
    what was skipped or cut, ``_damage``), the fields the queries read (``_kept``). Each file's
    ``file_index`` is joined to its run's number (a window or join over a small integer, not over a
    path per event)."""
    by_source = {"json": [r for r in reads if not r.parquet], "parquet": [r for r in reads if r.parquet]}
    rows = [(source, index, read.run) for source, group in by_source.items() for index, read in enumerate(group)]
    # one statement of three lists: executemany costs about 1.5 ms a row
    con.execute("CREATE OR REPLACE TEMP TABLE files AS SELECT UNNEST($1) AS source, "
                "CAST(UNNEST($2) AS BIGINT) AS file_index, CAST(UNNEST($3) AS INTEGER) AS file",
                [[row[i] for row in rows] for i in range(3)])
    sources = ([_json_source([r.at for r in by_source["json"]])] if by_source["json"] else []) + \
        ([_parquet_source(con, [r.at for r in by_source["parquet"]])] if by_source["parquet"] else [])
    con.execute(f"INSERT INTO events SELECT {', '.join(map(_kept, COLUMNS))}, f.file FROM ("
                + " UNION ALL ".join(sources) + ") e JOIN files f ON f.source = e.source AND f.file_index = e.file_index")


def _allow_open_files(needed: int) -> None:
    """Let this process open ``needed`` more files than it has (up to the hard limit): a batch of a job's
    traces is open at once, beside a server's sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = len(os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ()) + needed + 64
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(hard, want), hard))


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


class _Deadline:
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


def _shard_checks(rows: list[dict[str, Any]], ranks: Sequence[dict[str, Any]], budget: JobBudget,
                  deadline: _Deadline) -> Iterator[dict[str, Any]]:
    """One check per (loader, epoch) every rank of that loader reported a digest for, while the
    budget of decoded digests lasts: a check past it says so."""
    expected: dict[tuple[Any, Any], set[int]] = {}
    for r in ranks:
        expected.setdefault((r["job"], r["loader"]), set()).add(r["rank"])
    groups: dict[tuple[Any, Any, int], dict[int, dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["job"], row["loader"], row["epoch"]), {})[row["rank"]] = row
    spent = 0
    for (job, loader, epoch), ends in groups.items():
        if set(ends) != expected.get((job, loader), set()):
            continue
        deadline.check()
        length = next(iter(ends.values()))["shard_length"] or 0
        cost = length * len(ends) if 0 <= length <= MAX_SHARD_LENGTH else 0  # a longer one is refused by its length
        report: dict[str, Any]
        if spent + cost > budget.shard_bytes:
            report = {"error": budget.refusal("shard_bytes", f"its digests ({len(ends)} × {length:,} indices), with the "
                                              f"checks before it, come to {size_text(spent + cost)} decoded",
                                              spent + cost)}
        else:
            spent += cost
            try:
                report = shard_report(ends, length)
            except Exception as exc:  # noqa: BLE001 - ValueError (decode_shard), TypeError (not text): said
                report = {"error": f"a shard digest cannot be decoded: {exc}"}
        yield {"job": job, "loader": loader, "epoch": epoch, "report": report}


def shard_text_of(check: dict[str, Any]) -> str:
    """One shard check in words (``ranks.shard_text``), or why its digests could not be read."""
    report = check["report"]
    if "error" in report:
        return f"epoch {check['epoch']}: the shards were not checked: {report['error']}"
    return shard_text(check["epoch"], report)


def job_table(root: str, fs: Any = None, *, budget: JobBudget = JobBudget(), threads: int | None = None) -> JobTable:
    """The job table of every trace under ``root`` (a local directory, or a path of ``fs``); a local
    trace is read only where it lies under ``root``."""
    return table_of(trace_files(root, fs), fs, within=root, budget=budget, threads=threads, label=root)


def table_of(paths: Sequence[str], fs: Any = None, *, within: str | None = None, job: str | None = None,
             budget: JobBudget = JobBudget(), threads: int | None = None, label: str = "") -> JobTable:
    """The job table of these trace files (local paths, or paths of ``fs``); a loaderscope Parquet trace
    may be given as its directory (as a logdir's run list names it): its parts are read. ``within``:
    the directory every local trace must lie in; ``job``: only the runs whose run_start names it (a
    file listed as the job's may say otherwise by now).

    A trace that cannot be read, or holds no event, is left out and named in the table's ``damaged``, as
    is a run cut short or with events missing (``_damage``).

    Raises:
        JobQueryError: a trace outside ``within``, not a regular file, or over a budget; the time budget
            spent; the traces could not be queried. The message names the file or the table, and the fix.
    """
    duckdb = _duckdb()
    label = label or "the job"
    deadline = _Deadline(budget, label)
    try:
        con = _connection(fs, budget, threads)
        deadline.con = con
        try:
            unreadable = _load(con, paths, fs, within, budget, deadline)
            if job is not None:
                con.execute("DELETE FROM runs WHERE job IS DISTINCT FROM $1", [job])
            deadline.check()
            ranks = [row | {"file": paths[row["file"]]} for row in _rows(con, RANKS_SQL)]
            steps = _rows(con, STEPS_SQL)
            shard_rows = _rows(con, SHARDS_SQL)
            damaged = _damage(paths, unreadable, _rows(con, HEALTH_SQL))
            worlds = {(row["job"], row["loader"]): row["world_size"] for row in _rows(con, WORLD_SQL)}
        except duckdb.Error as exc:
            raise _query_error(exc, label, deadline) from None
        finally:
            deadline.con = None
            con.close()
        _count_last(ranks, steps)
        return JobTable(ranks, steps, list(_shard_checks(shard_rows, ranks, budget, deadline)), damaged, worlds)
    finally:
        deadline.done.set()


RANK_IN_NAME = re.compile(r"-rank([0-9]+)-")  # paths.trace_path's names: the rank of a trace unread


def _damage(paths: Sequence[str], unreadable: list[dict[str, Any]], health: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What is wrong with each trace that has something wrong, in path order: ``unreadable`` (left out,
    or its parts from one on), ``empty`` (no event), ``no run_start`` (left out: its names and clock are
    missing), ``events missing`` (gaps in its seq numbers) or ``no run_end`` (still being written, or its
    writer was killed). Its rank and loader where its run_start says them, else its rank as its file's
    name gives it (``rank_from_name``). A copy of another trace's recording, or a run of another job, is
    left out of the table by design and not named."""
    seen = {row["file"]: row for row in health}
    found: list[dict[str, Any]] = []
    cut = {entry["run"]: entry for entry in unreadable}
    for run, path in enumerate(paths):
        row = seen.get(run)
        named = {"trace": path, "rank": row["rank"] if row and row["tabled"] else _rank_in_name(path),
                 "job": row["job"] if row and row["tabled"] else None,
                 "loader": row["loader"] if row and row["tabled"] else None, "rank_from_name": not (row and row["tabled"])}
        if run in cut:
            found.append(named | {"problem": cut[run].get("problem", "unreadable"), "detail": cut[run]["detail"]})
        elif row is None or not row["events"]:
            found.append(named | {"problem": "empty", "detail": "no event in it"})
        elif not row["started"]:
            found.append(named | {"problem": "no run_start", "detail": "its first events are missing, and with them "
                                  "its rank's names and clock: left out"})
        elif not row["tabled"]:
            continue  # another job's run, or a copy of a recording another trace holds (RANKS_SQL counts it once)
        elif row["missing"]:
            found.append(named | {"problem": "events missing", "detail": f"{row['missing']:,} of its seq numbers are "
                                  "missing (lines skipped as unreadable, or events the probe dropped)"})
        elif not row["ended"]:
            found.append(named | {"problem": "no run_end", "detail": "still being written, or its process was killed"})
    return found


def _rank_in_name(path: str) -> int | None:
    found = RANK_IN_NAME.search(PurePosixPath(path).name)
    return int(found.group(1)) if found else None


def _query_error(exc: Exception, label: str, deadline: _Deadline) -> JobQueryError:
    import duckdb  # the optional `job` extra: reached only once _duckdb() found it

    if deadline.passed():
        return deadline.error()
    if isinstance(exc, duckdb.OutOfMemoryException):
        return JobQueryError(f"{label}: " + deadline.budget.refusal("memory_bytes", "reading the traces took more memory"))
    return JobQueryError(f"{label}: the traces could not be queried: {exc}")


def _count_last(ranks: list[dict[str, Any]], steps: list[dict[str, Any]]) -> None:
    """Each run's steps it was last in and its worst lag there (sim.job.rank_figures); a loader of one
    rank (one process) is never last: its own runs are not ranks of each other."""
    ranks_of: dict[tuple[Any, Any], set[Any]] = {}
    for row in ranks:
        ranks_of.setdefault((row["job"], row["loader"]), set()).add(row["rank"])
    last: dict[tuple[Any, Any, Any], list[float]] = {}
    for step in steps:
        if len(ranks_of.get((step["job"], step["loader"]), ())) < 2:
            step["rank"] = None
        if step["rank"] is not None:
            last.setdefault((step["job"], step["loader"], step["rank"]), []).append(step["lag"])
    for row in ranks:
        mine = last.get((row["job"], row["loader"], row["rank"]), [])
        row["slowest_steps"], row["worst_lag"] = len(mine), max(mine) if mine else None
