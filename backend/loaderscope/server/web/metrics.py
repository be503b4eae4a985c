"""◆ ``GET /metrics``: what the dashboard knows of each run, for the cluster's Prometheus.

Every number comes from what the server already keeps, never from a trace file: each run's meters
(``server/runs/meters.py``), kept up to date as its events are applied, and a few counters of its
store. A scrape copies them on the event loop, where they change (a scrape sees no half-applied
frame): a few dozen numbers per run, whatever its number of workers. The series are built and
encoded from those copies in a worker thread. Label values are bounded: at most ``MAX_RUNS`` runs,
``meters.MAX_WORKERS`` worker ids per run, ``MAX_LABEL`` characters of text.
docs/DESIGN.md §6 lists the metrics; deploy/prometheus/ has the scrape config and alert rules.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate

from fastapi import APIRouter, Request, Response
from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from loaderscope.events import RunStatus
from loaderscope.server.runs.manager import Run, RunManager
from loaderscope.server.runs.meters import BUCKETS, MAX_WORKERS, OTHER, STATES

# Runs exported one by one, live ones first then the newest; the rest are only counted (runs by
# status, and loaderscope_runs_unexported). Twice the 64 producers a dashboard takes: every live run
# and as many ended ones. A scrape of 128 runs of 8 workers is ~27,000 series, ~0.6 s of CPU to encode
# on the 2-core VM (bench/metrics_scrape.py). A logdir's runs are exported once a page opens them (their
# events are then in the store): a logdir of 10,000 traces is read by nobody for a scrape.
MAX_RUNS = 128
MAX_LABEL = 100  # characters of a loader name or job id (a default name is the whole command line)
_BOUNDS = (*map(repr, BUCKETS), "+Inf")  # the le label values
# logdir runs add these to the statuses a run can have (server/logdir.py, FileSource.status)
STATUSES = (*(str(s) for s in RunStatus), "truncated", "unreadable")
RUN_LABELS = ("run", "training_job", "loader", "rank")

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text (or OpenMetrics, as the scraper's Accept asks); needs the token like /api/.

    The runs' meters are copied on the event loop, where they change; the series are built and
    encoded (prometheus_client: tens of µs per series, bench/metrics_scrape.py) in a worker thread,
    one scrape at a time, so that ingest and every other route go on meanwhile.
    """
    exporter: Exporter = request.app.state.metrics
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    async with exporter.encoding:
        body = await asyncio.to_thread(encode, exporter.read())
    return Response(body, media_type=content_type)


def _text(value: object) -> str:
    return "" if value is None else str(value)[:MAX_LABEL]


class Exporter:
    """The dashboard's metrics: its runs' meters, copied on the event loop (``read``), and its own
    process (CPU, memory: prometheus_client's ProcessCollector, read from /proc at encoding)."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self.encoding = asyncio.Lock()
        self.process = ProcessCollector(namespace="loaderscope_dashboard", registry=None)

    def read(self) -> Snapshot:
        """Plain numbers of every exported run, taken at once (event loop only: the meters change
        there); building and encoding the series from them can then run in any thread."""
        runs = self.manager.listed()
        held = held_runs(runs)
        exported = held[:MAX_RUNS]
        return Snapshot(statuses=Counter(run.status for run in runs), unexported=len(held) - len(exported),
                        producers=self.manager.producers, viewers=self.manager.viewers,
                        runs=[_read(run) for run in exported], process=self.process)


def _read(run: Run) -> RunReading:
    """A run's numbers: its meters and its store's counters, O(worker labels) whatever its workers."""
    s, log = run.log.state, run.log  # the state's names and settings only: a parked run keeps those
    meters = log.meters.reading()
    return RunReading(
        labels=[run.id, _text(s.job), _text(s.name), str(s.rank)],
        info=[_text(run.mode or s.mode), run.origin, str(s.world_size)],
        status=run.status, age=run.event_age(),
        values=(log.next_seq, run.dropped, log.cut_events, log.state_problem_count, *meters.values),
        workers=meters.workers, queues=meters.queues, fetches=meters.fetches)


@dataclass
class RunReading:
    """One run's numbers at a scrape; ``values`` in the order of ``_Families.scalars``."""

    labels: list[str]
    info: list[str]
    status: str
    age: float | None
    values: tuple[float, ...]
    workers: tuple[int, ...]  # in the order of meters.STATES
    queues: dict[str, int]
    fetches: dict[str, tuple[list[int], float]]  # per worker label: fetches per bucket (not cumulative), sum


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
        for worker_status, count in zip(STATES, run.workers, strict=True):
            self.workers.add_metric([*labels, str(worker_status)], count)
        for label in sorted(run.queues, key=_worker_order):
            self.queue.add_metric([*labels, label], run.queues[label])
        for label in sorted(run.fetches, key=_worker_order):
            counts, total = run.fetches[label]
            self.fetch.add_metric([*labels, label], list(zip(_BOUNDS, accumulate(counts))), total)

    def all(self) -> Iterator[Metric]:
        return iter((self.info, self.status, self.age, *self.scalars, self.workers, self.queue, self.fetch))
