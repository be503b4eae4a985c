"""The job table of a 1,024-rank job by DuckDB (``loaderscope.traces.jobquery``): time and peak memory.

    .venv/bin/python bench/job_table.py                       # 1,024 ranks x 8 workers x 200 steps, 3 repeats
    .venv/bin/python bench/job_table.py --ranks 64 --steps 50 --repeat 2    # a smoke run

The job is simulated once (``sim.run.simulate_ranks``, rank 731 with 2.5x slower samples) into
``--dir`` (default: $TMPDIR/loaderscope-job-R-S), a trace per rank as ``loaderscope run --ranks``
writes them (``jsonl/``), each epoch_end with its shard digest as a real DDP job's probe writes it (a
cached directory without them, from before the simulator wrote them, is simulated afresh; whether
every rank has them is printed), then rewritten as loaderscope's Parquet traces (``probe/``: a directory of
parts per rank, by ``parquet.ParquetTraceWriter``, as ``record --format parquet`` writes them). Each
repeat runs ``job_table`` in a fresh process (cold: its own DuckDB, nothing cached but the OS's page
cache) and reports its wall time, its CPU time (all threads), how that CPU time split over the
process's threads (the busiest thread's share: on two idle cores the wall time is about the busiest
thread's CPU) and its peak RSS (``VmHWM``: ``ru_maxrss`` keeps the peak of the bench process that
forked it, which holds the simulated job), first on JSON lines, then on Parquet.
Then the command itself, ``loaderscope job DIR`` (the venv's installed entry point, as a user runs it:
the interpreter, the CLI's imports, the table, the printing of every row into a file), each repeat
in a fresh process started by a small watcher (``WATCH``) that reports the command's wall time, its
CPU time (all threads, ``os.wait4``), the busiest thread's share and its peak RSS (``ru_maxrss`` of
the command alone: the watcher it forked from holds a few MiB); and ``--json`` once per format.
Printed: median and range over the repeats against the targets of 5 s and 1 GiB, each with the
load average at the time, and an estimate of the wall time on two idle cores: the larger of the
busiest thread's CPU and half of all threads' CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SLOW_RANK, SLOW_FACTOR = 731, 2.5
WORKERS, BATCH = 8, 4
MAX_SAMPLES = 100_000


def simulate(root: Path, ranks: int, steps: int) -> None:
    from loaderscope.scenarios.plan import resolve
    from loaderscope.sim import CostModel
    from loaderscope.sim.run import simulate_ranks
    from loaderscope.traces.jsonl import write_trace
    from loaderscope.traces.paths import trace_path

    # the scenario's dataset holds at most 100,000 samples: the steps are spread over enough epochs
    epochs = -(-ranks * steps * BATCH // MAX_SAMPLES)
    per_epoch = -(-steps // epochs)
    plan = resolve("uniform", {"num_workers": WORKERS, "batch_size": BATCH, "dataset_size": ranks * per_epoch * BATCH,
                               "epochs": epochs, "sample_ms": 2.0})
    slow = SLOW_RANK if SLOW_RANK < ranks else ranks - 1
    costs = [CostModel(worker_factor={w: SLOW_FACTOR if rank == slow else 1.0 for w in range(WORKERS)})
             for rank in range(ranks)]
    job = simulate_ranks(plan.build(), job=f"bench-{ranks}", scenario="uniform", params=plan.values(), costs=costs,
                         max_events=10_000_000)
    for events in job.events:
        write_trace(trace_path(root / "jsonl", events[0]), events, events[0]["run"], scenario="uniform", mode="sim")
    print(f"simulated: {ranks} ranks, {epochs} epochs of {per_epoch} steps, {sum(job.counts):,} events, "
          f"slow rank {slow}")


def has_digests(root: Path) -> bool:
    """Whether every rank's JSON-lines trace has an epoch_end with a shard digest (as a real DDP job's
    probe writes them, and the simulator since it was taught to)."""
    found = sorted((root / "jsonl").rglob("*.trace.jsonl"))
    return bool(found) and all('"shard":"' in path.read_text() for path in found)


def to_parquet(root: Path) -> None:
    from loaderscope.traces.jsonl import read_trace, write_trace

    for path in sorted((root / "jsonl").rglob("*.trace.jsonl")):
        head, events = read_trace(path)
        target = root / "probe" / path.relative_to(root / "jsonl").with_name(
            path.name.removesuffix(".trace.jsonl") + ".trace.parquet")
        write_trace(target, events, head["run"], fmt="parquet", scenario=head.get("scenario"), mode=head.get("mode"))


# Run in a fresh process: the job table, while a thread samples each thread's CPU from /proc (DuckDB's
# pool is gone once the table is made, so it is sampled every 20 ms, its last sample kept per thread).
MEASURE = """
import os, sys, threading, time
from loaderscope.traces.jobquery import job_table
tick, seen, done = os.sysconf("SC_CLK_TCK"), {}, threading.Event()
def sample():
    me = threading.get_native_id()
    while not done.wait(0.02):
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(task) != me:
                seen[task] = (int(fields[11]) + int(fields[12])) / tick
threading.Thread(target=sample, daemon=True).start()
t, c = time.perf_counter(), time.process_time()
table = job_table(sys.argv[1])
took, cpu = time.perf_counter() - t, time.process_time() - c
done.set()
top = table.loaders()[0]["slowest"]
with open("/proc/self/status") as status:  # VmHWM: ru_maxrss would count the bench's own peak, inherited at fork
    peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(took, peak / 1024, top and top["rank"], cpu,
      max(seen.values()) / sum(seen.values()))
"""


def measure(directory: Path) -> tuple[float, float, int | None, float, float]:
    """(seconds, peak RSS in MiB, the slowest rank, CPU seconds of all its threads, the busiest thread's
    share of them) of one job_table in a fresh process. The CPU time does not depend on how many others
    share the cores; the wall time does."""
    out = subprocess.run([sys.executable, "-c", MEASURE, str(directory)], capture_output=True, text=True, check=True)
    took, rss, rank, cpu, busiest = out.stdout.split()
    return float(took), float(rss), None if rank == "None" else int(rank), float(cpu), float(busiest)


def report(label: str, runs: list[tuple[float, float, int | None, float, float]]) -> None:
    times, rss, cpu, busiest = [r[0] for r in runs], [r[1] for r in runs], [r[3] for r in runs], [r[4] for r in runs]
    print(f"{label}: job table in {statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f}), "
          f"= {statistics.median(times) / 5:.2f} of the 5 s target; peak RSS {statistics.median(rss):.0f} MiB "
          f"({min(rss):.0f}-{max(rss):.0f}) = {statistics.median(rss) / 1024:.2f} of 1 GiB; "
          f"CPU {statistics.median(cpu):.2f} s ({min(cpu):.2f}-{max(cpu):.2f}), the busiest thread "
          f"{statistics.median(busiest):.0%} of it ({min(busiest):.0%}-{max(busiest):.0%}); "
          f"slowest rank named: {sorted({r[2] for r in runs}, key=str)}")


# Run in a small fresh process that starts the command and watches it: each of the command's threads'
# CPU from /proc every 20 ms (the last sample kept per thread: DuckDB's pool is gone once the table is
# made), then its own rusage from wait4 (its CPU, and its peak RSS: started from this few-MiB process,
# not from the bench, whose simulated job ru_maxrss would count). The command's output goes to a file.
WATCH = """
import json, os, sys, time
tick, seen = os.sysconf("SC_CLK_TCK"), {}
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
began = time.perf_counter()
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, out, 1)])
while True:
    done, status, usage = os.wait4(pid, os.WNOHANG)
    if done:
        break
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else ():
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seen[task] = (int(fields[11]) + int(fields[12])) / tick
    time.sleep(0.02)
took = time.perf_counter() - began
print(json.dumps({"seconds": took, "status": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime,
                  "rss_mib": usage.ru_maxrss / 1024, "busiest": max(seen.values(), default=0.0)}))
"""


@dataclass(frozen=True)
class Command:
    """One run of ``loaderscope job``: its wall and CPU seconds (all threads), its busiest thread's CPU
    seconds, its peak RSS, the slowest rank it named and the load average when it ended."""

    seconds: float
    cpu: float
    busiest: float
    rss_mib: float
    rank: int | None
    load: float

    @property
    def idle_estimate(self) -> float:
        """The wall time on two idle cores: no thread runs faster than one core, and all take two at most."""
        return max(self.busiest, self.cpu / 2)


def run_command(directory: Path, *options: str) -> Command:
    """``loaderscope job DIR`` (the venv's entry point beside this interpreter) in a fresh process."""
    command = str(Path(sys.executable).with_name("loaderscope"))
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        watched = subprocess.run([sys.executable, "-c", WATCH, out.name, command, "job", str(directory), *options],
                                 capture_output=True, text=True, check=True)
        found = json.loads(watched.stdout)
        text = Path(out.name).read_text()
    if found["status"] != 0:
        sys.exit(f"loaderscope job {directory} {' '.join(options)} exited {found['status']}: {watched.stderr[-2000:]}")
    return Command(found["seconds"], found["cpu"], found["busiest"], found["rss_mib"], _named_rank(text, options),
                   os.getloadavg()[0])


def _named_rank(text: str, options: tuple[str, ...]) -> int | None:
    if "--json" in options:
        top = json.loads(text)["loaders"][0]["slowest"]
        return top and int(top["rank"])
    found = re.search(r"rank ([0-9]+) is the slowest", text)
    return int(found.group(1)) if found else None


def report_command(label: str, runs: list[Command]) -> None:
    def spread(values: list[float], form: str) -> str:
        return f"{statistics.median(values):{form}} ({min(values):{form}}-{max(values):{form}})"

    times, estimate = [r.seconds for r in runs], [r.idle_estimate for r in runs]
    print(f"{label}: {spread(times, '.2f')} s = {statistics.median(times) / 5:.2f} of the 5 s target at load "
          f"{spread([r.load for r in runs], '.1f')}; CPU {spread([r.cpu for r in runs], '.2f')} s, the busiest "
          f"thread {spread([r.busiest / r.cpu for r in runs], '.0%')} of it; on two idle cores about "
          f"{spread(estimate, '.2f')} s; peak RSS {spread([r.rss_mib for r in runs], '.0f')} MiB = "
          f"{statistics.median(r.rss_mib for r in runs) / 1024:.2f} of 1 GiB; "
          f"slowest rank named: {sorted({r.rank for r in runs}, key=str)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.gettempdir()) / f"loaderscope-job-{args.ranks}-{args.steps}"
    if (root / "jsonl").is_dir() and not has_digests(root):
        # a logdir simulated before the simulator wrote digests: its table skips the shard check, the
        # most expensive part of a real job's table
        print(f"the cached logdir {root} has no shard digests: simulated afresh")
        shutil.rmtree(root)
    if not (root / "jsonl").is_dir():
        started = time.perf_counter()
        simulate(root, args.ranks, args.steps)
        print(f"simulated and written in {time.perf_counter() - started:.0f} s (once; kept in {root})")
    if not (root / "probe").is_dir():
        started = time.perf_counter()
        to_parquet(root)
        print(f"rewritten as Parquet traces in {time.perf_counter() - started:.0f} s")
    print(f"shard digests: {'every' if has_digests(root) else 'NOT every'} rank's epoch_end has one "
          "(a real DDP job's probe writes them; the table checks them)")
    events = sum(1 for path in (root / "jsonl").rglob("*.trace.jsonl") for line in path.open() if '"seq":' in line)
    for kind in ("jsonl", "probe"):
        size = sum(p.stat().st_size for p in (root / kind).rglob("*") if p.is_file())
        print(f"{kind}: {size / 2**20:.0f} MiB on disk, {size / events:.1f} bytes an event")
    print(f"cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.1f} (other jobs share them); "
          f"this process's peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    for kind in ("jsonl", "probe"):
        report(kind, [measure(root / kind) for _ in range(args.repeat)])
    for kind in ("jsonl", "probe"):
        report_command(f"loaderscope job {kind}", [run_command(root / kind) for _ in range(args.repeat)])
        report_command(f"loaderscope job --json {kind}", [run_command(root / kind, "--json")])
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
