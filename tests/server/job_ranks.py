"""One real rank of a training job, streaming to a dashboard: a real DataLoader (2 worker processes,
batches of 4) watched with ``watch(url=URL)`` as rank R of a job of 4 (``$LOADERSCOPE_JOB``, ``$RANK``,
``$WORLD_SIZE``, as torchrun sets them), with a training step of 0.2 s.

    .venv/bin/python -m tests.server.job_ranks URL JOB RANK fast|slow|stuck|crash [PORT]

``fast`` (rank 0) and ``slow`` (rank 1) are data-parallel: each step ends with a gloo all-reduce between
the two (its store on 127.0.0.1:PORT), so both step at the slow one's pace and the fast rank waits in
the all-reduce, not in ``next()``. The slow rank's samples take 0.25 s: a batch a worker a second, half
a second a step, of which it waits about 0.3 s for its batch. Both run until killed; when one dies,
the other's all-reduce raises. ``stuck``: sample 13 (batch 3, worker 1's second) sleeps an hour; the
probe calls it stuck after 0.5 s. ``crash``: sample 21 (batch 5, worker 1) kills its worker with
SIGKILL, the OOM killer's signal; torch raises in the main process, which dies of it.

Used by tests/server/test_grafana_dashboard.py.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, get_worker_info

import loaderscope

WORLD = 4
STUCK_SAMPLE, CRASH_SAMPLE = 13, 21
SECONDS = {"slow": 0.25, "stuck": 0.005, "crash": 0.005, "fast": 0.005}  # a sample's read


class Samples(Dataset[torch.Tensor]):
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.mode == "crash" and index == CRASH_SAMPLE and get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3600 if self.mode == "stuck" and index == STUCK_SAMPLE else SECONDS[self.mode])
        return torch.tensor([index])


def main() -> None:
    url, job, rank, mode, *port = sys.argv[1:]
    os.environ.update({"LOADERSCOPE_JOB": job, "RANK": rank, "WORLD_SIZE": str(WORLD), "GLOO_SOCKET_IFNAME": "lo"})
    # the others' fetches are called stuck after the probe's default, 10 s at least: a slow batch takes 1 s
    loader = loaderscope.watch(DataLoader(Samples(mode), batch_size=4, num_workers=2), url=url, name="train",
                               stuck_after=0.5 if mode == "stuck" else None)
    batches = iter(loader)  # the probe reads the rank at the first iter(): the job's, before the pair's group
    if port:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port[0]}", rank=int(rank), world_size=2)
    for _ in batches:
        time.sleep(0.2)  # a training step
        if port:
            dist.all_reduce(torch.ones(1))


if __name__ == "__main__":
    main()
