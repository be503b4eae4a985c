"""A logdir job's table is made once per state of its files (``server/web/jobs.py``): loading the page to
open one of its ranks (``/?run=ID``, with the dashboard's token) starts it while the page's modules load, the
page's own request then finds it made or being made, a request while the files are unchanged gets the same
answer without a new query, and a changed trace has it made again. ``Server-Timing`` says which
(``computed``, ``shared``, ``cached``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.jobs import served_job

pytest.importorskip("duckdb")

RANKS = 4
JOB = "sim-straggler"


def how(answer: httpx.Response) -> str:
    """How the answer's table came: ``Server-Timing: jobtable;desc="...";dur=...``."""
    found = re.fullmatch(r'jobtable;desc="(\w+)";dur=\d+', answer.headers.get("server-timing", ""))
    assert found, answer.headers
    return found.group(1)


def test_a_ranks_page_load_starts_its_job_table_and_unchanged_files_keep_it(tmp_path: Path,
                                                                             start_server: Any) -> None:
    server, runs = served_job(start_server, tmp_path / "runs", RANKS, {})
    paths = sorted((tmp_path / "runs").rglob("*.trace.jsonl"))
    rank0 = runs[0]
    with server.client() as http:
        with httpx.Client(base_url=server.url) as stranger:  # the page needs no token; the table does
            assert stranger.get("/", params={"run": rank0}).status_code == 200
        unasked = http.get(f"/api/jobs/{JOB}/table", timeout=120)
        assert how(unasked) == "computed"  # no table was started for a request without the token

        paths[0].touch()  # a trace written to again: the table kept is not for the files as they are now
        assert http.get("/", params={"run": rank0}).status_code == 200  # the page, loading to open rank 0

        first = http.get(f"/api/jobs/{JOB}/table", timeout=120)
        assert first.status_code == 200, first.text
        assert how(first) in ("shared", "cached")  # started by the page's load, not by this request
        assert sorted(row["rank"] for row in first.json()["ranks"]) == list(range(RANKS))

        again = http.get(f"/api/jobs/{JOB}/table", timeout=120)
        assert (how(again), again.content) == ("cached", first.content)

        later = os.stat(paths[2]).st_mtime_ns + 10**9
        os.utime(paths[2], ns=(later, later))  # a trace written to again: its table is made anew
        changed = http.get(f"/api/jobs/{JOB}/table", timeout=120)
        assert (how(changed), changed.json()["ranks"]) == ("computed", first.json()["ranks"])
