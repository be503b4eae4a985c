"""What the reducers keep of ``memory`` samples, compactly: per process the latest figures and the
high-water marks, where copy-on-read is measured from, its RSS at each epoch's end; for the run the
host's headroom, /dev/shm, the bytes of batches in flight and a decimated series for the page.

A light sample (``light``: each process's RSS and swap only) counts for what reads RSS: the latest RSS,
its high-water mark, the epochs' RSS, the host's figures; USS, PSS and shared, copy-on-read, the PSS
sum and its trend come from the full samples alone (a process keeps its last full figures).

Pure (no I/O). ``state.py`` feeds it each sample with what only the reducer knows (the bytes in
flight, how many samples each worker has fetched) and each epoch's end; ``frontend/js/model/memory.js``
mirrors it name by name, and the agreement tests compare the two (docs/DESIGN.md §3, "Memory").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAIN = -1  # the main process's key among the workers'
MAX_POINTS = 512  # the series for the page: halved (every other point kept) when full
MAX_EPOCHS = 64  # RSS at epoch ends kept per process: the first and the most recent (the leak's rate)


@dataclass(slots=True)
class Proc:
    """One worker's processes (a new pid each epoch without persistent workers), or the main process."""

    key: int
    pid: int
    t: float = 0.0
    uss: int | None = None
    pss: int | None = None
    rss: int = 0
    shared: int | None = None
    swap: int | None = None
    high_uss: int = 0  # high-water marks over the run, of any of its processes
    high_pss: int = 0
    high_rss: int = 0
    high_t: float = 0.0  # when RSS was highest
    full_t: float = 0.0  # when its USS, PSS and shared were read (its last full sample)
    # Copy-on-read is measured from this process's first sample: the probe samples a new worker at once
    # (probe/memory.py), before it has touched much of what it shares with the main process.
    base_uss: int | None = None
    base_shared: int | None = None
    base_samples: int = 0
    grown: int = 0  # the most any of its processes' USS grew since its base
    copied: int = 0  # of that growth, the pages it had shared with another process (its shared RSS lost)
    copied_samples: int = 0  # the samples its worker fetched over that growth
    # [epochs done, RSS + swap] in the first sample after each epoch's end
    epoch_rss: list[list[int]] = field(default_factory=list)


@dataclass
class MemoryModel:
    """The run's memory as its samples tell it."""

    samples: int = 0
    full_samples: int = 0  # of them, full: USS, PSS and shared beside RSS
    source: str | None = None
    t: float = 0.0
    full_t: float = 0.0  # the last full sample's time
    cost: float = 0.0  # CPU seconds the samples took the probe
    procs: dict[int, Proc] = field(default_factory=dict)
    host: dict[str, int | None] = field(default_factory=dict)  # the latest sample's host figures
    headroom: int | None = None
    headroom_low: int | None = None
    headroom_low_t: float = 0.0
    shm_high: int = 0
    shm_free_low: int | None = None
    total_pss: int = 0  # the processes' PSS summed: the memory the loader's processes hold between them
    total_high: int = 0
    total_high_t: float = 0.0
    in_flight: int = 0  # bytes of batches fetched and not yet handed to the training loop
    in_flight_high: int = 0
    in_flight_high_t: float = 0.0
    in_flight_batches: int = 0  # the batches in flight at the high-water mark
    in_flight_pss: int = 0  # the processes' PSS summed at that moment
    # [t, headroom, in flight, total PSS, [[key, uss, shared, rss], ...]]: every stride-th full sample and
    # every light_stride-th light one (total PSS, USS and shared null: a light point)
    series: list[list[Any]] = field(default_factory=list)
    stride: int = 1
    light_stride: int = 1
    ended: int | None = None  # the epochs done at an epoch's end that no sample has followed yet

    def apply(self, e: Mapping[str, Any], in_flight: tuple[int, int], fetched: Mapping[int, int]) -> None:
        """One sample, with the bytes and batches in flight and each worker's samples fetched so far."""
        full = not e.get("light")
        self.samples += 1
        self.source = e.get("source")
        self.t = e["t"]
        self.cost += e.get("cost") or 0
        total = 0
        sampled = [item for item in e["procs"] if _readable(item)]
        for item in sampled:
            proc = self._proc(item, full)
            total += proc.pss or 0
            if full and proc.key != MAIN:
                _copy_on_read(proc, fetched.get(proc.key, 0))
            if self.ended is not None:
                if len(proc.epoch_rss) >= MAX_EPOCHS:
                    del proc.epoch_rss[1]
                proc.epoch_rss.append([self.ended, proc.rss + (proc.swap or 0)])
        self.ended = None
        if full:
            self.full_samples += 1
            self.full_t = self.t
            self.total_pss = total
            if total > self.total_high:
                self.total_high, self.total_high_t = total, self.t
        self._host(e)
        self.in_flight = in_flight[0]
        if in_flight[0] > self.in_flight_high:
            self.in_flight_high, self.in_flight_high_t = in_flight[0], self.t
            self.in_flight_batches, self.in_flight_pss = in_flight[1], self.total_pss
        self._point(sampled, full)

    def _proc(self, item: Mapping[str, Any], full: bool) -> Proc:
        key = _key(item)
        proc = self.procs.get(key)
        if proc is None:
            proc = self.procs[key] = Proc(key, item["pid"])
        elif proc.pid != item["pid"]:  # the worker's next process: its own base, its own epochs
            proc.pid, proc.base_uss, proc.base_shared = item["pid"], None, None
            proc.uss = proc.pss = proc.shared = None  # the last process's, until this one's full sample
            proc.epoch_rss = []
        proc.t, proc.rss = self.t, item["rss"]
        swap = _int(item.get("swap"))
        if full or swap is not None:  # psutil's light sample has no swap: the full one's holds
            proc.swap = swap
        if full:
            proc.uss, proc.pss, proc.shared = _int(item.get("uss")), _int(item.get("pss")), _int(item.get("shared"))
            proc.full_t = self.t
            proc.high_uss = max(proc.high_uss, proc.uss or 0)
            proc.high_pss = max(proc.high_pss, proc.pss or 0)
        if proc.rss > proc.high_rss:
            proc.high_rss, proc.high_t = proc.rss, self.t
        return proc

    def _host(self, e: Mapping[str, Any]) -> None:
        self.host = {name: e.get(name) for name in HOST_FIELDS}
        self.headroom = headroom(e)
        if self.headroom is not None and (self.headroom_low is None or self.headroom < self.headroom_low):
            self.headroom_low, self.headroom_low_t = self.headroom, self.t
        used, size = e.get("shm_used"), e.get("shm_total")
        if used is not None and size is not None:
            self.shm_high = max(self.shm_high, used)
            free = size - used
            self.shm_free_low = free if self.shm_free_low is None else min(self.shm_free_low, free)

    def _point(self, sampled: list[Mapping[str, Any]], full: bool) -> None:
        """Every stride-th full sample and every light_stride-th light one join the series; a full series
        keeps every other point of the kind it holds more of (the USS track keeps its full points), that
        kind's stride doubled."""
        count = self.full_samples if full else self.samples - self.full_samples
        if (count - 1) % (self.stride if full else self.light_stride):
            return
        procs = [self.procs[_key(item)] for item in sampled]
        self.series.append([self.t, self.headroom, self.in_flight, self.total_pss if full else None,
                            [[p.key, p.uss, p.shared, p.rss] if full else [p.key, None, None, p.rss] for p in procs]])
        if len(self.series) >= MAX_POINTS:
            lights = sum(1 for point in self.series if point[3] is None)
            halve_full = lights * 2 <= len(self.series)
            kind = [0, 0]  # the points of each kind seen so far: every second one of the halved kind goes
            kept = []
            for point in self.series:
                of_full = point[3] is not None
                kind[of_full] += 1
                if of_full != halve_full or kind[of_full] % 2:
                    kept.append(point)
            self.series = kept
            if halve_full:
                self.stride *= 2
            else:
                self.light_stride *= 2

    def epoch_end(self, epochs: int) -> None:
        """``epochs`` have ended: the next sample notes each process's RSS (with swap), what the epoch left."""
        self.ended = epochs

    def evidence(self, worker: int, pid: Any) -> dict[str, Any] | None:
        """A dead worker's last sample and the host's headroom in the latest sample (its last, or later)."""
        proc = self.procs.get(worker)
        if proc is None or (pid is not None and pid != proc.pid):
            return None
        return {"t": proc.t, "rss": proc.rss, "uss": proc.uss, "headroom": self.headroom,
                "available": self.host.get("available"), "cgroup_limit": self.host.get("cgroup_limit")}


HOST_FIELDS = ("available", "total", "cgroup_limit", "cgroup_usage", "shm_used", "shm_total", "pinned")


def _key(item: Mapping[str, Any]) -> int:
    worker = _int(item.get("worker"))
    return worker if worker is not None else MAIN


def _int(value: Any) -> int | None:
    """A producer's figure: an integer (a bool is none), else unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _readable(item: Any) -> bool:
    """A process of a sample the model can keep: a mapping with an integer pid and RSS (the validator takes
    the list loosely, so a producer's odd entry is skipped, never fatal)."""
    return isinstance(item, Mapping) and _int(item.get("pid")) is not None and _int(item.get("rss")) is not None


def uss_pss(e: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    """Each process's (USS, PSS) in a full sample, by its key, where its USS was read; a source without PSS
    (psutil off Linux) gives its USS there: no shared pages known."""
    figures = {}
    for item in e["procs"]:
        uss = _int(item.get("uss")) if _readable(item) else None
        if uss is not None:
            pss = _int(item.get("pss"))
            figures[_key(item)] = (uss, uss if pss is None else pss)
    return figures


def headroom(e: Mapping[str, Any]) -> int | None:
    """What the host has left: the smaller of MemAvailable and the cgroup's limit less its working set."""
    room = [e["available"]] if e.get("available") is not None else []
    if e.get("cgroup_limit") is not None and e.get("cgroup_usage") is not None:
        room.append(max(0, e["cgroup_limit"] - e["cgroup_usage"]))
    return min(room) if room else None


def _copy_on_read(proc: Proc, fetched: int) -> None:
    """How much this worker's USS grew since its base, at most, and how much of that growth its shared
    memory lost then: pages it shared with the main process and holds privately now (the rest of the
    growth is memory it allocated, or shared pages it faulted in and then wrote)."""
    if proc.uss is None or proc.shared is None:
        return
    if proc.base_uss is None or proc.base_shared is None:
        proc.base_uss, proc.base_shared, proc.base_samples = proc.uss, proc.shared, fetched
        return
    grown = proc.uss - proc.base_uss
    if grown > proc.grown:
        proc.grown, proc.copied_samples = grown, fetched - proc.base_samples
        proc.copied = max(0, min(grown, proc.base_shared - proc.shared))


def leak_per_epoch(proc: Proc) -> float | None:
    """The mean growth of a process's RSS per epoch when it grew at every epoch end noted since its first
    (at least three), else None."""
    marks = proc.epoch_rss
    if len(marks) < 3 or any(b[1] <= a[1] for a, b in zip(marks, marks[1:], strict=False)):
        return None
    return (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])


def trend(m: MemoryModel) -> tuple[float | None, float]:
    """The loader's memory (PSS summed) per second over the second half of its sampled time, and the
    whole span sampled: a rate is extrapolated no further than the time it was seen over. Full samples
    only: a light one has no PSS."""
    full = [p for p in m.series if p[3] is not None]
    if not full:
        return None, 0.0
    first_t = full[0][0]
    span = m.full_t - first_t
    middle = next((p for p in full if p[0] >= first_t + span / 2), None)  # the latest sample may be left out
    if middle is None or m.full_t - middle[0] <= 0:
        return None, span
    return (m.total_pss - middle[3]) / (m.full_t - middle[0]), span


def proc_summary(proc: Proc) -> dict[str, Any]:
    return {"worker": None if proc.key == MAIN else proc.key, "pid": proc.pid, "t": proc.t, "uss": proc.uss,
            "pss": proc.pss, "rss": proc.rss, "shared": proc.shared, "swap": proc.swap, "high_uss": proc.high_uss,
            "high_pss": proc.high_pss, "high_rss": proc.high_rss, "high_t": proc.high_t, "full_t": proc.full_t,
            "grown": proc.grown, "copied": proc.copied,
            "copied_samples": proc.copied_samples,
            "epochs": proc.epoch_rss[-1][0] - proc.epoch_rss[0][0] if proc.epoch_rss else 0,
            "epoch_first": proc.epoch_rss[0][1] if proc.epoch_rss else None,
            "epoch_last": proc.epoch_rss[-1][1] if proc.epoch_rss else None,
            "leak_per_epoch": leak_per_epoch(proc)}


def summary(m: MemoryModel) -> dict[str, Any] | None:
    """The memory figures of ``stats.summary`` (None before the first sample)."""
    if not m.samples:
        return None
    rate, span = trend(m)
    main = m.procs.get(MAIN)
    return {
        "source": m.source, "samples": m.samples, "full_samples": m.full_samples, "t": m.t, "cost": m.cost,
        "main": proc_summary(main) if main is not None else None,
        "workers": [proc_summary(p) for key, p in sorted(m.procs.items()) if key != MAIN],
        **m.host,
        "headroom": m.headroom, "headroom_low": m.headroom_low, "headroom_low_t": m.headroom_low_t,
        "shm_high": m.shm_high, "shm_free_low": m.shm_free_low,
        "total_pss": m.total_pss, "total_high": m.total_high, "total_high_t": m.total_high_t,
        "in_flight": m.in_flight, "in_flight_high": m.in_flight_high, "in_flight_high_t": m.in_flight_high_t,
        "in_flight_batches": m.in_flight_batches, "in_flight_pss": m.in_flight_pss,
        "growth_per_s": rate, "trend_span": span,
        "headroom_s": m.headroom / rate if rate is not None and rate > 0 and m.headroom is not None else None,
    }
