"""A real Prometheus (Debian's package) scrapes a real dashboard while a real DataLoader's worker is
stuck, and evaluates the alert rules of deploy/prometheus/ on it; promtool checks and unit-tests them.

scripts/test.sh installs the package when promtool is missing: nothing here is skipped without it.
The live Prometheus holds the stuck-worker rule for ``HOLD``, not the shipped minute (tests/server/
prometheus.py's ``held_rules``: only that line differs); promtool's unit tests check the minute.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.server.prometheus import DEPLOY, LOOK, RULES, Prometheus, tool

HOLD = "10s"  # five 2 s evaluations in a row


def test_promtool_checks_the_rules_and_the_example_config_and_passes_their_unit_tests(tmp_path: Path) -> None:
    promtool = tool("promtool")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0 and "SUCCESS: 9 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", "loaderscope.rules.test.yml"], cwd=DEPLOY,
                            capture_output=True, text=True)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    for name in ("prometheus.yml", "loaderscope.rules.yml"):  # its credentials_file is beside it
        shutil.copy(DEPLOY / name, tmp_path / name)
    (tmp_path / "loaderscope.token").write_text("a-token-for-the-check-0123\n")
    config = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True,
                            text=True)
    assert config.returncode == 0, config.stdout + config.stderr


@pytest.fixture
def prometheus(start_server: Any, tmp_path: Path) -> Iterator[tuple[Any, Prometheus]]:
    dashboard = start_server(stop_grace=1.0, kill_grace=1.0)
    server = Prometheus(tmp_path / "prometheus", dashboard, hold=HOLD)
    yield dashboard, server
    server.stop()


def the_run_api(dashboard: Any, run_id: str) -> dict[str, Any]:
    """What the REST API says, in the exported series' terms."""
    detail = dashboard.run(run_id)
    stats = detail["statistics"]
    return {"batches": detail["batches"], "events": detail["events"], "dropped": detail["dropped"],
            "wait": round(stats["consumer_wait"], 9), "epoch": round(stats["epoch_wall"], 9),
            "parked_high": stats["parked_high"], "fetches": sum(w["tasks"] for w in stats["workers"]),
            "stuck": sum(w["status"] == "stuck" for w in stats["workers"]), "status": detail["status"]}


def scraped(prom: Prometheus, run_id: str) -> dict[str, Any]:
    """The same, as Prometheus holds it from its last scrape."""
    def scalar(name: str) -> float | None:
        found = prom.query(f'{name}{{run="{run_id}"}}')
        return found.get("") if found else None

    statuses = prom.query(f'loaderscope_run_status{{run="{run_id}"}} == 1')
    wait, epoch = scalar("loaderscope_wait_seconds_total"), scalar("loaderscope_epoch_seconds_total")
    return {"batches": scalar("loaderscope_batches_total"), "events": scalar("loaderscope_events_total"),
            "dropped": scalar("loaderscope_events_dropped_total"), "wait": None if wait is None else round(wait, 9),
            "epoch": None if epoch is None else round(epoch, 9),
            "parked_high": scalar("loaderscope_reorder_buffer_high_tasks"),
            "fetches": scalar("loaderscope_fetch_seconds_count"),
            "stuck": prom.query(f'loaderscope_workers{{run="{run_id}",state="stuck"}}').get("stuck"),
            "status": next(iter(statuses), None)}


@pytest.mark.slow  # the rule fires only after its `for:` (HOLD)
def test_prometheus_scrapes_a_stuck_worker_and_fires_the_stuck_rule(prometheus: tuple[Any, Prometheus]) -> None:
    dashboard, prom = prometheus
    # sample 13 (task 3, worker 1) hangs far longer than the test; the probe calls it stuck after 0.5 s
    run_id = dashboard.start_run("stuck_worker", num_workers=2, stuck_after=0.5, stuck_seconds=600,
                                 dataset_size=32, sample_ms=2)["id"]
    wait_for(lambda: prom.query(f'loaderscope_workers{{run="{run_id}",state="stuck"}}').get("stuck") == 1, 90,
             "Prometheus to hold the stuck worker", LOOK)

    def stuck_alert() -> dict[str, Any] | None:
        return next((a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "LoaderscopeWorkerStuck"
                     and a["labels"]["run"] == run_id), None)

    alert = wait_for(stuck_alert, 60, "the stuck-worker rule to hold", LOOK)
    assert alert["labels"]["rank"] == "0" and "training_job" not in alert["labels"]  # empty: no label
    assert float(alert["value"]) == 1

    # The pipeline stalls behind the stuck task: once Prometheus's last scrape and the REST API see
    # the same stalled run, every number agrees (but the events: the probe reports the stuck worker
    # again every 5 s, so they are compared once the run has ended).
    def stalled(numbers: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in numbers.items() if key != "events"}

    rest = wait_for(lambda: (api := stalled(the_run_api(dashboard, run_id))) == stalled(scraped(prom, run_id))
                    and api, 60, "Prometheus and the run API to agree while the worker is stuck")
    assert rest["stuck"] == 1 and rest["status"] == "running" and rest["batches"] == 3
    assert rest["fetches"] >= 3 and rest["dropped"] == 0
    fired = wait_for(lambda: (a := stuck_alert()) is not None and a["state"] == "firing" and a, 150,
                     f"the stuck-worker rule to fire, {HOLD} after it held", LOOK)
    assert fired["annotations"]["summary"] == f"1 DataLoader worker(s) stuck on rank 0 of run {run_id}"

    with dashboard.client() as http:
        assert http.post(f"/api/runs/{run_id}/control", json={"action": "stop"}).status_code == 200
    dashboard.wait_status(run_id)
    ended = wait_for(lambda: (api := the_run_api(dashboard, run_id)) == scraped(prom, run_id) and api, 60,
                     "Prometheus and the run API to agree once the run ended")
    assert ended["status"] == "stopped" and ended["events"] > 0 and ended["batches"] == rest["batches"]
    wait_for(lambda: stuck_alert() is None, 30, "the alert to go: an ended run's stuck worker is nobody's to page",
             LOOK)

    groups = prom.api("rules")["groups"]
    assert [g["name"] for g in groups] == ["loaderscope"]
    rules = wait_for(lambda: len(ok := [r for g in prom.api("rules")["groups"] for r in g["rules"]
                                         if r["health"] == "ok"]) == 9 and ok, 30, "every rule evaluated", LOOK)
    assert sorted(r["name"] for r in rules) == sorted(
        ["LoaderscopeWorkerStuck", "LoaderscopeRankLost", "LoaderscopeInputBound", "LoaderscopeWorkerDied",
         "LoaderscopeEventsDropped", "LoaderscopeRunSilent", "LoaderscopeRunsNotExported", "LoaderscopeCopyOnRead",
         "LoaderscopeHeadroomLow"])
