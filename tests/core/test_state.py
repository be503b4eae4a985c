"""The reducer replays seed 001's worked example: 4 workers, tasks 0–3, task 1 arrives before task 0."""

from __future__ import annotations

import pytest

from loaderscope.contract.rules import Where, WorkerStatus
from loaderscope.model.conformance import check
from loaderscope.model.diagnosis import diagnosis
from loaderscope.model.state import LoaderState, reduce
from loaderscope.model.stats import summary
from tests.core.worked_example import EXAMPLE, stream


def test_after_priming_every_worker_holds_one_task() -> None:
    s = reduce(EXAMPLE, until_seq=5)
    assert (s.send_idx, s.rcvd_idx, s.outstanding) == (4, 0, 4)
    assert [s.workers[w].queue for w in range(4)] == [[0], [1], [2], [3]]
    assert s.tasks[2].indices == [4, 5]


def test_fetching_then_result_queue() -> None:
    s = reduce(EXAMPLE, until_seq=10)
    assert s.workers[1].status == WorkerStatus.IDLE and s.workers[0].status == WorkerStatus.FETCHING
    assert s.result_queue == [1] and s.tasks[1].where == Where.RESULT_QUEUE


def test_task_1_is_parked_waiting_for_task_0() -> None:
    s = reduce(EXAMPLE, until_seq=12)
    assert s.parked == [1] and s.tasks[1].where == Where.PARKED
    assert s.rcvd_idx == 0 and s.result_queue == [] and s.outstanding == 3
    assert s.parked_high == 1 and s.out_of_order == 1


def test_task_0_released_then_1_from_the_buffer() -> None:
    s = reduce(EXAMPLE, until_seq=15)
    assert s.rcvd_idx == 1 and s.parked == [1] and s.batches == 1
    # the 0.12 s wait for task 0 began before any result was in; task 1 parked at 0.11 s, and from then
    # on in_order=False would have handed it over: 0.04 s of the wait is the reorder cost
    assert s.head_of_line_wait == pytest.approx(0.04)
    s = reduce(EXAMPLE)
    assert (s.send_idx, s.rcvd_idx, s.parked, s.batches) == (5, 2, [], 2)
    assert s.yield_order == [(0, 0), (0, 1)]
    assert s.violations == [] and check(EXAMPLE) == []


def test_violations_are_reported_not_hidden() -> None:
    bad = stream(
        ("run_start", {"mode": "sim", "config": {"num_workers": 1, "prefetch_factor": 1}}),
        ("epoch_start", {"epoch": 0}),
        ("dispatch", {"idx": 0, "worker": 0}),
        ("dispatch", {"idx": 1, "worker": 0}),  # window is 1
        ("arrive", {"idx": 1, "worker": 0}),
        ("yield", {"idx": 1, "wait": 0.0}),  # out of order with in_order on
        ("epoch_end", {"epoch": 0}),
    )
    problems = check(bad)
    assert any("window is 1" in p for p in problems)
    assert any("yielded while rcvd_idx was 0" in p for p in problems)
    assert any("never yielded" in p for p in problems)


def test_unknown_kinds_are_kept_and_summary_and_diagnosis_speak() -> None:
    s = LoaderState()
    for e in EXAMPLE + stream(("future_kind", {"x": 1})):
        s.apply(e)
    assert s.notes[-1]["kind"] == "future_kind"
    stats = summary(s)
    assert stats["batches"] == 2 and stats["out_of_order"] == 1
    assert any("reorder cost" in line for line in diagnosis(s))


def test_a_straggler_is_named_only_on_enough_fetches_and_a_robust_gap() -> None:
    from loaderscope.model.stats import stragglers

    def state(times: dict[int, list[float]]) -> LoaderState:
        s = LoaderState()
        for wid, ts in times.items():
            s.worker(wid).fetch_times = list(ts)
        return s

    # two or three fetches per worker: one slow sample names nobody
    assert stragglers(state({0: [0.01, 0.01, 0.03], 1: [0.01, 0.01], 2: [0.011, 0.01, 0.01]})) == []
    # enough fetches, but the "slow" worker sits inside the others' own spread
    noisy = {0: [0.010, 0.030, 0.012, 0.028, 0.011], 1: [0.009, 0.031, 0.013, 0.027, 0.010],
             2: [0.020, 0.026, 0.024, 0.025, 0.022]}
    assert stragglers(state(noisy)) == []
    # a worker consistently several times slower is named, with its factor
    slow = {0: [0.010] * 6, 1: [0.011] * 6, 2: [0.052, 0.049, 0.051, 0.050, 0.048]}
    found = stragglers(state(slow))
    assert [f["worker"] for f in found] == [2] and 4.5 < found[0]["factor"] < 5.1


def test_statistics_kept_between_summaries_equal_those_computed_from_scratch() -> None:
    import random

    from loaderscope.model.stats import FetchOrder

    rng = random.Random(7)
    s, kept = LoaderState(), FetchOrder()
    for step in range(40):  # fetches arrive between summaries; worker 2 turns slow, worker 3 joins late
        for wid in range(4 if step > 20 else 3):
            slow = 5 if wid == 2 and step > 10 else 1
            times = (round(0.01 * slow * rng.uniform(0.8, 1.2), 4) for _ in range(rng.randint(0, 3)))
            s.worker(wid).fetch_times.extend(times)
        incremental, scratch = summary(s, kept), summary(s)
        assert incremental.pop("mean_task") == pytest.approx(scratch.pop("mean_task"), rel=1e-12)
        assert incremental.pop("ideal_batches_per_s") == pytest.approx(scratch.pop("ideal_batches_per_s"), rel=1e-12)
        assert incremental == scratch
    assert [found["worker"] for found in summary(s, kept)["stragglers"]] == [2]
