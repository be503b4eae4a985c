"""The memory sampler's own cost, full samples against light ones, on a real loader (issue 38).

    .venv/bin/python bench/memory_cost.py                 # 2 workers, 20 s
    .venv/bin/python bench/memory_cost.py --workers 4 --seconds 60 --share 0.01

A training loop with persistent workers (each process imported torch: the walk smaps_rollup makes is a
real one) runs for ``--seconds``; the probe samples its memory as it does in any run. Reported from the
``memory`` events: how many of each kind came per second, the CPU one sample of each kind cost the probe
thread (its ``cost`` field: thread CPU time, median and max), and the CPU each kind took per second of the
run, as a share of one core. The machine's load average is printed beside it: on a loaded box a sample
waits for a core, but its CPU time is its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from torch.utils.data import Dataset

from loaderscope import InstrumentedDataLoader
from loaderscope.probe import memory
from loaderscope.runner import Collector


class Slow(Dataset[int]):
    """A sample every 10 ms: the loop runs for as long as asked, the workers awake."""

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> int:
        time.sleep(0.01)
        return i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--share", type=float, default=memory.COST_SHARE,
                        help="the full samples' CPU, at most, as a share of one core (probe/memory.py COST_SHARE)")
    args = parser.parse_args()
    memory.COST_SHARE = args.share
    c = Collector()
    loader = InstrumentedDataLoader(Slow(), batch_size=4, num_workers=args.workers, persistent_workers=True, sink=c)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for _ in loader:
            if time.monotonic() >= end:
                break
    events: list[dict[str, Any]] = [e for e in list(c.events) if e["kind"] == "memory"]
    span = events[-1]["t"] - events[0]["t"]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.workers} workers + the main "
          f"process, {span:.1f} s sampled, {len(events) / span:.2f} samples/s, COST_SHARE {args.share}")
    for name, kind in (("full", [e for e in events if not e.get("light")]),
                       ("light", [e for e in events if e.get("light")])):
        if not kind:
            print(f"{name:5}: none")
            continue
        costs = [e["cost"] for e in kind]
        print(f"{name:5}: {len(kind) / span:5.2f}/s, {statistics.median(costs) * 1e3:7.3f} ms CPU each "
              f"(max {max(costs) * 1e3:.3f}), {sum(costs) / span * 100:.3f}% of a core")
    del loader


if __name__ == "__main__":
    main()
