"""Property and state-machine tests: random loader configurations keep the protocol's invariants."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from loaderscope.model.state import LoaderState
from loaderscope.sim import CostModel, SampleDist, Simulator, TaskCosts
from tests.core.sim_helpers import make_config, problems, run_core

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw: st.DrawFn) -> dict:
    workers = draw(st.integers(0, 8))
    kind = draw(st.sampled_from(["map", "iterable"]))
    size = draw(st.integers(1, 60))
    shards = None
    if kind == "iterable" and workers:
        shards = draw(st.lists(st.integers(0, 20), min_size=workers, max_size=workers))
    return {
        "num_workers": workers,
        "prefetch_factor": draw(st.integers(1, 4)),
        "in_order": draw(st.booleans()),
        "persistent_workers": draw(st.booleans()) if workers else False,
        "drop_last": draw(st.booleans()),
        "kind": kind,
        "size": size,
        "batch_size": draw(st.integers(1, 8)),
        "epochs": draw(st.integers(1, 3)),
        "shards": shards,
        "shuffle_seed": draw(st.none() | st.integers(0, 5)),
    }


@st.composite
def cost_models(draw: st.DrawFn) -> CostModel:
    dist = draw(st.sampled_from(["constant", "normal", "lognormal", "exponential"]))
    return CostModel(
        sample=SampleDist(dist=dist, mean_ms=draw(st.floats(0, 5)), sd_ms=draw(st.floats(0, 5))),
        collate_ms=draw(st.sampled_from([0.0, 1.0])),
        worker_factor={0: draw(st.sampled_from([1.0, 3.0]))},
        step_ms=draw(st.sampled_from([0.0, 2.0, 10.0])),
        pin_ms_per_mb=draw(st.sampled_from([0.0, 1000.0])),
        startup_ms=draw(st.sampled_from([0.0, 5.0])),
        spawn_ms=draw(st.sampled_from([0.0, 2.0])),
        transfer_ms=draw(st.sampled_from([0.0, 1.0])),
        get_ms=draw(st.sampled_from([0.0, 0.5])),
    )


def _expected_samples(cfg: dict) -> int:
    """Samples the training loop should see over the run."""
    if cfg["kind"] == "map":
        full, rest = divmod(cfg["size"], cfg["batch_size"])
        per_epoch = full * cfg["batch_size"] + (0 if cfg["drop_last"] else rest)
        return per_epoch * cfg["epochs"]
    shards = cfg["shards"] if cfg["shards"] is not None else [cfg["size"]] * max(cfg["num_workers"], 1)
    batch = cfg["batch_size"]
    kept = sum((s // batch) * batch + (0 if cfg["drop_last"] else s % batch) for s in shards)
    return kept * cfg["epochs"]


@FAST
@given(configs(), cost_models(), st.integers(0, 3))
def test_random_configurations_keep_the_invariants(cfg: dict, costs: CostModel, seed: int) -> None:
    events = run_core(make_config(**cfg), costs, seed=seed)
    assert problems(events) == []
    assert events[-1]["reason"] == "done"
    yields = [e for e in events if e["kind"] == "yield"]
    bytes_by_task = {(e["epoch"], e["idx"]): e["nbytes"] for e in events if e["kind"] == "fetch_end"}
    # Every sample reaches the training loop exactly as torch would deliver it: none lost, none twice.
    assert sum(bytes_by_task[(e["epoch"], e["idx"])] for e in yields) == 32 * _expected_samples(cfg)
    if cfg["in_order"]:
        for epoch in range(cfg["epochs"]):
            order = [e["idx"] for e in yields if e["epoch"] == epoch]
            assert order == sorted(order)


@FAST
@given(configs(), cost_models())
def test_same_inputs_give_the_same_events(cfg: dict, costs: CostModel) -> None:
    assert run_core(make_config(**cfg), costs, seed=7) == run_core(make_config(**cfg), costs, seed=7)


class SteppedSimulation(RuleBasedStateMachine):
    """Advance a simulation in random slices of virtual time; the state stays sound after every slice,
    and the slices together are exactly the run that ``run()`` produces in one go."""

    @initialize(cfg=configs(), costs=cost_models())
    def start(self, cfg: dict, costs: CostModel) -> None:
        self.cfg = make_config(**cfg)
        self.costs = costs
        self.sim = Simulator(self.cfg, TaskCosts(costs, lambda i, w: 0.002, 0.0, random.Random(1)))
        self.events: list = []
        self.state = LoaderState()
        self.until = 0.0

    @rule(dt=st.floats(0, 0.05))
    def advance(self, dt: float) -> None:
        self.until += dt
        new = self.sim.advance(self.until)
        assert all(e["t"] <= self.until for e in new)
        for event in new:
            self.state.apply(event)
        self.events.extend(new)

    @invariant()
    def sound(self) -> None:
        if not hasattr(self, "state"):
            return
        assert not self.state.violations
        assert self.state.rcvd_idx <= self.state.send_idx
        assert self.state.outstanding <= self.state.window
        assert problems(self.events, complete=False) == []

    def teardown(self) -> None:
        if not hasattr(self, "sim"):
            return
        self.events.extend(self.sim.advance(None))
        fresh = Simulator(self.cfg, TaskCosts(self.costs, lambda i, w: 0.002, 0.0, random.Random(1))).run()
        assert self.events == fresh
        assert problems(self.events) == []


TestSteppedSimulation = SteppedSimulation.TestCase
TestSteppedSimulation.settings = settings(max_examples=30, stateful_step_count=12, deadline=None)
