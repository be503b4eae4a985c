"""GET /metrics: real loaders (watch()ed, and the dashboard's own run processes) on a real dashboard,
read back with prometheus_client's parser and held against what the REST API says of the same run."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from torch.utils.data import DataLoader, Dataset

import loaderscope
from loaderscope.server.web import metrics
from loaderscope.server.config import ServerConfig
from loaderscope.server.runs.manager import RunManager
from loaderscope.state import LoaderState
from tests.conftest import wait_for

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Series:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(server: Any) -> Series:
    answer = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return parse(answer.text)


def of(series: Series, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return {found: value for (n, found), value in series.items() if n == name and wanted <= found}


def one(series: Series, name: str, **labels: str) -> float:
    found = of(series, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {found}"
    return next(iter(found.values()))


def listing(server: Any) -> list[dict[str, Any]]:
    with server.client() as http:
        runs: list[dict[str, Any]] = http.get("/api/runs").json()
    return runs


def per_worker(series: Series, name: str, run: str) -> dict[str, float]:
    return {dict(labels)["worker"]: value for labels, value in of(series, name, run=run).items()}


class Uneven(Dataset[torch.Tensor]):
    """Every fourth batch is slow, so later ones overtake it and park in the reorder buffer."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.03 if (index // 4) % 4 == 0 else 0.002)
        return torch.tensor([index])


def test_a_watched_loaders_series_agree_with_the_run_api(start_server: Any) -> None:
    live = start_server()
    loader = loaderscope.watch(DataLoader(Uneven(), batch_size=4, num_workers=3), url=live.page_url, name="train.py")
    with loader:
        for _ in loader:
            time.sleep(0.004)  # a training step: epoch seconds are more than the waits
    run_id = loader._probe_transport.run
    detail = wait_for(lambda: (d := live.run(run_id))["status"] == "done" and d, what="the run to end")
    stats = detail["statistics"]
    series = scrape(live)
    labels = {"run": run_id, "loader": "train.py", "rank": "0"}

    assert one(series, "loaderscope_run_status", status="done", **labels) == 1
    assert sum(of(series, "loaderscope_run_status", **labels).values()) == 1
    assert one(series, "loaderscope_run_info", **labels, origin="external", mode="real", world_size="1") == 1
    assert one(series, "loaderscope_batches_total", **labels) == detail["batches"] == stats["batches"] == 12
    assert one(series, "loaderscope_events_total", **labels) == detail["events"]
    assert one(series, "loaderscope_events_dropped_total", **labels) == detail["dropped"] == 0
    assert one(series, "loaderscope_epochs_total", **labels) == stats["epochs"] == 1
    wait = one(series, "loaderscope_wait_seconds_total", **labels)
    assert wait == pytest.approx(stats["consumer_wait"], rel=1e-9)
    epoch = one(series, "loaderscope_epoch_seconds_total", **labels)
    assert epoch == pytest.approx(stats["epoch_wall"], rel=1e-9) and wait / epoch == pytest.approx(stats["input_bound"])
    assert one(series, "loaderscope_reorder_buffer_high_tasks", **labels) == stats["buffer_high"] > 0
    assert one(series, "loaderscope_prefetch_window_tasks", **labels) == stats["window"] == 6
    counts = per_worker(series, "loaderscope_fetch_seconds_count", run_id)
    assert counts == {str(w["worker"]): w["tasks"] for w in stats["workers"]}
    assert sum(counts.values()) == 12
    slowest = {str(w["worker"]): w["fetch_max"] for w in stats["workers"]}
    for worker, count in counts.items():  # every fetch is at most its worker's slowest, in the bucket that says so
        buckets = {float(dict(labels)["le"]): value for labels, value in
                   of(series, "loaderscope_fetch_seconds_bucket", run=run_id, worker=worker).items()}
        assert buckets[float("inf")] == count
        assert all(value == count for le, value in buckets.items() if le >= slowest[worker])
    states = {dict(labels)["state"]: value for labels, value in of(series, "loaderscope_workers", **labels).items()}
    assert states["exited"] + states["idle"] == 3 and states["stuck"] == states["died"] == 0


def test_metrics_need_the_token_like_the_api(server: Any) -> None:
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    wrong = {"Authorization": "Bearer wrong-token-0123456789"}
    assert httpx.get(f"{server.url}/metrics", headers=wrong).status_code == 401
    answer = httpx.get(f"{server.url}/metrics", headers=server.headers)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert answer.headers["cache-control"] == "no-store"
    series = parse(answer.text)  # the session's dashboard: other tests' runs are there too
    assert one(series, "loaderscope_runs_unexported") >= 0
    assert one(series, "loaderscope_dashboard_process_cpu_seconds_total") > 0
    openmetrics = httpx.get(f"{server.url}/metrics", headers={**server.headers,
                                                            "Accept": "application/openmetrics-text; version=1.0.0"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")


def test_logdir_runs_get_series_once_a_page_opens_them(start_server: Any, tmp_path: Path) -> None:
    from loaderscope import InstrumentedDataLoader
    from loaderscope.trace import TraceWriter

    events: list[dict[str, Any]] = []
    loader = InstrumentedDataLoader(torch.arange(24.0), batch_size=4, num_workers=2, sink=events.extend)
    for _ in loader:
        pass
    loader.close()
    for rank in (0, 1):  # two ranks of one job, as `loaderscope record` writes them
        events[0].update(job="job-7", world_size=2, rank=rank, name="train_loader")
        with TraceWriter(tmp_path / "logs" / f"DataLoader-rank{rank}.trace.jsonl", "producer", mode="real") as writer:
            writer.write([{**event, "rank": rank} for event in events])
    live = start_server(logdir=str(tmp_path / "logs"))
    listed = wait_for(lambda: len(runs := [r for r in listing(live) if r["origin"] == "logdir"]) == 2 and runs)
    series = scrape(live)
    assert one(series, "loaderscope_runs", status="done") == 2  # counted, not read
    assert not of(series, "loaderscope_run_info") and one(series, "loaderscope_runs_unexported") == 0

    opened = next(r for r in listed if r["rank"] == 1)
    detail = live.run(opened["id"])  # what a page does when it opens the run
    series = wait_for(lambda: of(s := scrape(live), "loaderscope_batches_total") and s)
    labels = {"run": opened["id"], "training_job": "job-7", "loader": "train_loader", "rank": "1"}
    assert one(series, "loaderscope_batches_total", **labels) == detail["batches"] == 6
    assert one(series, "loaderscope_run_info", **labels, origin="logdir", world_size="2") == 1
    assert one(series, "loaderscope_run_status", status="done", **labels) == 1
    assert len(of(series, "loaderscope_run_info")) == 1  # rank 0, never opened, still only counted


@pytest.mark.parametrize(("scenario", "params", "counter", "kind"), [
    ("crash_worker", {"num_workers": 2, "how": "sigkill", "sample_ms": 2}, "loaderscope_worker_deaths_total",
     "worker_died"),
    ("timeout", {"num_workers": 2, "timeout": 0.5, "stuck_seconds": 2.0, "sample_ms": 1}, "loaderscope_timeouts_total",
     "timeout"),
])
def test_a_dead_worker_and_an_expired_timeout_are_counted(server: Any, scenario: str, params: dict[str, Any],
                                                          counter: str, kind: str) -> None:
    run_id = server.start_run(scenario, **params)["id"]
    detail = server.wait_status(run_id)
    series = scrape(server)
    with server.client() as http:
        stored = http.get(f"/api/runs/{run_id}/events", params={"limit": 10_000}).json()["events"]
    kinds = [event["kind"] for event in stored]
    assert detail["status"] == "error" and one(series, "loaderscope_run_status", run=run_id, status="error") == 1
    assert kinds.count(kind) == one(series, counter, run=run_id) == 1, (kinds, detail["error"], detail["log_tail"])
    died = sum(w["status"] == "died" for w in detail["statistics"]["workers"])
    assert one(series, "loaderscope_workers", run=run_id, state="died") == died
    assert one(series, "loaderscope_worker_deaths_total", run=run_id) == (1 if scenario == "crash_worker" else 0)


# --- the exporter on a run manager, without a server: caps and the running histograms --------------


def _fetches(run: Any, workers: int, per_worker: int, *, start: int = 0, t: float = 0.0) -> None:
    events: list[dict[str, Any]] = []
    if start == 0:
        events.append({"kind": "run_start", "t": t, "mode": "real", "config": {"num_workers": workers}})
        events.append({"kind": "epoch_start", "t": t, "epoch": 0})
    idx = start * workers
    for _ in range(per_worker):
        for worker in range(workers):
            t += 0.001
            events += [{"kind": "dispatch", "t": t, "idx": idx, "worker": worker},
                       {"kind": "fetch_start", "t": t, "idx": idx, "worker": worker},
                       {"kind": "fetch_end", "t": t, "idx": idx, "worker": worker, "dt": 0.0004 * (worker + 1)}]
            idx += 1
    run.ingest(events)


def _manager() -> RunManager:
    return RunManager(ServerConfig(token="metrics-test-token-0123"))


def _exported(manager: RunManager, exporter: metrics.Exporter | None = None) -> Series:
    return parse(generate_latest((exporter or metrics.Exporter(manager)).read()).decode())


def test_worker_series_are_capped_and_the_rest_add_up_under_other() -> None:
    manager = _manager()
    run = manager.create(scenario=None, mode="real", params={}, origin="external")
    _fetches(run, workers=20, per_worker=3)
    series = _exported(manager)
    counts = per_worker(series, "loaderscope_fetch_seconds_count", run.id)
    assert set(counts) == {*map(str, range(metrics.MAX_WORKERS)), "other"}
    assert counts["other"] == 3 * (20 - metrics.MAX_WORKERS) and sum(counts.values()) == 60
    sums = per_worker(series, "loaderscope_fetch_seconds_sum", run.id)
    assert sums["other"] == pytest.approx(3 * 0.0004 * sum(range(17, 21)))
    queues = per_worker(series, "loaderscope_worker_queue_tasks", run.id)
    assert set(queues) == set(counts)
    assert sum(("run", run.id) in labels for _, labels in series) == 373  # docs/DESIGN.md's most per run


def test_running_histograms_equal_ones_counted_from_scratch() -> None:
    manager = _manager()
    run = manager.create(scenario=None, mode="real", params={}, origin="external")
    exporter = metrics.Exporter(manager)
    _fetches(run, workers=3, per_worker=4)
    _exported(manager, exporter)
    _fetches(run, workers=3, per_worker=5, start=4, t=1.0)
    kept, fresh = _exported(manager, exporter), _exported(manager)
    histogram = {key: value for key, value in fresh.items() if key[0].startswith("loaderscope_fetch_seconds")}
    assert len(histogram) == 3 * (len(metrics.BUCKETS) + 3)
    for key, value in histogram.items():  # counts exactly; sums added in another order
        assert kept[key] == (pytest.approx(value, rel=1e-12) if key[0].endswith("_sum") else value)
    assert per_worker(kept, "loaderscope_fetch_seconds_count", run.id) == {"0": 9, "1": 9, "2": 9}
    # a time equal to a bucket's bound counts in it (Prometheus's le is "less or equal")
    assert one(kept, "loaderscope_fetch_seconds_bucket", run=run.id, worker="0", le="0.0005") == 9
    assert one(kept, "loaderscope_fetch_seconds_bucket", run=run.id, worker="1", le="0.0005") == 0


def test_runs_past_the_cap_are_counted_live_ones_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_RUNS", 2)
    manager = _manager()
    runs = [manager.create(scenario=None, mode="real", params={}, origin="external") for _ in range(4)]
    for age, run in enumerate(runs):
        run.created -= age
        _fetches(run, workers=1, per_worker=1)
    manager.close(runs[-1])  # the oldest ended; of the three live ones the two newest are exported
    series = _exported(manager)
    exported = {dict(labels)["run"] for labels in of(series, "loaderscope_batches_total")}
    assert exported == {runs[0].id, runs[1].id}
    assert one(series, "loaderscope_runs_unexported") == 2
    assert sum(of(series, "loaderscope_runs").values()) == 4


def test_the_reducer_counts_deaths_and_timeouts_past_its_kept_notes() -> None:
    state = LoaderState()
    state.apply({"kind": "run_start", "t": 0, "mode": "real", "config": {"num_workers": 1}})
    for i in range(1200):  # more than the 1,000 notes the reducer keeps
        state.apply({"kind": "worker_died", "t": i, "worker": 0, "exitcode": -9, "signal": "SIGKILL"})
        state.apply({"kind": "timeout", "t": i, "seconds": 1.0})
    assert state.worker_deaths == state.timeouts == 1200
    assert len(state.notes) == 1000


def test_label_text_is_cut_and_missing_values_are_empty() -> None:
    manager = _manager()
    run = manager.create(scenario=None, mode="real", params={}, origin="external")
    run.ingest([{"kind": "run_start", "t": 0, "mode": "real", "config": {}, "name": "python " + "x" * 500,
                 "job": None}])
    labels = defaultdict(set)
    for (_, found) in _exported(manager):
        for key, value in found:
            labels[key].add(value)
    assert max(map(len, labels["loader"])) == metrics.MAX_LABEL and labels["training_job"] == {""}
