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

The parts: ``jobfiles.py`` opens the traces, ``jobsql.py`` holds the SQL, ``jobtable.py`` the answers
made in Python from its rows, ``jobbudget.py`` the budget; here DuckDB is connected and the table made.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from loaderscope.traces.jobbudget import Deadline, JobBudget, JobQueryError
from loaderscope.traces.jobfiles import Opener, Read, Unreadable, trace_files
from loaderscope.traces.jobsql import (
    COLUMNS,
    HEALTH_SQL,
    PREPARED,
    RANKS_SQL,
    RUN_RANKS_SQL,
    SHARDS_SQL,
    STEPS_SQL,
    WORLD_SQL,
    json_source,
    kept,
    parquet_source,
)
from loaderscope.traces.jobtable import JobTable, count_last, damage, shard_checks

if TYPE_CHECKING:  # types only: duckdb is the optional `job` extra, never imported at run time here
    import duckdb


# Files open at once while the traces are read into ``events``: their descriptors are closed after
# each batch, so a job of 10,000 ranks needs no more than this many (and the server its sockets).
FILES_AT_ONCE = 256


def _duckdb() -> Any:
    try:
        import duckdb  # the optional `job` extra, not a runtime dependency: refused with its install line
    except ImportError:
        raise JobQueryError("the job table needs DuckDB: pip install 'loaderscope[job]'") from None
    return duckdb


def connect(paths: Sequence[str], fs: Any = None, *, within: str | None = None, budget: JobBudget = JobBudget(),
            threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    """An in-memory DuckDB with the table ``events`` of ``paths`` (JSON lines or Parquet, by extension;
    a loaderscope Parquet trace as its directory), its ``file`` a run's number, and the shared tables
    (``PREPARED``); and the runs' paths by number. ``within``: the directory every local trace must lie in.

    Raises:
        JobQueryError: a trace that cannot be read or is over a budget (``Opener``).
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
    elif con.execute("SELECT COUNT(*) FROM duckdb_settings() WHERE name = 'async_threads'").fetchone() != (0,):
        # local traces need no thread of DuckDB's own for asynchronous I/O (8 by default, in the DuckDBs
        # that have them; the job extra allows 1.1 on): without them `loaderscope job` on 1,024 ranks took
        # less CPU in 7 of 9 runs alternated with them (by up to 1.0 s of 6-7) and no more wall time
        con.execute("SET async_threads = 0")
    return con


def _load(con: duckdb.DuckDBPyConnection, paths: Sequence[str], fs: Any, within: str | None, budget: JobBudget,
          deadline: Deadline | None) -> list[dict[str, Any]]:
    """Read the traces into ``events`` a batch of files at a time (``FILES_AT_ONCE``), then make ``PREPARED``;
    the traces that could not be read (``_unreadable``), each with why."""
    con.execute(f"CREATE TEMP TABLE events ({', '.join(f'{k} {v}' for k, v in COLUMNS.items())}, file INTEGER)")
    if fs is None and not os.path.isdir("/proc/self/fd"):
        raise JobQueryError("the job table reads each local trace through its open descriptor (/proc/self/fd), "
                            "which this system lacks: make the table on Linux, or give the traces as an fsspec URL")
    _allow_open_files(FILES_AT_ONCE)
    opener = Opener(fs, within, budget)
    unreadable: list[dict[str, Any]] = []
    try:
        batch: list[Read] = []
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


def _insert_readable(con: duckdb.DuckDBPyConnection, reads: Sequence[Read],
                     paths: Sequence[str]) -> list[dict[str, Any]]:
    """``_insert`` these files; when the batch cannot be read, each run's alone, and a Parquet trace's
    parts one by one up to the first that cannot be read (its events before it are the run's, as a
    killed writer's parts are): one damaged trace never costs the table the others. Returns the
    traces left out, or cut short, each with DuckDB's reason, told by the file's name."""
    duckdb = _duckdb()  # the optional `job` extra, imported in one place

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


def _unreadable_text(exc: Exception, read: Read) -> str:
    return f"not readable ({str(exc).splitlines()[0].replace(read.at, read.name)})"


def _insert(con: duckdb.DuckDBPyConnection, reads: Sequence[Read]) -> None:
    """Read these files into ``events``: every event (a run's count of events and its seq numbers tell
    what was skipped or cut, ``damage``), the fields the queries read (``kept``). Each file's
    ``file_index`` is joined to its run's number (a window or join over a small integer, not over a
    path per event)."""
    by_source = {"json": [r for r in reads if not r.parquet], "parquet": [r for r in reads if r.parquet]}
    rows = [(source, index, read.run) for source, group in by_source.items() for index, read in enumerate(group)]
    # one statement of three lists: executemany costs about 1.5 ms a row
    con.execute("CREATE OR REPLACE TEMP TABLE files AS SELECT UNNEST($1) AS source, "
                "CAST(UNNEST($2) AS BIGINT) AS file_index, CAST(UNNEST($3) AS INTEGER) AS file",
                [[row[i] for row in rows] for i in range(3)])
    sources = ([json_source([r.at for r in by_source["json"]])] if by_source["json"] else []) + \
        ([parquet_source(con, [r.at for r in by_source["parquet"]])] if by_source["parquet"] else [])
    con.execute(f"INSERT INTO events SELECT {', '.join(map(kept, COLUMNS))}, f.file FROM ("
                + " UNION ALL ".join(sources)
                + ") e JOIN files f ON f.source = e.source AND f.file_index = e.file_index")


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
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


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
    is a run cut short or with events missing (``damage``).

    Raises:
        JobQueryError: a trace outside ``within``, not a regular file, or over a budget; the time budget
            spent; the traces could not be queried. The message names the file or the table, and the fix.
    """
    duckdb = _duckdb()
    label = label or "the job"
    deadline = Deadline(budget, label)
    try:
        con = _connection(fs, budget, threads)
        deadline.con = con
        try:
            unreadable = _load(con, paths, fs, within, budget, deadline)
            if job is not None:
                con.execute("DELETE FROM runs WHERE job IS DISTINCT FROM $1", [job])
            deadline.check()
            # the shard check (libdeflate's inflate and numpy, both without the GIL) runs beside the
            # queries left, which DuckDB runs without it: on two cores the two take about the longer's time
            with ThreadPoolExecutor(1, thread_name_prefix="loaderscope-shards") as pool:
                shards = pool.submit(_checked, _rows(con, SHARDS_SQL), _rows(con, RUN_RANKS_SQL), budget, deadline)
                ranks = [row | {"file": paths[row["file"]]} for row in _rows(con, RANKS_SQL)]
                steps = _rows(con, STEPS_SQL)
                damaged = damage(paths, unreadable, _rows(con, HEALTH_SQL))
                worlds = {(row["job"], row["loader"]): row["world_size"] for row in _rows(con, WORLD_SQL)}
                checks = shards.result()
        except duckdb.Error as exc:
            raise _query_error(exc, label, deadline) from None
        finally:
            deadline.con = None
            con.close()
        count_last(ranks, steps)
        return JobTable(ranks, steps, checks, damaged, worlds)
    finally:
        deadline.done.set()


def _checked(rows: list[dict[str, Any]], runs: list[dict[str, Any]], budget: JobBudget,
             deadline: Deadline) -> list[dict[str, Any]]:
    return list(shard_checks(rows, runs, budget, deadline))


def _query_error(exc: Exception, label: str, deadline: Deadline) -> JobQueryError:
    duckdb = _duckdb()  # the optional `job` extra, imported in one place

    if deadline.passed():
        return deadline.error()
    if isinstance(exc, duckdb.OutOfMemoryException):
        return JobQueryError(f"{label}: "
                             + deadline.budget.refusal("memory_bytes", "reading the traces took more memory"))
    return JobQueryError(f"{label}: the traces could not be queried: {exc}")
