"""The simulator against torch's protocol, one behaviour per test (core without torch where possible)."""

from __future__ import annotations

import random

import pytest

from loaderscope.model.state import reduce
from loaderscope.scenarios.catalog import get
from loaderscope.sim import CostModel, Death, SampleDist, Simulator, Stall, TaskCosts, simulate
from loaderscope.sim.costs import MB
from tests.core.sim_helpers import make_config, problems, run_core


def _kind(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def _plan_events(scenario: str, params: dict | None = None, costs: CostModel | None = None) -> list[dict]:
    params = params or {}
    return simulate(get(scenario).plan(params), run_id="r", scenario=scenario, params=params, costs=costs)


# --- seed 001's worked example ------------------------------------------------------------------------


def test_seed_001_batch_1_arrives_before_batch_0_and_waits_in_task_info() -> None:
    # 4 workers, prefetch_factor 1: priming sends task i to worker i; batch 1 is the quickest.
    cfg = make_config(num_workers=4, prefetch_factor=1, size=4, batch_size=1)
    table = {0: 40.0, 1: 10.0, 2: 30.0, 3: 20.0}  # ms per sample; one sample per batch
    events = run_core(cfg, CostModel(sample_table_ms=table))
    assert problems(events) == []
    dispatches = [(e["idx"], e["worker"]) for e in _kind(events, "dispatch")]
    assert dispatches == [(0, 0), (1, 1), (2, 2), (3, 3)]

    first_park = _kind(events, "parked")[0]
    assert (first_park["idx"], first_park["waiting_for"]) == (1, 0)
    state = reduce(events, until_seq=first_park["seq"])
    assert (state.send_idx, state.rcvd_idx, state.parked) == (4, 0, [1])
    assert sorted(state.tasks) == [0, 1, 2, 3]  # _task_info: 1 holds data, 0, 2, 3 are outstanding

    yields = [(e["idx"], e["from_parked"]) for e in _kind(events, "yield")]
    assert yields == [(0, False), (1, True), (2, True), (3, True)]
    assert _kind(events, "yield")[0]["wait"] == pytest.approx(0.040)


def test_out_of_order_scenario_parks_results_and_still_yields_in_order() -> None:
    events = _plan_events("out_of_order")
    assert problems(events) == []
    parked = _kind(events, "parked")
    assert parked and all(e["idx"] > e["waiting_for"] for e in parked)
    assert [e["idx"] for e in _kind(events, "yield")] == list(range(24))
    assert any(e["from_parked"] for e in _kind(events, "yield"))


# --- dispatch rules --------------------------------------------------------------------------------


def test_priming_fills_the_window_round_robin() -> None:
    events = run_core(make_config(num_workers=3, prefetch_factor=2, size=40, batch_size=2))
    first = _kind(events, "dispatch")[:6]
    assert [(e["idx"], e["worker"]) for e in first] == [(i, i % 3) for i in range(6)]
    assert all(e["t"] == 0 for e in first)
    assert reduce(events).outstanding_high == 6


def test_one_dispatch_per_yield_after_priming() -> None:
    events = run_core(make_config(num_workers=2, prefetch_factor=2, size=40, batch_size=2))
    for position, event in enumerate(events):
        if event["kind"] == "yield" and event["idx"] < 20 - 4:  # while the sampler has batches left
            assert events[position - 1]["kind"] in ("dispatch", "fetch_start")
            dispatch = next(e for e in reversed(events[:position]) if e["kind"] == "dispatch")
            assert dispatch["idx"] == event["idx"] + 4


def test_in_order_false_gives_the_task_to_a_worker_with_capacity() -> None:
    # Worker 0 is 10x slower. max_tasks // active = 4 // 2 = 2 tasks per worker.
    cfg = make_config(num_workers=2, prefetch_factor=2, size=12, batch_size=1, in_order=False)
    events = run_core(cfg, CostModel(worker_factor={0: 10.0}))
    assert problems(events) == []
    dispatches = [(e["idx"], e["worker"]) for e in _kind(events, "dispatch")]
    assert dispatches[:4] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert dispatches[4] == (4, 1)  # the cycle points at worker 0, but it holds 2 tasks already
    yields = [e["idx"] for e in _kind(events, "yield")]
    assert yields != sorted(yields) and sorted(yields) == list(range(12))
    assert not _kind(events, "parked")


def test_in_order_true_keeps_round_robin_and_waits_for_the_slow_worker() -> None:
    cfg = make_config(num_workers=2, prefetch_factor=2, size=12, batch_size=1, in_order=True)
    events = run_core(cfg, CostModel(worker_factor={0: 10.0}))
    assert [e["worker"] for e in _kind(events, "dispatch")] == [0, 1] * 6
    assert [e["idx"] for e in _kind(events, "yield")] == list(range(12))
    assert _kind(events, "parked")


# --- iterable datasets ------------------------------------------------------------------------------


def test_exhausted_iterable_worker_leaves_and_its_tasks_are_skipped() -> None:
    cfg = make_config(num_workers=3, kind="iterable", batch_size=4, shards=[3, 6, 11])
    events = run_core(cfg)
    assert problems(events) == []
    nbytes = {e["idx"]: e["nbytes"] for e in _kind(events, "fetch_end")}
    assert sum(nbytes[e["idx"]] for e in _kind(events, "yield")) == 20 * 32  # every sample once
    skipped = _kind(events, "skip")
    assert {e["worker"] for e in skipped} == {0, 1, 2}
    exits = [e["worker"] for e in _kind(events, "worker_exit")]
    assert exits == [0, 1, 2]  # each leaves when the main process learns its shard ran out
    stops = [e for e in _kind(events, "fetch_end") if e.get("stop")]
    assert len(stops) == 3


def test_iterable_drop_last_drops_each_shards_short_batch() -> None:
    cfg = make_config(num_workers=2, kind="iterable", batch_size=4, shards=[6, 9], drop_last=True)
    events = run_core(cfg)
    assert problems(events) == []
    assert len(_kind(events, "yield")) == 1 + 2


def test_iterable_without_workers_ends_the_epoch_from_inside_next() -> None:
    cfg = make_config(num_workers=0, kind="iterable", batch_size=4, size=10)
    events = run_core(cfg)
    assert problems(events) == []
    assert len(_kind(events, "yield")) == 3
    assert [e["idx"] for e in _kind(events, "skip")] == [3]


# --- epochs and workers -----------------------------------------------------------------------------


def test_persistent_workers_start_once_and_reset_per_epoch() -> None:
    events = run_core(make_config(num_workers=2, persistent_workers=True, epochs=3, size=8, batch_size=2))
    assert problems(events) == []
    assert len(_kind(events, "worker_start")) == 2
    assert [e["epoch"] for e in _kind(events, "epoch_start")] == [0, 1, 2]
    exits = _kind(events, "worker_exit")
    assert len(exits) == 2 and exits[0]["seq"] > _kind(events, "epoch_end")[-1]["seq"]
    # every epoch restarts the cursors and the cycle at worker 0
    assert [e["worker"] for e in _kind(events, "dispatch") if e["idx"] == 0] == [0, 0, 0]


def test_non_persistent_workers_are_new_processes_every_epoch() -> None:
    events = run_core(make_config(num_workers=2, epochs=2, size=8, batch_size=2))
    pids = [e["pid"] for e in _kind(events, "worker_start")]
    assert len(pids) == 4 and len(set(pids)) == 4
    assert len(_kind(events, "worker_exit")) == 4


def test_persistent_iterable_workers_come_back_next_epoch() -> None:
    cfg = make_config(num_workers=2, kind="iterable", batch_size=2, shards=[2, 6], persistent_workers=True, epochs=2)
    events = run_core(cfg)
    assert problems(events) == []
    assert len(_kind(events, "yield")) == 2 * (1 + 3)
    assert len(_kind(events, "worker_exit")) == 2  # only at the end


def test_single_process_loads_in_next() -> None:
    cfg = make_config(num_workers=0, size=10, batch_size=4)
    events = run_core(cfg, sample_s=0.01)
    assert problems(events) == []
    assert not _kind(events, "worker_start")
    assert {e["worker"] for e in _kind(events, "dispatch")} == {0}
    assert [e["wait"] for e in _kind(events, "yield")] == pytest.approx([0.04, 0.04, 0.02])


def test_worker_spawn_and_boot_delay_the_first_fetches() -> None:
    events = run_core(make_config(num_workers=3), CostModel(spawn_ms=10, startup_ms=5))
    starts = [e["t"] for e in _kind(events, "worker_start")]
    assert starts == pytest.approx([0.01, 0.02, 0.03])
    assert _kind(events, "epoch_start")[0]["t"] == pytest.approx(0.03)
    first = {}
    for e in _kind(events, "fetch_start"):
        first.setdefault(e["worker"], e["t"])
    assert [first[w] for w in range(3)] == pytest.approx([0.03, 0.03, 0.035])


# --- costs --------------------------------------------------------------------------------------------


def test_consumer_step_hides_loading_behind_training() -> None:
    fed = run_core(make_config(num_workers=2, size=40), sample_s=0.001, step_s=0.02)
    starved = run_core(make_config(num_workers=2, size=40), sample_s=0.01, step_s=0.0)
    assert reduce(fed).consumer_wait < 0.01
    assert reduce(starved).consumer_wait == pytest.approx(reduce(starved).t, rel=0.01)


def test_pin_stage_runs_between_result_queue_and_consumer() -> None:
    cfg = make_config(num_workers=2, size=16, batch_size=4)
    costs = CostModel(pin_ms_per_mb=1000.0, sample_bytes=MB // 4)  # 1 MB per batch: 1 s to pin
    events = run_core(cfg, costs)
    assert problems(events) == []
    starts, ends = _kind(events, "pin_start"), _kind(events, "pin_end")
    assert len(starts) == len(ends) == 4
    assert [e["t"] - s["t"] for s, e in zip(starts, ends, strict=True)] == pytest.approx([1.0] * 4)
    assert not _kind(run_core(cfg, costs, pin_memory=False), "pin_start")
    assert not _kind(run_core(cfg), "pin_start")


def test_transfer_delays_arrival() -> None:
    events = run_core(make_config(num_workers=1, size=4, batch_size=4), CostModel(transfer_ms=3), sample_s=0.01)
    (end,), (arrive,) = _kind(events, "fetch_end"), _kind(events, "arrive")
    assert arrive["t"] - end["t"] == pytest.approx(0.003)


def test_stall_is_reported_stuck_with_its_task() -> None:
    costs = CostModel(stalls=[Stall(task=2, seconds=15.0)], stuck_after_s=10.0)
    events = run_core(make_config(num_workers=2, size=16, batch_size=2), costs)
    assert problems(events) == []
    (stuck,) = _kind(events, "worker_stuck")
    assert (stuck["idx"], stuck["worker"], stuck["elapsed"]) == (2, 0, 10.0)
    fetch = next(e for e in _kind(events, "fetch_end") if e["idx"] == 2)
    assert fetch["dt"] == pytest.approx(15.01)  # two 5 ms samples and the stall
    assert events[-1]["reason"] == "done"


def test_dying_worker_ends_the_run_with_an_error() -> None:
    costs = CostModel(die=Death(task=3, after_ms=5))
    events = run_core(make_config(num_workers=2, size=16, batch_size=2), costs)
    (died,) = _kind(events, "worker_died")
    assert (died["worker"], died["idx"], died["signal"]) == (1, 3, "SIGKILL")
    (error,) = _kind(events, "error")
    assert error["type"] == "RuntimeError" and "killed by signal" in error["message"]
    assert events[-1]["kind"] == "run_end" and events[-1]["reason"] == "error"
    assert problems(events) == []


def test_timeout_expires_in_the_main_process() -> None:
    events = run_core(make_config(num_workers=1, size=8, batch_size=4, timeout=0.01), sample_s=0.005)
    assert _kind(events, "timeout")[0]["seconds"] == 0.01
    assert _kind(events, "error")[0]["message"] == "DataLoader timed out after 0.01 seconds"
    assert events[-1]["reason"] == "error"
    fine = run_core(make_config(num_workers=1, size=8, batch_size=4, timeout=1.0), sample_s=0.005)
    assert fine[-1]["reason"] == "done"


def test_distributions_have_the_asked_mean() -> None:
    for dist in ("normal", "lognormal", "exponential"):
        model = CostModel(sample=SampleDist(dist=dist, mean_ms=4.0, sd_ms=1.0))
        costs = TaskCosts(model, None, 0.0, random.Random(3))
        mean = costs.fetch(range(20_000), 0) / 20_000
        assert mean == pytest.approx(0.004, rel=0.05), dist


def test_table_and_worker_factor_and_collate_compose() -> None:
    model = CostModel(sample_table_ms={1: 10.0}, worker_factor={1: 2.0}, collate_ms=1.0, sample_overhead_ms=0.5)
    costs = TaskCosts(model, lambda i, w: 0.002, 0.0, random.Random(0))
    assert costs.fetch([0, 1], 0) == pytest.approx(0.002 + 0.010 + 0.001 + 0.001)
    assert costs.fetch([0, 1], 1) == pytest.approx(2 * (0.002 + 0.010 + 0.001 + 0.001))


# --- driving and determinism -------------------------------------------------------------------------


def test_advance_in_slices_gives_the_same_events_as_one_run() -> None:
    cfg = make_config(num_workers=3, size=30, batch_size=2)

    def fresh() -> Simulator:
        return Simulator(cfg, TaskCosts(CostModel(), lambda i, w: 0.003, 0.001, random.Random(0)))

    whole = fresh().run()
    sim, sliced, until = fresh(), [], 0.0
    while not sim.done:
        until += 0.0037
        sliced.extend(sim.advance(until))
    assert sliced == whole


def test_max_events_stops_the_run_and_says_so() -> None:
    cfg = make_config(num_workers=2, size=400, batch_size=1)
    sim = Simulator(cfg, TaskCosts(CostModel(), lambda i, w: 0.001, 0.0, random.Random(0)), max_events=100)
    events = sim.run()
    assert events[-1]["kind"] == "run_end" and events[-1]["reason"] == "stopped" and events[-1]["truncated"]
    assert len(events) <= 101


def test_same_plan_same_events() -> None:
    params = {"sampler": "random", "seed": 3}
    assert _plan_events("samplers", params) == _plan_events("samplers", params)


# --- scenarios through simulate() ---------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["uniform", "straggler", "iterable_shards", "group_sampler", "samplers",
                                      "persistent_epochs", "slow_consumer", "out_of_order"])
@pytest.mark.parametrize("workers", [0, 3])
def test_every_scenario_simulates_conformantly(scenario: str, workers: int) -> None:
    events = _plan_events(scenario, {"num_workers": workers})
    assert problems(events) == []
    assert events[0]["mode"] == "sim" and events[-1]["reason"] == "done"
    assert events[-1]["stats"]["batches"] == len(_kind(events, "yield"))


def test_simulated_sampler_order_is_torchs() -> None:
    from torch.utils.data import DataLoader

    params = {"sampler": "weighted_random", "dataset_size": 30, "batch_size": 4, "seed": 5}
    plan = get("samplers").plan(params)
    dataset = plan.make_dataset()
    loader = DataLoader(dataset, sampler=plan.make_sampler(dataset), batch_size=4)
    expected = [list(map(int, b)) for b in loader.batch_sampler]
    events = _plan_events("samplers", params)
    assert [e["indices"] for e in _kind(events, "dispatch")] == expected


def test_run_start_config_names_every_loader_argument() -> None:
    config = _plan_events("group_sampler", {"num_workers": 2})[0]["config"]
    for key in ("num_workers", "batch_size", "prefetch_factor", "persistent_workers", "in_order", "drop_last",
                "timeout", "pin_memory", "dataset_kind", "dataset_length", "sampler", "batch_sampler",
                "batches_per_epoch"):
        assert key in config, key
    assert (config["sampler"], config["batch_sampler"]) == ("GroupSampler", "BatchSampler")


def test_dispatch_indices_are_clipped() -> None:
    events = run_core(make_config(num_workers=1, size=100, batch_size=100))
    (dispatch,) = _kind(events, "dispatch")
    assert len(dispatch["indices"]) == 64 and dispatch["n"] == 100
