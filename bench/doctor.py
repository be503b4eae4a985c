"""What `loaderscope doctor` costs a hung process with 8 workers, and how long its verdict takes.

    .venv/bin/python bench/doctor.py [--rounds 5] [--duration 2]

A target script (started without loaderscope) runs a DataLoader with 8 workers whose worker 3 is
stuck on a sample. Inside the target's main process a thread spins for ever and never sleeps: the
kernel's own account of it (``/proc/PID/task/TID/schedstat``: time on a CPU, time waiting for one)
leaves, out of the wall time, only the time it was held off the CPU for another reason, such as a
ptrace stop. That "held" time is the pause, whatever the load of the machine (a timer loop inside
the target would count the machine's scheduling noise instead). Each round measures, back to back:

- ``before``: the spinner's held time over a quiet window as long as a doctor run;
- ``during``: its held time while ``loaderscope doctor PID --json`` runs; the command's wall time
  (Python's start included) and the time doctor itself reports from its first sample to its
  verdict (``took_s``), against the 5 s target;
- ``after``: its held time over a quiet window once doctor has left, and the target's thread and
  file descriptor counts before and after (py-spy runs nothing in it, so they must not change).

It prints each round and then the median with its min–max interval over the rounds. The pause
doctor adds is ``during − before`` (goal: under 50 ms over the whole run); ``after − before`` is
its cost once gone (expected: zero). Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TARGET = '''\
import sys, threading, time
import torch
from torch.utils.data import DataLoader, Dataset


def spin():  # never sleeps: any time it is neither running nor runnable, something held it
    print(f"SPIN {threading.get_native_id()}", flush=True)
    n = 0
    while True:
        n += 1


class Data(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        if i == 12:  # task 3, worker 3
            print("READY", flush=True)
            time.sleep(3600)
        return torch.tensor([i])


threading.Thread(target=spin, daemon=True).start()
for batch in DataLoader(Data(), batch_size=4, num_workers=8):
    pass
'''


class Target:
    def __init__(self, directory: Path) -> None:
        script = directory / "target.py"
        script.write_text(TARGET)
        self.proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.spinner = 0
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("SPIN"):
                self.spinner = int(line.split()[1])
            elif line.startswith("READY"):
                self.ready.set()

    def clock(self) -> tuple[float, float]:
        """(wall, on a CPU + waiting for one) of the spinner, in seconds."""
        run, wait, _ = Path(f"/proc/{self.proc.pid}/task/{self.spinner}/schedstat").read_text().split()
        return time.monotonic(), (int(run) + int(wait)) / 1e9


    def counts(self) -> tuple[int, int]:
        return len(os.listdir(f"/proc/{self.proc.pid}/task")), len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def end(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def held(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Milliseconds of the spinner's wall time between two clocks spent neither running nor runnable."""
    return 1000 * max(0.0, (b[0] - a[0]) - (b[1] - a[1]))


def one_round(target: Target, duration: float, quiet: float) -> dict[str, float]:
    c0 = target.clock()
    time.sleep(quiet)
    c1 = target.clock()
    counts_before = target.counts()
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "loaderscope.cli", "doctor", str(target.proc.pid), "--json",
                           "--duration", str(duration)], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "backend")})
    end = time.monotonic()
    c2 = target.clock()
    if done.returncode != 0 or '"stuck_sample"' not in done.stdout or '"worker":3' not in done.stdout:
        raise SystemExit(f"doctor did not find worker 3 stuck:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    time.sleep(quiet)
    c3 = target.clock()
    counts_after = target.counts()
    scale = (c2[0] - c1[0]) / quiet  # the quiet windows' held time, scaled to the doctor run's length
    return {"verdict_s": end - start, "took_s": json.loads(done.stdout)["took_s"],
            "before_ms": held(c0, c1) * scale, "during_ms": held(c1, c2), "after_ms": held(c2, c3) * scale,
            "threads_changed": float(counts_after[0] != counts_before[0]),
            "fds_changed": float(counts_after[1] != counts_before[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=2.0, help="doctor's --duration (default 2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        target = Target(Path(tmp))
        try:
            if not target.ready.wait(180):
                raise SystemExit("the target did not reach its stuck sample in 180 s")
            rows = []
            for n in range(args.rounds):
                row = one_round(target, args.duration, quiet=args.duration + 1)
                rows.append(row)
                print(f"round {n + 1}: verdict {row['verdict_s']:.2f} s (doctor's own {row['took_s']:.2f} s) · "
                      f"spinner held off the CPU before "
                      f"{row['before_ms']:.1f} ms, during {row['during_ms']:.1f} ms, after {row['after_ms']:.1f} ms"
                      f" · threads/fds changed: {bool(row['threads_changed'])}/{bool(row['fds_changed'])}", flush=True)
        finally:
            target.end()
    print(f"\n{args.rounds} rounds, 8 workers, --duration {args.duration}: median [min–max]")
    for key, label in (("verdict_s", "command wall time (s)"), ("took_s", "first sample to verdict (s)"),
                       ("before_ms", "held before doctor (ms)"), ("during_ms", "held while doctor ran (ms)"),
                       ("after_ms", "held after doctor left (ms)")):
        values = [r[key] for r in rows]
        print(f"  {label:30} {statistics.median(values):8.2f}  [{min(values):.2f}–{max(values):.2f}]")
    added = [r["during_ms"] - r["before_ms"] for r in rows]
    left = [r["after_ms"] - r["before_ms"] for r in rows]
    print(f"  {'pause doctor added (ms)':30} {statistics.median(added):8.2f}  [{min(added):.2f}–{max(added):.2f}]")
    print(f"  {'cost after it left (ms)':30} {statistics.median(left):8.2f}  [{min(left):.2f}–{max(left):.2f}]")
    print(f"  threads or fds of the target changed in {sum(r['threads_changed'] or r['fds_changed'] for r in rows):.0f}"
          f" of {args.rounds} rounds")


if __name__ == "__main__":
    main()
