"""A training run in a process of its own, for the verdicts on the host's memory: test_memory_host.py starts
it inside a memory cgroup it made with a limit (``headroom``), or in a private mount namespace whose
/dev/shm is a small tmpfs (``shm``), so that what the probe reads is that cgroup's and that tmpfs's.

Run as ``python -m tests.probe.memory_host headroom CGROUP_DIR`` or ``... shm``; prints one JSON line:
the findings (code: text), the run's memory summary, and what the run read itself, beside a sample at a
quiet moment (and one by a sampler whose per-process source is psutil), to check the probe's figures against."""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from torch.utils.data import Dataset

from loaderscope import InstrumentedDataLoader
from loaderscope.model.diagnosis import HEADROOM_SPAN, findings
from loaderscope.model.stats import summary
from loaderscope.probe.memory import MemorySampler
from loaderscope.runner import Collector
from tests.conftest import wait_for
from tests.probe.memory import full_samples, next_sample

warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
GROWTH = 16 * 2**20  # what each sample read keeps, in the worker that read it
SHM_FREE = 4 * 2**20  # what the ballast leaves free of the small /dev/shm: under SHM_LOW of 64 MiB


class Growing(Dataset[int]):
    """Keeps 16 MiB per sample it reads, every page written: persistent workers grow without end."""

    def __init__(self) -> None:
        self.kept: list[np.ndarray[Any, Any]] = []

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        self.kept.append(np.full(GROWTH // 8, 1.0))
        return i


class Small(Dataset[np.ndarray[Any, Any]]):
    """A 64 KiB array a sample: each batch goes through /dev/shm from the worker to the main process."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> np.ndarray[Any, Any]:
        return np.full(2**13, float(i))


def foretold(c: Collector, loader: InstrumentedDataLoader[Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """Epochs of a growing dataset, a batch per sample, until an epoch has ended and the samples span more than
    the verdict's rate needs; the findings are taken at an epoch's fourth batch, while the workers still grow
    (each batch the loop takes has them fetch one more: the epoch's last four were fetched ahead)."""
    while True:
        for i, _ in enumerate(loader):
            seen = len(full_samples(c))
            wait_for(lambda: len(full_samples(c)) > seen, timeout=30)  # noqa: B023  # called within the iteration
            stats = summary(c.state)
            if i == 3 and stats["epochs"] and stats["memory"]["trend_span"] > HEADROOM_SPAN + 1:
                return {f.code: f.text for f in findings(c.state, stats)}, stats["memory"]


def headroom(group: Path) -> dict[str, Any]:
    """The verdict on a growing loader; then one more sample and the cgroup's working set beside it, read the
    way the kubelet counts it (the workers idle: the figures hold still), and psutil's host figures."""
    c = Collector()
    loader = InstrumentedDataLoader(Growing(), batch_size=1, num_workers=2, persistent_workers=True, sink=c)
    said, memory = foretold(c, loader)
    sample = next_sample(c)
    v2 = (group / "memory.current").exists()
    usage = int((group / ("memory.current" if v2 else "memory.usage_in_bytes")).read_text())
    inactive = "inactive_file" if v2 else "total_inactive_file"
    for line in (group / "memory.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == inactive:
            usage -= int(value)
    # psutil as the per-process source (where /proc has no smaps_rollup) reads the same cgroup
    by_psutil = MemorySampler(loader._probe, source="psutil").sample()
    return {"findings": said, "memory": memory, "sample": sample, "usage": usage,
            "psutil": psutil.virtual_memory()._asdict(), "by_psutil": by_psutil}


def shm() -> dict[str, Any]:
    """A ballast file leaves this namespace's /dev/shm nearly full; the loader's batches go through it."""
    st = os.statvfs("/dev/shm")
    with open("/dev/shm/ballast", "wb") as f:
        f.write(b"\0" * (st.f_bfree * st.f_frsize - SHM_FREE))
    st = os.statvfs("/dev/shm")
    c = Collector()
    loader = InstrumentedDataLoader(Small(), batch_size=4, num_workers=2, sink=c)
    for _ in loader:
        pass
    sample = next_sample(c)
    return {"findings": {f.code: f.text for f in findings(c.state)}, "memory": summary(c.state)["memory"],
            "free": st.f_bavail * st.f_frsize, "total": st.f_blocks * st.f_frsize, "sample": sample,
            "psutil": psutil.disk_usage("/dev/shm")._asdict()}


if __name__ == "__main__":
    out = headroom(Path(sys.argv[2])) if sys.argv[1] == "headroom" else shm()
    print(json.dumps(out), flush=True)
