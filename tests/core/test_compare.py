"""compare.py on real and simulated runs, and ``loaderscope compare`` on trace files and run ids."""

from __future__ import annotations

import argparse
import io
import math
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from loaderscope.cli.compare import add_compare_command
from loaderscope.cli.errors import UsageError
from loaderscope.model.compare import compare, counts, diagnosis_diff, log_edges, normalise
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.runner import Collector, run_real
from loaderscope.scenarios.plan import resolve
from loaderscope.sim import simulate
from loaderscope.traces.jsonl import write_trace

REAL = {"dataset_size": 24, "batch_size": 2, "sample_ms": 4}


def real_run(num_workers: int) -> list[dict[str, Any]]:
    collector = Collector()
    run_real("uniform", {**REAL, "num_workers": num_workers}, collector)
    return collector.events


def sim_run(name: str, **params: Any) -> list[dict[str, Any]]:
    plan = resolve(name, params)
    return simulate(plan.build(), run_id=f"{name}-{len(params)}", scenario=name, params=plan.values())


@pytest.fixture(scope="module")
def real_pair() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return real_run(1), real_run(2)


def test_real_runs_differ_in_num_workers_only(real_pair: Any) -> None:
    a, b = real_pair
    result = compare(a, b, labels=("one", "two"))
    assert [row["key"] for row in result["settings"]["changed"]] == ["num_workers"]
    assert result["settings"]["changed"][0] == {"key": "num_workers", "a": 1, "b": 2}
    assert "batch_size" in result["settings"]["same"]
    assert [r["label"] for r in result["runs"]] == ["one", "two"]
    assert [r["mode"] for r in result["runs"]] == ["real", "real"]


def test_metrics_are_the_runs_own_summaries(real_pair: Any) -> None:
    a, b = real_pair
    sa, sb = summary(reduce(a)), summary(reduce(b))
    rows = {row["key"]: row for row in compare(a, b)["metrics"]}
    for key in ("batches_per_s", "input_bound", "median_task", "batches", "wall"):
        assert rows[key]["a"] == pytest.approx(sa[key]) and rows[key]["b"] == pytest.approx(sb[key])
        assert rows[key]["delta"] == pytest.approx(sb[key] - sa[key])
    assert rows["batches"]["a"] == rows["batches"]["b"] == 12
    assert rows["batches_per_s"]["ratio"] == pytest.approx(sb["batches_per_s"] / sa["batches_per_s"])


def test_histograms_share_one_scale_and_count_every_fetch(real_pair: Any) -> None:
    a, b = real_pair
    hist = compare(a, b)["histograms"]
    edges = hist["edges"]
    assert len(edges) == 25 and edges == sorted(edges)
    times = [dt for events in (a, b) for dt in (e["dt"] for e in events if e["kind"] == "fetch_end")]
    assert edges[0] < min(times) and max(times) < edges[-1]
    assert [w["worker"] for w in hist["a"]] == [0] and [w["worker"] for w in hist["b"]] == [0, 1]
    for side, events in (("a", a), ("b", b)):
        for w in hist[side]:
            mine = [e["dt"] for e in events if e["kind"] == "fetch_end" and e["worker"] == w["worker"]]
            assert sum(w["counts"]) == w["tasks"] == len(mine)
            assert w["counts"] == counts(mine, edges)


def test_a_state_compares_like_its_events_but_without_params() -> None:
    a, b = sim_run("uniform", num_workers=1), sim_run("uniform", num_workers=2, sample_ms=8)
    from_events, from_states = compare(a, b), compare(reduce(a), reduce(b))
    assert from_events["metrics"] == from_states["metrics"]
    assert from_events["histograms"] == from_states["histograms"]
    assert from_events["diagnosis"] == from_states["diagnosis"]
    assert {r["key"] for r in from_events["settings"]["changed"]} == {"num_workers", "params.sample_ms"}
    assert {r["key"] for r in from_states["settings"]["changed"]} == {"num_workers"}


def test_a_straggler_gone_in_b_is_only_in_a() -> None:
    a = sim_run("straggler", num_workers=4, slow_worker=1, slow_factor=4)
    b = sim_run("straggler", num_workers=4, slow_worker=1, slow_factor=1)
    diff = compare(a, b)["diagnosis"]
    assert any(text.startswith("straggler: worker 1 ") for text in diff["only_a"])
    assert not any("straggler" in text for text in diff["only_b"] + [p["b"] for p in diff["both"]])
    waited = [p for p in diff["both"] if p["a"].startswith("training waited")]
    assert len(waited) == 1  # the same finding, with other numbers: listed as changed, not gone and new
    assert waited[0]["changed"]


def test_normalise_blanks_measurements_but_keeps_worker_ids() -> None:
    assert normalise("straggler: worker 1 fetches 3.1× slower than the others (median 80 ms vs 20 ms)") == \
        "straggler: worker 1 fetches #× slower than the others (median # ms vs # ms)"
    assert normalise("worker 2 (pid 12821) died by exit code -9 while fetching task 5") == \
        "worker 2 (pid #) died by exit code # while fetching task #"
    assert normalise("copied to cuda:0 in 0.13 ms; h2d 1,750 MB/s; 2 worker(s)") == \
        "copied to cuda:# in # ms; h2d # MB/s; # worker(s)"


def test_diagnosis_diff_pairs_same_then_topic_leaves_the_rest() -> None:
    a = ["straggler: worker 1 fetches 3.0× slower", "reorder cost: 12 results", "training waited for data 90%; loading"]
    b = ["training waited for data 5%; the step", "reorder cost: 3 results", "straggler: worker 2 fetches 2.0× slower"]
    diff = diagnosis_diff(a, b)
    assert diff["only_a"] == [a[0]] and diff["only_b"] == [b[2]]
    assert diff["both"] == [{"a": a[1], "b": b[1], "changed": True}, {"a": a[2], "b": b[0], "changed": True}]
    assert diagnosis_diff(["x 1"], ["x 1"])["both"] == [{"a": "x 1", "b": "x 1", "changed": False}]


def test_no_fetch_anywhere_gives_no_edges() -> None:
    assert log_edges(0.01, 0.01)[0] < 0.01 < log_edges(0.01, 0.01)[-1]
    empty = [{"seq": 0, "t": 0.0, "kind": "run_start", "mode": "sim", "config": {"num_workers": 1}}]
    hist = compare(empty, empty)["histograms"]
    assert hist["edges"] == [] and hist["a"][0]["counts"] == []
    assert math.isclose(compare(empty, empty)["metrics"][0]["a"], 0.0)


# --- the command -------------------------------------------------------------------------------------


def run_command(*argv: str) -> str:
    parser = argparse.ArgumentParser()
    add_compare_command(parser.add_subparsers())
    args = parser.parse_args(["compare", *argv])
    out = io.StringIO()
    assert args.func(args, Console(file=out, width=200, highlight=False)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory, real_pair: Any) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("traces")
    return (write_trace(folder / "one.trace.jsonl", real_pair[0], "one"),
            write_trace(folder / "two.trace.jsonl", real_pair[1], "two"))


def test_command_prints_every_part(traces: tuple[Path, Path], real_pair: Any) -> None:
    text = run_command(str(traces[0]), str(traces[1]))
    assert re.search(r"num_workers +1 +2 *\n", text)
    rate = summary(reduce(real_pair[1]))["batches_per_s"]
    assert f"{rate:.1f} batches/s" in text
    assert "Fetch time per worker, one scale for both runs" in text
    assert "Diagnosis" in text and "training waited for data" in text


def test_command_errors_name_the_problem(traces: tuple[Path, Path], tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    with pytest.raises(UsageError, match="missing.trace.jsonl: no such file"):
        run_command(str(traces[0]), str(tmp_path / "missing.trace.jsonl"))
    with pytest.raises(UsageError, match="is not a loaderscope trace"):
        run_command(str(other), str(traces[0]))


def test_a_run_id_without_a_dashboard_says_how_to_name_one(traces: tuple[Path, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOADERSCOPE_URL", raising=False)
    monkeypatch.delenv("LOADERSCOPE_TOKEN", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no published dashboard either
    with pytest.raises(UsageError, match="abc123: no such file, and no dashboard to look it up.*--url"):
        run_command(str(traces[0]), "abc123")


def test_command_reads_run_ids_from_the_dashboard(server: Any, traces: tuple[Path, Path]) -> None:
    run = server.start_run("uniform", mode="sim", num_workers=3)
    server.wait_status(run["id"])
    text = run_command(str(traces[0]), run["id"], "--url", server.page_url)
    assert re.search(r"num_workers +1 +3 *\n", text)
    with pytest.raises(UsageError, match="has no run with that id"):
        run_command(str(traces[0]), "nosuchrun", "--url", server.page_url)
    with pytest.raises(UsageError, match="refused the token"):
        run_command(str(traces[0]), run["id"], "--url", f"{server.url}/?token=wrong")
