"""The job table's SQL: the table ``events`` the traces are read into, the tables the queries share, the
queries themselves (per rank, per step, the shard digests, each trace's health, the world sizes), and the
``SELECT``s that read JSON lines and Parquet into ``events``. Standard SQL but for DuckDB's readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loaderscope.model.ranks import TIE_S

if TYPE_CHECKING:  # types only: duckdb is the optional `job` extra, never imported at run time here
    import duckdb


# The event fields the queries read, with their SQL types; a trace without one reads it as NULL.
COLUMNS: dict[str, str] = {
    "seq": "BIGINT", "t": "DOUBLE", "run": "VARCHAR", "rank": "BIGINT", "kind": "VARCHAR", "name": "VARCHAR",
    "job": "VARCHAR", "epoch": "BIGINT", "idx": "BIGINT", "worker": "BIGINT", "wait": "DOUBLE", "dt": "DOUBLE",
    "wall_start": "DOUBLE", "host": "VARCHAR", "pid": "BIGINT", "shard": "VARCHAR", "shard_length": "BIGINT",
    "others": "DOUBLE", "world_size": "BIGINT",
}

# Tables the three queries share, made once per connection, in order: each event the figures read
# inside an epoch (its fetches, yields and loop time, and the epoch_starts) with its run's segment
# (epoch_starts so far: state.py resets the epoch's pace at each) and that segment's epoch (the latest
# epoch_start's: a run's epochs count up, probe/iterators.py), both from the run's epoch_start at or
# before it and before the next (a range join to the few epoch_starts: a third of the CPU of a running
# window over every event, which sorts them all); each run's rank, loader and clock, one file per
# recording; its yields with the gap before each.
PREPARED: tuple[tuple[str, str], ...] = (
    ("timeline", """
WITH starts AS (SELECT file, seq, epoch, ROW_NUMBER() OVER (PARTITION BY file ORDER BY seq) AS segment,
                       LEAD(seq) OVER (PARTITION BY file ORDER BY seq) AS until
                FROM events WHERE kind = 'epoch_start')
SELECT e.file, e.seq, e.kind, e.t, e.wait, e.others, e.idx, e.worker, e.dt,
       COALESCE(s.segment, 0) AS segment, s.epoch AS current_epoch
FROM events e
LEFT JOIN starts s ON e.file = s.file AND e.seq >= s.seq AND (s.until IS NULL OR e.seq < s.until)
WHERE e.kind IN ('epoch_start', 'fetch_start', 'fetch_end', 'yield', 'loop')
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
          FROM events WHERE kind = 'run_start' GROUP BY file) r
    JOIN (SELECT file, COUNT(*) AS events FROM events
          WHERE kind IN ('run_start', 'epoch_start', 'fetch_start', 'fetch_end', 'yield', 'epoch_end', 'loop')
          GROUP BY file) n ON n.file = r.file
  ) c
  WHERE copy = 1 OR recorded IS NULL
) s
"""),
    # Each yield with the gap before it and the loop's time in other loaders' next() since the run's
    # previous yield (its `loop` events: state.py's pending_others), so that the step is the gap less it.
    ("yields", """
WITH b AS (SELECT file, seq, kind, t, wait, others, segment, current_epoch,
                  COUNT(*) FILTER (WHERE kind = 'yield') OVER (PARTITION BY file ORDER BY seq
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS batch
           FROM timeline WHERE kind IN ('yield', 'loop'))
SELECT y.file, y.seq, y.t, y.wait, y.segment, y.current_epoch, y.gap, COALESCE(o.others, 0.0) AS others
FROM (SELECT file, seq, t, wait, segment, current_epoch, batch,
             t - wait - LAG(t) OVER (PARTITION BY file, segment ORDER BY seq) AS gap
      FROM b WHERE kind = 'yield') y
LEFT JOIN (SELECT file, batch, SUM(others) AS others FROM b WHERE kind = 'loop' GROUP BY file, batch) o
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
FROM events e JOIN runs r ON r.file = e.file
WHERE e.kind = 'epoch_end' AND e.shard IS NOT NULL
ORDER BY r.job, r.loader, e.epoch, r.rank
"""

# Each run's rank and loader: the ranks a shard check expects of each loader (RANKS_SQL's rows, sooner).
RUN_RANKS_SQL = "SELECT job, loader, rank FROM runs"

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


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _file_list(paths: Sequence[str]) -> str:
    return "[" + ", ".join(_quote(p) for p in paths) + "]"


def json_source(paths: Sequence[str]) -> str:
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


def parquet_source(con: duckdb.DuckDBPyConnection, paths: Sequence[str]) -> str:
    source = f"read_parquet({_file_list(paths)}, union_by_name=true)"
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    picked = [_parquet_column(k, v, present) for k, v in COLUMNS.items()]
    return f"SELECT {', '.join(picked)}, 'parquet' AS source, file_index FROM {source}"


# The fields the queries read only from a run_start (the run's names and clock) or an epoch_end (its
# shard digest): kept there and nowhere else, so a run's names are not copied into each of its events.
SPARSE = {"run": "run_start", "name": "run_start", "job": "run_start", "wall_start": "run_start",
          "host": "run_start", "pid": "run_start", "world_size": "run_start", "shard": "epoch_end",
          "shard_length": "epoch_end", "others": "loop"}


def kept(column: str) -> str:
    kind = SPARSE.get(column)
    return f"e.{column}" if kind is None else f"CASE WHEN e.kind = '{kind}' THEN e.{column} END AS {column}"
