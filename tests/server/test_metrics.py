"""GET /metrics: real loaders (watch()ed, and the dashboard's own run processes) on a real dashboard,
read back with prometheus_client's parser and held against what the REST API says of the same run."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import torch
from torch.utils.data import DataLoader

import loaderscope
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.server.config import ServerConfig
from loaderscope.server.runs import meters
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.web import metrics
from tests.conftest import wait_for
from tests.server.producers import frames, produce
from tests.server.series import Uneven, listing, of, one, parse, per_worker, scrape


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
    assert one(series, "loaderscope_reorder_buffer_high_tasks", **labels) == stats["parked_high"] > 0
    assert one(series, "loaderscope_prefetch_window_tasks", **labels) == stats["window"] == 6
    count = one(series, "loaderscope_fetch_seconds_count", **labels)
    assert count == sum(w["tasks"] for w in stats["workers"]) == 12
    slowest = max(w["fetch_max"] for w in stats["workers"])
    buckets = {float(dict(labels)["le"]): value for labels, value in
               of(series, "loaderscope_fetch_seconds_bucket", **labels).items()}
    assert buckets[float("inf")] == count  # every fetch is at most the slowest, in the bucket that says so
    assert all(value == count for le, value in buckets.items() if le >= slowest)
    states = {dict(labels)["state"]: value for labels, value in of(series, "loaderscope_workers", **labels).items()}
    assert states["exited"] + states["idle"] == 3 and states["stuck"] == states["died"] == 0
    assert one(series, "loaderscope_producer_lost", **labels) == 0 and not of(series, "loaderscope_worker_state")
    unsampled = 0 if stats["memory"] else 4  # a run this short may end before the probe's first memory sample
    assert sum(("run", run_id) in key for _, key in series) == metrics.MAX_SERIES - meters.MAX_NAMED - unsampled


def test_a_copy_on_read_runs_memory_is_exported_as_its_summary_gives_it(start_server: Any, tmp_path: Path) -> None:
    """A real recording (frontend/tests/fixtures/make_memory.py: 600,000 strings, 2 workers) from a logdir:
    the workers' USS, the pages they copied, the processes' PSS and the headroom, as the summary has them."""
    from loaderscope.traces.jsonl import TraceWriter

    fixture = Path(__file__).parents[2] / "frontend" / "tests" / "fixtures" / "memory_copy_on_read.jsonl"
    events = [{k: v for k, v in orjson.loads(line).items() if k not in ("seq", "run")}
              for line in fixture.read_text().splitlines()]
    logs = tmp_path / "logs"
    logs.mkdir()
    with TraceWriter(logs / "strings.trace.jsonl", "producer", mode="real") as writer:
        writer.write(events)
    live = start_server(logdir=str(logs))
    run_id = wait_for(lambda: next((r["id"] for r in listing(live) if r["origin"] == "logdir"), None))
    memory = live.run(run_id)["statistics"]["memory"]  # a page opens it: its file is read whole
    labels = {"run": run_id}
    series = wait_for(lambda: of(s := scrape(live), "loaderscope_workers_uss_bytes", **labels) and s)
    workers = memory["workers"]
    assert one(series, "loaderscope_workers_uss_bytes", **labels) == sum(w["uss"] for w in workers)
    copied = one(series, "loaderscope_workers_copied_bytes", **labels)
    assert copied == sum(w["copied"] for w in workers) > 50e6  # the copy-on-read the diagnosis names
    assert one(series, "loaderscope_processes_pss_bytes", **labels) == memory["total_pss"]
    assert one(series, "loaderscope_host_headroom_bytes", **labels) == memory["headroom"] > 0


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


def recorded_loader() -> list[dict[str, Any]]:
    """A real 6-batch loader of 2 workers, as its probe recorded it."""
    from loaderscope import InstrumentedDataLoader

    events: list[dict[str, Any]] = []
    loader = InstrumentedDataLoader(torch.arange(24.0), batch_size=4, num_workers=2, sink=events.extend)
    for _ in loader:
        pass
    loader.close()
    return events


def write_rank(path: Path, events: list[dict[str, Any]], rank: int, *, age: float = 0.0) -> None:
    """Rank ``rank`` of a 4-rank job, as ``loaderscope record`` writes it; last written ``age`` s ago."""
    from loaderscope.traces.jsonl import TraceWriter

    start = {**events[0], "job": "job-7", "world_size": 4, "rank": rank, "name": "train_loader"}
    with TraceWriter(path, "producer", mode="real") as writer:
        writer.write([start, *({**event, "rank": rank} for event in events[1:])])
    if age:
        os.utime(path, (time.time() - age, time.time() - age))


def test_logdir_runs_of_the_last_hour_are_exported_without_a_page(start_server: Any, tmp_path: Path) -> None:
    events = recorded_loader()
    logs = tmp_path / "logs"
    write_rank(logs / "DataLoader-rank0.trace.jsonl", events, 0)
    write_rank(logs / "DataLoader-rank1.trace.jsonl", events, 1)
    write_rank(logs / "DataLoader-rank2.trace.jsonl", events, 2, age=metrics.WINDOW + 600)  # ended long ago
    write_rank(logs / "DataLoader-rank3.trace.jsonl", events[:-5], 3, age=120)  # killed: no run_end, silent
    live = start_server(logdir=str(logs))
    found = wait_for(lambda: len(runs := [r for r in listing(live) if r["origin"] == "logdir"]) == 4 and runs)
    listed = {run["rank"]: run for run in found}
    series = scrape(live)
    assert {dict(labels)["rank"] for labels in of(series, "loaderscope_run_info", origin="logdir", world_size="4")} \
        == {"0", "1", "3"}
    for rank in (0, 1):  # from the index: no file was read for this scrape
        labels = {"run": listed[rank]["id"], "training_job": "job-7", "loader": "train_loader", "rank": str(rank)}
        assert one(series, "loaderscope_run_status", status="done", **labels) == 1
        assert one(series, "loaderscope_batches_total", **labels) == 6
        assert one(series, "loaderscope_events_total", **labels) == listed[rank]["events"] == len(events)
        assert one(series, "loaderscope_producer_lost", **labels) == 0
        assert not of(series, "loaderscope_wait_seconds_total", **labels)  # the index does not say it
    killed = {"run": listed[3]["id"], "rank": "3"}
    assert one(series, "loaderscope_run_status", status="truncated", **killed) == 1
    assert one(series, "loaderscope_producer_lost", **killed) == 1
    assert one(series, "loaderscope_runs", status="done") == 3 and one(series, "loaderscope_runs_exported") == 3

    live.run(listed[1]["id"])  # a page opens rank 1: its file is read, its meters then say the rest
    labels = {"run": listed[1]["id"], "rank": "1"}
    series = wait_for(lambda: of(s := scrape(live), "loaderscope_wait_seconds_total", **labels) and s)
    detail = live.run(listed[1]["id"])
    assert one(series, "loaderscope_batches_total", **labels) == detail["batches"] == 6
    assert one(series, "loaderscope_events_total", **labels) == detail["events"] == len(events)
    assert one(series, "loaderscope_wait_seconds_total", **labels) == pytest.approx(
        detail["statistics"]["consumer_wait"], rel=1e-9)
    assert one(series, "loaderscope_fetch_seconds_count", **labels) == 6


def test_a_live_logdir_run_is_read_for_its_numbers_without_its_events_then_keeps_only_its_summary(
        tmp_path: Path) -> None:
    """In-process (the store's memory is not visible from outside): a followed file no viewer opened
    keeps its newest events only, and once it ends, its summary and meters alone; a viewer's, its events."""
    import asyncio

    from loaderscope.server.budgets import MEMORY_BYTES
    from loaderscope.server.logdir.follow import METERED_BYTES, Logdir
    from loaderscope.server.logdir.storage import storage_for
    from loaderscope.traces.jsonl import TraceWriter

    events = recorded_loader()
    logs = tmp_path / "logs"

    async def scenario() -> None:
        manager = RunManager(ServerConfig(token="metrics-test-token-0123", logdir=str(logs), logdir_poll=0.05))
        logdir = Logdir(manager, storage_for(str(logs)))
        writers = {name: TraceWriter(logs / f"{name}.trace.jsonl", "producer", mode="real") for name in ("a", "b")}
        body = [*events[:-1], *({"kind": "loop", "t": events[-2]["t"], "others": 0.0} for _ in range(3000))]
        for writer in writers.values():  # over METERED_BYTES of events
            writer.write(body)
            writer.flush()
        await logdir.scan()
        a, b = (logdir.files[str(logs / f"{name}.trace.jsonl")] for name in ("a", "b"))
        manager.opened(b)  # a viewer
        for run in (a, b):  # every line read, and a read after them found nothing more
            await asyncio.wait_for(run.source.caught_up.wait(), 60)
        assert a.log.next_seq == b.log.next_seq == len(body)
        assert a.log.memory_bytes == METERED_BYTES < b.log.memory_bytes == MEMORY_BYTES
        assert not a.log.in_memory(0) and a.log.in_memory(len(body) - 1) and b.log.in_memory(0)
        read = metrics.Exporter(manager).read()
        assert {r.labels[0]: r.meters.values[0] for r in read.runs if r.meters} == {a.id: 6, b.id: 6}
        for writer in writers.values():
            writer.write(events[-1:])
            writer.close()
        while not (a.closed and b.closed):
            await asyncio.sleep(0.02)
        assert a.log.parked and not a.log.state.workers and not b.log.parked
        assert a.detail()["statistics"] == b.detail()["statistics"] and a.detail()["status"] == "done"
        text = metrics.Exporter(manager).read().text().decode()
        assert one(parse(text), "loaderscope_fetch_seconds_count", run=a.id) == 6
        await manager.shutdown()

    # a thread of its own: a browser test before this one in the same pytest worker leaves Playwright's
    # event loop on this thread, where asyncio.run() refuses to start another
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, scenario()).result()


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
    """What /metrics should say of a run of these events: from stats.summary()."""
    state = reduce(events)
    stats = summary(state)
    stuck_or_dead = sorted(w["worker"] for w in stats["workers"] if w["status"] in ("stuck", "died"))
    return {"loaderscope_batches_total": stats["batches"],
            "loaderscope_wait_seconds_total": stats["consumer_wait"],
            "loaderscope_epoch_seconds_total": stats["epoch_wall"],
            "loaderscope_prefetch_window_tasks": stats["window"],
            "loaderscope_outstanding_tasks": state.outstanding,
            "states": Counter(w["status"] for w in stats["workers"]),
            "fetches": sum(w["tasks"] for w in stats["workers"]), "named": stuck_or_dead[:meters.MAX_NAMED]}


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


@pytest.mark.perf  # it compares wall-clock waits: out of the default run, which a loaded CI box made fail
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
        assert one(series, "loaderscope_fetch_seconds_count", **labels) == want["fetches"]
        assert sorted(map(int, per_worker(series, "loaderscope_worker_state", run))) == want["named"]
    assert one(series, "loaderscope_runs_unexported") == 0
