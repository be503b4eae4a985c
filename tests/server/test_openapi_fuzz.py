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
SCHEMA_CHECKS = [*CHECKS, response_schema_conformance]  # every body against the schema its route documents
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


# --- producers: frames and meta messages (Hypothesis) -------------------------------------------------

INTS = st.integers(-(2**63), 2**64 - 1)  # what JSON encoders write
NUMBERS = st.one_of(INTS, st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([2**53, 2**53 + 1, 2**64 - 1, -1, 1.7e308, -1.7e308]))
VALUES = st.one_of(NUMBERS, st.booleans(), st.none(), st.text(max_size=20), st.lists(INTS, max_size=3))
KINDS = st.sampled_from(["run_start", "dispatch", "fetch_start", "fetch_end", "arrive", "yield", "step",
                         "worker_stuck", "mystery", "", "run_end"])
FIELDS = st.sampled_from(["seq", "t", "idx", "worker", "epoch", "wait", "dt", "elapsed", "rank", "mode",
                          "config", "reason", "batch", "nbytes", "stack"])
EVENTS = st.builds(lambda kind, fields: {"kind": kind, **fields}, KINDS, st.dictionaries(FIELDS, VALUES, max_size=6))
ROWS = st.lists(st.one_of(
    st.tuples(st.just("batch"), NUMBERS, NUMBERS, NUMBERS, NUMBERS, NUMBERS, NUMBERS, VALUES).map(list),
    st.tuples(st.sampled_from(["yield", "dispatch", "mystery"]), NUMBERS, VALUES, VALUES).map(list),
    VALUES), max_size=5)
MESSAGES = st.one_of(
    st.lists(EVENTS, max_size=5),
    st.builds(lambda rows, seq, t0: {"rows": rows, "seq": seq, "t0": t0}, ROWS, NUMBERS, NUMBERS),
    st.builds(lambda kind, count: {"type": kind, "count": count, "error": count},
              st.sampled_from(["dropped", "failed", "takeover"]), VALUES),
    VALUES,
)
VALID_CLOSES = {1000, 1007, 1008, 1009, 1013} | set(range(4000, 5000))


def test_any_frame_or_meta_message_is_taken_or_refused_with_a_valid_close(fuzzed: LiveServer) -> None:
    """Whatever a producer sends: kept, or its connection closed with a valid code and a reason; the
    run, its viewers and every route go on answering."""
    import httpx
    from websockets.exceptions import ConnectionClosed

    with fuzzed.client() as http:

        @given(messages=st.lists(MESSAGES, min_size=1, max_size=4))
        @settings(max_examples=EXAMPLES * 2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(messages: list[Any]) -> None:
            with fuzzed.connect("/ws/ingest") as ws:
                run_id = orjson.loads(ws.recv(timeout=5))["run"]
                try:
                    for message in messages:
                        ws.send(orjson.dumps(message, option=orjson.OPT_NON_STR_KEYS))
                    ws.send(orjson.dumps({"type": "dropped", "count": 0}))
                    _read_or_closed(ws)
                except ConnectionClosed as closed:
                    assert closed.rcvd is not None and closed.rcvd.code in VALID_CLOSES, closed
                    assert closed.rcvd.code == 1000 or closed.rcvd.reason
            for path in (f"/api/runs/{run_id}", f"/api/runs/{run_id}/events", "/api/runs"):
                assert http.get(path).status_code == 200, path
            with fuzzed.connect(f"/ws/runs/{run_id}") as viewer:
                assert orjson.loads(viewer.recv(timeout=5))["type"] == "hello"
            assert httpx.get(f"{fuzzed.url}/api/health").status_code == 200

        check()


def _read_or_closed(ws: Any, timeout: float = 10) -> None:
    """Returns once the server has read everything sent so far (a ping answered); raises
    ConnectionClosed, with the server's close frame, if it closed the connection instead."""
    import time

    from websockets.protocol import State

    pong, deadline = ws.ping(), time.monotonic() + timeout
    while not pong.wait(0.02):
        if ws.protocol.state is not State.OPEN:
            ws.recv(timeout=1)  # raises ConnectionClosed
        assert time.monotonic() < deadline, "the server neither read nor closed"
