"""◆ ``GET /api/jobs/{job}/table``: a logdir job's table of ranks, from DuckDB over its traces.

The page's job view draws it without opening a websocket per rank (``jobquery``: per loader of each
rank its pace, wait share, slowest worker and p95; per step of a loader the rank that was last; the
shard check). The query reads the files, so it runs in a thread, one job table at a time (a
1,024-rank job's read holds a few hundred MB), within ``budgets.JOB_TABLE``: its bytes, memory and
time, past which it is refused and its slot freed. Each file is checked again as it is read (the
logdir's files may have changed since they were listed): it must lie in the logdir, be a regular
file, and its run_start must still name the job.

A table is made once per state of the job's files: the answer is kept (the last few jobs') with the
files' sizes and modification times, and served again while they are unchanged; a request that comes
while the table is being made waits for that one. The page's load of a logdir job's rank (``/?run=ID``,
``warm``) starts the table while the page's modules load, so the job view does not wait for them and
then for the table. Each answer says which it was in ``Server-Timing`` (``computed``, ``shared``,
``cached``, and the milliseconds the table took to make).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import posixpath
import stat
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from loaderscope.server.budgets import JOB_TABLE
from loaderscope.server.offloop import in_daemon_thread
from loaderscope.traces.jobbudget import JobQueryError
from loaderscope.traces.jobquery import table_of

router = APIRouter(prefix="/api")
_ONE_AT_A_TIME = asyncio.Lock()
KEPT = 4  # jobs whose last table is kept: a 1,024-rank job's answer is half a MiB


@dataclasses.dataclass
class _Table:
    """A job's table, made or being made, and the state of the files it was made from (None: a URL
    logdir's, never compared: a stat per object is a request)."""

    signature: tuple[Any, ...] | None
    task: asyncio.Task[tuple[int, bytes]]  # the answer: its status and JSON body
    took: float = 0.0  # seconds it took to make


# by logdir and job: two dashboards in one process (tests, a notebook) may serve two logdirs' jobs of one name
_TABLES: OrderedDict[tuple[str, str], _Table] = OrderedDict()
_WARMING: set[asyncio.Task[None]] = set()  # held until done: the loop keeps only weak references to tasks


def job_files(state: Any, job: str) -> tuple[dict[str, str], Any, str]:
    """The trace files of ``job``'s logdir runs, each with its run's id on this dashboard, the fsspec
    filesystem for a URL logdir (else None), and the logdir's root they lie under (``state``: the app's)."""
    logdir = state.config.logdir
    manager = state.manager
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
    state = request.app.state
    paths, fs, root = job_files(state, job)
    if not paths:
        return JSONResponse({"detail": f"no trace of job {job!r} in this dashboard's logdir; the job table reads "
                                       "a logdir's traces (loaderscope serve --logdir DIR)"}, status_code=404)
    table, how = await _table(state, job, paths, fs, root)
    status, body = await asyncio.shield(table.task)  # a client that goes leaves the table to the next
    return Response(body, status_code=status, media_type="application/json",
                    headers={"Server-Timing": f'jobtable;desc="{how}";dur={table.took * 1000:.0f}'})


def warm(state: Any, run_id: str) -> None:
    """The page is loading to open run ``run_id``: if it is a rank of a logdir job, start the job's table,
    which the page asks for once its modules have loaded and the run's info names the job."""
    run = state.manager.runs.get(run_id)
    brief = run.brief() if run is not None else {}
    job = brief.get("job")
    if not job or not brief.get("path") or (brief.get("world_size") or 1) <= 1:
        return
    task = asyncio.get_running_loop().create_task(_warm(state, job))
    _WARMING.add(task)
    task.add_done_callback(_WARMING.discard)


async def _warm(state: Any, job: str) -> None:
    paths, fs, root = job_files(state, job)
    if paths:
        await _table(state, job, paths, fs, root)


async def _table(state: Any, job: str, paths: dict[str, str], fs: Any, root: str) -> tuple[_Table, str]:
    """The job's table: being made (shared: seconds old at most), made from files as they are now
    (cached), or started now (computed)."""
    signature = await asyncio.to_thread(_signature, paths, fs)
    key = (str(state.config.logdir), job)
    table = _TABLES.get(key)
    if table is not None and not table.task.done():
        return table, "shared"
    if table is not None and signature is not None and table.signature == signature \
            and not table.task.cancelled() and table.task.exception() is None:
        _TABLES.move_to_end(key)
        return table, "cached"
    logdir = None if fs is not None else str(state.config.logdir)
    started = time.monotonic()
    table = _Table(signature, asyncio.get_running_loop().create_task(_make(job, paths, fs, root, logdir)))
    table.task.add_done_callback(lambda _: setattr(table, "took", time.monotonic() - started))
    _TABLES[key] = table
    _TABLES.move_to_end(key)
    while len(_TABLES) > KEPT and next(iter(_TABLES.values())).task.done():
        _TABLES.popitem(last=False)
    return table, "computed"


async def _make(job: str, paths: dict[str, str], fs: Any, root: str, logdir: str | None) -> tuple[int, bytes]:
    """The answer: 200 and the table, 422 and why it could not be made, 404 if no file names the job now."""
    async with _ONE_AT_A_TIME:
        try:
            budget = JOB_TABLE.from_environment()
            table = await in_daemon_thread(table_of, list(paths), fs, within=logdir, job=job, budget=budget,
                                            label=f"job {job}")
        except JobQueryError as exc:
            return 422, orjson.dumps({"detail": str(exc)})
    if not table.ranks:
        return 404, orjson.dumps({"detail": f"no trace of job {job!r} says so any more: its files in the logdir "
                                            "were changed since they were listed; reload the page"})
    rows = [{k: v for k, v in row.items() if k != "file"} | {"dashboard_run": paths.get(row["file"])}
            for row in table.ranks]
    # a damaged trace is named by its path in the logdir, as the run list names it
    table = dataclasses.replace(table, damaged=[entry | {"trace": posixpath.relpath(entry["trace"], root)}
                                                for entry in table.damaged])
    return 200, orjson.dumps(table.as_json() | {"ranks": rows, "job": job})


def _signature(paths: Iterable[str], fs: Any) -> tuple[Any, ...] | None:
    """The state of a local job's files: each trace's (each Parquet trace's parts') size and modification
    time. A table made from the same state is the same table."""
    if fs is not None:
        return None
    seen: list[tuple[str, int, int]] = []
    for path in paths:
        try:
            info = os.stat(path)
            if not stat.S_ISDIR(info.st_mode):
                seen.append((path, info.st_size, info.st_mtime_ns))
                continue
            with os.scandir(path) as entries:  # a Parquet trace: a directory of parts, one added at a time
                parts = [(part.path, part.stat()) for part in entries]
            seen.extend(sorted((name, part.st_size, part.st_mtime_ns) for name, part in parts))
        except OSError:
            seen.append((path, -1, -1))  # gone or unreadable: so it is until it comes back
    return tuple(seen)
