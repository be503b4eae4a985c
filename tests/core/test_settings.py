"""``settings.LoaderSettings``: one record of the loader's settings, its bounds and torch's defaults,
shared by the scenarios, the real loader, the simulator and the reducer."""

from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from torch.utils.data import DataLoader

from loaderscope.contract.loader import TORCH_PREFETCH_FACTOR
from loaderscope.events import Kind
from loaderscope.model.state import LoaderState
from loaderscope.problems import ParamError
from loaderscope.runner import Collector, run_plan
from loaderscope.scenarios.params import CommonParams
from loaderscope.scenarios.plan import resolve
from loaderscope.settings import LoaderSettings, check, max_tasks, table
from loaderscope.sim import replay_grid, simulate
from loaderscope.traces.jsonl import write_trace


def test_the_defaults_are_torchs() -> None:
    signature = inspect.signature(DataLoader.__init__).parameters
    for name, default in asdict(LoaderSettings()).items():
        assert default == signature[name].default, name
    assert DataLoader(range(4), num_workers=1).prefetch_factor == TORCH_PREFETCH_FACTOR
    assert LoaderSettings(num_workers=1).prefetch_factor == TORCH_PREFETCH_FACTOR


def test_the_record_is_always_a_call_torch_accepts() -> None:
    # torch raises for prefetch_factor or persistent_workers without workers: the record clears them.
    settings = LoaderSettings(num_workers=0, batch_size=2, prefetch_factor=4, persistent_workers=True)
    assert settings.prefetch_factor is None and not settings.persistent_workers
    assert len(list(DataLoader(range(4), **settings.kwargs()))) == 2
    assert LoaderSettings(num_workers=2, batch_size=None).kwargs().keys() == {
        "num_workers", "timeout", "pin_memory", "prefetch_factor", "persistent_workers"}
    # in_order only when it is not torch's default: torch 2.4 and 2.5 have no such argument
    assert LoaderSettings(num_workers=2, in_order=False).kwargs()["in_order"] is False
    swept = LoaderSettings(num_workers=0).with_values({"num_workers": 3})
    assert swept.prefetch_factor == TORCH_PREFETCH_FACTOR
    assert DataLoader(range(4), **swept.kwargs()).prefetch_factor == swept.prefetch_factor


def test_a_recording_reads_back_as_the_record_that_made_it() -> None:
    settings = LoaderSettings(num_workers=3, batch_size=None, prefetch_factor=5, in_order=False)
    assert LoaderSettings.from_config(settings.config() | {"dataset_kind": "map"}) == settings


def test_a_recorded_loader_beyond_a_requests_bounds_replays_as_it_ran() -> None:
    recorded = LoaderSettings.from_config({"num_workers": 96, "batch_size": 4096, "prefetch_factor": 32})
    assert (recorded.num_workers, recorded.batch_size, recorded.prefetch_factor) == (96, 4096, 32)
    swept = recorded.with_values({"num_workers": "8"})  # what is changed is checked; the rest is kept
    assert (swept.num_workers, swept.batch_size, swept.prefetch_factor) == (8, 4096, 32)
    with pytest.raises(ParamError, match="prefetch_factor=64: Input should be less than or equal to 16"):
        recorded.with_values({"prefetch_factor": 64})


@pytest.mark.parametrize(("values", "expected"), [
    ({"prefetch_factor": 64}, "prefetch_factor=64: Input should be less than or equal to 16; "
                              "allowed: an integer from 1 to 16"),
    ({"prefetch_factor": 0}, "prefetch_factor=0: Input should be greater than or equal to 1; "
                             "allowed: an integer from 1 to 16"),
    ({"num_workers": 65}, "num_workers=65: Input should be less than or equal to 64; allowed: an integer from 0 to 64"),
    ({"timeout": -1}, "timeout=-1: Input should be greater than or equal to 0; allowed: a number from 0 to 600"),
    ({"in_order": "maybe"}, "in_order='maybe': Input should be a valid boolean, unable to interpret input; "
                            "allowed: true or false"),
    ({"workers": 2}, "workers=2: 'workers' is not a DataLoader setting; allowed: num_workers, batch_size,"),
])
def test_a_bad_value_names_the_setting_the_bound_and_what_is_allowed(values: dict[str, Any], expected: str) -> None:
    with pytest.raises(ParamError) as caught:
        check(values)
    assert str(caught.value).startswith(expected)


def test_a_scenario_refuses_a_setting_in_the_records_words() -> None:
    for values in ({"prefetch_factor": 64}, {"num_workers": 65}, {"timeout": -1}):
        with pytest.raises(ParamError) as by_record:
            check(values)
        with pytest.raises(ParamError) as by_scenario:
            resolve("uniform", values)
        assert str(by_scenario.value) == str(by_record.value)


def test_the_table_is_plain_data_and_the_scenarios_bounds_are_its_own() -> None:
    rows = table()
    assert orjson.loads(orjson.dumps(rows)) == rows
    assert [row["name"] for row in rows] == list(asdict(LoaderSettings()))
    by_name = {row["name"]: row for row in rows}
    assert by_name["prefetch_factor"] | {"description": ""} == {
        "name": "prefetch_factor", "type": "integer", "default": None, "min": 1, "max": 16, "sweepable": True,
        "nullable": True, "description": ""}
    assert {name for name, row in by_name.items() if row["sweepable"]} == {
        "num_workers", "prefetch_factor", "persistent_workers", "in_order", "pin_memory"}
    params = CommonParams.model_json_schema()["properties"]
    for row in rows:
        assert (params[row["name"]].get("minimum"), params[row["name"]].get("maximum")) == (row["min"], row["max"])
        assert params[row["name"]]["type"] == row["type"]


def test_a_replay_grid_is_checked_with_the_records_bounds() -> None:
    assert replay_grid({"num_workers": ["2", 4], "transfer_ms": [1]}) == {"num_workers": [2, 4], "transfer_ms": [1.0]}
    with pytest.raises(ParamError) as caught:
        replay_grid({"prefetch_factor": [2, 64], "batch_size": [8], "transfer_ms": [-1]})
    assert [p.field for p in caught.value.problems] == ["prefetch_factor", "batch_size", "transfer_ms"]
    assert str(caught.value).splitlines()[0] == ("prefetch_factor=64: Input should be less than or equal to 16; "
                                                 "allowed: an integer from 1 to 16")


def test_the_command_line_refuses_a_replays_setting_in_the_same_words(tmp_path: Path) -> None:
    plan = resolve("uniform", {"num_workers": 2, "dataset_size": 16})
    events = simulate(plan.build(), run_id="own", scenario="", params={})
    events[0]["scenario"] = None  # a loader of the user's own: replayed, not rebuilt as a scenario
    trace = write_trace(tmp_path / "own.trace.jsonl", events, "own")
    done = subprocess.run([sys.executable, "-m", "loaderscope.cli", "sim", "--from-trace", str(trace),
                           "--sweep", "prefetch_factor=2,64"], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    with pytest.raises(ParamError) as caught:
        check({"prefetch_factor": 64})
    assert done.returncode == 2 and done.stdout == f"error: {caught.value}\n"


def _most_in_flight(events: list[dict[str, Any]]) -> int:
    outstanding = most = 0
    for event in events:
        outstanding += {Kind.DISPATCH: 1, Kind.ARRIVE: -1}.get(event["kind"], 0)
        most = max(most, outstanding)
    return most


@pytest.mark.parametrize("workers", [0, 3])
def test_the_real_loader_and_the_simulator_given_one_record_agree(workers: int) -> None:
    # No prefetch_factor asked of the record: both run with torch's default, and the reducer agrees.
    plan = resolve("uniform", {"num_workers": workers, "dataset_size": 48, "sample_ms": 4.0, "step_ms": 1.0})
    workload = plan.build()
    settings = LoaderSettings(**{k: v for k, v in asdict(workload.settings).items() if k != "prefetch_factor"})
    assert settings == workload.settings
    real = Collector()
    run_plan(plan, real)
    simulated = simulate(workload, run_id="sim", scenario=plan.name, params=plan.values())
    real_config, sim_config = real.events[0]["config"], simulated[0]["config"]
    assert {k: real_config[k] for k in settings.config()} == {k: sim_config[k] for k in settings.config()} == \
        settings.config()
    window = LoaderState()
    window.apply(real.events[0])
    assert window.window == settings.max_tasks == (workers * TORCH_PREFETCH_FACTOR or 1)
    if workers:  # torch primes prefetch_factor × num_workers tasks and never has more in flight
        assert _most_in_flight(real.events) == _most_in_flight(simulated) == settings.max_tasks


def test_the_reducer_reads_a_missing_prefetch_factor_as_torchs_default() -> None:
    state = LoaderState()
    state.config = {"num_workers": 3, "prefetch_factor": None}
    assert state.window == max_tasks(3, None) == 3 * TORCH_PREFETCH_FACTOR
    state.config = {"num_workers": 0}
    assert state.window == max_tasks(0, None) == 1
