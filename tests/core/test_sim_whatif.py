"""What-if: sweeps, recommendations, tables, and cost models fitted from traces."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from loaderscope.problems import ParamError
from loaderscope.scenarios.catalog import get
from loaderscope.scenarios.plan import resolve
from loaderscope.sim import (
    CostModel,
    describe_fit,
    fit_from_trace,
    format_table,
    machinery,
    recommend,
    recorded_check,
    simulate,
    sweep,
    trace_sweep,
)
from tests.core.sim_helpers import problems


def _events(scenario: str, params: dict, costs: CostModel | None = None) -> list[dict]:
    return simulate(get(scenario).plan(params), run_id="r", scenario=scenario, params=params, costs=costs)


def test_sweep_rows_carry_the_swept_values_and_the_metrics() -> None:
    rows = sweep(resolve("uniform", {"step_ms": 10.0}), {"num_workers": [0, 1, 2, 4], "prefetch_factor": [1, 2]})
    assert [(r["num_workers"], r["prefetch_factor"]) for r in rows] == [(w, p) for w in (0, 1, 2, 4) for p in (1, 2)]
    for row in rows:
        assert row["status"] == "done" and row["batches"] == 24
        assert 0 <= row["input_bound"] <= 1 and 0 <= row["worker_util"] <= 1
    rates = {r["num_workers"]: r["batches_per_s"] for r in rows if r["prefetch_factor"] == 2}
    assert rates[0] < rates[1] < rates[2] == pytest.approx(rates[4], rel=0.02)


def test_recommend_names_the_smallest_worker_count_that_feeds_the_consumer() -> None:
    rows = sweep(resolve("uniform", {"step_ms": 10.0}), {"num_workers": [0, 1, 2, 4, 8]})
    assert recommend(rows).startswith("num_workers=2 keeps the consumer fed")


def test_recommend_when_nothing_feeds_the_consumer() -> None:
    still_rising = sweep(resolve("uniform", {}), {"num_workers": [1, 2]})
    assert "sweep more workers" in recommend(still_rising)
    main_bound = sweep(resolve("uniform", {"sample_ms": 1.0}), {"num_workers": [1, 2, 4]}, CostModel(get_ms=10.0))
    assert recommend(main_bound).startswith("throughput levels off at num_workers=1 ")
    assert "more workers will not help" in recommend(main_bound)


def test_recommend_per_combination_of_the_other_keys_and_without_workers() -> None:
    rows = sweep(resolve("slow_consumer", {}), {"num_workers": [0, 1, 2], "prefetch_factor": [1, 2]})
    lines = recommend(rows).splitlines()
    assert [line.split(":")[0] for line in lines] == ["prefetch_factor=1", "prefetch_factor=2"]
    assert "num_workers" in recommend(sweep(resolve("slow_consumer", {}), {"prefetch_factor": [1, 2]}))


def test_sweep_a_cost_field_and_reject_unknown_keys() -> None:
    rows = sweep(resolve("slow_consumer", {"num_workers": 2}), {"get_ms": [0.0, 20.0]})
    assert rows[1]["input_bound"] > rows[0]["input_bound"]
    with pytest.raises(ParamError, match="cannot sweep wheels"):
        sweep(resolve("uniform", {}), {"wheels": [1]})
    with pytest.raises(ParamError, match=r"num_workers=99: .*allowed: an integer from 0 to 64"):
        sweep(resolve("uniform", {}), {"num_workers": [2, 99]})
    with pytest.raises(ParamError, match="get_ms='slow'"):
        sweep(resolve("uniform", {}), {"get_ms": ["slow"]})


def test_sweep_step_ms_also_overrides_a_fitted_step() -> None:
    costs = CostModel(step_ms=1.0)
    rows = sweep(resolve("uniform", {"num_workers": 2}), {"step_ms": [1.0, 50.0]}, costs)
    assert rows[1]["batches_per_s"] < rows[0]["batches_per_s"] / 4


def test_format_table_shows_every_row_and_metric() -> None:
    rows = sweep(resolve("out_of_order", {}), {"in_order": [True, False]})
    text = format_table(rows)
    for title in ("in_order", "batches/s", "training loop waiting", "buffer high", "worker util"):  # the page's words
        assert title in text
    assert "True" in text and "False" in text
    assert [r["parked_high"] for r in rows][1] == 0 < rows[0]["parked_high"]


def test_fit_from_trace_recovers_the_costs_of_a_run() -> None:
    params = {"num_workers": 3, "slow_worker": 1, "slow_factor": 4.0, "sample_ms": 2.0, "step_ms": 7.0}
    events = _events("straggler", params)
    model = fit_from_trace(events)
    assert model.worker_factor == {1: pytest.approx(4.0)}
    assert model.step_ms == pytest.approx(7.0)
    assert model.sample is not None and model.sample.dist == "constant"
    assert set(model.sample_table_ms) == set(range(96))
    replay = _events("straggler", params, model)
    assert [e["t"] for e in replay if e["kind"] == "yield"] == pytest.approx(
        [e["t"] for e in events if e["kind"] == "yield"], rel=1e-6)


def test_fit_from_trace_sees_noise_and_the_machinery() -> None:
    costs = CostModel(sample={"dist": "lognormal", "mean_ms": 3.0, "sd_ms": 1.5}, spawn_ms=10.0, startup_ms=4.0,
                      transfer_ms=0.5, get_ms=1.0)
    events = _events("uniform", {"num_workers": 2, "batch_size": 1, "dataset_size": 200, "step_ms": 5.0}, costs)
    model = fit_from_trace(events)
    assert model.sample is not None and model.sample.dist == "lognormal"
    assert model.sample.mean_ms == pytest.approx(3.0, rel=0.15)
    fitted = machinery(events, sample_ms=3.0)
    assert fitted["spawn_ms"] == pytest.approx(10.0)
    assert fitted["startup_ms"] == pytest.approx(4.0)
    assert fitted["get_ms"] == pytest.approx(1.0)


def _first_result_lags(events: list[dict]) -> list[float]:
    """Per epoch and worker, its first result's time from fetch_end to arrive (ms)."""
    ended, lags, seen, epoch = {}, [], set(), 0
    for event in events:
        if event["kind"] == "epoch_start":
            epoch = event["epoch"]
        elif event["kind"] == "fetch_end":
            ended[(epoch, event["idx"])] = event["t"]
        elif event["kind"] == "arrive" and (epoch, event["worker"]) not in seen:
            seen.add((epoch, event["worker"]))
            lags.append(round((event["t"] - ended[(epoch, event["idx"])]) * 1000, 6))
    return lags


@pytest.mark.parametrize("persistent", [False, True])
def test_a_worker_process_pays_its_first_result_once(persistent: bool) -> None:
    # multiprocessing.Queue starts its feeder thread on a process's first put: new workers every epoch pay it
    # every epoch, persistent ones only in the first
    costs = CostModel(first_result_ms=30.0, transfer_ms=0.5)
    params = {"num_workers": 2, "batch_size": 1, "dataset_size": 40, "epochs": 2, "persistent_workers": persistent}
    lags = _first_result_lags(_events("uniform", params, costs))
    assert lags[:2] == pytest.approx([30.5, 30.5])
    assert lags[2:] == pytest.approx([0.5, 0.5] if persistent else [30.5, 30.5])


def test_fit_reads_the_first_result_lag_of_new_workers() -> None:
    costs = CostModel(first_result_ms=30.0, transfer_ms=0.5, get_ms=1.0, spawn_ms=10.0)
    params = {"num_workers": 2, "batch_size": 1, "dataset_size": 40, "epochs": 2, "step_ms": 5.0}
    fitted = machinery(_events("uniform", params, costs))
    # this loop's main process never waits for a steady result: the transfer shows only in the first
    assert fitted["first_result_ms"] + fitted.get("transfer_ms", 0.0) == pytest.approx(30.5)
    plain = machinery(_events("uniform", params, CostModel(transfer_ms=0.5, get_ms=1.0)))
    assert plain["first_result_ms"] + plain.get("transfer_ms", 0.0) == pytest.approx(0.5)


def test_fit_needs_fetches() -> None:
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_from_trace([{"seq": 0, "t": 0.0, "kind": "run_start", "mode": "real", "config": {}}])


def test_sweep_of_a_scenario_trace_predicts_the_recorded_run() -> None:
    params = {"num_workers": 2, "sample_ms": 3.0, "step_ms": 4.0}
    events = _events("uniform", params)
    rows = sweep(resolve("uniform", events[0]["params"]), {"num_workers": [1, 2, 4]}, fit_from_trace(events))
    recorded = events[-1]["stats"]["batches_per_s"]
    assert rows[1]["batches_per_s"] == pytest.approx(recorded, rel=0.01)
    assert rows[0]["batches_per_s"] < rows[1]["batches_per_s"] < rows[2]["batches_per_s"]


def test_trace_sweep_replays_a_loader_without_scenario() -> None:
    events = _events("samplers", {"num_workers": 2, "sampler": "random", "step_ms": 2.0, "batch_size": 8})
    for event in events:  # as a user's own training script would record it
        event.pop("params", None)
        if event["kind"] == "run_start":
            event["scenario"] = None
    rows = trace_sweep(events, {"num_workers": [0, 2, 4], "transfer_ms": [0.0]})
    assert [r["batches"] for r in rows] == [12, 12, 12]
    assert rows[0]["batches_per_s"] < rows[1]["batches_per_s"]
    with pytest.raises(ValueError, match="cannot sweep batch_size"):
        trace_sweep(events, {"batch_size": [4]})


def test_replayed_user_trace_is_conformant() -> None:
    from loaderscope.sim.sweep import plan_from_trace

    events = _events("iterable_shards", {"num_workers": 3})
    events[0]["scenario"] = None
    plan, batches = plan_from_trace(events)
    replay = simulate(plan, run_id="x", scenario="trace", params={}, costs=fit_from_trace(events), batches=batches)
    assert problems(replay) == []
    assert sum(1 for e in replay if e["kind"] == "yield") > 0


def test_fit_reads_the_pin_cost() -> None:
    costs = CostModel(pin_ms_per_mb=2.0, sample_bytes=1 << 18)
    events = _events("uniform", {"num_workers": 2, "pin_memory": True}, costs)
    assert events[0]["config"]["pin_memory_active"] is True
    assert machinery(events)["pin_ms_per_mb"] == pytest.approx(2.0)
    assert fit_from_trace(events).sample_bytes == 1 << 18


def test_sim_from_trace_says_what_it_fitted_and_how_close_it_replays(tmp_path: Path) -> None:
    trace = tmp_path / "mine.trace.jsonl"
    cli = [sys.executable, "-m", "loaderscope.cli"]
    recorded = subprocess.run([*cli, "run", "uniform", "--mode", "sim", "--set", "num_workers=2", "--set", "step_ms=3",
                               "--set", "epochs=2", "--out", str(trace)], capture_output=True, text=True, timeout=120)
    assert recorded.returncode == 0, recorded.stderr
    done = subprocess.run([*cli, "sim", "--from-trace", str(trace), "--sweep", "num_workers=2,4"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "fitted from the trace:" in out
    assert "step_ms 3 ms per batch: the training step" in out, out
    replayed = re.search(r"at the recorded setting \(.*num_workers=2.*\): recorded ([\d.]+) batches/s, "
                         r"replayed ([\d.]+) \(([+-][\d.]+)%\)", out)
    assert replayed is not None, out
    assert replayed[1] == replayed[2]  # a simulated run is replayed exactly by its own fit


def test_recorded_check_counts_the_gap_between_epochs() -> None:
    params = {"num_workers": 2, "step_ms": 2.0, "epochs": 3, "persistent_workers": True}
    events = _events("uniform", params, CostModel(epoch_gap_ms=50.0, spawn_ms=5.0, startup_ms=10.0))
    for event in events:
        if event["kind"] == "run_start":
            event["scenario"] = None
    model = fit_from_trace(events)
    assert model.epoch_gap_ms == pytest.approx(50.0)
    check = recorded_check(events)
    assert check["predicted_batches_per_s"] == pytest.approx(check["recorded_batches_per_s"], rel=1e-6)
    assert "epoch_gap_ms" in {cost["field"] for cost in describe_fit(model)}
