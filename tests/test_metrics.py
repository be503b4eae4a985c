"""GET /metrics: real loaders (watch()ed, and the dashboard's own run processes) on a real dashboard,
read back with prometheus_client's parser and held against what the REST API says of the same run."""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from torch.utils.data import DataLoader, Dataset

import loaderscope
from loaderscope.server.config import ServerConfig
from loaderscope.server.runs import meters
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.store import EventLog
from loaderscope.server.web import metrics
from loaderscope.sim import CostModel, Death, Stall
from loaderscope.state import LoaderState, reduce, summary
from tests.conftest import wait_for
from tests.test_server_ingest import frames, produce
from tests.test_sim_helpers import make_config, run_core

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


# --- many runs of many workers: a scrape costs the event loop what the runs' meters hold -------------

WIDE = 4096  # workers per run: the most a loader may have (events.MAX_WORKERS)
WIDE_RUNS = 32
VARIANTS = 4  # runs differ in their fetch times and in how many workers are busy, stuck, dead or queued


def wide_run(variant: int) -> list[dict[str, Any]]:
    """A loader of 4,096 workers, each of which fetched one batch; then a few fetching, stuck, dead,
    and a few with tasks waiting in their index queue; the first batches yielded."""
    events: list[dict[str, Any]] = [
        {"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": WIDE}, "name": "wide.py",
         "job": "wide-job", "world_size": WIDE_RUNS},
        {"kind": "epoch_start", "t": 0.0, "epoch": 0}]
    for w in range(WIDE):
        dt = 0.0003 * (1 + (w * (variant + 1)) % 400)  # 0.3 ms to 120 ms: most buckets get some
        events += [{"kind": "dispatch", "t": 0.01, "idx": w, "worker": w},
                   {"kind": "fetch_start", "t": 0.01, "idx": w, "worker": w},
                   {"kind": "fetch_end", "t": 0.01 + dt, "idx": w, "worker": w, "dt": dt}]
    for idx in range(64 * (variant + 1)):
        events += [{"kind": "arrive", "t": 1.0, "idx": idx, "worker": idx},
                   {"kind": "yield", "t": 1.0 + idx * 1e-3, "idx": idx, "wait": 1e-4 * (variant + 1)}]
    idx = WIDE
    for w in range(0, WIDE, 97 - variant):  # busy again; every other one stuck, a few of them dead
        events += [{"kind": "dispatch", "t": 2.0, "idx": idx, "worker": w},
                   {"kind": "fetch_start", "t": 2.0, "idx": idx, "worker": w}]
        if w % 2:
            events.append({"kind": "worker_stuck", "t": 12.0, "idx": idx, "worker": w, "elapsed": 10.0})
        if w % 5 == 1:
            events.append({"kind": "worker_died", "t": 13.0, "idx": idx, "worker": w, "signal": "SIGKILL"})
        idx += 1
    for w in range(variant, WIDE, 61):
        events.append({"kind": "dispatch", "t": 3.0, "idx": idx, "worker": w})  # queued behind the busy one
        idx += 1
    return events


def expected_series(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What /metrics should say of a run of these events: from state.summary(), and the state's queues."""
    state = reduce(events)
    stats = summary(state)
    fetches, queues = Counter(), Counter()
    for worker in stats["workers"]:
        fetches[meters.worker_label(worker["worker"])] += worker["tasks"]
    for worker in state.workers.values():
        queues[meters.worker_label(worker.id)] += len(worker.queue)
    return {"loaderscope_batches_total": stats["batches"],
            "loaderscope_wait_seconds_total": stats["consumer_wait"],
            "loaderscope_epoch_seconds_total": stats["epoch_wall"],
            "loaderscope_prefetch_window_tasks": stats["window"],
            "loaderscope_outstanding_tasks": state.outstanding,
            "states": Counter(w["status"] for w in stats["workers"]), "fetches": dict(fetches), "queues": dict(queues)}


class HealthPoller:
    """Asks /api/health again as soon as it is answered, in a thread; keeps (sent, answered) of each 200."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        wait_for(lambda: self.answers, what="/api/health to answer")

    def _poll(self) -> None:
        with httpx.Client(base_url=self.url, timeout=300) as http:
            while not self.stop.is_set():
                sent = time.monotonic()
                if http.get("/api/health").status_code == 200:
                    self.answers.append((sent, time.monotonic()))

    def longest_wait(self, started: float, ended: float) -> float:
        """The longest a request waited within [started, ended] (a wait counts only inside it)."""
        return max(min(answered, ended) - max(sent, started) for sent, answered in self.answers
                   if answered > started and sent < ended)

    def answered_within(self, started: float, ended: float) -> bool:
        return any(started <= sent and answered <= ended for sent, answered in self.answers)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(300)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_health_answers_while_many_runs_of_many_workers_are_scraped(start_server: Any) -> None:
    """32 producers of 4,096 workers each stream over /ws/ingest, then /metrics is scraped three times
    while another client asks /api/health again as soon as it is answered.

    Health must answer while each scrape is in flight, and wait at most three times as long as it did
    at worst while the same runs were streamed in. That yardstick is this dashboard's own, on this
    machine at this load: the event loop then applied frames (in slices of 2,000 events) and the
    interpreter collected garbage (a full pass over these runs' 750,000 objects takes 0.25 s of CPU,
    and may fall in a scrape too: 0.99 s waited in a scrape against 0.91 s while streaming, at a load
    of 11 on 2 cores). Before the meters, the first scrape walked every worker on the event loop, 1.8 s
    of CPU, and health waited for all of it: 8.7 s against 0.74 s while streaming."""
    live = start_server(record=False, memory_events=1000)
    health = HealthPoller(live.url)
    variants = [wide_run(variant) for variant in range(VARIANTS)]
    streamed = time.monotonic()
    for number in range(WIDE_RUNS):
        produce(live, f"wide-{number}", frames(iter(variants[number % VARIANTS]), 2000), end=False)
    wait_for(lambda: sum(r["events"] for r in listing(live) if r["id"].startswith("wide-")) ==
             sum(len(variants[number % VARIANTS]) for number in range(WIDE_RUNS)), 300, "every event to be applied")
    yardstick = health.longest_wait(streamed, time.monotonic())
    scrapes: list[tuple[float, float]] = []
    for _ in range(3):
        started = time.monotonic()
        series = scrape(live)
        scrapes.append((started, time.monotonic()))
    health.close()
    for started, ended in scrapes:
        assert health.answered_within(started, ended), f"no health answer during a {ended - started:.2f} s scrape"
        waited = health.longest_wait(started, ended)
        assert waited <= 3 * yardstick, f"/api/health waited {waited:.2f} s in a scrape, {yardstick:.2f} s at most " \
            "while the runs streamed in"

    expected = [expected_series(events) for events in variants]
    for number in range(WIDE_RUNS):
        want, run = expected[number % VARIANTS], f"wide-{number}"
        labels = {"run": run, "training_job": "wide-job", "loader": "wide.py", "rank": "0"}
        for name in ("loaderscope_batches_total", "loaderscope_outstanding_tasks", "loaderscope_prefetch_window_tasks"):
            assert one(series, name, **labels) == want[name], (run, name)
        for name in ("loaderscope_wait_seconds_total", "loaderscope_epoch_seconds_total"):
            assert one(series, name, **labels) == pytest.approx(want[name], rel=1e-9), (run, name)
        states = {dict(key)["state"]: value for key, value in of(series, "loaderscope_workers", run=run).items()}
        assert states == {str(state): want["states"].get(str(state), 0) for state in meters.STATES}
        assert per_worker(series, "loaderscope_fetch_seconds_count", run) == want["fetches"]
        assert per_worker(series, "loaderscope_worker_queue_tasks", run) == want["queues"]
    assert one(series, "loaderscope_runs_unexported") == 0


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
    assert set(counts) == {*map(str, range(meters.MAX_WORKERS)), "other"}
    assert counts["other"] == 3 * (20 - meters.MAX_WORKERS) and sum(counts.values()) == 60
    sums = per_worker(series, "loaderscope_fetch_seconds_sum", run.id)
    assert sums["other"] == pytest.approx(3 * 0.0004 * sum(range(17, 21)))
    queues = per_worker(series, "loaderscope_worker_queue_tasks", run.id)
    assert set(queues) == set(counts)
    assert sum(("run", run.id) in labels for _, labels in series) == 373  # docs/DESIGN.md's most per run


def from_the_workers(state: LoaderState) -> meters.Reading:
    """What the meters should read, counted from scratch from every worker of the state."""
    workers, queues, fetches = Counter(), Counter(), {}
    for worker in state.workers.values():
        label = meters.worker_label(worker.id)
        workers[worker.status] += 1
        queues[label] += len(worker.queue)
        counts, total = fetches.get(label, ([0] * (len(meters.BUCKETS) + 1), 0.0))
        for dt in worker.fetch_times:
            counts[bisect.bisect_left(meters.BUCKETS, dt)] += 1
        fetches[label] = (counts, total + math.fsum(worker.fetch_times))
    return meters.Reading(meters.Meters._values(state), tuple(workers[s] for s in meters.STATES), dict(queues),
                          fetches)


def real_loader_events() -> list[dict[str, Any]]:
    """A real DataLoader's events (3 workers, batches parked out of order), as its probe recorded them."""
    from loaderscope import InstrumentedDataLoader

    events: list[dict[str, Any]] = []
    loader = InstrumentedDataLoader(Uneven(), batch_size=4, num_workers=3, sink=events.extend)
    for _ in loader:
        pass
    loader.close()
    return events


def simulated_events() -> list[dict[str, Any]]:
    """20 workers (the last ones under "other") over two epochs, one stuck fetch, then one worker killed."""
    costs = CostModel(stalls=[Stall(task=5, seconds=15.0)], stuck_after_s=10.0, die=Death(task=70, epoch=1),
                      worker_factor={3: 4.0})
    return run_core(make_config(num_workers=20, size=200, batch_size=2, epochs=2), costs)


def lying_events() -> list[dict[str, Any]]:
    """A producer whose arrive names another worker than the task's, before that worker took it:
    the task leaves its own worker's index queue (state._leave_result_queue)."""
    return [{"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": 2}},
            {"kind": "epoch_start", "t": 0.0, "epoch": 0},
            {"kind": "dispatch", "t": 0.1, "idx": 0, "worker": 0},
            {"kind": "dispatch", "t": 0.1, "idx": 1, "worker": 1},
            {"kind": "arrive", "t": 0.2, "idx": 0, "worker": 1},
            {"kind": "skip", "t": 0.3, "idx": 1, "worker": 0}]


def abandoned_events() -> list[dict[str, Any]]:
    """An iterator left with batches queued and one stuck, then the next epoch: its epoch_start idles
    and empties every worker (state._epoch_start), naming none."""
    return [{"kind": "run_start", "t": 0.0, "mode": "real", "config": {"num_workers": 2}},
            {"kind": "epoch_start", "t": 0.0, "epoch": 0},
            *({"kind": "dispatch", "t": 0.1, "idx": idx, "worker": idx % 2} for idx in range(4)),
            {"kind": "fetch_start", "t": 0.2, "idx": 0, "worker": 0},
            {"kind": "fetch_start", "t": 0.2, "idx": 1, "worker": 1},
            {"kind": "worker_stuck", "t": 10.2, "idx": 1, "worker": 1, "elapsed": 10.0},
            {"kind": "epoch_end", "t": 11.0, "epoch": 0, "batches": 0, "abandoned": True},
            {"kind": "epoch_start", "t": 12.0, "epoch": 1},
            {"kind": "dispatch", "t": 12.1, "idx": 0, "worker": 0}]


@pytest.mark.parametrize("frame", [1, 7, 500])
@pytest.mark.parametrize("make", [real_loader_events, simulated_events, lying_events, abandoned_events])
def test_the_meters_read_what_the_workers_say_after_every_frame(make: Any, frame: int) -> None:
    log = EventLog("metered", memory_events=100)
    events = make()
    for start in range(0, len(events), frame):
        log.append([dict(event) for event in events[start:start + frame]])
        kept, counted = log.meters.reading(), from_the_workers(log.state)
        assert (kept.values, kept.workers, kept.queues) == (counted.values, counted.workers, counted.queues)
        assert {label: counts for label, (counts, _) in kept.fetches.items()} == \
            {label: counts for label, (counts, _) in counted.fetches.items()}
        for label, (_, total) in kept.fetches.items():  # added in another order
            assert total == pytest.approx(counted.fetches[label][1], rel=1e-12)
    assert sum(log.meters.reading().workers) == len(log.state.workers) > 0


class Deaf:
    """A producer's control channel that takes every control and does nothing with it."""

    async def send(self, message: dict[str, Any]) -> None:
        pass


def test_a_run_moved_to_disk_is_exported_as_it_was(tmp_path: Path) -> None:
    manager = RunManager(ServerConfig(token="metrics-test-token-0123", data_dir=tmp_path, max_runs=1))
    run, _ = manager.attach(None, Deaf())
    run.ingest(simulated_events()[:-1])  # no run_end: its producer went away
    manager.detach(run)
    before = {key: value for key, value in _exported(manager).items() if ("run", run.id) in key[1]}
    assert one(before, "loaderscope_wait_seconds_total") > 0 and one(before, "loaderscope_workers", state="died") == 1
    manager.create(scenario=None, mode="real", params={}, origin="external")  # takes the one place in memory
    assert run.log.parked and not run.log.state.workers
    after = {key: value for key, value in _exported(manager).items() if ("run", run.id) in key[1]}
    age = "loaderscope_last_event_age_seconds"
    assert {k: v for k, v in after.items() if k[0] != age} == {k: v for k, v in before.items() if k[0] != age}


def test_a_fetch_time_equal_to_a_bound_counts_in_its_bucket() -> None:
    manager = _manager()
    run = manager.create(scenario=None, mode="real", params={}, origin="external")
    _fetches(run, workers=1, per_worker=0)
    run.ingest([{"kind": "fetch_end", "t": 1.0, "idx": idx, "worker": 0, "dt": dt}
                for idx, dt in enumerate((0.0005, 0.001, 0.0010001, 60.0, 61.0))])
    buckets = {dict(labels)["le"]: value for labels, value in
               of(_exported(manager), "loaderscope_fetch_seconds_bucket", run=run.id, worker="0").items()}
    assert (buckets["0.0005"], buckets["0.001"], buckets["0.0025"], buckets["60.0"], buckets["+Inf"]) == (1, 2, 3, 4, 5)


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
