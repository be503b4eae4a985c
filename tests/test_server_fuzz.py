"""Every HTTP route fuzzed against the app's own OpenAPI (schemathesis): no 5xx, only documented codes.

The fuzzed dashboard may start no run processes (max_active_runs=0): generated parameters within
their bounds (32 workers, 100k samples, 5 s per sample) would otherwise start real loaders. Run
creation is still validated in full before it is refused with the documented 429.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.conftest import LiveServer

schemathesis = pytest.importorskip("schemathesis")
import orjson  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.core.failures import FailureGroup  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance]
# The body of every response against the schema its route documents: kept apart from CHECKS while a
# known gap stands (see test_every_response_matches_its_documented_schema).
SCHEMA_CHECKS = [*CHECKS, response_schema_conformance]
EXAMPLES = int(os.environ.get("LOADERSCOPE_FUZZ_EXAMPLES", "25"))  # per operation


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.conftest import launch

    server = launch(tmp_path_factory.mktemp("fuzzed"), max_active_runs=0)
    with server.connect("/ws/ingest?run=0") as ws:  # hypothesis tries run id "0" first: let it exist
        ws.recv(timeout=5)
        ws.send(orjson.dumps([{"kind": "run_start", "t": 0, "mode": "real", "config": {}},
                              {"kind": "epoch_start", "t": 0, "epoch": 0}]))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api_schema(fuzzed: LiveServer) -> Any:
    return schemathesis.openapi.from_url(f"{fuzzed.url}/api/openapi.json", headers=fuzzed.headers)


def fuzz(api_schema: Any, fuzzed: LiveServer, checks: list[Any]) -> None:
    """Every operation, EXAMPLES generated cases each, through ``checks``."""
    # Driven by hand: schemathesis' pytest plugin does not run under pytest 9.
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 7
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            case.call_and_validate(base_url=fuzzed.url, headers=fuzzed.headers, checks=checks)

        check()


def test_no_route_answers_5xx_or_undocumented_codes(api_schema: Any, fuzzed: LiveServer) -> None:
    fuzz(api_schema, fuzzed, CHECKS)


@pytest.mark.xfail(strict=True, raises=FailureGroup,
                   reason="the 422 body is {detail: str, errors: [...]} (server/api.py), but the OpenAPI document "
                          "declares FastAPI's HTTPValidationError (detail: a list); strict: passes once it is documented")
def test_every_response_matches_its_documented_schema(api_schema: Any, fuzzed: LiveServer) -> None:
    fuzz(api_schema, fuzzed, SCHEMA_CHECKS)


def test_a_response_off_its_documented_schema_fails_the_check(api_schema: Any, fuzzed: LiveServer) -> None:
    """The schema check can fail: the health answer as served passes, a wrong-typed one does not."""
    import httpx

    case = api_schema["/api/health"]["GET"].Case()
    served = httpx.get(f"{fuzzed.url}/api/health")
    case.validate_response(served, checks=SCHEMA_CHECKS)
    wrong = httpx.Response(200, json={"status": 1}, request=served.request)
    wrong.read()
    wrong.elapsed = served.elapsed
    with pytest.raises(FailureGroup, match="violates schema"):
        case.validate_response(wrong, checks=SCHEMA_CHECKS)


@st.composite
def run_requests(draw: Any, described: list[dict[str, Any]]) -> dict[str, Any]:
    """Scenario parameters near and past their bounds, of the right type and of wrong ones."""
    scenario = draw(st.sampled_from(described))
    names = sorted(scenario["params"])
    chosen = draw(st.lists(st.sampled_from([*names, "bogus"]), max_size=4, unique=True))
    params = {name: draw(_value(scenario["params"].get(name, {}))) for name in chosen}
    return {"scenario": scenario["name"], "mode": draw(st.sampled_from(["real", "sim", "warp"])), "params": params}


def _value(prop: dict[str, Any]) -> Any:
    low, high = prop.get("minimum", -10), prop.get("maximum", 10)
    edges = st.sampled_from([low, high, low - 1, high + 1, high * 10])
    wrong = st.one_of(st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2), st.booleans())
    if prop.get("type") in ("integer", "number"):
        return st.one_of(edges, st.integers(low, high), wrong)
    if "enum" in prop:
        return st.one_of(st.sampled_from(prop["enum"]), wrong)
    return st.one_of(st.booleans(), wrong)


def test_run_parameters_are_accepted_or_refused_by_name(fuzzed: LiveServer) -> None:
    with fuzzed.client() as http:
        described = http.get("/api/scenarios").json()

        @given(body=run_requests(described))
        @settings(max_examples=EXAMPLES * 4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(body: dict[str, Any]) -> None:
            answer = http.post("/api/runs", json=body)
            assert answer.status_code in (422, 429), answer.text  # 429: valid, but this server runs nothing
            if answer.status_code == 422:
                fields = {p["field"] for p in answer.json()["errors"]}
                assert fields <= {"mode", *(f"params.{name}" for name in body["params"])}, (body, fields)
                assert answer.json()["detail"]

        check()


def test_the_schema_documents_every_route(fuzzed: LiveServer) -> None:
    import httpx

    paths = httpx.get(f"{fuzzed.url}/api/openapi.json", headers=fuzzed.headers).json()["paths"]
    for path in ("/api/health", "/api/scenarios", "/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/control",
                 "/api/runs/{run_id}/events", "/api/runs/{run_id}/trace"):
        assert path in paths, path
