"""◆ ``GET /metrics``: what the dashboard knows of each run, for the cluster's Prometheus.

Every number comes from what the server already keeps, never from a trace file: each run's meters
(``server/runs/meters.py``), kept up to date as its events are applied, and a few counters of its
store; a logdir run whose file has not been read whole yet, from its index (its events and batches).
Exported: every run whose producer is connected, and every other run that changed within ``WINDOW``
(its last event, its producer leaving, its file growing or touched), at most ``MAX_RUNS`` of them:
runs with a worker stuck or dead or a lost producer first, then live ones, then the latest changed.
A run has at most ``MAX_SERIES`` series, whatever its workers (docs/DESIGN.md §6).

A scrape copies the numbers on the event loop, where they change (a scrape sees no half-applied
frame): a few dozen per run. The text is written from that copy in a thread of the exporter's own
(a scrape never queues behind job tables or file reads in the default pool), by ``_Writer``: about
a microsecond a series, where prometheus_client's encoder took 20 µs (bench/metrics_fleet.py).
docs/DESIGN.md §6 lists the metrics; deploy/prometheus/ has the scrape config and alert rules.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import accumulate

from fastapi import APIRouter, Request, Response
from prometheus_client import ProcessCollector
from prometheus_client.metrics_core import Metric

from loaderscope.events import RunStatus
from loaderscope.server.runs.manager import RunManager
from loaderscope.server.runs.meters import BUCKETS, MAX_NAMED, STATES, Reading
from loaderscope.server.runs.run import Run

# Runs with series of their own; the others are counted (loaderscope_runs_unexported). Twice the
# 1,024 ranks tests/server/test_metrics_fleet.py runs with a real Prometheus: 2,048 runs of MAX_SERIES is
# 98,304 series, ~0.2 s of CPU to write on the 2-core VM (bench/metrics_fleet.py).
MAX_RUNS = 2048
# A run that has not changed for this long (ended, or its producer lost) has no series any more: its
# last values reached Prometheus long before, and a lost rank's alert has fired for an hour.
WINDOW = 3600.0
MAX_LABEL = 100  # characters of a loader name or job id (a default name is the whole command line)
# info, status, last event age, producer lost, 4 store counters, 11 loader numbers, 4 of memory, 6 worker
# states, the fetch histogram (16 bounds, +Inf, sum, count), and the named workers
MAX_SERIES = 4 + 4 + 11 + 4 + len(STATES) + len(BUCKETS) + 3 + MAX_NAMED
LOST = frozenset({RunStatus.DISCONNECTED, "truncated"})  # no run_end, and its producer is gone
_BOUNDS = (*map(repr, BUCKETS), "+Inf")  # the le label values
RUN_LABELS = ("run", "training_job", "loader", "rank")
TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text (or OpenMetrics, as the scraper's Accept asks); needs the token like /api/.

    The runs' numbers are copied on the event loop, where they change; the text is written from the
    copy in the exporter's thread, one scrape at a time, so that ingest and every other route go on.
    """
    exporter: Exporter = request.app.state.metrics
    openmetrics = "application/openmetrics-text" in request.headers.get("accept", "")
    async with exporter.encoding:
        snapshot = exporter.read()
        body = await asyncio.get_running_loop().run_in_executor(exporter.thread, snapshot.text, openmetrics)
    return Response(body, media_type=OPENMETRICS if openmetrics else TEXT)


def _text(value: object) -> str:
    return "" if value is None else str(value)[:MAX_LABEL]


class Exporter:
    """The dashboard's metrics: its runs' numbers, copied on the event loop (``read``), and its own
    process (CPU, memory: prometheus_client's ProcessCollector, read from /proc in the thread)."""

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self.encoding = asyncio.Lock()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loaderscope-metrics")
        self.process = ProcessCollector(namespace="loaderscope_dashboard", registry=None)

    def read(self) -> Snapshot:
        """Plain numbers of every exported run, taken at once (event loop only: they change there);
        the text can then be written from them in any thread."""
        runs = self.manager.listed()
        chosen = exported(runs, time.monotonic())
        return Snapshot(statuses=Counter(run.status for run in runs), exported=len(chosen[0]),
                        unexported=chosen[1], producers=self.manager.producers, viewers=self.manager.viewers,
                        runs=[_read(run) for run in chosen[0]], process=self.process)


def exported(runs: list[Run], now: float) -> tuple[list[Run], int]:
    """The runs with series of their own (at most MAX_RUNS, in their order), and how many more the
    window holds. A run whose producer is connected is in the window however quiet (an evaluation
    between epochs); any other while it changed within WINDOW. An unreadable file has no numbers."""
    ranked = []
    for run in runs:
        if run.status == "unreadable":
            continue
        quiet = quiet_for(run, now)
        if run.producer is None and quiet > WINDOW:
            continue
        ended = _ended(run)
        alarming = not ended and (run.status in LOST or run.log.meters.alarming)
        ranked.append((0 if alarming else 1 if not ended else 2, quiet, run))
    ranked.sort(key=lambda item: item[:2])
    return [run for *_, run in ranked[:MAX_RUNS]], max(0, len(ranked) - MAX_RUNS)


def quiet_for(run: Run, now: float) -> float:
    """Seconds since the run last changed: its file grew or was touched (a logdir run), else its last
    event came or its producer left; 0 for a run that has not started yet."""
    if run.source is not None:
        return max(0.0, now - run.source.grew)
    changed = [t for t in (run.log.last_event_at, run.detached_at) if t is not None]
    return max(0.0, now - max(changed)) if changed else 0.0


def _ended(run: Run) -> bool:
    source = run.source
    return run.log.ended or (source is not None and not source.read_whole and source.index.reason is not None)


def _read(run: Run) -> RunReading:
    """A run's numbers: its meters and its store's counters, O(1) whatever its workers; a logdir run's
    from its index until its file has been read whole (as the run list shows it)."""
    source, log = run.source, run.log
    lost = float(run.status in LOST)
    if source is not None and not source.read_whole:
        i = source.index
        return RunReading(labels=(run.id, _text(i.job), _text(i.name), str(i.rank)),
                          info=(_text(run.mode or i.mode), run.origin, str(i.world_size)), status=run.status,
                          values=(None, lost, i.events, None, None, None, i.batches, *_UNREAD), meters=None)
    s, meters = log.state, log.meters.reading()  # the state's names and settings only: a parked run keeps those
    return RunReading(labels=(run.id, _text(s.job), _text(s.name), str(s.rank)),
                      info=(_text(run.mode or s.mode), run.origin, str(s.world_size)), status=run.status,
                      values=(run.event_age(), lost, log.next_seq, run.dropped, log.cut_events,
                              log.state_problem_count, *meters.values), meters=meters)


@dataclass
class RunReading:
    """One run's numbers at a scrape: from its meters, or (``meters`` None) from its file's index."""

    labels: tuple[str, str, str, str]  # the values of RUN_LABELS
    info: tuple[str, str, str]  # mode, origin, world_size
    status: str
    values: tuple[float | None, ...]  # in the order of SCALARS; None: no sample
    meters: Reading | None


@dataclass
class Snapshot:
    """A scrape: the numbers read on the loop, written out as text in the exporter's thread."""

    statuses: Counter[str]
    exported: int
    unexported: int
    producers: int
    viewers: int
    runs: list[RunReading]
    process: ProcessCollector
    process_read: list[Metric] | None = None  # the process's figures, read at the first text(): one reading a scrape

    def text(self, openmetrics: bool = False) -> bytes:
        writer = _Writer(openmetrics)
        self._dashboard(writer)
        _runs(writer, self.runs)
        if self.process_read is None:
            self.process_read = list(self.process.collect())
        for metric in self.process_read:
            writer.family(metric.name, metric.type, metric.documentation,
                          ((s.name, _labels(s.labels.items()), s.value) for s in metric.samples))
        return writer.done()

    def _dashboard(self, w: _Writer) -> None:
        w.family("loaderscope_runs", "gauge", "Runs the dashboard lists, by status (logdir runs not read yet "
                 "included)", (("loaderscope_runs", _labels([("status", status)]), count)
                               for status, count in sorted(self.statuses.items())))
        w.one("loaderscope_runs_exported", "gauge", "Runs with series of their own: a connected producer, or a "
              f"change within the last {WINDOW:g} s", self.exported)
        w.one("loaderscope_runs_unexported", "gauge", f"Runs of the window without series of their own: past the "
              f"{MAX_RUNS} exported (stuck, dead or lost ones and live ones go first)", self.unexported)
        w.one("loaderscope_producers", "gauge", "Producer websockets connected", self.producers)
        w.one("loaderscope_viewers", "gauge", "Viewer websockets open", self.viewers)


# The families of one sample a run, in the order of RunReading.values: name, type, help
SCALARS: tuple[tuple[str, str, str], ...] = (
    ("loaderscope_last_event_age_seconds", "gauge", "Seconds since the run's last event reached the dashboard "
     "(absent before its first, and for a logdir run not read yet)"),
    ("loaderscope_producer_lost", "gauge", "1 while the run has no end and its producer is gone: a stream that "
     "disconnected, a trace neither grown nor touched for 30 s (its process died, was killed, or hangs whole)"),
    ("loaderscope_events", "counter", "Events the dashboard stored for the run (a logdir run not read yet: the "
     "lines of its file)"),
    ("loaderscope_events_dropped", "counter", "Events the producer lost before they reached the dashboard (its "
     "own count, or gaps in its seq)"),
    ("loaderscope_events_cut", "counter", "Events stored with their largest fields cut (over 256 KiB)"),
    ("loaderscope_state_problems", "counter", "Events the reducer could not apply (kept, not counted in the "
     "statistics)"),
    # the meters' values (meters.Meters._values), in their order
    ("loaderscope_batches", "counter", "Batches the loader delivered to the training loop"),
    ("loaderscope_epochs", "counter", "Epochs finished (peeks not counted)"),
    ("loaderscope_wait_seconds", "counter", "Seconds the training loop waited inside next() for a batch "
     "(producer clock)"),
    ("loaderscope_epoch_seconds", "counter", "Seconds the training loop spent in this loader's epochs, waiting or "
     "stepping: wait / epoch seconds is the dashboard's input_bound"),
    ("loaderscope_worker_deaths", "counter", "Workers that exited by a signal or a non-zero code"),
    ("loaderscope_timeouts", "counter", "DataLoader(timeout=...) expirations"),
    ("loaderscope_outstanding_tasks", "gauge", "Tasks dispatched to workers and not yet taken by the main process "
     "(torch's _tasks_outstanding)"),
    ("loaderscope_prefetch_window_tasks", "gauge", "Most tasks in flight: prefetch_factor x num_workers "
     "(1 in-process)"),
    ("loaderscope_result_queue_tasks", "gauge", "Fetched batches on the result queue"),
    ("loaderscope_reorder_buffer_tasks", "gauge", "Batches that arrived out of order, parked until the one before "
     "them comes"),
    ("loaderscope_reorder_buffer_high_tasks", "gauge", "The reorder buffer's high-water mark"),
    # memory (meters._memory): absent until the probe's first memory sample
    ("loaderscope_workers_uss_bytes", "gauge", "The workers' unique memory (USS, smaps_rollup) together, each at "
     "its last full sample"),
    ("loaderscope_workers_copied_bytes", "gauge", "Of the workers' USS growth, the pages they had shared with the "
     "main process and now hold privately: copy-on-read (pytorch/pytorch#13246)"),
    ("loaderscope_processes_pss_bytes", "gauge", "The loader's processes' proportional memory (PSS) together: what "
     "the main process and its workers hold between them"),
    ("loaderscope_host_headroom_bytes", "gauge", "What the host has left at the last sample: MemAvailable, or the "
     "memory cgroup's limit less its usage where that is smaller"),
)
_UNREAD = (None,) * (len(SCALARS) - 7)  # what a run's index does not say: everything after its batches


def _runs(w: _Writer, runs: list[RunReading]) -> None:
    """Every run family, a family at a time (its samples together, as both formats want them)."""
    keys = [_labels(zip(RUN_LABELS, run.labels, strict=True)) for run in runs]
    w.family("loaderscope_run_info", "gauge", "1 for each exported run, with how it was produced",
             (("loaderscope_run_info",
               f"{key},{_labels(zip(('mode', 'origin', 'world_size'), run.info, strict=True))}", 1)
              for key, run in zip(keys, runs, strict=True)))
    w.family("loaderscope_run_status", "gauge", "1, labelled with the run's status (one series a run)",
             (("loaderscope_run_status", f"{key},{_labels([('status', run.status)])}", 1)
              for key, run in zip(keys, runs, strict=True)))
    for at, (name, kind, text) in enumerate(SCALARS):
        sample = f"{name}_total" if kind == "counter" else name
        w.family(name, kind, text, ((sample, key, v) for key, run in zip(keys, runs, strict=True)
                                    if (v := run.values[at]) is not None))
    metered = [(key, run.meters) for key, run in zip(keys, runs, strict=True) if run.meters is not None]
    w.family("loaderscope_workers", "gauge", "Workers by state (stuck: a fetch past the stuck threshold; died: "
             "killed or crashed)", (("loaderscope_workers", f'{key},state="{state}"', count) for key, m in metered
                                    for state, count in zip(STATES, m.workers, strict=True)))
    w.family("loaderscope_worker_state", "gauge", f"1 for each stuck or dead worker, by id (the first {MAX_NAMED} "
             "of a run; loaderscope_workers counts them all)",
             (("loaderscope_worker_state", f'{key},worker="{wid}",state="{state}"', 1) for key, m in metered
              for wid, state in m.named))
    w.family("loaderscope_fetch_seconds", "histogram", "Seconds a worker took to fetch and collate one batch "
             "(every worker of the run)", _histograms(metered))


def _histograms(metered: list[tuple[str, Reading]]) -> Iterator[tuple[str, str, float]]:
    for key, m in metered:
        cumulative = list(accumulate(m.fetches))
        for bound, count in zip(_BOUNDS, cumulative, strict=True):
            yield "loaderscope_fetch_seconds_bucket", f'{key},le="{bound}"', count
        yield "loaderscope_fetch_seconds_count", key, cumulative[-1]
        yield "loaderscope_fetch_seconds_sum", key, m.fetch_sum


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{_escape(value)}"' for name, value in pairs)


def _number(value: float) -> str:
    """A sample's value as both formats write it: an integer as one, +Inf, -Inf, NaN."""
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"


class _Writer:
    """Prometheus's text format (0.0.4) or OpenMetrics 1.0, written family by family. They differ in a
    counter's family name (OpenMetrics names it without ``_total``), HELP's escapes and the end."""

    def __init__(self, openmetrics: bool) -> None:
        self.openmetrics = openmetrics
        self.parts: list[str] = []

    def family(self, name: str, kind: str, text: str, samples: Iterable[tuple[str, str, float]]) -> None:
        named = name if self.openmetrics or kind != "counter" else f"{name}_total"
        help_text = text.replace("\\", r"\\").replace("\n", r"\n")
        if self.openmetrics:
            help_text = help_text.replace('"', r"\"")
        self.parts.append(f"# HELP {named} {help_text}\n# TYPE {named} {kind}\n")
        self.parts.extend(f"{sample}{{{labels}}} {_number(value)}\n" if labels else f"{sample} {_number(value)}\n"
                          for sample, labels, value in samples)

    def one(self, name: str, kind: str, text: str, value: float) -> None:
        self.family(name, kind, text, [(name, "", value)])

    def done(self) -> bytes:
        if self.openmetrics:
            self.parts.append("# EOF\n")
        return "".join(self.parts).encode()
