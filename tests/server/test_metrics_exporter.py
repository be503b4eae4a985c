"""The metrics exporter (``server/web/metrics.py``) on a run manager, without a server: the caps on series
per run and on runs, the running histograms against the workers' own reading after every frame, and both
text formats."""

from __future__ import annotations

import bisect
import math
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from loaderscope.model.state import LoaderState
from loaderscope.server.config import ServerConfig
from loaderscope.server.runs import meters
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.store import EventLog
from loaderscope.server.web import metrics
from loaderscope.sim import CostModel, Death, Stall
from tests.core.sim_helpers import make_config, run_core
from tests.server.series import Series, Uneven, of, one, parse


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
    return parse((exporter or metrics.Exporter(manager)).read().text().decode())


def test_a_runs_series_are_bounded_whatever_its_workers_and_name_its_stuck_and_dead_ones() -> None:
    manager = _manager()
    run = manager.create(scenario=None, mode="real", params={}, origin="external")
    _fetches(run, workers=20, per_worker=3)
    run.ingest([{"kind": "memory", "t": 0.5, "procs": [{"pid": 100, "uss": 5 << 20, "rss": 300 << 20},
                                                      *({"worker": w, "pid": 200 + w, "uss": 8 << 20, "rss": 260 << 20}
                                                        for w in range(20))], "available": 20 << 30}])
    assert sum(("run", run.id) in labels for _, labels in _exported(manager)) == metrics.MAX_SERIES - meters.MAX_NAMED
    run.ingest([*({"kind": "dispatch", "t": 1.0, "idx": 100 + w, "worker": w} for w in (19, 2, 7, 11, 5, 3)),
                *({"kind": "fetch_start", "t": 1.0, "idx": 100 + w, "worker": w} for w in (19, 2, 7, 11, 5, 3)),
                *({"kind": "worker_stuck", "t": 12.0, "idx": 100 + w, "worker": w, "elapsed": 11.0}
                  for w in (19, 7, 5)),
                *({"kind": "worker_died", "t": 13.0, "worker": w, "signal": "SIGKILL"} for w in (11, 2, 3))])
    series = _exported(manager)
    assert sum(("run", run.id) in labels for _, labels in series) == metrics.MAX_SERIES == 52  # docs/DESIGN.md §6
    named = {(dict(labels)["worker"], dict(labels)["state"]) for labels in of(series, "loaderscope_worker_state")}
    assert named == {("2", "died"), ("3", "died"), ("5", "stuck"), ("7", "stuck")}  # the lowest ids
    assert one(series, "loaderscope_workers", state="stuck") == 3
    assert one(series, "loaderscope_workers", state="died") == 3
    assert one(series, "loaderscope_fetch_seconds_count") == 60
    assert one(series, "loaderscope_fetch_seconds_sum") == pytest.approx(3 * 0.0004 * sum(range(1, 21)))


def from_the_workers(state: LoaderState) -> meters.Reading:
    """What the meters should read, counted from scratch from every worker of the state."""
    workers, fetches, named = Counter(), [0] * (len(meters.BUCKETS) + 1), []
    for worker in sorted(state.workers.values(), key=lambda worker: worker.id):
        workers[worker.status] += 1
        for dt in worker.fetch_times:
            fetches[bisect.bisect_left(meters.BUCKETS, dt)] += 1
        if worker.status in meters.NAMED:
            named.append((worker.id, worker.status))
    return meters.Reading(meters.Meters._values(state), tuple(workers[s] for s in meters.STATES), fetches,
                          math.fsum(t for worker in state.workers.values() for t in worker.fetch_times),
                          named[:meters.MAX_NAMED])


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
    """A producer whose arrive names another worker than the task's, before that worker took it
    (state._leave_result_queue): the meters count the workers the events name."""
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
        assert (kept.values, kept.workers, kept.fetches, kept.named) == \
            (counted.values, counted.workers, counted.fetches, counted.named)
        assert kept.fetch_sum == pytest.approx(counted.fetch_sum, rel=1e-12)  # added in another order
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
               of(_exported(manager), "loaderscope_fetch_seconds_bucket", run=run.id).items()}
    assert (buckets["0.0005"], buckets["0.001"], buckets["0.0025"], buckets["60.0"], buckets["+Inf"]) == (1, 2, 3, 4, 5)


def _quiet(run: Any, seconds: float) -> None:
    """As if the run's last event came, and its producer (if any) left, ``seconds`` ago."""
    run.log.last_event_at = time.monotonic() - seconds
    if run.detached_at is not None:
        run.detached_at = run.log.last_event_at


def test_past_the_cap_stuck_dead_and_lost_runs_go_first_then_live_ones_then_the_latest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_RUNS", 4)
    manager = _manager()
    quiet = {}
    for name, seconds in (("live", 10), ("stuck", 300), ("ended", 1), ("lost", 200), ("livelier", 5),
                          ("dead worker", 400), ("long ended", metrics.WINDOW + 60)):
        run, _ = manager.attach(None, Deaf())
        _fetches(run, workers=2, per_worker=1)
        quiet[name] = run
        if name == "stuck":
            run.ingest([{"kind": "dispatch", "t": 1.0, "idx": 9, "worker": 1},
                        {"kind": "fetch_start", "t": 1.0, "idx": 9, "worker": 1},
                        {"kind": "worker_stuck", "t": 12.0, "idx": 9, "worker": 1, "elapsed": 11.0}])
        if name == "dead worker":
            run.ingest([{"kind": "worker_died", "t": 2.0, "worker": 0, "exitcode": -9, "signal": "SIGKILL"}])
        if name in ("ended", "long ended"):
            run.ingest([{"kind": "run_end", "t": 3.0, "reason": "done"}])
        if name in ("lost", "ended", "long ended"):
            manager.detach(run)  # "lost": gone without its run_end
        _quiet(run, seconds)
    series = _exported(manager)
    exported = {dict(labels)["run"] for labels in of(series, "loaderscope_batches_total")}
    assert exported == {quiet[name].id for name in ("stuck", "lost", "dead worker", "livelier")}
    assert one(series, "loaderscope_producer_lost", run=quiet["lost"].id) == 1
    assert one(series, "loaderscope_producer_lost", run=quiet["stuck"].id) == 0
    assert one(series, "loaderscope_worker_state", run=quiet["stuck"].id, worker="1", state="stuck") == 1
    assert one(series, "loaderscope_runs_unexported") == 2  # "live" and "ended"; "long ended" is past the window
    assert one(series, "loaderscope_runs_exported") == 4 and sum(of(series, "loaderscope_runs").values()) == 7


def test_a_run_is_exported_while_its_producer_is_connected_or_it_changed_within_the_window() -> None:
    manager = _manager()
    connected, _ = manager.attach(None, Deaf())  # evaluating for two hours: no event, still connected
    gone, _ = manager.attach(None, Deaf())
    ended = manager.create(scenario=None, mode="real", params={}, origin="external")
    for run in (connected, gone, ended):
        _fetches(run, workers=1, per_worker=1)
    ended.ingest([{"kind": "run_end", "t": 3.0, "reason": "done"}])
    manager.detach(gone)
    for run in (connected, gone, ended):
        _quiet(run, metrics.WINDOW - 30)
    assert {dict(labels)["run"] for labels in of(_exported(manager), "loaderscope_run_info")} == \
        {connected.id, gone.id, ended.id}
    for run in (connected, gone, ended):
        _quiet(run, metrics.WINDOW + 30)
    series = _exported(manager)
    assert {dict(labels)["run"] for labels in of(series, "loaderscope_run_info")} == {connected.id}
    assert one(series, "loaderscope_runs_unexported") == 0


def test_the_text_and_openmetrics_say_the_same_and_both_parse_strictly() -> None:
    manager = _manager()
    run, _ = manager.attach(None, Deaf())
    run.ingest(simulated_events())
    odd = manager.create(scenario=None, mode="real", params={}, origin="external")
    odd.ingest([{"kind": "run_start", "t": 0, "mode": "real", "config": {}, "name": 'a "quoted"\\name\nline',
                 "job": "j\\1"}])
    snapshot = metrics.Exporter(manager).read()
    text, openmetrics = snapshot.text().decode(), snapshot.text(openmetrics=True).decode()
    plain = {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text)
             for s in f.samples}
    strict = {(s.name, frozenset(s.labels.items())): s.value for f in openmetrics_families(openmetrics)
              for s in f.samples}
    assert plain == strict and len(plain) > 100 and openmetrics.endswith("# EOF\n")
    loader = {dict(labels)["loader"] for labels in of(plain, "loaderscope_run_info", run=odd.id)}
    assert loader == {'a "quoted"\\name\nline'}
    kinds = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert kinds["loaderscope_events"] == "counter" and kinds["loaderscope_fetch_seconds"] == "histogram"


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
