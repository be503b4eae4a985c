"""``scenarios.resolve``: the one place a scenario's parameters are parsed, and the torch-free catalog."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from loaderscope.problems import ParamError, UnknownScenario
from loaderscope.scenarios.catalog import BUILT_INS, get
from loaderscope.scenarios.plan import resolve


def test_good_values_are_typed_and_the_rest_defaulted() -> None:
    plan = resolve("samplers", {"num_workers": "3", "sampler": "distributed", "rank": 1})
    assert plan.name == "samplers" and plan.params.num_workers == 3
    assert plan.values()["sampler"] == "distributed" and plan.values()["world_size"] == 2
    assert plan.with_values({"num_workers": 0}).params.num_workers == 0
    assert resolve("uniform").values() == resolve("uniform", {}).values()


def _problem(name: str, values: dict[str, Any]) -> str:
    with pytest.raises(ParamError) as caught:
        resolve(name, values)
    (problem,) = caught.value.problems
    assert str(caught.value) == str(problem)
    return str(problem)


@pytest.mark.parametrize(("values", "expected"), [
    ({"num_workers": 99}, "num_workers=99: Input should be less than or equal to 64; allowed: an integer from 0 to 64"),
    ({"num_workers": -1},
     "num_workers=-1: Input should be greater than or equal to 0; allowed: an integer from 0 to 64"),
    ({"sample_ms": "fast"}, "sample_ms='fast': Input should be a valid number, unable to parse string as a number; "
                            "allowed: a number from 0 to 5000"),
    ({"in_order": "maybe"}, "in_order='maybe': Input should be a valid boolean, unable to interpret input; "
                            "allowed: true or false"),
    ({"wheels": 4}, "wheels=4: uniform has no parameter 'wheels'; allowed: num_workers, batch_size,"),
])
def test_each_kind_of_bad_value_names_the_field_the_value_and_what_is_allowed(values: dict[str, Any],
                                                                               expected: str) -> None:
    assert _problem("uniform", values).startswith(expected)


def test_choices_and_rules_across_fields_name_the_field_too() -> None:
    assert _problem("samplers", {"sampler": "magic"}).startswith("sampler='magic': Input should be ")
    assert "allowed: one of 'sequential', 'random'" in _problem("samplers", {"sampler": "magic"})
    assert _problem("samplers", {"world_size": 2, "rank": 2}) == (
        "rank=2: rank 2 must be below world_size 2 (ranks count from 0); allowed: an integer from 0 to 63")


def test_an_unknown_scenario_names_the_known_ones() -> None:
    with pytest.raises(UnknownScenario) as caught:
        resolve("nope")
    assert str(caught.value).startswith("scenario='nope': no scenario named 'nope'; allowed: crash_worker, ")
    assert isinstance(caught.value, ParamError)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ParamError) as caught:
        resolve("uniform", {"num_workers": 99, "batch_size": 0})
    assert [p.field for p in caught.value.problems] == ["num_workers", "batch_size"]
    assert len(str(caught.value).splitlines()) == 2


def test_the_command_line_and_the_api_say_the_same(server: Any, tmp_path: Path) -> None:
    with pytest.raises(ParamError) as caught:
        resolve("out_of_order", {"num_workers": 99, "how": "x"})
    message = str(caught.value)
    cli = subprocess.run([sys.executable, "-m", "loaderscope.cli", "run", "out_of_order", "--set", "num_workers=99",
                          "--set", "how=x"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    assert cli.returncode == 2 and cli.stdout == f"error: {message}\n"
    with server.client() as http:
        answer = http.post("/api/runs", json={"scenario": "out_of_order", "params": {"num_workers": 99, "how": "x"}})
    assert answer.status_code == 422 and answer.json()["detail"] == message
    assert [e["field"] for e in answer.json()["errors"]] == ["params.num_workers", "params.how"]


def test_every_built_in_names_a_builder_that_builds() -> None:
    for scenario in BUILT_INS:
        module, _, function = scenario.builder.partition(":")
        assert callable(getattr(__import__(module, fromlist=[function]), function)), scenario.name
    workload = resolve("group_sampler", {"num_workers": 2}).build()
    assert workload.settings.batch_size is None and workload.settings.prefetch_factor == 2


TORCH_FREE = textwrap.dedent("""
    import sys
    from loaderscope import sim
    from loaderscope.cli import main
    from loaderscope.server.runs import manager
    from loaderscope.server.web import api, app, dashboard

    listed = api._describe_scenarios()
    assert {s["name"] for s in listed} >= {"uniform", "samplers", "gpu_step"}, listed
    plan = api._check_run(api.RunRequest(scenario="samplers", mode="sim", params={"num_workers": 2}))
    assert plan.params.num_workers == 2, plan
    refused = api._check_run(api.RunRequest(scenario="uniform", params={"num_workers": 99}))
    assert refused.status_code == 422, refused
    assert len(api._check_sweep(api.SweepRequest(scenario="samplers", grid={"num_workers": [1, 2]}))) == 2
    loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "loaderscope.scenarios.builders",
                                                                            "loaderscope.probe")))
    assert not loaded, loaded
""")


def test_the_server_lists_and_validates_scenarios_without_torch() -> None:
    done = subprocess.run([sys.executable, "-c", TORCH_FREE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_simulator_imports_no_scenario_builder() -> None:
    code = ("import sys, loaderscope.sim; "
            "assert not [m for m in sys.modules if m == 'torch' or m.startswith(('loaderscope.scenarios.builders', "
            "'loaderscope.scenarios.catalog', 'loaderscope.scenarios.plan', 'loaderscope.probe'))]")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_registering_is_the_same_for_built_ins_and_hub_entries() -> None:
    assert all(get(s.name) is s for s in BUILT_INS)
