"""Simulated ranks of one distributed job, each writing its trace into a logdir as the probe does.

    .venv/bin/python -m tests.fleet LOGDIR --ranks 1023 [--first-rank 1] [--world 1024] [--job JOB]
                                    [--every 2] [--workers 4] [--stuck RANK] [--history N] [--ready FILE]

One process writes every rank's trace (``LOGDIR/<job>/train-rank<R>-pid<P>-<run>.trace.jsonl``, the
path and header ``loaderscope record`` writes): its ``run_start`` (job, rank, world size, name
``train``, ``num_workers``), its workers' start, an epoch's start, then, every ``--every`` seconds
(the ranks spread over the interval), one batch of events per rank (dispatch, fetch_start, fetch_end,
arrive, yield), flushed at once; ``--history N`` batches of each rank first, at once (a job the
dashboard finds already running). Rank ``--stuck`` instead starts one fetch and never ends it: it
writes ``worker_stuck`` for that worker every 5 s, as the probe's liveness thread re-reports it.
The events are the real probe's kinds and fields (tests/core/sim_helpers.py's simulator writes the
same), so the dashboard's reducer and meters take them as any rank's. ``--ready FILE`` is created
once every rank's file has its first events. Runs until SIGTERM or SIGINT, then leaves the files
as they are (no ``run_end``: the ranks are still "running" for the seconds the dashboard waits).

    .venv/bin/python -m tests.fleet LOGDIR --real stuck|steady --first-rank R --world 1024 [--job JOB]

``--real`` is one real rank instead: a real DataLoader (2 worker processes) watched with
``watch(logdir=LOGDIR)`` as rank R of the job (``$LOADERSCOPE_JOB``, ``$RANK``, ``$WORLD_SIZE``),
whose worker 1 hangs in its fourth batch forever (``stuck``: the probe calls it stuck after 0.5 s), or
that steps every 0.2 s until it is killed (``steady``).

Used by tests/server/test_metrics_fleet.py and bench/metrics_fleet.py.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from loaderscope.traces.jsonl import TraceWriter
from loaderscope.traces.paths import trace_path

STUCK_EVERY = 5.0  # seconds between worker_stuck reports (probe/liveness.py REFRESH_SECONDS)


class Rank:
    """One rank's loader: a trace file and the batch it is at."""

    def __init__(self, logdir: Path, job: str, rank: int, world: int, workers: int, seed: int) -> None:
        self.run, self.rank, self.workers = uuid.uuid4().hex[:12], rank, workers
        self.random = random.Random(seed)
        self.idx = 0
        self.born = time.monotonic()
        start: dict[str, Any] = {"kind": "run_start", "t": 0.0, "rank": rank, "run": self.run, "mode": "real",
                                 "name": "train", "job": job, "world_size": world, "pid": os.getpid(),
                                 "loader": "torch.utils.data.DataLoader", "wall_start": time.time(),
                                 "config": {"num_workers": workers, "prefetch_factor": 2, "batch_size": 8}}
        path = trace_path(logdir, start)
        self.path = path.with_name(f"train-{path.name}")
        self.writer = TraceWriter(self.path, self.run, mode="real", origin="logdir", name="train", job=job,
                                  rank=rank, world_size=world, pid=os.getpid())
        self.write([start, *({"kind": "worker_start", "worker": w, "pid": 10_000 + w} for w in range(workers)),
                    {"kind": "epoch_start", "epoch": 0, "batches": 1 << 30}])

    def now(self) -> float:
        return round(time.monotonic() - self.born, 6)

    def write(self, events: list[dict[str, Any]]) -> None:
        t = self.now()
        self.writer.write({"t": t, "rank": self.rank, "run": self.run, **event} for event in events)
        self.writer.flush()

    def batch(self) -> None:
        """One batch through worker ``idx % workers``: a fetch of 5–50 ms, a wait of up to 20 ms."""
        idx, worker = self.idx, self.idx % self.workers
        self.idx += 1
        task = {"idx": idx, "worker": worker, "epoch": 0}
        dt = self.random.uniform(0.005, 0.05)
        self.write([{"kind": "dispatch", **task, "indices": list(range(8 * idx, 8 * idx + 8)), "n": 8},
                    {"kind": "fetch_start", **task, "n": 8},
                    {"kind": "fetch_end", **task, "dt": round(dt, 6), "nbytes": 4096},
                    {"kind": "arrive", **task},
                    {"kind": "yield", **task, "wait": round(self.random.uniform(0.0, 0.02), 6), "from_parked": False}])

    def hang(self) -> None:
        """Worker 1 starts a fetch it never ends."""
        task = {"idx": self.idx, "worker": 1, "epoch": 0}
        self.write([{"kind": "dispatch", **task, "indices": [0], "n": 1}, {"kind": "fetch_start", **task, "n": 1}])

    def stuck(self) -> None:
        self.write([{"kind": "worker_stuck", "worker": 1, "pid": 10_001, "idx": self.idx, "threshold": 10.0,
                     "elapsed": self.now()}])


def real_rank(logdir: Path, job: str, rank: int, world: int, hang: bool) -> None:
    os.environ.update({"LOADERSCOPE_JOB": job, "RANK": str(rank), "WORLD_SIZE": str(world)})
    import torch
    from torch.utils.data import DataLoader, Dataset

    import loaderscope

    class Samples(Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, index: int) -> torch.Tensor:
            time.sleep(3600 if hang and index == 13 else 0.005)  # sample 13: batch 3, worker 1's second
            return torch.tensor([index])

    loader = loaderscope.watch(DataLoader(Samples(), batch_size=4, num_workers=2), logdir=logdir, name="train",
                               stuck_after=0.5)
    for _ in loader:
        time.sleep(0.2)  # a training step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logdir", type=Path)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--first-rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=0, help="world size (default: first rank + ranks)")
    parser.add_argument("--job", default="fleet")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between a rank's batches")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--stuck", type=int, default=-1, help="the rank whose worker 1 hangs")
    parser.add_argument("--history", type=int, default=0, help="batches each rank writes at once, first")
    parser.add_argument("--ready", type=Path, default=None)
    parser.add_argument("--real", choices=("stuck", "steady"), default=None)
    args = parser.parse_args()
    if args.real is not None:
        real_rank(args.logdir, args.job, args.first_rank, args.world or args.first_rank + 1, args.real == "stuck")
        return
    stop = False

    def stopped(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGINT, stopped)
    world = args.world or args.first_rank + args.ranks
    ranks = [Rank(args.logdir, args.job, r, world, args.workers, seed=r)
             for r in range(args.first_rank, args.first_rank + args.ranks)]
    for rank in ranks:
        for _ in range(args.history if rank.rank != args.stuck else 0):
            rank.batch()
        (rank.hang if rank.rank == args.stuck else rank.batch)()
    if args.ready is not None:
        args.ready.touch()
    step = args.every / len(ranks)
    started, turn = time.monotonic(), 0
    while not stop:
        rank = ranks[turn % len(ranks)]
        if rank.rank != args.stuck:
            rank.batch()
        elif rank.now() // STUCK_EVERY > (rank.now() - args.every) // STUCK_EVERY:
            rank.stuck()
        turn += 1
        time.sleep(max(0.0, started + turn * step - time.monotonic()))
    for rank in ranks:
        rank.writer.close()


if __name__ == "__main__":
    main()
