"""The ◆ REST routes: health, scenarios, runs, controls, events and traces."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import threading
from collections.abc import AsyncIterator, Iterator
from typing import IO, TYPE_CHECKING, Any, Literal

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loaderscope.events import MAX_NUMBER
from loaderscope.problems import ParamError, UnknownScenario
from loaderscope.scenarios.catalog import all_scenarios
from loaderscope.scenarios.plan import Plan, resolve
from loaderscope.server.budgets import PAGE_BYTES
from loaderscope.server.offloop import in_daemon_thread
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.run import Run, RunRefused
from loaderscope.server.runs.store import EventLog, Gap, Spill
from loaderscope.server.web.errors import field_problems, readable, type_problems
from loaderscope.sim.sweep import MAX_SWEEP_EVENTS
from loaderscope.traces import jsonl as trace
from loaderscope.version import __version__

if TYPE_CHECKING:
    from loaderscope.sim import Variant

MAX_EVENTS_PER_REQUEST = 10_000
MAX_CHROME_EVENTS = 2_000_000  # ~2 s of conversion each; beyond this, `loaderscope export` on the jsonl file
MAX_EXPORTS = 2  # Chrome conversions at once (each streams, but costs a core while it runs)
EXPORT_BLOCK = 10_000  # events read from the trace file per step of a Chrome export
STREAM_CHUNK = 1 << 20

router = APIRouter(prefix="/api")


class RunRequest(BaseModel):
    """POST /api/runs: which scenario, how, with which parameters (checked against the scenario)."""

    model_config = ConfigDict(extra="forbid")
    scenario: str = Field(..., min_length=1, max_length=100, description="a name from GET /api/scenarios")
    mode: Literal["real", "sim"] = Field("real", description="real DataLoader, or the simulator")
    params: dict[str, Any] = Field(default_factory=dict, description="the scenario's parameters")
    costs: dict[str, Any] | None = Field(None, description="mode 'sim' only: the simulator's cost model "
                                         "(loaderscope.sim.CostModel fields)")


class ControlRequest(BaseModel):
    """POST /api/runs/{id}/control: an action, a playback delay, or both.

    ``inspect`` asks the run's workers to describe their next batch with a few values of each leaf.
    """

    model_config = ConfigDict(extra="forbid")
    action: Literal["pause", "resume", "step", "stop", "inspect"] | None = None
    delay: float | None = Field(None, ge=0, le=10, description="extra seconds per batch so a human can follow")

    @model_validator(mode="after")
    def _something(self) -> ControlRequest:
        if self.action is None and self.delay is None:
            raise ValueError("send an 'action' (pause, resume, step, stop, inspect) or a 'delay' in seconds")
        return self


def manager_of(request: Request) -> RunManager:
    manager: RunManager = request.app.state.manager
    return manager


def refused(_: Request, exc: Exception) -> JSONResponse:
    """Every route's answer to a RunRefused (404 unknown run, 409, 429, 503), installed on the app."""
    assert isinstance(exc, RunRefused)
    return JSONResponse({"detail": exc.message}, status_code=exc.status)


async def whole_run(manager: RunManager, run_id: str) -> Run:
    """The run, with a logdir run's file read to its end first (raises RunRefused)."""
    run = manager.require(run_id)
    await manager.read_whole(run)
    return run


def unprocessable(problems: list[dict[str, Any]], detail: str | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail or readable(problems), "errors": problems}, status_code=422)


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok", "version": __version__}


@router.get("/scenarios")
async def list_scenarios() -> list[dict[str, Any]]:
    return _describe_scenarios()


@functools.cache
def _describe_scenarios() -> list[dict[str, Any]]:
    # The catalog is fixed once the server runs (torch.hub entries register before it starts).
    return [s.describe() for s in all_scenarios()]


@router.post("/runs", status_code=201, responses={422: {}, 429: {}, 503: {}})
async def create_run(body: RunRequest, request: Request) -> Any:
    checked = _check_run(body)
    if isinstance(checked, JSONResponse):
        return checked
    run = await manager_of(request).start(checked, body.mode, costs=body.costs)
    return JSONResponse(run.detail(), status_code=201)


def rejected(exc: ParamError, prefix: str) -> JSONResponse:
    """422 with the ParamError's own words (the command line's), and its problems by request field."""
    scope = "" if isinstance(exc, UnknownScenario) else prefix
    problems = [{"field": scope + p.field, "message": p.message, "allowed": p.allowed} for p in exc.problems]
    return unprocessable(problems, str(exc))


def _check_run(body: RunRequest) -> Plan | JSONResponse:
    """The resolved plan (torch-free), or the 422 that says what is wrong with the request."""
    try:
        plan = resolve(body.scenario, body.params)
    except ParamError as exc:
        return rejected(exc, "params.")
    mistyped = _mistyped(body.scenario, body.params, "params.")  # what resolving would have coerced
    if mistyped:
        return unprocessable(mistyped)
    if body.mode == "sim" and not sim_available():
        return unprocessable([{"field": "mode", "message": "the simulator is not available in this installation; "
                               "use mode 'real'", "allowed": "'real'"}])
    if body.costs is not None:
        if body.mode != "sim":
            return unprocessable([{"field": "costs", "message": "a cost model only applies to simulated runs "
                                   "(mode 'sim')", "allowed": None}])
        from loaderscope.sim import CostModel

        mistyped = type_problems(body.costs, CostModel.model_json_schema()["properties"], "costs.")
        if mistyped:
            return unprocessable(mistyped)
        try:
            CostModel.model_validate(body.costs)
        except ValidationError as exc:
            return unprocessable(field_problems(exc.errors(), CostModel, prefix="costs."))
    return plan


def _mistyped(scenario: str, params: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """JSON is typed: over HTTP ``"4"`` and ``true`` are not integers (the command line's text is parsed)."""
    described = next((s for s in _describe_scenarios() if s["name"] == scenario), None)
    return type_problems(params, described["params"] if described else {}, prefix)


def sim_available() -> bool:
    try:
        from loaderscope import sim
    except ImportError:
        return False
    return callable(getattr(sim, "simulate", None))


class SweepRequest(BaseModel):
    """POST /api/sweeps: simulate a scenario over a small grid of parameters (what-if)."""

    model_config = ConfigDict(extra="forbid")
    scenario: str = Field(..., min_length=1, max_length=100, description="a name from GET /api/scenarios")
    params: dict[str, Any] = Field(default_factory=dict, description="the scenario's parameters (the base)")
    grid: dict[str, list[Any]] = Field(..., description="parameter (or cost-model field) -> values to try")
    costs: dict[str, Any] | None = Field(None, description="the simulator's cost model")


MAX_SWEEP_RUNS = 36  # combinations per sweep: each is a whole simulated run
_sweeping = asyncio.Semaphore(1)  # one sweep at a time: they are CPU-bound


@router.get("/sim/costs")
async def sim_costs() -> dict[str, Any]:
    """The simulator's cost model as JSON schema (fields, types, bounds), for the page's form."""
    from loaderscope.sim import CostModel

    return CostModel.model_json_schema()


@router.post("/sweeps", responses={413: {}, 422: {}, 429: {}})
async def create_sweep(body: SweepRequest) -> Any:
    """Rows of batches/s, input-bound share, buffer high-water and worker use per combination,
    and the recommendation (the smallest num_workers that keeps the consumer fed)."""
    checked = _check_sweep(body)
    if isinstance(checked, JSONResponse):
        return checked
    async with sweep_slot() as free:
        if not free:
            return JSONResponse({"detail": "a sweep is already running; try again when it ends"}, status_code=429)
        # builds torch samplers and simulates: CPU-bound, off the event loop
        return await in_daemon_thread(_sweep, checked)


@contextlib.asynccontextmanager
async def sweep_slot() -> AsyncIterator[bool]:
    """One sweep at a time, scenario or run (they are CPU-bound): False, at once, while one runs."""
    if _sweeping.locked():
        yield False
        return
    async with _sweeping:
        yield True


def _check_sweep(body: SweepRequest) -> list[Variant] | JSONResponse:
    """Every combination, resolved and checked (torch-free), or the 422 that says what is wrong."""
    from loaderscope import sim

    combinations = math.prod(max(len(values), 1) for values in body.grid.values())
    if not body.grid or combinations > MAX_SWEEP_RUNS:  # before anything else: a grid may hold millions of values
        return unprocessable([{"field": "grid", "message": f"give 1 to {MAX_SWEEP_RUNS} combinations "
                               f"(got {combinations})", "allowed": None}])
    try:
        plan = resolve(body.scenario, body.params)
    except ParamError as exc:
        return rejected(exc, "params.")
    cost_fields = sim.CostModel.model_json_schema()["properties"]
    mistyped = (_mistyped(body.scenario, body.params, "params.") + _mistyped_grid(body, cost_fields)
                + type_problems(body.costs or {}, cost_fields, "costs."))
    if mistyped:
        return unprocessable(mistyped)
    try:
        costs = sim.CostModel.model_validate(body.costs or {})
    except ValidationError as exc:
        return unprocessable(field_problems(exc.errors(), sim.CostModel, prefix="costs."))
    try:
        chosen = sim.variants(plan, body.grid, costs)
    except ParamError as exc:
        return rejected(exc, "grid.")
    return _within_budget(chosen)


def _mistyped_grid(body: SweepRequest, costs: dict[str, Any]) -> list[dict[str, Any]]:
    """Each swept value typed as its parameter or cost field takes it, named ``grid.KEY``."""
    problems = []
    for key, values in body.grid.items():
        for value in values:
            found = _mistyped(body.scenario, {key: value}, "grid.") if key not in costs else \
                type_problems({key: value}, costs, "grid.")
            if found:
                problems += found
                break
    return problems


def _within_budget(chosen: list[Variant]) -> list[Variant] | JSONResponse:
    """413 when the combinations together would simulate more than MAX_SWEEP_EVENTS events."""
    total = sum(_events_of(variant) for variant in chosen)
    if total <= MAX_SWEEP_EVENTS:
        return chosen
    return JSONResponse({"detail": f"this sweep would simulate about {total:,} events, "
                         f"more than the {MAX_SWEEP_EVENTS:,} one sweep may: sweep fewer combinations, "
                         "a smaller dataset_size or fewer epochs"},
                        status_code=413)


def _events_of(variant: Variant) -> int:
    """About five events per batch (dispatch, fetch start and end, arrival, yield) per epoch."""
    params = variant.plan.values()
    samples = params.get("num_samples") or params.get("dataset_size") or 0
    batch = max(1, params.get("batch_size") or 1)
    return 5 * -(-int(samples) // batch) * max(1, int(params.get("epochs") or 1))


def _sweep(chosen: list[Variant]) -> dict[str, Any]:
    from loaderscope import sim

    rows = sim.simulate_variants(chosen)
    return {"rows": rows, "recommendation": sim.recommend(rows)}


@router.get("/runs")
async def list_runs(request: Request) -> list[dict[str, Any]]:
    return [run.brief() for run in manager_of(request).listed()]


@router.get("/runs/{run_id}", responses={404: {}})
async def get_run(run_id: str, request: Request) -> Any:
    manager = manager_of(request)
    detail = manager.opened(manager.require(run_id)).detail()
    # orjson writes a non-finite number as null where the standard encoder would fail the request
    return Response(orjson.dumps(detail, option=orjson.OPT_NON_STR_KEYS), media_type="application/json")


@router.post("/runs/{run_id}/control", responses={404: {}, 409: {}})
async def control_run(run_id: str, body: ControlRequest, request: Request) -> Any:
    manager = manager_of(request)
    run = manager.require(run_id)
    await manager.control(run, body.action, body.delay)
    return JSONResponse(run.brief())


@router.get("/runs/{run_id}/events", responses={404: {}})
async def run_events(
    run_id: str,
    request: Request,
    after: int = Query(-1, ge=-1, le=MAX_NUMBER, description="the last seq already seen (-1: from the start)"),
    limit: int = Query(1000, ge=1, le=MAX_EVENTS_PER_REQUEST, description="most events returned"),
) -> Any:
    """Events ``after+1 ..`` in seq order, with ``gap`` naming any requested ones no longer held.

    A page holds at most ``limit`` events and about PAGE_BYTES (4 MiB, at least one event): when
    ``more`` is true, ask again with ``after=next_after``.
    """
    manager = manager_of(request)
    run = await whole_run(manager, run_id)
    lines, gap = await read_events(run.log, after + 1, limit)
    start = max(after + 1, gap.last + 1 if gap else after + 1)
    next_after = start + len(lines) - 1 if lines else (gap.last if gap else after)
    meta = {"run": run.id, "after": after, "last_seq": run.log.last_seq, "status": run.status,
            "gap": gap.meta("not held by the store") if gap else None,
            "next_after": next_after, "more": next_after < run.log.last_seq}
    body = orjson.dumps(meta)[:-1] + b',"events":[' + b",".join(lines) + b"]}"
    return Response(body, media_type="application/json")


async def read_events(log: EventLog, start: int, limit: int) -> tuple[list[bytes], Gap | None]:
    """EventLog.read: from memory on the loop; from the trace file (blocking) in a worker thread."""
    if log.in_memory(max(start, log.first_held)):
        return log.read(start, limit, PAGE_BYTES)
    if log.spill is None:  # the trace file failed since first_held was read
        return [], Gap(start, log.first_held - 1)
    log.flush()
    return await asyncio.to_thread(log.read, start, limit, PAGE_BYTES)


TRACE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "jsonl: the trace file (header line, then one event per line); chrome: trace-event JSON",
          "content": {"application/x-ndjson": {}, "application/json": {}}},
    404: {}, 410: {}, 413: {}, 429: {},
}


@router.get("/runs/{run_id}/trace", responses=TRACE_RESPONSES)
async def run_trace(
    run_id: str, request: Request, format: Literal["jsonl", "chrome"] = Query("jsonl"),
) -> Any:
    manager = manager_of(request)
    run = await whole_run(manager, run_id)
    if run.log.first_held > 0:
        return JSONResponse({"detail": f"this dashboard keeps runs in memory only and no longer holds events "
                             f"0..{run.log.first_held - 1}; serve with a data directory to record complete traces"},
                            status_code=410)
    if format == "chrome":
        return await _chrome_trace(run)
    disposition = {"content-disposition": f'attachment; filename="{run.id}.trace.jsonl"'}
    spill = run.log.spill
    if spill is not None:
        run.log.flush()
        try:  # opened before the answer starts: a file gone (or turned into a bad link) is said, not cut off
            handle = await asyncio.to_thread(spill.open)
        except OSError as exc:
            return _unreadable(run, exc)
        return StreamingResponse(_file_bytes(handle, spill.flushed_bytes), media_type="application/x-ndjson",
                                 headers=disposition)
    return Response(_memory_trace(run), media_type="application/x-ndjson", headers=disposition)


def _unreadable(run: Run, exc: OSError) -> JSONResponse:
    return JSONResponse({"detail": f"the trace file of run {run.id} cannot be read now: {exc.strerror or exc}"},
                        status_code=410)


async def _chrome_trace(run: Run) -> Response:
    """The run as Chrome trace-event JSON (Perfetto, chrome://tracing), streamed as it is converted:
    an export holds one block of events at a time, whatever the run's size."""
    count = run.log.next_seq
    if count > MAX_CHROME_EVENTS:
        return JSONResponse({"detail": f"run {run.id} has {count} events, more than the {MAX_CHROME_EVENTS} the "
                             "dashboard converts; download format=jsonl and run `loaderscope export FILE --format "
                             "chrome`"}, status_code=413)
    if _exports.running >= MAX_EXPORTS:
        return JSONResponse({"detail": f"{MAX_EXPORTS} Chrome exports are already running; try again when one "
                             "ends"}, status_code=429)
    spill = run.log.spill
    if spill is not None:
        run.log.flush()
        try:
            await asyncio.to_thread(_check_readable, spill)  # before the answer starts
        except OSError as exc:
            return _unreadable(run, exc)
        lines: Iterator[bytes] = _spill_lines(spill, count)
    else:  # memory only: a snapshot taken on the loop (bounded by the run's memory budget)
        lines = iter(run.log.read_memory(0, count))
    return StreamingResponse(_exports.counted(trace.chrome_chunks(orjson.loads(line) for line in lines)),
                             media_type="application/json",
                             headers={"content-disposition": f'attachment; filename="{run.id}.chrome.json"'})


def _check_readable(spill: Spill) -> None:
    spill.open().close()


def _spill_lines(spill: Spill, count: int) -> Iterator[bytes]:
    """Events 0..count-1 of a trace file, read a block at a time (Starlette iterates this in a thread)."""
    start = 0
    while start < count:
        block = spill.read(start, min(EXPORT_BLOCK, count - start))
        if not block:
            return
        yield from block
        start += len(block)


class _Exports:
    """How many Chrome exports are streaming. Counted from inside the stream (in Starlette's worker
    threads), so a response that never starts holds no slot."""

    def __init__(self) -> None:
        self.running = 0
        self._lock = threading.Lock()

    def counted(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        with self._lock:
            self.running += 1
        try:
            yield from chunks
        finally:
            with self._lock:
                self.running -= 1


_exports = _Exports()


def _file_bytes(handle: IO[bytes], size: int) -> Iterator[bytes]:
    """The first ``size`` bytes (whole lines, flushed) while the run may still be appending."""
    with handle as f:
        left = size
        while left > 0:
            chunk = f.read(min(STREAM_CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk


def _memory_trace(run: Run) -> bytes:
    header = trace.header(run.id, scenario=run.scenario, mode=run.mode, params=run.params, origin=run.origin)
    lines = [orjson.dumps(header), *run.log.read_memory(0, run.log.next_seq)]
    return b"\n".join(lines) + b"\n"
