"""Memory, sampled from the main process on the probe thread: no code runs in the workers.

Four times a second the probe reads each of the run's processes (the main process, the current
iterator's workers) and the host, and notes one ``memory`` event (docs/DESIGN.md §10, "Memory"): a
full sample now and then, light ones between (``light: true``: each process's RSS and swap only).

- a process, on Linux, from ``/proc/PID/smaps_rollup`` (Linux 4.14+), the kernel's sums over every
  mapping: USS (``Private_*``: pages mapped by this process alone), PSS (each page divided among the
  processes that map it), RSS and swap; ``shared`` is RSS less USS (pages another process maps too:
  a forked worker starts with all of them, and copy-on-read turns them private). Elsewhere, with
  psutil installed, psutil's ``memory_full_info`` (``source: "psutil"``); without it, nothing. A light
  sample reads ``/proc/PID/status``'s ``VmRSS`` and ``VmSwap`` (psutil's ``memory_info``: RSS alone).
- the host: ``MemAvailable`` and ``MemTotal`` (``/proc/meminfo``); the memory cgroup's limit and
  working set where a limit applies (v2 ``memory.max``/``memory.current``, v1
  ``memory.limit_in_bytes``/``memory.usage_in_bytes``, less the inactive file pages of
  ``memory.stat``, as the kubelet counts it); ``/dev/shm``'s usage (``statvfs``); the pinned host
  memory torch's CUDA host allocator holds, where CUDA is initialized.

Reading smaps_rollup walks the process's mappings and page tables: on this project's loaded 2-core
box (2026-11-28) 0.8 ms of CPU for a process holding a 1 GiB numpy array, 8 ms for one that imported
torch (262 MiB resident, 350 mappings); a sample of a main process and two workers took 35-45 ms.
So full samples are spaced by at least ``1 / COST_SHARE`` times what the last one cost (at most 2% of
one core: one every 1.3-2 s here), and light ones, which read the kernel's counters (25-45 µs a
process), fill the time between, ``PERIOD`` apart: RSS, headroom and /dev/shm four times a second, USS
and PSS from the full ones (bench/memory_cost.py: 26 ms of CPU a full sample of three processes, 0.44 ms
a light one, 0.14% of a core for the light ones together). The reads are system calls with the GIL
released; the training thread pays nothing but the GIL's few switches.

Everything this module uses is imported when it is imported (the probe thread imports nothing:
docs/DESIGN.md §10); psutil, where it is the source, is imported by the thread that starts the run.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from loaderscope.probe.faults import report
from loaderscope.probe.recorder import Recorder
from loaderscope.procmem import Figures, find_cgroup, meminfo, shm, smaps_rollup, status

PERIOD = 0.25  # seconds between samples, light or full
COST_SHARE = 0.02  # the full samples' CPU, at most, as a share of one core
OFF = frozenset({"0", "false", "no", "off", ""})  # $LOADERSCOPE_MEMORY's values that turn sampling off
ENV = "LOADERSCOPE_MEMORY"
ProcessReader = Callable[[int], Figures | None]


def psutil_reader() -> tuple[ProcessReader, ProcessReader, Callable[[], tuple[int, int]]] | None:
    """psutil's per-process readers (full, light) and host reader, where psutil is installed (imported
    here, on the thread that starts the run, never on the probe thread)."""
    try:
        import psutil  # type: ignore[import-untyped]  # optional: the source where /proc has no smaps_rollup
    except ImportError:
        return None

    def process(pid: int) -> Figures | None:
        try:
            info = psutil.Process(pid).memory_full_info()
        except (psutil.Error, OSError):
            return None
        uss = getattr(info, "uss", None)
        return {"uss": uss, "pss": getattr(info, "pss", None), "rss": info.rss,
                "shared": max(0, info.rss - uss) if uss is not None else None, "swap": getattr(info, "swap", None)}

    def light(pid: int) -> Figures | None:
        try:
            return {"rss": psutil.Process(pid).memory_info().rss}
        except (psutil.Error, OSError):
            return None

    def host() -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    return process, light, host


def pinned_bytes(stats: dict[str, Any]) -> int | None:
    """The bytes of pinned blocks torch's CUDA host allocator holds, from its nested statistics
    (``torch.cuda.host_memory_stats_as_nested_dict``: ``allocated_bytes.current``)."""
    current = stats.get("allocated_bytes", {})
    value = current.get("current") if isinstance(current, dict) else None
    return int(value) if isinstance(value, (int, float)) else None


_HOST_STATS: Callable[[], dict[str, Any]] | None = getattr(torch.cuda, "host_memory_stats_as_nested_dict", None)


def pinned() -> int | None:
    """Pinned host memory where torch reports it: CUDA initialized (never initialized from here)."""
    if _HOST_STATS is None or not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch's, unannotated
        return None
    return pinned_bytes(_HOST_STATS())


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in OFF


class MemorySampler:
    """Samples the run's processes and the host on the probe thread (``tick``, every probe tick)."""

    def __init__(self, recorder: Recorder, source: str | None = None) -> None:
        self.recorder = recorder
        self.source, self.process, self.light, self.host = _backend(source)
        self.cgroup = find_cgroup()  # whatever reads the processes: the limit is the host's, read from /sys
        self.main = os.getpid()
        self.due = 0.0  # the next sample, light or full
        self.full_due = 0.0  # the next full sample
        self.cost = 0.0  # CPU seconds the last sample took
        self.seen: set[int] = set()  # the worker pids sampled so far (by a full sample)

    def tick(self) -> None:
        now = time.monotonic()
        new = self._new_workers()
        if now < self.due and not new:
            return
        full = new or now >= self.full_due
        started = time.thread_time()
        try:
            fields = self.sample(full)
        except Exception as exc:  # a file that vanished under us: said once, the next sample tries again
            report("memory sample", exc, self.recorder.note)
            fields = {"procs": []}
        self.cost = time.thread_time() - started
        self.due = now + PERIOD
        if full:
            self.full_due = now + max(PERIOD, self.cost / COST_SHARE)
        if fields["procs"]:
            self.recorder.note_at("memory", now, cost=round(self.cost, 6), **fields)

    def _new_workers(self) -> bool:
        """A worker not sampled yet: sampled at once, whatever the period, so that its growth (copy-on-read
        most of all, in its first epoch) is measured from its start."""
        return any(reader.pid > 0 and reader.pid not in self.seen for reader in list(self.recorder.readers.values()))

    def sample(self, full: bool = True) -> dict[str, Any]:
        """One ``memory`` event's fields: every process that has memory to read (all its figures, or RSS and
        swap in a light sample), then the host."""
        read = self.process if full else self.light
        procs = []
        main = read(self.main)
        if main is not None:
            procs.append({"pid": self.main, **main})
        for worker, reader in sorted(self.recorder.readers.items()):
            pid = reader.pid
            figures = read(pid) if pid > 0 else None
            if figures is not None:
                procs.append({"worker": worker, "pid": pid, **figures})
                if full:
                    self.seen.add(pid)
        available, total = self.host()
        fields: dict[str, Any] = {"source": self.source, "procs": procs, "available": available, "total": total}
        if not full:
            fields["light"] = True
        if self.cgroup is not None:
            bound = _quietly(self.cgroup.read)
            if bound is not None:
                fields["cgroup_limit"], fields["cgroup_usage"] = bound
        tmpfs = shm()
        if tmpfs is not None:
            fields["shm_used"], fields["shm_total"] = tmpfs
        held = pinned()
        if held is not None:
            fields["pinned"] = held
        return fields


def _quietly(read: Callable[[], tuple[int, int] | None]) -> tuple[int, int] | None:
    """A cgroup removed or moved under a running process (a container's teardown) has no figures."""
    try:
        return read()
    except (OSError, ValueError):
        return None


def _backend(source: str | None) -> tuple[str, ProcessReader, ProcessReader, Callable[[], tuple[int, int]]]:
    """smaps_rollup where the kernel has it (``source`` may ask for psutil), else psutil: the source, its
    full and light per-process readers, the host's reader."""
    if source != "psutil" and os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"):
        return "smaps_rollup", smaps_rollup, status, meminfo
    given = psutil_reader()
    if given is None:
        raise NotSampled("no /proc/PID/smaps_rollup here and psutil is not installed (pip install psutil)")
    return "psutil", *given


class NotSampled(Exception):
    """Memory cannot be read on this system."""


_said: set[str] = set()


def watch_memory(recorder: Recorder, source: str | None = None) -> MemorySampler | None:
    """Start sampling a run's memory on its probe thread, unless $LOADERSCOPE_MEMORY turns it off."""
    if not enabled():
        return None
    try:
        sampler = MemorySampler(recorder, source)
    except NotSampled as exc:
        if str(exc) not in _said:
            _said.add(str(exc))
            print(f"loaderscope: memory is not sampled: {exc}", file=sys.stderr, flush=True)
        return None
    except Exception as exc:  # a /proc this probe cannot read: said once, the run goes on
        report("memory sampler", exc, recorder.note)
        return None
    recorder.watch(sampler.tick)
    return sampler
