"""◆ ``GET /metrics``: what the dashboard knows of each run, for the cluster's Prometheus.

Every number is read from what the server already keeps (each run's ``LoaderState``, its store's
counters), never from a trace file, on the event loop where that state changes (a scrape sees no
half-applied event); the series are built and encoded from those plain numbers in a worker thread.
A reading costs runs × workers, plus the fetches that finished since the last scrape (the
fetch-time histograms are kept as running bucket counts). Label values are bounded:
at most ``MAX_RUNS`` runs, ``MAX_WORKERS`` worker ids per run, ``MAX_LABEL`` characters of text.
docs/DESIGN.md §6 lists the metrics; deploy/prometheus/ has the scrape config and alert rules.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from fastapi import APIRouter, Request, Response
from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from loaderscope.events import RunStatus
from loaderscope.server.runs.manager import Run, RunManager
from loaderscope.contract.rules import WorkerStatus
from loaderscope.state import LoaderState

# Runs exported one by one, live ones first then the newest; the rest are only counted (runs by
# status, and loaderscope_runs_unexported). Twice the 64 producers a dashboard takes: every live run
# and as many ended ones. A scrape of 128 runs of 8 workers is ~27,000 series, ~0.6 s of CPU to encode
# on the 2-core VM (bench/metrics_scrape.py). A logdir's runs are exported once a page opens them (their
# events are then in the store): a logdir of 10,000 traces is read by nobody for a scrape.
MAX_RUNS = 128
# Worker ids with series of their own; the fetches and queues of workers from this id on are added
# up under worker="other". A run has at most 33 + 17 × 20 = 373 series (docs/DESIGN.md §6).
MAX_WORKERS = 16
OTHER = "other"
MAX_LABEL = 100  # characters of a loader name or job id (a default name is the whole command line)
# Fetch times in seconds: 0.5 ms (a tensor slice) to a minute (a stuck read is past the last bound).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_BOUNDS = (*map(repr, BUCKETS), "+Inf")  # the le label values
# logdir runs add these to the statuses a run can have (server/logdir.py, FileSource.status)
STATUSES = (*(str(s) for s in RunStatus), "truncated", "unreadable")
RUN_LABELS = ("run", "training_job", "loader", "rank")

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text (or OpenMetrics, as the scraper's Accept asks); needs the token like /api/.

    The numbers are read on the event loop, where the runs' state changes; the series are built
    and encoded (prometheus_client: tens of µs per series, bench/metrics_scrape.py) in a worker
    thread, one scrape at a time, so that ingest goes on meanwhile.
    """
    exporter: Exporter = request.app.state.metrics
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    async with exporter.encoding:
        body = await asyncio.to_thread(encode, exporter.read())
    return Response(body, media_type=content_type)


Counts = npt.NDArray[np.int64]


@dataclass
class _Fetches:
    """One run's fetch-time histograms: running counts per worker label, and how many of each
    worker's fetch times (``Worker.fetch_times``, which only grows) have been counted."""

    state: LoaderState
    seen: dict[int, int] = field(default_factory=dict)
    counts: dict[str, Counts] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)

    def catch_up(self) -> None:
        for worker in self.state.workers.values():
            label = worker_label(worker.id)
            if label not in self.counts:  # a worker has its series from its start, 0 until it fetches
                self.counts[label], self.sums[label] = np.zeros(len(BUCKETS) + 1, np.int64), 0.0
            start = self.seen.get(worker.id, 0)
            if start == len(worker.fetch_times):
                continue
            new = np.asarray(worker.fetch_times[start:], dtype=np.float64)
            self.seen[worker.id] = start + len(new)
            # searchsorted "left": a time equal to a bound counts in that bucket (Prometheus's le is ≤)
            found = np.bincount(np.searchsorted(BUCKETS, new, "left"), minlength=len(BUCKETS) + 1)
            self.counts[label] += found
            self.sums[label] += float(new.sum())

    def buckets(self, label: str) -> list[tuple[str, float]]:
        return list(zip(_BOUNDS, np.cumsum(self.counts[label]).tolist()))


def worker_label(wid: int) -> str:
    return str(wid) if 0 <= wid < MAX_WORKERS else OTHER


def _text(value: object) -> str:
    return "" if value is None else str(value)[:MAX_LABEL]


class Exporter:
    """The dashboard's metrics: its runs, read on the event loop (``read``), and its own process
    (CPU, memory: prometheus_client's ProcessCollector, read from /proc at encoding)."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self.encoding = asyncio.Lock()
        self.process = ProcessCollector(namespace="loaderscope_dashboard", registry=None)
        self._fetches: dict[str, _Fetches] = {}

    def read(self) -> Snapshot:
        """Plain numbers of every exported run, taken at once (event loop only: the runs' state
        changes there); building and encoding the series from them can then run in any thread."""
        runs = self.manager.listed()
        held = held_runs(runs)
        exported = held[:MAX_RUNS]
        self._forget(exported)
        return Snapshot(statuses=Counter(run.status for run in runs), unexported=len(held) - len(exported),
                        producers=self.manager.producers, viewers=self.manager.viewers,
                        runs=[self._read(run) for run in exported], process=self.process)

    def _forget(self, exported: list[Run]) -> None:
        """Histograms of runs no longer exported go (they are rebuilt from the run's state if it comes back)."""
        keep = {run.id: run.log.state for run in exported}
        for run_id in [r for r, f in self._fetches.items() if keep.get(r) is not f.state]:
            del self._fetches[run_id]

    def _read(self, run: Run) -> RunReading:
        s, log = run.log.state, run.log
        fetches = self._fetches.get(run.id)
        if fetches is None:
            fetches = self._fetches[run.id] = _Fetches(s)
        fetches.catch_up()
        queues: Counter[str] = Counter()
        for worker in s.workers.values():
            queues[worker_label(worker.id)] += len(worker.queue)
        return RunReading(
            labels=[run.id, _text(s.job), _text(s.name), str(s.rank)],
            info=[_text(run.mode or s.mode), run.origin, str(s.world_size)],
            status=run.status, age=run.event_age(),
            values=(log.next_seq, run.dropped, log.cut_events, log.state_problem_count, s.batches, s.epochs_done,
                    s.consumer_wait, s.consumer_wait + s.step_total, s.worker_deaths, s.timeouts, s.outstanding,
                    s.window, len(s.result_queue), len(s.buffer), s.buffer_high),
            workers=Counter(w.status for w in s.workers.values()), queues=queues,
            fetches={label: (fetches.buckets(label), fetches.sums[label]) for label in fetches.counts})


@dataclass
class RunReading:
    """One run's numbers at a scrape; ``values`` in the order of ``_Families.scalars``."""

    labels: list[str]
    info: list[str]
    status: str
    age: float | None
    values: tuple[float, ...]
    workers: Counter[WorkerStatus]
    queues: Counter[str]
    fetches: dict[str, tuple[list[tuple[str, float]], float]]


@dataclass
class Snapshot:
    """A scrape: the numbers read on the loop, made into metric families when an encoder collects
    (it stands for the registry prometheus_client's encoders take)."""

    statuses: Counter[str]
    unexported: int
    producers: int
    viewers: int
    runs: list[RunReading]
    process: ProcessCollector

    def collect(self) -> Iterator[Metric]:
        yield from self._dashboard()
        families = _Families()
        for run in self.runs:
            families.add(run)
        yield from families.all()
        yield from self.process.collect()

    def _dashboard(self) -> Iterator[Metric]:
        by_status = GaugeMetricFamily("loaderscope_runs", "Runs the dashboard lists, by status (logdir runs not "
                                      "opened yet included)", labels=["status"])
        for status, count in sorted(self.statuses.items()):
            by_status.add_metric([status], count)
        yield by_status
        yield GaugeMetricFamily("loaderscope_runs_unexported", f"Runs held but without series of their own: "
                                f"past the {MAX_RUNS} exported (live ones and the newest go first)", self.unexported)
        yield GaugeMetricFamily("loaderscope_producers", "Producer websockets connected", self.producers)
        yield GaugeMetricFamily("loaderscope_viewers", "Viewer websockets open", self.viewers)


def _worker_order(label: str) -> int:
    return MAX_WORKERS if label == OTHER else int(label)


def held_runs(runs: list[Run]) -> list[Run]:
    """The runs whose events the store holds (a logdir run once a page opened it; any other from its
    start), live ones first, then the newest: the first MAX_RUNS get series of their own."""
    held = [run for run in runs if run.source is None or run.log.next_seq > 0]
    held.sort(key=lambda run: (run.closed, -run.created))
    return held


class _Families:
    """One family per metric name for a scrape, filled run by run."""

    def __init__(self) -> None:
        def gauge(name: str, text: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=[*RUN_LABELS, *extra])

        def counter(name: str, text: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, text, labels=list(RUN_LABELS))

        self.info = gauge("loaderscope_run_info", "1 for each exported run, with how it was produced",
                          ("mode", "origin", "world_size"))
        self.status = gauge("loaderscope_run_status", "1 for the run's status, 0 for the others", ("status",))
        self.age = gauge("loaderscope_last_event_age_seconds", "Seconds since the run's last event reached the "
                         "dashboard (absent before its first)")
        self.events = counter("loaderscope_events", "Events the dashboard stored for the run")
        self.dropped = counter("loaderscope_events_dropped", "Events the producer lost before they reached "
                               "the dashboard (its own count, or gaps in its seq)")
        self.cut = counter("loaderscope_events_cut", "Events stored with their largest fields cut (over 256 KiB)")
        self.problems = counter("loaderscope_state_problems", "Events the reducer could not apply (kept, "
                                "not counted in the statistics)")
        self.batches = counter("loaderscope_batches", "Batches the loader delivered to the training loop")
        self.epochs = counter("loaderscope_epochs", "Epochs finished (peeks not counted)")
        self.wait = counter("loaderscope_wait_seconds", "Seconds the training loop waited inside next() "
                            "for a batch (producer clock)")
        self.epoch_seconds = counter("loaderscope_epoch_seconds", "Seconds the training loop spent in this "
                                     "loader's epochs, waiting or stepping: wait / epoch seconds is the "
                                     "dashboard's input_bound")
        self.deaths = counter("loaderscope_worker_deaths", "Workers that exited by a signal or a non-zero code")
        self.timeouts = counter("loaderscope_timeouts", "DataLoader(timeout=...) expirations")
        self.outstanding = gauge("loaderscope_outstanding_tasks", "Tasks dispatched to workers and not yet "
                                 "taken by the main process (torch's _tasks_outstanding)")
        self.window = gauge("loaderscope_prefetch_window_tasks", "Most tasks in flight: prefetch_factor x "
                            "num_workers (1 in-process)")
        self.result_queue = gauge("loaderscope_result_queue_tasks", "Fetched batches on the result queue")
        self.buffer = gauge("loaderscope_reorder_buffer_tasks", "Batches that arrived out of order, parked "
                            "until the one before them comes")
        self.buffer_high = gauge("loaderscope_reorder_buffer_high_tasks", "The reorder buffer's high-water mark")
        self.workers = gauge("loaderscope_workers", "Workers by state (stuck: a fetch past the stuck "
                             "threshold; died: killed or crashed)", ("state",))
        self.queue = gauge("loaderscope_worker_queue_tasks", "Tasks waiting in a worker's index queue", ("worker",))
        self.fetch = HistogramMetricFamily("loaderscope_fetch_seconds", "Seconds a worker took to fetch and "
                                           "collate one batch", labels=[*RUN_LABELS, "worker"])

        self.scalars: tuple[CounterMetricFamily | GaugeMetricFamily, ...] = (
            self.events, self.dropped, self.cut, self.problems, self.batches, self.epochs, self.wait,
            self.epoch_seconds, self.deaths, self.timeouts, self.outstanding, self.window, self.result_queue,
            self.buffer, self.buffer_high)

    def add(self, run: RunReading) -> None:
        labels = run.labels
        self.info.add_metric([*labels, *run.info], 1)
        for known in (STATUSES if run.status in STATUSES else (*STATUSES, run.status)):
            self.status.add_metric([*labels, known], float(known == run.status))
        if run.age is not None:
            self.age.add_metric(labels, run.age)
        for family, value in zip(self.scalars, run.values, strict=True):
            family.add_metric(labels, value)
        for worker_status in WorkerStatus:
            self.workers.add_metric([*labels, str(worker_status)], run.workers[worker_status])
        for label in sorted(run.queues, key=_worker_order):
            self.queue.add_metric([*labels, label], run.queues[label])
        for label in sorted(run.fetches, key=_worker_order):
            buckets, total = run.fetches[label]
            self.fetch.add_metric([*labels, label], buckets, total)

    def all(self) -> Iterator[Metric]:
        return iter((self.info, self.status, self.age, *self.scalars, self.workers, self.queue, self.fetch))
