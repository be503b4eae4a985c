"""◆ ``POST /api/runs/{id}/sweeps`` and ``GET /api/runs/{id}/advice``: what if, for a recorded or watched run.

The built-in scenarios are swept by ``POST /api/sweeps``. A run of someone's own loader has no
scenario to rebuild, so this fits the simulator's cost model to the run's own fetches
(``sim.fit_from_trace``) and replays its own batches with the swept loader settings and cost fields
(``sim.trace_sweep``), each value checked against the bounds every request meets
(``loaderscope/settings.py``). The answer says which costs were fitted (``sim.describe_fit``) and how
close the replay comes to the run at its recorded setting (``sim.recorded_check``); where that is off
by more than ``sim.advice.TRUST`` it says so instead of recommending. The advice (``sim.advice.advise``)
is the worker count the page, the CLI and the what-if panel give for a run: made in the sweeps' one
slot, off the event loop, and kept for a run that has ended. The run's events are read from the store
like any viewer reads them.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from loaderscope.events import Event
from loaderscope.server.offloop import in_daemon_thread
from loaderscope.server.runs.run import Run
from loaderscope.server.web.api import MAX_SWEEP_RUNS, manager_of, read_events, rejected, sweep_slot, unprocessable
from loaderscope.server.web.errors import type_problems
from loaderscope.sim.sweep import MAX_SWEEP_EVENTS

router = APIRouter(prefix="/api")
READ_PAGE = 10_000  # events per store read while collecting a run for a sweep


class RunSweepRequest(BaseModel):
    """The loader arguments and cost-model fields to try on this run."""

    model_config = ConfigDict(extra="forbid")
    grid: dict[str, list[Any]] = Field(..., description="num_workers, prefetch_factor, persistent_workers, "
                                                         "in_order, pin_memory or a cost-model field -> values to try")


@router.post("/runs/{run_id}/sweeps", responses={404: {}, 413: {}, 422: {}, 429: {}})
async def sweep_run(run_id: str, body: RunSweepRequest, request: Request) -> Any:
    """The same rows and recommendation as ``POST /api/sweeps``, for this run's own loader."""
    manager = manager_of(request)
    run = manager.require(run_id)
    grid = checked_grid(body.grid)
    if isinstance(grid, JSONResponse):
        return grid
    # Budget and slot before a single event is read: loading a 2M-event run to refuse it cost ~1 GB and
    # 14 s, and ten such requests at once 10 GB. The count comes from the store or the logdir's index.
    combinations = math.prod(len(values) for values in grid.values())
    if (over := _over_budget(run.brief()["events"], combinations)) is not None:
        return over
    async with sweep_slot() as free:
        if not free:
            return JSONResponse({"detail": "a sweep is already running; try again when it ends"}, status_code=429)
        events = await all_events(manager, run)
        if (over := _over_budget(len(events), combinations)) is not None:  # a live run grew meanwhile
            return over
        return await in_daemon_thread(_sweep, events, grid)


@router.get("/runs/{run_id}/advice", responses={404: {}, 429: {}})
async def run_advice(run_id: str, request: Request) -> Any:
    """The advice on num_workers for this run (``sim.advice.Advice``), as ``loaderscope run`` prints it."""
    from loaderscope.sim import advice

    manager = manager_of(request)
    run = manager.require(run_id)
    if run.advice is not None and run.advice[0] == run.log.last_seq:
        return run.advice[1]
    known = run.brief()["events"] or 0
    if not advice.affordable(known, -1):  # refused before a single event is read, as a sweep is
        return advice.too_long(known, {}, None)
    async with sweep_slot() as free:
        if not free:
            return JSONResponse({"detail": "a sweep is already running; try again when it ends"}, status_code=429)
        events = await all_events(manager, run)
        answer = await in_daemon_thread(advice.advise, events)
    if run.log.ended:  # nothing more will come: the same events give the same advice
        run.advice = (run.log.last_seq, dict(answer))
    return answer


def _over_budget(events: int, combinations: int) -> JSONResponse | None:
    if events * combinations <= MAX_SWEEP_EVENTS:
        return None
    return JSONResponse({"detail": f"this run holds {events:,} events: {combinations} replays of it would "
                         f"simulate more than the {MAX_SWEEP_EVENTS:,} one sweep may; sweep fewer values"},
                        status_code=413)


def checked_grid(grid: dict[str, list[Any]]) -> dict[str, list[Any]] | JSONResponse:
    """The grid typed and checked by the bounds every request meets (``sim.replay_grid``), or its 422."""
    from loaderscope import sim
    from loaderscope.problems import ParamError
    from loaderscope.settings import table

    combinations = math.prod(max(len(values), 1) for values in grid.values())
    if not grid or combinations > MAX_SWEEP_RUNS or any(not values for values in grid.values()):
        return unprocessable([{"field": "grid", "message": f"give 1 to {MAX_SWEEP_RUNS} combinations of non-empty "
                               f"value lists (got {combinations})", "allowed": None}])
    # JSON is typed: over HTTP "4" is not an integer (the command line's text is parsed), as on POST /api/sweeps
    fields = sim.CostModel.model_json_schema()["properties"] | {
        row["name"]: {"type": row["type"], "minimum": row["min"], "maximum": row["max"]} for row in table()}
    mistyped = [problems[0] for key, values in grid.items()
                if (problems := [p for v in values for p in type_problems({key: v}, fields, "grid.")])]
    if mistyped:
        return unprocessable(mistyped)
    try:
        return sim.replay_grid(grid)
    except ParamError as exc:
        return rejected(exc, "grid.")


async def all_events(manager: Any, run: Run) -> list[Event]:
    """Every event the store holds for ``run``, in seq order."""
    await manager.read_whole(run)
    events: list[Event] = []
    start = 0
    while start <= run.log.last_seq:
        lines, gap = await read_events(run.log, start, READ_PAGE)
        events += await in_daemon_thread(_decoded, lines)  # 2M events took 14 s: not on the event loop
        start = (events[-1]["seq"] if lines else gap.last if gap else run.log.last_seq) + 1
    return events


def _decoded(lines: list[bytes]) -> list[Event]:
    return [orjson.loads(line) for line in lines]


def _sweep(events: list[Event], grid: dict[str, list[Any]]) -> dict[str, Any] | JSONResponse:
    from loaderscope import sim
    from loaderscope.sim.advice import untrusted

    try:
        costs = sim.fit_from_trace(events)
        rows = sim.trace_sweep(events, grid, costs)
        check = sim.recorded_check(events, costs=costs)
    except ValueError as exc:  # a run with no finished fetch yet: nothing to fit
        return unprocessable([{"field": "run", "message": str(exc), "allowed": None}])
    fit = {"costs": sim.describe_fit(costs), "recorded": check}
    off = untrusted(check["predicted_batches_per_s"], check["recorded_batches_per_s"])
    memory = {"memory": sim.memory_notes(rows)} if rows and "memory" in rows[0] else {}  # a run with memory samples
    return {"rows": rows, "recommendation": sim.recommend(rows) if off is None else off, "source": "run", "fit": fit,
            **memory}
