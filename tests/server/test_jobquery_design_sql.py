"""The SQL docs/DESIGN.md §19 says runs unchanged on other engines, run as written on a job of
multi-part Parquet traces (the probe's writer, a part per 64 events): in DuckDB, and in a local Spark
when pyspark is importable (an optional test dependency: ``pip install pyspark``; Java 17 or later).
Its answers must be ``loaderscope job --json``'s.

Before, the queries read ``wall_start`` as a column, which a Parquet trace kept only inside its
``extra`` JSON (DuckDB and Spark refused the SQL), and named a run by its file, so every part of a
trace counted as a run (52 of 200 steps, and the wrong slow rank)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from loaderscope.scenarios.plan import resolve
from loaderscope.sim import CostModel
from loaderscope.sim.run import simulate_ranks
from loaderscope.traces.parquet import ParquetTraceWriter
from loaderscope.traces.paths import trace_path

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "DESIGN.md"
RANKS, SLOW = 4, 2


def design_queries() -> dict[str, str]:
    """§19's SQL blocks that name themselves (their first line ``-- query: NAME``), as written."""
    text = DESIGN.read_text()
    section = text[text.index("\n## 19. "):text.index("\n## 20. ")]
    blocks = [textwrap.dedent(block) for block in re.findall(r"```sql\n(.*?)```", section, re.S)]
    return {found.group(1): block for block in blocks if (found := re.match(r"-- query: (\w+)", block))}


def multipart_job(logdir: Path) -> None:
    """A simulated 4-rank job of 2 epochs (rank 2's samples 3x slower), each rank's trace in parts of 64 events."""
    plan = resolve("uniform", {"dataset_size": 3200, "batch_size": 4, "num_workers": 2, "epochs": 2})
    workload = plan.build()
    fetchers = range(max(workload.settings.num_workers, 1))
    costs = [CostModel(worker_factor={w: 3.0 if rank == SLOW else 1.0 for w in fetchers}) for rank in range(RANKS)]
    job = simulate_ranks(workload, job="sim-uniform", scenario="uniform", params=plan.values(), costs=costs)
    for events in job.events:
        path = trace_path(logdir, events[0])
        path = path.with_name(path.name.replace(".trace.jsonl", ".trace.parquet"))
        with ParquetTraceWriter(path, events[0]["run"], row_group_events=64, part_seconds=3600) as writer:
            writer.write(events)


def loaderscope_job(logdir: Path) -> dict[str, Any]:
    printed = subprocess.run([sys.executable, "-m", "loaderscope.cli", "job", str(logdir), "--json"],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stdout + printed.stderr
    answer: dict[str, Any] = json.loads(printed.stdout)
    return answer


def assert_same(steps: list[tuple[Any, ...]], last: list[tuple[Any, ...]], answer: dict[str, Any]) -> None:
    want = [(s["job"], s["loader"], s["epoch"], s["step"], s["rank"]) for s in answer["steps"]]
    assert [tuple(row[:5]) for row in steps] == want
    assert [row[5] for row in steps] == pytest.approx([s["lag"] for s in answer["steps"]], abs=1e-9)
    by_rank = {(r["job"], r["loader"], r["rank"]): (r["slowest_steps"], r["worst_lag"]) for r in answer["ranks"]
               if r["slowest_steps"]}
    assert {tuple(row[:3]): (row[3], pytest.approx(row[4], abs=1e-9)) for row in last} == by_rank
    assert max(by_rank.items(), key=lambda item: item[1][0])[0][2] == SLOW


def test_the_design_queries_run_as_written_in_duckdb(tmp_path: Path) -> None:
    queries = design_queries()
    assert set(queries) == {"steps", "last"}, sorted(queries)
    multipart_job(tmp_path / "runs")
    assert min(len(list(trace.iterdir())) for trace in (tmp_path / "runs").rglob("*.trace.parquet")) > 5
    answer = loaderscope_job(tmp_path / "runs")
    assert len(answer["steps"]) > 50
    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{tmp_path}/runs/*/*.trace.parquet/*.parquet', "
                "union_by_name = true)")
    steps = con.execute(queries["steps"]).fetchall()
    con.execute(f"CREATE VIEW steps AS {queries['steps']}")
    assert_same(steps, con.execute(queries["last"]).fetchall(), answer)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_design_queries_run_as_written_in_spark(tmp_path: Path) -> None:
    pyspark_sql = pytest.importorskip("pyspark.sql", reason="pyspark is an optional test dependency")
    queries = design_queries()
    multipart_job(tmp_path / "runs")
    answer = loaderscope_job(tmp_path / "runs")
    spark = (pyspark_sql.SparkSession.builder.master("local[1]").appName("loaderscope-design-sql")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    try:
        spark.read.option("mergeSchema", "true").parquet(f"{tmp_path}/runs/*/*.trace.parquet") \
            .createOrReplaceTempView("events")
        steps = [tuple(row) for row in spark.sql(queries["steps"]).collect()]
        spark.sql(queries["steps"]).createOrReplaceTempView("steps")
        assert_same(steps, [tuple(row) for row in spark.sql(queries["last"]).collect()], answer)
    finally:
        spark.stop()
