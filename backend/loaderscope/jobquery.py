"""A whole job's table from its traces, by SQL on an embedded DuckDB: every rank's figures without
replaying any rank's events in Python.

The SQL is the definitions of ``state.summary`` (batches/s, the share of time waiting for data),
the page's ``ranks.slowestWorker`` with ``state.worker_stats``' p95, and ``ranks.slowest_per_step``,
written as window functions over one view ``events`` (a row per event, columns named as the event's
top-level fields, plus ``file``: its run, as a number). Only the view is DuckDB's (``read_json`` / ``read_parquet``); the
queries are standard SQL, so the same text runs on Spark SQL or Trino over the same Parquet files
(docs/DESIGN.md §19). The shard check gathers each rank's ``epoch_end`` digest in SQL and decodes
it with ``ranks.shard_report``: a digest is zlib'd, which no SQL engine reads.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from loaderscope.ranks import TIE_S, shard_report, shard_text

if TYPE_CHECKING:
    import duckdb

TRACE_SUFFIXES = (".trace.jsonl", ".parquet")  # a Parquet file of another writer, or a part of ours
PART_NAME = r"part-[0-9]+\.parquet"  # columnar.PART_GLOB: the parts of a ``NAME.trace.parquet/`` directory
KINDS = ("run_start", "epoch_start", "fetch_start", "fetch_end", "yield", "epoch_end")

# The event fields the queries read, with their SQL types; a trace without one reads it as NULL.
COLUMNS: dict[str, str] = {
    "seq": "BIGINT", "t": "DOUBLE", "run": "VARCHAR", "rank": "BIGINT", "kind": "VARCHAR", "name": "VARCHAR",
    "job": "VARCHAR", "epoch": "BIGINT", "idx": "BIGINT", "worker": "BIGINT", "wait": "DOUBLE", "dt": "DOUBLE",
    "wall_start": "DOUBLE", "host": "VARCHAR", "pid": "BIGINT", "shard": "VARCHAR", "shard_length": "BIGINT",
}

# Tables the three queries share, made once per connection, in order: each event with its run's
# segment (epoch_starts so far: state.py resets the epoch's pace at each) and that segment's epoch
# (the latest epoch_start's: a run's epochs count up, probe/iterators.py), both from one window;
# each run's rank, loader and clock, one file per recording; its first event's time; its yields with
# the gap before each.
PREPARED: tuple[tuple[str, str], ...] = (
    ("timeline", """
SELECT e.*,
       SUM(CASE WHEN kind = 'epoch_start' THEN 1 ELSE 0 END) OVER w AS segment,
       MAX(CASE WHEN kind = 'epoch_start' THEN epoch END) OVER w AS current_epoch
FROM events e
WHERE kind IN ('run_start', 'epoch_start', 'fetch_start', 'fetch_end', 'yield', 'epoch_end')
WINDOW w AS (PARTITION BY file ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
"""),
    # A recording (one probe: its host, pid and clock) may be in a logdir twice: a script that streams
    # to `serve --logdir DIR` and writes its own trace into DIR leaves the dashboard's copy beside its
    # own. Each recording counts once, by the file that holds most of it (a stream may have lost some).
    ("runs", """
SELECT file, run, rank, name, job, COALESCE(recorded, 0.0) AS wall_start FROM (
  SELECT r.*, ROW_NUMBER() OVER (PARTITION BY job, name, rank, host, pid, recorded
                                 ORDER BY n.events DESC, r.file) AS copy
  FROM (SELECT file, MAX(run) AS run, MAX(rank) AS rank, MAX(name) AS name, MAX(job) AS job,
               MAX(host) AS host, MAX(pid) AS pid, MAX(wall_start) AS recorded
        FROM timeline WHERE kind = 'run_start' GROUP BY file) r
  JOIN (SELECT file, COUNT(*) AS events FROM timeline GROUP BY file) n ON n.file = r.file
)
WHERE copy = 1 OR recorded IS NULL
"""),
    ("firsts", """
SELECT e.file, e.t AS first_t FROM events e
JOIN (SELECT file, MIN(seq) AS seq FROM events GROUP BY file) m ON e.file = m.file AND e.seq = m.seq
"""),
    ("yields", """
SELECT file, seq, t, wait, segment, current_epoch,
       t - wait - LAG(t) OVER (PARTITION BY file, segment ORDER BY seq) AS gap
FROM timeline WHERE kind = 'yield'
"""),
)

# Per rank: summary()'s batches_per_s and input_bound; the slowest worker by mean fetch time
# (ranks.js slowestWorker) and its p95 as worker_stats takes it (sorted[round(0.95 * (n - 1))],
# Python's round: half to even).
RANKS_SQL = """
WITH pace AS (
  SELECT y.file, COUNT(*) AS batches, MAX(y.t) AS last_yield_t, SUM(y.wait) AS consumer_wait,
         SUM(CASE WHEN y.gap > 0 THEN y.gap ELSE 0.0 END) AS step_total
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
SELECT r.file, r.run, r.rank, r.name, r.job,
       COALESCE(p.batches, 0) AS batches,
       CASE WHEN p.last_yield_t - fi.first_t > 0 THEN p.batches / (p.last_yield_t - fi.first_t) ELSE 0.0 END
         AS batches_per_s,
       CASE WHEN p.consumer_wait + p.step_total > 0 THEN p.consumer_wait / (p.consumer_wait + p.step_total)
            ELSE 0.0 END AS input_bound,
       w.worker AS slowest_worker, w.mean AS slowest_worker_mean, q.p95 AS slowest_worker_p95
FROM runs r
JOIN firsts fi ON fi.file = r.file
LEFT JOIN pace p ON p.file = r.file
LEFT JOIN workers w ON w.file = r.file AND w.place = 1
LEFT JOIN p95 q ON q.file = r.file
ORDER BY r.job, r.name, r.rank
"""

# Per step of every epoch: the rank whose batch came last on the wall clock (wall_start + t) and how
# much after the first; steps past the fewest any rank delivered are left out (ranks.slowest_per_step).
STEPS_SQL = f"""
WITH deliveries AS (
  SELECT r.job, r.name, r.rank, y.current_epoch AS epoch, r.wall_start + y.t AS at,
         ROW_NUMBER() OVER (PARTITION BY y.file, y.current_epoch ORDER BY y.seq) - 1 AS step
  FROM yields y JOIN runs r ON r.file = y.file
  WHERE y.current_epoch IS NOT NULL
),
counted AS (
  SELECT job, name, epoch, rank, COUNT(*) AS n FROM deliveries GROUP BY job, name, epoch, rank
),
common AS (
  SELECT job, name, epoch, MIN(n) AS steps FROM counted GROUP BY job, name, epoch
),
ranked AS (
  SELECT d.job, d.name, d.epoch, d.step, d.rank, d.at,
         ROW_NUMBER() OVER (PARTITION BY d.job, d.name, d.epoch, d.step ORDER BY d.at DESC, d.rank) AS place,
         MAX(d.at) OVER (PARTITION BY d.job, d.name, d.epoch, d.step)
           - MIN(d.at) OVER (PARTITION BY d.job, d.name, d.epoch, d.step) AS lag
  FROM deliveries d
  JOIN common c ON c.job IS NOT DISTINCT FROM d.job AND c.name IS NOT DISTINCT FROM d.name AND c.epoch = d.epoch
  WHERE d.step < c.steps
)
SELECT job, name, epoch, step, CASE WHEN lag > {TIE_S!r} THEN rank END AS rank, lag
FROM ranked WHERE place = 1
ORDER BY job, name, epoch, step
"""

# Each rank's shard digest per epoch (the probe's epoch_end), decoded by ranks.shard_report.
SHARDS_SQL = """
SELECT r.job, r.name, e.epoch, r.rank, e.shard, e.shard_length
FROM timeline e JOIN runs r ON r.file = e.file
WHERE e.kind = 'epoch_end' AND e.shard IS NOT NULL
ORDER BY r.job, r.name, e.epoch, r.rank
"""


class JobQueryError(ValueError):
    """A job's traces could not be read; the message names the directory or file, and the fix."""


@dataclass(frozen=True)
class JobTable:
    """The job's answers: a row per rank, a row per step, a shard check per epoch every rank reported."""

    ranks: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    shards: list[dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        """The table as JSON values: a shard report's ``per_rank`` is keyed by the rank as text."""
        shards = [check | {"report": check["report"] | {"per_rank": {str(rank): n for rank, n in per_rank.items()}}}
                  if (per_rank := check["report"].get("per_rank")) is not None else check for check in self.shards]
        return {"ranks": self.ranks, "steps": self.steps, "shards": shards, "slowest": self.slowest_rank()}

    def slowest_rank(self) -> dict[str, Any] | None:
        """The rank most often last to deliver a step (lowest rank on a tie), or None if none was."""
        ranked = [r for r in self.ranks if r["slowest_steps"]]
        if not ranked:
            return None
        top = max(ranked, key=lambda r: (r["slowest_steps"], -r["rank"]))
        return {"rank": top["rank"], "steps": top["slowest_steps"], "of": len(self.steps),
                "worst_lag": top["worst_lag"]}


def trace_files(root: str, fs: Any = None) -> list[str]:
    """Every trace under ``root`` (recursively), sorted; ``fs``: an fsspec filesystem for a URL."""
    if fs is None:
        base = Path(root)
        if not base.is_dir():
            raise JobQueryError(f"{root}: not a directory; give the job's directory of traces "
                                "(e.g. LOGDIR/<job>, or the --logdir of `loaderscope run --ranks`)")
        found = [str(p) for p in base.rglob("*")  # a dangling link too: said by name, not skipped
                 if (p.is_file() or p.is_symlink()) and p.name.endswith(TRACE_SUFFIXES) and not p.name.startswith(".")]
    else:
        found = [p if "://" in p else f"{fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]}://{p}"
                 for p in fs.find(root) if PurePosixPath(p).name.endswith(TRACE_SUFFIXES)]
    if not found:
        raise JobQueryError(f"{root}: no traces (*.trace.jsonl or *.parquet) under it; record a job into it with "
                            "`loaderscope record --logdir DIR -- torchrun ...` or `loaderscope run SCENARIO "
                            "--mode sim --ranks N --logdir DIR`")
    return sorted(found)


def _parts_of(paths: Sequence[str], fs: Any) -> list[str]:
    """Each path, a ``NAME.trace.parquet/`` directory replaced by its part files in order (columnar.PART_GLOB)."""
    out: list[str] = []
    for path in paths:
        if not (Path(path).is_dir() if fs is None else fs.isdir(path)):
            out.append(path)
            continue
        parts = sorted(fs.glob(posixpath.join(path, "part-*.parquet")) if fs is not None
                       else (str(p) for p in Path(path).glob("part-*.parquet")))
        if not parts:
            raise JobQueryError(f"{path}: a directory without trace parts (part-N.parquet); a Parquet trace "
                                "whose writer was killed before its first part has no events yet")
        out.extend(parts)
    return out


def _check_readable(paths: Sequence[str], fs: Any) -> None:
    for path in paths:
        try:
            if fs is None:
                with open(path, "rb") as f:
                    f.read(1)
            else:
                with fs.open(path, "rb") as f:
                    f.read(1)
        except OSError as exc:
            raise JobQueryError(f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions "
                                "or move it out of the job's directory") from None


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
    """A field from its column, else from loaderscope's ``extra`` JSON text (docs/DESIGN.md §5): a field
    typed loosely in the contract (``wall_start``, ``shard``) has no column of its own there. Only a
    run_start or epoch_end holds one, so only theirs is parsed."""
    column = f"TRY_CAST({name} AS {sql_type})" if name in present else None
    extra = (f"CASE WHEN extra IS NOT NULL AND kind IN ('run_start', 'epoch_end') "
             f"THEN TRY_CAST(json_extract_string(extra, '$.{name}') AS {sql_type}) END") if "extra" in present else None
    found = [c for c in (column, extra) if c]
    picked = found[0] if len(found) == 1 else f"COALESCE({', '.join(found)})" if found else f"CAST(NULL AS {sql_type})"
    return f"{picked} AS {name}"


def _parquet_source(con: duckdb.DuckDBPyConnection, paths: Sequence[str]) -> str:
    source = f"read_parquet({_file_list(paths)}, union_by_name=true)"
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    picked = [_parquet_column(k, v, present) for k, v in COLUMNS.items()]
    return f"SELECT {', '.join(picked)}, 'parquet' AS source, file_index FROM {source}"


def _run_keys(paths: Sequence[str]) -> list[str]:
    """Each file's run: a loaderscope Parquet trace is a directory of parts, one run; any other file is one."""
    return [re.sub(f"/{PART_NAME}$", "", path) for path in paths]


def _files_table(con: duckdb.DuckDBPyConnection, sources: Mapping[str, Sequence[str]]) -> list[str]:
    """The table ``files(source, file_index, file)``: each file of each source read, and its run as a
    number (a window or join over a small integer, not over a path per event); the runs' paths by number."""
    runs: dict[str, int] = {}
    rows = [(source, index, runs.setdefault(run, len(runs)))
            for source, paths in sources.items() for index, run in enumerate(_run_keys(paths))]
    # one statement of three lists: executemany costs about 1.5 ms a row
    con.execute("CREATE TEMP TABLE files AS SELECT UNNEST($1) AS source, CAST(UNNEST($2) AS BIGINT) AS file_index, "
                "CAST(UNNEST($3) AS INTEGER) AS file", [[row[i] for row in rows] for i in range(3)])
    return list(runs)


def _duckdb() -> Any:
    try:
        import duckdb  # the optional `job` extra, not a runtime dependency: refused with its install line
    except ImportError:
        raise JobQueryError("the job table needs DuckDB: pip install 'loaderscope[job]'") from None
    return duckdb


# The fields the queries read only from a run_start (the run's names and clock) or an epoch_end (its
# shard digest): kept there and nowhere else, so a run's names are not copied into each of its events.
SPARSE = {"run": "run_start", "name": "run_start", "job": "run_start", "wall_start": "run_start",
          "host": "run_start", "pid": "run_start", "shard": "epoch_end", "shard_length": "epoch_end"}


def _kept(column: str) -> str:
    kind = SPARSE.get(column)
    return f"e.{column}" if kind is None else f"CASE WHEN e.kind = '{kind}' THEN e.{column} END AS {column}"


def connect(paths: Sequence[str], fs: Any = None, *,
            threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    """An in-memory DuckDB with the table ``events`` of ``paths`` (JSON lines or Parquet, by extension),
    its ``file`` a run's number; and the runs' paths by number."""
    con: duckdb.DuckDBPyConnection = _duckdb().connect(":memory:")
    con.execute("SET enable_progress_bar = false")  # a bar on stderr is noise in a CLI and a server
    con.execute("SET preserve_insertion_order = false")  # every answer has its ORDER BY
    con.execute("SET parquet_metadata_cache = true")  # the footers DESCRIBE read are not read again
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if fs is not None:
        con.register_filesystem(fs)
    by_source = {"json": [p for p in paths if not p.endswith(".parquet")],
                 "parquet": [p for p in paths if p.endswith(".parquet")]}
    runs = _files_table(con, by_source)
    sources = ([_json_source(by_source["json"])] if by_source["json"] else []) + \
        ([_parquet_source(con, by_source["parquet"])] if by_source["parquet"] else [])
    # Read once for the three queries: the kinds they read, and each run's first event (summary()'s
    # clock starts there; a header line has no kind and no seq)
    con.execute(f"CREATE TEMP TABLE events AS SELECT {', '.join(map(_kept, COLUMNS))}, f.file FROM ("
                + " UNION ALL ".join(sources) + ") e JOIN files f ON f.source = e.source AND f.file_index = e.file_index "
                f"WHERE e.kind IN ({', '.join(map(_quote, KINDS))}) OR e.seq = 0")
    for name, sql in PREPARED:
        con.execute(f"CREATE TEMP TABLE {name} AS {sql}")
    return con, runs


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _shard_checks(rows: list[dict[str, Any]], ranks: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """One check per (loader, epoch) every rank of that loader reported a digest for."""
    expected: dict[tuple[Any, Any], set[int]] = {}
    for r in ranks:
        expected.setdefault((r["job"], r["name"]), set()).add(r["rank"])
    groups: dict[tuple[Any, Any, int], dict[int, dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["job"], row["name"], row["epoch"]), {})[row["rank"]] = row
    for (job, name, epoch), ends in groups.items():
        if set(ends) != expected.get((job, name), set()):
            continue
        length = next(iter(ends.values()))["shard_length"] or 0
        try:
            report: dict[str, Any] = shard_report(ends, length)
        except Exception as exc:  # noqa: BLE001 - ValueError, zlib.error, binascii.Error: a damaged digest is said
            report = {"error": f"a shard digest cannot be decoded: {exc}"}
        yield {"job": job, "name": name, "epoch": epoch, "report": report}


def shard_text_of(check: dict[str, Any]) -> str:
    """One shard check in words (``ranks.shard_text``), or why its digests could not be read."""
    report = check["report"]
    if "error" in report:
        return f"epoch {check['epoch']}: the shards were not checked: {report['error']}"
    return shard_text(check["epoch"], report)


def job_table(root: str, fs: Any = None, *, threads: int | None = None) -> JobTable:
    """The job table of every trace under ``root`` (a local directory, or a path of ``fs``)."""
    return table_of(trace_files(root, fs), fs, threads=threads, label=root)


def table_of(paths: Sequence[str], fs: Any = None, *, threads: int | None = None, label: str = "") -> JobTable:
    """The job table of these trace files (local paths, or paths of ``fs``); a loaderscope Parquet trace
    may be given as its directory (as a logdir's run list names it): its parts are read."""
    duckdb = _duckdb()
    paths = _parts_of(paths, fs)
    _check_readable(paths, fs)
    try:
        con, runs = connect(paths, fs, threads=threads)
        ranks = [row | {"file": runs[row["file"]]} for row in _rows(con, RANKS_SQL)]
        steps = _rows(con, STEPS_SQL)
        shard_rows = _rows(con, SHARDS_SQL)
    except duckdb.Error as exc:
        raise JobQueryError(f"{label or 'the job'}: the traces could not be queried: {exc}") from None
    finally:
        if "con" in locals():
            con.close()
    last: dict[tuple[Any, Any, Any], list[float]] = {}
    for step in steps:  # the steps each rank was last in, and its worst lag there (sim.job.rank_figures)
        last.setdefault((step["job"], step["name"], step["rank"]), []).append(step["lag"])
    for row in ranks:
        mine = last.get((row["job"], row["name"], row["rank"]), [])
        row["slowest_steps"], row["worst_lag"] = len(mine), max(mine) if mine else None
    return JobTable(ranks, steps, list(_shard_checks(shard_rows, ranks)))
