"""A real Prometheus scrapes a dashboard following a logdir of live ranks of one job (256 by default,
1,024 with LOADERSCOPE_FLEET_RANKS=1024): rank 0 is a real DataLoader whose worker hangs, rank 1 a
real one that is killed, the others simulated producers writing their traces as the probe does
(tests/fleet.py, one process). Every rank is
exported, the stuck-worker alert fires and stays firing, the killed rank's alert fires, a scrape
never waits on the job table asked for meanwhile, and each query of the Grafana dashboard
(deploy/grafana/) answers from what Prometheus scraped.

About two minutes with 256 ranks on the loaded 2-core VM: every rank found and scraped, the killed
rank called truncated (SILENT_AFTER) and the rules' holds, then a minute of evaluations. Scrapes every
10 s with a 10 s timeout (Prometheus's default timeout): beside four other test runs, scrapes of the
1,024 ranks took 0.8–4.3 s of wall time. The rules are the shipped ones held HOLD rather than their
minute (tests/server/prometheus.py's ``held_rules``): the evaluations watched, not the hold, are what
show the stuck rank's alert staying.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_for
from tests.server.prometheus import Prometheus

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "loaderscope-job.json"
# The default run follows 256 ranks, beside the rest of the suite on 2 cores; the scale is
# LOADERSCOPE_FLEET_RANKS=1024 (passed there at load 11-14, 3-4 minutes; bench/metrics_fleet.py measures it).
RANKS = int(os.environ.get("LOADERSCOPE_FLEET_RANKS", "256"))
JOB = "fleet"
INTERVAL = 10  # seconds between scrapes and rule evaluations, and a scrape's timeout
EVERY = 5  # seconds between a simulated rank's batches
# seconds between two looks at what Prometheus holds, which changes once a scrape or an evaluation (INTERVAL):
# the test took 127 s of CPU looking every 50 ms, 107-110 s looking every second
LOOK = 1.0
# A killed rank is called truncated this long after its last write or heartbeat: the default. At 15 s,
# one run of four (load 14) found the stuck rank's alert gone at one evaluation while job tables were
# being built (not pinned down: a follow loop 15 s behind calls a live file truncated, and a scrape past
# its timeout ends an alert too).
SILENT_AFTER = 30.0
FIRING_FOR = 6  # evaluations the stuck alert is watched for, once it fired
HOLD = "10s"  # the stuck and lost rules' `for:` (shipped: 1m), one evaluation
SUBSTITUTIONS = {"$job": JOB, "$loader": ".*", "$__rate_interval": "30s"}  # what Grafana would put there


def rank(logdir: Path, *options: str) -> subprocess.Popen[bytes]:
    """Ranks in a process group of their own, with their DataLoader workers: killing the rank's process
    leaves a worker inside the hung fetch asleep (it notices its parent's death only between tasks)."""
    return subprocess.Popen([sys.executable, "-m", "tests.fleet", str(logdir), "--job", JOB, "--world", str(RANKS),
                             *options], cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture
def fleet(start_server: Any, tmp_path: Path) -> Iterator[tuple[Any, Prometheus, dict[str, subprocess.Popen[bytes]]]]:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    dashboard = start_server(logdir=str(logdir), silent_after=SILENT_AFTER)
    ranks = {"stuck": rank(logdir, "--real", "stuck", "--first-rank", "0")}  # the oldest: the cap dropped it
    wait_for(lambda: any(logdir.rglob("*rank0*.trace.jsonl")), 120, "the stuck rank's trace")
    ranks["steady"] = rank(logdir, "--real", "steady", "--first-rank", "1")
    ranks["simulated"] = rank(logdir, "--ranks", str(RANKS - 2), "--first-rank", "2", "--every", str(EVERY))
    prometheus = Prometheus(tmp_path / "prometheus", dashboard, interval=f"{INTERVAL}s", hold=HOLD)
    yield dashboard, prometheus, ranks
    prometheus.stop()
    for process in ranks.values():
        with contextlib.suppress(ProcessLookupError):  # every process of the group already gone
            os.killpg(process.pid, signal.SIGKILL)  # the group: its workers too
        process.wait()


class Evaluations:
    """The rule group's evaluations as Prometheus reports them (by their time), with the stuck rank's
    alerts each one left."""

    def __init__(self, prom: Prometheus) -> None:
        self.prom = prom
        self.seen: dict[str, list[dict[str, Any]]] = {}

    def watch(self) -> int:
        group = self.prom.api("rules")["groups"][0]
        rule = next(r for r in group["rules"] if r["name"] == "LoaderscopeWorkerStuck")
        self.seen[group["lastEvaluation"]] = [a for a in rule["alerts"] if a["labels"].get("rank") == "0"]
        return len(self.seen)


def alert(prom: Prometheus, name: str, rank: str) -> dict[str, Any] | None:
    return next((a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == name
                 and a["labels"].get("rank") == rank and a["state"] == "firing"), None)


def scalar(prom: Prometheus, promql: str) -> float | None:
    found = prom.api("query", query=promql)["result"]
    return float(found[0]["value"][1]) if found else None


class JobTables:
    """Asks the dashboard for the job's table again as soon as it answers, in a thread."""

    def __init__(self, dashboard: Any) -> None:
        self.dashboard, self.answers, self.stop = dashboard, [], threading.Event()
        self.thread = threading.Thread(target=self._ask, daemon=True)
        self.thread.start()

    def _ask(self) -> None:
        with self.dashboard.client() as http:
            while not self.stop.is_set():
                self.answers.append(http.get(f"/api/jobs/{JOB}/table", timeout=300).status_code)

    def close(self) -> list[int]:
        self.stop.set()
        self.thread.join(300)
        return self.answers


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_real_prometheus_keeps_paging_for_the_stuck_rank_of_a_fleet_and_pages_for_a_killed_one(
        fleet: tuple[Any, Prometheus, dict[str, subprocess.Popen[bytes]]]) -> None:
    dashboard, prom, ranks = fleet
    held = f'count(loaderscope_run_info{{training_job="{JOB}"}})'
    wait_for(lambda: scalar(prom, held) == RANKS, 300, f"Prometheus to hold every one of the {RANKS} ranks", LOOK)
    assert scalar(prom, f'loaderscope_workers{{training_job="{JOB}",rank="0",state="stuck"}}') == 1
    ranks["steady"].send_signal(signal.SIGKILL)  # rank 1's process dies: no run_end, no more heartbeat

    stuck = wait_for(lambda: alert(prom, "LoaderscopeWorkerStuck", "0"), 300, "the stuck rank's alert to fire", LOOK)
    assert stuck["labels"]["training_job"] == JOB and stuck["labels"]["loader"] == "train"

    # The stuck rank's alert is watched from when it fires, while the killed rank's alert comes (its own
    # `for:`, after the dashboard calls it truncated) and the job's table is asked for: the two waits
    # overlap, rather than the evaluations starting only once the killed rank's alert fired.
    tables, began = JobTables(dashboard), time.time()
    evaluations = Evaluations(prom)
    lost = wait_for(lambda: evaluations.watch() and alert(prom, "LoaderscopeRankLost", "1"), 300,
                    "the killed rank's alert to fire", LOOK)
    assert lost["annotations"]["summary"] == f"rank 1 of job {JOB} stopped without ending its run"
    assert alert(prom, "LoaderscopeRankLost", "0") is None  # the stuck rank lives: the probe reports it
    wait_for(lambda: evaluations.watch() > FIRING_FOR, 3 * FIRING_FOR * INTERVAL, f"{FIRING_FOR} more evaluations",
             LOOK)
    answers = tables.close()
    window = f"{int(time.time() - began) + 1}s"
    for evaluated, firing in evaluations.seen.items():  # the stuck rank's alert, as each evaluation left it
        assert [(a["state"], a["activeAt"]) for a in firing] == [("firing", stuck["activeAt"])], \
            (evaluated, firing, history(prom, window))
    assert answers and set(answers) <= {200, 422}, answers  # answered, or refused over its budget
    assert scalar(prom, f'min_over_time(up{{job="loaderscope"}}[{window}])') == 1  # no scrape failed or timed out
    assert scalar(prom, held) == RANKS and scalar(prom, "loaderscope_runs_unexported") == 0
    assert dashboard.alive()
    check_grafana_queries(prom)


def history(prom: Prometheus, window: str) -> dict[str, Any]:
    """What Prometheus scraped of the stuck rank over ``window``: to say why its alert went away."""
    return {promql: [(r["metric"], r["values"]) for r in prom.api("query", query=f"{promql}[{window}]")["result"]]
            for promql in ('up{job="loaderscope"}', 'scrape_duration_seconds{job="loaderscope"}',
                           'loaderscope_run_status{rank="0"}', 'loaderscope_workers{rank="0",state="stuck"}')}


def check_grafana_queries(prom: Prometheus) -> None:
    """Each query of the Grafana dashboard, as Grafana would send it, answers with data and no warning."""
    board = json.loads(DASHBOARD.read_text())
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":  # label_values(METRIC{...}, LABEL)
            metric, label = variable["query"]["query"][len("label_values("):-1].rsplit(", ", 1)
            values = prom.api(f"label/{label}/values", **{"match[]": _substituted(metric)})
            assert values, variable["name"]
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            promql = _substituted(target["expr"])
            answer = httpx.get(f"{prom.url}/api/v1/query", params={"query": promql}, timeout=30).json()
            assert answer["status"] == "success" and not answer.get("warnings"), (panel["title"], answer)
            assert answer["data"]["result"], f"{panel['title']}: no data for {promql}"


def _substituted(promql: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        promql = promql.replace(variable, value)
    return promql
