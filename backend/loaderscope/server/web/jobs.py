"""◆ ``GET /api/jobs/{job}/table``: a logdir job's table of ranks, from DuckDB over its traces.

The page's job view draws it without opening a websocket per rank (``jobquery``: per loader of each
rank its pace, wait share, slowest worker and p95; per step of a loader the rank that was last; the
shard check). The query reads the files, so it runs in a thread, one job table at a time (a
1,024-rank job's read holds a few hundred MB), within ``budgets.JOB_TABLE``: its bytes, memory and
time, past which it is refused and its slot freed. Each file is checked again as it is read (the
logdir's files may have changed since they were listed): it must lie in the logdir, be a regular
file, and its run_start must still name the job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import posixpath
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from loaderscope.server.budgets import JOB_TABLE
from loaderscope.server.web.api import manager_of
from loaderscope.traces.jobbudget import JobQueryError
from loaderscope.traces.jobquery import table_of

router = APIRouter(prefix="/api")
_ONE_AT_A_TIME = asyncio.Lock()


def job_files(request: Request, job: str) -> tuple[dict[str, str], Any, str]:
    """The trace files of ``job``'s logdir runs, each with its run's id on this dashboard, the fsspec
    filesystem for a URL logdir (else None), and the logdir's root they lie under."""
    logdir = request.app.state.config.logdir
    manager = manager_of(request)
    # every file of the job, a copy the run list leaves out too (the query counts a recording once),
    # each named by the run the list shows for its recording
    shown: dict[str | None, str] = {key: run.id for run in manager.listed() if (key := run.recording()) is not None}
    relative = {brief["path"]: shown.get(run.recording(), run_id) for run_id, run in manager.runs.items()
                if (brief := run.brief()).get("job") == job and brief.get("path")}
    if logdir is None or not relative:
        return {}, None, ""
    if "://" not in str(logdir):
        local = {posixpath.join(str(logdir), path): run_id for path, run_id in sorted(relative.items())}
        return local, None, str(logdir)
    import fsspec  # type: ignore[import-untyped]  # the optional remote extra; a URL logdir was only opened with it

    fs, root = fsspec.core.url_to_fs(str(logdir))
    return {posixpath.join(root, path): run_id for path, run_id in sorted(relative.items())}, fs, root


@router.get("/jobs/{job}/table", responses={404: {}, 422: {}})
async def job_table(job: str, request: Request) -> Any:
    """Per rank, per step and per epoch's shards: the answers of ``loaderscope job``, for a logdir job;
    each rank's row names its run on this dashboard (``dashboard_run``), so the page opens it by that id."""
    paths, fs, root = job_files(request, job)
    if not paths:
        return JSONResponse({"detail": f"no trace of job {job!r} in this dashboard's logdir; the job table reads "
                                       "a logdir's traces (loaderscope serve --logdir DIR)"}, status_code=404)
    logdir = None if fs is not None else str(request.app.state.config.logdir)
    async with _ONE_AT_A_TIME:
        try:
            budget = JOB_TABLE.from_environment()
            table = await asyncio.to_thread(table_of, list(paths), fs, within=logdir, job=job, budget=budget,
                                            label=f"job {job}")
        except JobQueryError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=422)
    if not table.ranks:
        return JSONResponse({"detail": f"no trace of job {job!r} says so any more: its files in the logdir were "
                                       "changed since they were listed; reload the page"}, status_code=404)
    rows = [{k: v for k, v in row.items() if k != "file"} | {"dashboard_run": paths.get(row["file"])}
            for row in table.ranks]
    # a damaged trace is named by its path in the logdir, as the run list names it
    table = dataclasses.replace(table, damaged=[entry | {"trace": posixpath.relpath(entry["trace"], root)}
                                                for entry in table.damaged])
    return Response(orjson.dumps(table.as_json() | {"ranks": rows, "job": job}), media_type="application/json")
