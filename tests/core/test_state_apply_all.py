"""The reducer's frame-at-once path (``fastpath.apply_all``, what the store runs per frame) against
its event-at-a-time path (``LoaderState.apply``): after every frame the state, the summary and the
diagnosis must be the same, for simulated runs of every scenario, a real DataLoader's run, and random
streams (broken ones included, where a rule raises or the protocol is violated)."""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset

from loaderscope import sim
from loaderscope.contract.rules import RULES
from loaderscope.events import expand
from loaderscope.model.diagnosis import diagnosis
from loaderscope.model.fastpath import _INLINED, _INLINED_RULES, apply_all
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import summary
from loaderscope.probe.loader import InstrumentedDataLoader
from loaderscope.scenarios.catalog import all_scenarios
from tests.frames import Frames


def one_at_a_time(frames: list[list[dict[str, Any]]]) -> tuple[LoaderState, list[str]]:
    """The reference: ``apply`` per event, a rule that raises noted as the store notes it."""
    state, problems = LoaderState(), []
    for frame in frames:
        for event in frame:
            try:
                state.apply(event)
            except Exception as exc:
                problems.append(f"{event.get('seq')}: {type(exc).__name__}: {exc}")
    return state, problems


def at_once(frames: list[list[dict[str, Any]]]) -> tuple[LoaderState, list[str]]:
    state, problems = LoaderState(), []

    def failed(event: Mapping[str, Any], exc: Exception) -> None:
        problems.append(f"{event.get('seq')}: {type(exc).__name__}: {exc}")

    for frame in frames:
        apply_all(state, frame, failed)
    return state, problems


def assert_same(events: list[dict[str, Any]], sizes: random.Random) -> None:
    frames, start = [], 0
    while start < len(events):
        size = sizes.choice([1, 2, 7, 50, 1000])
        frames.append(events[start:start + size])
        start += size
    reference, said = one_at_a_time(copy.deepcopy(frames))
    batched, told = at_once(frames)
    assert batched == reference
    assert told == said
    assert said_of(batched) == said_of(reference)


def said_of(state: LoaderState) -> Any:
    """The summary and diagnosis, or what they raise on a broken stream (the same, both ways)."""
    try:
        return summary(state), diagnosis(state)
    except Exception as exc:
        return repr(exc)


@pytest.mark.parametrize("name", [scenario.name for scenario in all_scenarios()])
def test_every_scenario_reduces_alike_a_frame_at_once(name: str) -> None:
    scenario = next(s for s in all_scenarios() if s.name == name)
    events = sim.simulate(scenario.plan({}), run_id="batch", scenario=name, params={})
    assert_same(events, random.Random(name))


class Squares(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 60

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((2,), index * index)


def test_a_real_loaders_run_reduces_alike_a_frame_at_once() -> None:
    sink = Frames()
    loader = InstrumentedDataLoader(Squares(), batch_size=2, num_workers=2, sink=sink, run_id="batch")
    for _ in range(2):
        for _ in loader:
            pass
    loader.close()
    events = [event for data in sink.frames for event in expand(orjson.loads(data))]
    assert {"dispatch", "fetch_start", "fetch_end", "arrive", "yield"} <= {e["kind"] for e in events}
    assert_same(events, random.Random(0))


KINDS = ["dispatch", "fetch_start", "fetch_end", "arrive", "parked", "yield", "skip", "pin_start", "pin_end",
         "epoch_start", "worker_start", "error", "worker_died", "custom"]


@st.composite
def streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Events of any kind, in any order, tasks and workers from small ranges (so that they meet), some
    fields missing (a rule then raises) or out of protocol."""
    events: list[dict[str, Any]] = [{"kind": "run_start", "t": 0.0, "mode": "real",
                                     "config": {"num_workers": draw(st.integers(0, 3)), "prefetch_factor": 1,
                                                "in_order": draw(st.booleans())}}]
    for position in range(draw(st.integers(0, 80))):
        event: dict[str, Any] = {"kind": draw(st.sampled_from(KINDS)), "t": position * 0.01,
                                 "idx": draw(st.integers(0, 5)), "worker": draw(st.integers(0, 3))}
        event.update(draw(st.fixed_dictionaries({}, optional={
            "wait": st.sampled_from([0.0, 0.003, -0.0]), "dt": st.sampled_from([None, 0.002]),
            "nbytes": st.sampled_from([None, 0, 12, 7.5]), "pickled": st.sampled_from([None, 3]),
            "from_parked": st.booleans(), "epoch": st.integers(0, 1), "pid": st.integers(1, 9),
            "indices": st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=3)), "n": st.integers(0, 3),
            "type": st.just("ValueError"), "message": st.just("boom"), "pinned": st.booleans()})))
        if draw(st.booleans()):
            event.pop(draw(st.sampled_from(["idx", "worker", "wait", "t"])), None)
        events.append(event)
    for seq, event in enumerate(events):
        event["seq"] = seq
    return events


@pytest.mark.slow
@pytest.mark.timeout(600)  # 100 streams: ~50 s at load 10, three times that under coverage's tracer
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.integers(0, 2**32))
def test_random_streams_reduce_alike_a_frame_at_once(events: list[dict[str, Any]], seed: int) -> None:
    assert_same(events, random.Random(seed))


def test_the_frequent_kinds_rules_are_the_ones_apply_all_was_written_for() -> None:
    """A changed row in contract/rules.py stays correct (the kind goes through its compiled steps), but
    loses the fast path: apply_all must be changed with it."""
    assert {kind.value for kind in _INLINED_RULES} == set(_INLINED)
    assert all(RULES[kind].counts == rule.counts for kind, rule in _INLINED_RULES.items())
