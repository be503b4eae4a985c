"""Parquet traces (traces/parquet.py, ``loaderscope[columnar]``): the same events come back as from JSON lines,
for real recordings of a multiprocess DataLoader and for every simulated scenario; a SIGKILLed recording
leaves a readable prefix marked truncated; ``export`` converts both ways; a bad format is named."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("pyarrow")  # the columnar extra; scripts/test.sh installs it with the test extra

import pyarrow.parquet as pq

from loaderscope.contract.events import COMMON_FIELDS, STRUCTS
from loaderscope.events import Kind
from loaderscope.model import conformance
from loaderscope.scenarios.catalog import all_scenarios
from loaderscope.traces import parquet as columnar
from loaderscope.traces.jsonl import TraceError, chosen_format, read_trace, read_trace_tolerant, write_trace
from tests.conftest import wait_for
from tests.recording import PYTHON, environment, kill_recorded, record_argv, script, yields

LOADERSCOPE = [PYTHON, "-m", "loaderscope.cli"]


def same_events(left: list[dict[str, Any]], right: list[dict[str, Any]]) -> None:
    """Equal, field for field, with the same Python types (1 is not 1.0, a null is not a missing field)."""
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        assert a == b
        assert {k: type(v) for k, v in a.items()} == {k: type(v) for k, v in b.items()}, (a, b)
        assert orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)


def record_as(fmt: str, logdir: Path, *command: str) -> list[str]:
    """``loaderscope record --format FMT --logdir LOGDIR -- COMMAND``."""
    python, dash_m, module, *rest = record_argv(logdir, *command)
    return [python, dash_m, module, "--format", fmt, *rest]


def recorded(tmp_path: Path, fmt: str, *args: str) -> list[Path]:
    logdir = tmp_path / f"runs-{fmt}"
    done = subprocess.run(record_as(fmt, logdir, PYTHON, script(tmp_path), *args), cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return sorted(logdir.rglob(f"*.trace.{fmt}"))


def test_a_real_multiprocess_recording_in_parquet_is_conformant_and_converts_to_the_same_jsonl(tmp_path: Path) -> None:
    found = recorded(tmp_path, "parquet", "workers=2")
    assert len(found) == 1 and found[0].is_dir()
    head, events, truncated = read_trace_tolerant(found[0])
    assert not truncated and events[-1]["kind"] == "run_end"
    assert conformance.check(events) == [] and yields(events) == 24
    assert head["format"] == "loaderscope-trace" and head["origin"] == "logdir" and head["run"] == events[0]["run"]
    # the conversions are lossless both ways
    jsonl = tmp_path / "back.trace.jsonl"
    write_trace(jsonl, events, head["run"])
    again = tmp_path / "again.trace.parquet"
    write_trace(again, read_trace(jsonl)[1], head["run"], fmt="parquet")
    same_events(events, read_trace(jsonl)[1])
    same_events(events, read_trace(again)[1])


def test_a_real_jsonl_recording_comes_back_the_same_from_parquet(tmp_path: Path) -> None:
    (source,) = recorded(tmp_path, "jsonl", "workers=2", "epochs=3")
    head, events = read_trace(source)
    target = tmp_path / "copy.trace.parquet"
    write_trace(target, events, head["run"], fmt="parquet")
    copy_head, copy = read_trace(target)
    same_events(events, copy)
    assert conformance.check(copy) == []
    assert {k: copy_head[k] for k in ("format", "version", "run")} == {k: head[k] for k in ("format", "version", "run")}


@pytest.mark.parametrize("name", [s.name for s in all_scenarios()])
def test_every_simulated_scenario_comes_back_the_same(tmp_path: Path, name: str) -> None:
    from loaderscope.cli.main import execute
    from loaderscope.scenarios.plan import resolve

    events, state, _ = execute(resolve(name, {}), "sim", None)
    path = write_trace(tmp_path / f"{name}.trace.parquet", events, state.run, fmt="parquet")
    back = read_trace(path)[1]
    same_events([{k: (v.value if isinstance(v, Kind) else v) for k, v in e.items()} for e in events], back)
    assert conformance.check(back) == conformance.check(events)


def test_columns_are_the_contracts_top_level_fields_and_rare_values_go_to_extra(tmp_path: Path) -> None:
    declared = {f for cls in STRUCTS.values() for f in cls.__struct_fields__} | {"kind"}
    assert set(columnar.COLUMNS) <= declared and set(COMMON_FIELDS) <= set(columnar.COLUMNS)
    assert {"idx", "worker", "epoch", "dt", "wait", "nbytes"} <= set(columnar.COLUMNS)
    assert "config" not in columnar.COLUMNS and "indices" not in columnar.COLUMNS  # nested: in extra
    odd = [
        {"seq": 0, "t": 1, "run": "r", "rank": 0, "kind": "run_start", "mode": "real",
         "config": {"a": [1, {"b": None}]}},
        {"seq": 1, "t": 2.5, "run": "r", "rank": 0, "kind": "fetch_end", "worker": 0, "idx": 0, "dt": 3,
         "nbytes": None},
        {"seq": 2, "t": 2.75, "run": "r", "rank": 0, "kind": "step", "batch": "b", "pinned": True},  # pinned: two types
        {"seq": 3, "t": 3.0, "run": None, "rank": 0, "kind": "something_new", "worker": 4095, "who": ["x"]},
        {"seq": 4, "t": 2**52 + 0.5, "run": "r", "rank": -(2**53), "kind": "dispatch", "idx": 2**53, "worker": 1,
         "indices": [1, "a", None, 2.5]},
    ]
    path = write_trace(tmp_path / "odd.trace.parquet", odd, "r", fmt="parquet")
    same_events(odd, read_trace(path)[1])
    table = pq.read_table(path)
    assert table.column("dt").to_pylist()[1] == 3.0 and table.column("idx").to_pylist()[4] == 2**53
    assert str(table.schema.field("worker").type) == "int16" and str(table.schema.field("t").type) == "double"
    assert orjson.loads(table.column("extra").to_pylist()[0]) == {"config": {"a": [1, {"b": None}]}}


def test_a_sigkilled_recording_leaves_a_readable_prefix_marked_truncated(tmp_path: Path) -> None:
    env = environment() | {"LOADERSCOPE_PART_SECONDS": "0.3"}
    argv = record_as("parquet", tmp_path / "runs", PYTHON, script(tmp_path), "workers=2", "epochs=100000", "slow=0.02")
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # for kill_recorded

    def two_parts() -> Path | None:  # with batches in them: on a loaded box the first parts may hold none
        assert process.poll() is None, process.communicate()
        found = [p for p in (tmp_path / "runs").rglob("*.trace.parquet")
                 if len(columnar.parts(p)) >= 2 and yields(read_trace_tolerant(p)[1]) >= 3]
        return found[0] if found else None

    path = wait_for(two_parts, timeout=90, what="a Parquet trace of two parts holding three batches")
    err = kill_recorded(process, int(path.name.split("-pid")[1].split("-")[0]))
    assert process.returncode == 128 + signal.SIGKILL, err
    head, events, truncated = read_trace_tolerant(path)
    assert truncated and events[-1]["kind"] != "run_end" and head["run"] == events[0]["run"]
    assert yields(events) >= 3 and conformance.check(events) == []
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    # an engine reads the same prefix: every part-*.parquet is a whole file
    assert pq.ParquetDataset(path).read().num_rows == len(events)


def test_a_writer_killed_before_renaming_its_part_reads_as_truncated(tmp_path: Path) -> None:
    events = [{"seq": i, "t": float(i), "run": "r", "rank": 0, "kind": "epoch_start", "epoch": i} for i in range(5)]
    path = write_trace(tmp_path / "t.trace.parquet", events, "r", fmt="parquet")
    (path / ".part-000001.parquet.tmp").write_bytes(b"PAR1 cut short")
    head, back, truncated = read_trace_tolerant(path)
    assert truncated and back == events and head["run"] == "r"


def test_export_converts_both_ways_and_names_bad_input(tmp_path: Path) -> None:
    events = [{"seq": 0, "t": 0.5, "run": "r", "rank": 0, "kind": "run_start", "mode": "sim", "config": {}},
              {"seq": 1, "t": 1.5, "run": "r", "rank": 0, "kind": "run_end", "reason": "done"}]
    source = write_trace(tmp_path / "a.trace.jsonl", events, "r", scenario="uniform")

    def export(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*LOADERSCOPE, "export", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)

    assert export(str(source), "-o", "b.trace.parquet").returncode == 0
    assert export("b.trace.parquet", "-o", "c.trace.jsonl").returncode == 0
    assert export("b.trace.parquet", "-o", "c.json").returncode == 0
    assert read_trace(tmp_path / "c.trace.jsonl")[1] == events
    assert read_trace(tmp_path / "b.trace.parquet")[0]["scenario"] == "uniform"
    assert orjson.loads((tmp_path / "c.json").read_bytes())["traceEvents"]
    again = export("b.trace.parquet", "-o", "c.trace.jsonl")
    assert again.returncode == 2 and "already exists" in again.stdout + again.stderr
    (tmp_path / "plain.parquet").write_bytes((tmp_path / "b.trace.parquet" / "part-000000.parquet").read_bytes()[:40])
    damaged = export("plain.parquet", "-o", "d.trace.jsonl")
    assert damaged.returncode == 2 and "not a readable Parquet file" in damaged.stdout + damaged.stderr
    pq.write_table(pq.read_table(tmp_path / "b.trace.parquet").replace_schema_metadata({}), tmp_path / "other.parquet")
    foreign = export("other.parquet", "-o", "e.trace.jsonl")
    assert foreign.returncode == 2 and "not a loaderscope trace" in foreign.stdout + foreign.stderr


def test_the_format_is_chosen_by_flag_then_environment_and_a_bad_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOADERSCOPE_FORMAT", raising=False)
    assert chosen_format() == "jsonl"
    monkeypatch.setenv("LOADERSCOPE_FORMAT", "parquet")
    assert chosen_format() == "parquet" and chosen_format("jsonl") == "jsonl"
    monkeypatch.setenv("LOADERSCOPE_FORMAT", "csv")
    with pytest.raises(ValueError, match=r"unknown trace format 'csv' \(from \$LOADERSCOPE_FORMAT\): use one of jsonl"):
        chosen_format()


def test_a_bad_format_variable_is_said_once_and_training_records_jsonl(tmp_path: Path) -> None:
    env = environment() | {"LOADERSCOPE_LOGDIR": str(tmp_path / "runs"), "LOADERSCOPE_FORMAT": "csv"}
    done = subprocess.run([PYTHON, script(tmp_path), "workers=2"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0 and "consumed 24 in all" in done.stdout
    assert done.stderr.count("unknown trace format 'csv'") == 1
    assert len(list((tmp_path / "runs").rglob("*.trace.jsonl"))) == 1


def test_a_missing_part_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty.trace.parquet").mkdir()
    with pytest.raises(TraceError, match="holds no part"):
        read_trace(tmp_path / "empty.trace.parquet")


def test_without_pyarrow_a_parquet_request_records_jsonl_with_one_note(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("pyarrow is not installed here")\n')
    env = environment() | {"LOADERSCOPE_LOGDIR": str(tmp_path / "runs"), "LOADERSCOPE_FORMAT": "parquet",
                           "PYTHONPATH": str(tmp_path / "shadow")}
    done = subprocess.run([PYTHON, script(tmp_path), "workers=2", "epochs=3"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "consumed 36 in all" in done.stdout
    assert done.stderr.count("Parquet traces need pyarrow (pip install 'loaderscope[columnar]')") == 1
    (trace,) = (tmp_path / "runs").rglob("*.trace.*")
    assert trace.name.endswith(".trace.jsonl") and conformance.check(read_trace(trace)[1]) == []


def test_compare_and_sim_from_trace_read_a_parquet_recording(tmp_path: Path) -> None:
    (source,) = recorded(tmp_path, "parquet", "workers=2")
    head, events = read_trace(source)
    jsonl = write_trace(tmp_path / "same.trace.jsonl", events, head["run"])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*LOADERSCOPE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=180)

    compared = cli("compare", str(source), str(jsonl), "--format", "json")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    result = orjson.loads(compared.stdout)
    assert [run["status"] for run in result["runs"]] == ["done", "done"] and result["settings"]["changed"] == []
    assert result["metrics"] and all(metric["a"] == metric["b"] for metric in result["metrics"])
    swept = {fmt: cli("sim", "--from-trace", str(path), "--sweep", "num_workers=1,2", "--format", "csv")
             for fmt, path in (("parquet", source), ("jsonl", jsonl))}
    assert swept["parquet"].returncode == 0, swept["parquet"].stdout + swept["parquet"].stderr
    assert swept["parquet"].stdout == swept["jsonl"].stdout  # the same events, the same fit and table


def test_watch_writes_a_parquet_logdir_trace_when_asked(tmp_path: Path) -> None:
    code = (
        "import sys, torch\n"
        "from torch.utils.data import DataLoader\n"
        "from loaderscope import watch\n"
        "loader = watch(DataLoader(torch.arange(40.0), batch_size=4, num_workers=2), logdir=sys.argv[1],\n"
        "               trace_format='parquet')\n"
        "print(sum(1 for _ in loader), 'batches')\n"
    )
    done = subprocess.run([PYTHON, "-c", code, str(tmp_path / "runs")], cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "10 batches" in done.stdout, done.stderr
    (trace,) = (tmp_path / "runs").rglob("*.trace.*")
    head, events, truncated = read_trace_tolerant(trace)
    assert trace.name.endswith(".trace.parquet") and not truncated and head["origin"] == "logdir"
    assert yields(events) == 10 and conformance.check(events) == []


FIXTURES = Path(__file__).resolve().parents[2] / "frontend" / "tests" / "fixtures"


def test_a_trace_of_the_previous_writer_reads_the_same_and_tables_the_same(tmp_path: Path) -> None:
    """A real recording written by the writer before parts kept only their non-null columns and
    before ``wall_start``, ``host`` and ``pid`` had columns (they were in ``extra``), and by today's:
    the same events, and the same job table (its clock read from ``extra`` in the old one)."""
    pytest.importorskip("duckdb")
    from loaderscope.traces.jobquery import table_of

    old, new = FIXTURES / "gpu_step_h100.v1.trace.parquet", FIXTURES / "gpu_step_h100.trace.parquet"
    assert all("wall_start" not in pq.ParquetFile(part).schema_arrow.names for part in old.glob("part-*.parquet"))
    _, events = read_trace(FIXTURES / "gpu_step_h100.jsonl")
    same_events(read_trace(old)[1], events)
    same_events(read_trace(new)[1], events)
    assert events[0]["wall_start"]
    tables = [table_of([str(trace)]) for trace in (old, new, FIXTURES / "gpu_step_h100.jsonl")]
    assert [t.ranks[0]["batches_per_s"] for t in tables] == [tables[2].ranks[0]["batches_per_s"]] * 3
    assert [t.steps for t in tables] == [tables[2].steps] * 3 and tables[2].steps


def test_a_later_part_keeps_only_the_columns_its_events_fill_and_the_union_has_all(tmp_path: Path) -> None:
    """Each column a part keeps costs its chunk's metadata in the footer, whatever it holds: a part
    after the first leaves out the columns none of its events fills (the common fields stay), and
    the first keeps every one, so that engines reading the trace as one dataset find every column."""
    duckdb = pytest.importorskip("duckdb")
    header, events = read_trace(FIXTURES / "gpu_step_h100.jsonl")
    trace = tmp_path / "real.trace.parquet"
    with columnar.ParquetTraceWriter(trace, header["run"], row_group_events=100) as writer:
        writer.write(events)
    first, *later = [pq.ParquetFile(part).schema_arrow.names for part in columnar.parts(trace)]
    assert first == columnar.SCHEMA.names and later
    assert all(set(COMMON_FIELDS) <= set(names) < set(first) for names in later)
    same_events(read_trace(trace)[1], events)
    described = duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{trace}/*.parquet', union_by_name = true)")
    assert sorted(row[0] for row in described.fetchall()) == sorted(columnar.SCHEMA.names)
