"""◆ ``loaderscope doctor PID`` and ``loaderscope doctor --job PID``: the command's shell.

Exit codes (DESIGN.md §20): 0 a verdict; 2 a usage error; 3 no such process, or it exited while being
read; 4 not allowed to read it (ptrace); 5 not a Python process; 6 no DataLoader in it (or no rank
under --job's PID); 7 py-spy could not read it otherwise; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from loaderscope.doctor import model, sample, snapshot, source, verdict
from loaderscope.doctor.sample import EXIT_NO_LOADER, DoctorError


def cmd_doctor(args: argparse.Namespace) -> int:
    if (args.pid is None) == (args.job is None):
        print("error: give the training process's PID, or --job PID for every rank under a parent", file=sys.stderr)
        return 2
    if not 0 < args.duration <= 600:
        print(f"error: --duration must be between 0 and 600 s, got {args.duration}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGINT, _interrupted)
    try:
        return _job(args) if args.job is not None else _one(args)
    except DoctorError as exc:
        if args.json:
            print(orjson.dumps({"error": str(exc), "exit_code": exc.code}).decode())
        else:
            print(f"error: {exc}", file=sys.stderr)
        return exc.code
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted(signum: int, frame: Any) -> None:
    """Ctrl-C ends doctor at once: its py-spy runs and its reader are killed, and no thread that
    waits on one is joined (the interpreter would wait for each at exit)."""
    for pid in list(source.live):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    print("loaderscope doctor: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def _read(pid: int, duration: float, interval: float) -> model.Picture:
    """The picture of ``pid``: sampled, then its frames' lines read as its own user."""
    return model.build(source.quote(pid, sample.record(pid, duration, interval)))


def _one(args: argparse.Namespace) -> int:
    started = time.monotonic()
    picture = _read(args.pid, args.duration, args.interval)
    found = verdict.decide(picture)
    took = time.monotonic() - started
    out = _write(args.out, picture, found) if args.out else None
    if args.json:
        print(orjson.dumps(snapshot.as_json(picture, found) | {"snapshot": str(out) if out else None,
                                                               "took_s": round(took, 3)}).decode())
    else:
        _print(picture, found, out)
    return EXIT_NO_LOADER if found.cause == "no_loader" else 0


def _write(path: str | Path, p: model.Picture, v: verdict.Verdict, **job: Any) -> Path:
    try:
        return snapshot.write(path, p, v, **job)
    except OSError as exc:
        raise DoctorError(2, f"cannot write the snapshot {path}: {exc.strerror or exc}: give --out a file in a "
                          "directory that exists and that you can write") from None


def _print(p: model.Picture, v: verdict.Verdict, out: Path | None, indent: str = "") -> None:
    if not indent:
        print(f"loaderscope doctor: process {p.pid}, {p.samples} samples over {p.duration:.1f} s "
              "(read with py-spy --nonblocking: the process was never stopped)")
    print(f"{indent}{v.text}")
    print(f"{indent}what to do: {v.advice}")
    for line in v.details:
        print(f"{indent}  {line}")
    for line in memory_lines(p):
        print(f"{indent}{line}")
    if out is not None:
        print(f"{indent}snapshot: {out}  (open it: loaderscope serve --open {out})")


LOW_MEMORY = 0.1  # the host's MemAvailable share under which a wait may be swapping or near an OOM kill


def memory_lines(p: model.Picture) -> list[str]:
    """Which process holds how much (smaps_rollup, read without ptrace), and the host's headroom."""
    if not p.memory:
        return []
    lines = ["memory (smaps_rollup, MB = 10^6 bytes):"]
    for proc in p.memory:
        who = "main process" if proc.get("worker") is None else f"worker {proc['worker']}"
        swap = f", swapped out {proc['swap'] / 1e6:.1f}" if proc.get("swap") else ""
        lines.append(f"  {who} (pid {proc['pid']}): USS {proc['uss'] / 1e6:.1f}, PSS {proc['pss'] / 1e6:.1f}, "
                     f"RSS {proc['rss'] / 1e6:.1f}{swap}")
    host = p.host
    if host:
        share = host["available"] / host["total"]
        lines.append(f"  host: {host['available'] / 1e6:.1f} MB available of {host['total'] / 1e6:.1f} MB "
                     f"({share:.0%})")
        if share < LOW_MEMORY:
            lines.append("  the host is nearly out of memory: a process that waits may be swapping, or about to "
                         "be killed by the OOM killer")
    return lines


def _rank_of(pid: int, p: model.Picture, fallback: int) -> int:
    """$RANK from the rank's environment (torchrun), else torch.multiprocessing.spawn's process index."""
    env = sample.environ(pid)
    if env.get("RANK", "").isdigit():
        return int(env["RANK"])
    for f in p.training.stack:
        if f["file"].endswith("torch/multiprocessing/spawn.py") and f["function"] == "_wrap":
            index = model.int_or_none(f["locals"].get("i"))
            if index is not None:
                return index
    return fallback


def _job(args: argparse.Namespace) -> int:
    if sample.proc_stat(args.job) is None:
        raise sample.no_process(args.job)
    candidates = sample.children(args.job)

    def look(pid: int) -> tuple[int, model.Recording] | None:
        try:
            return pid, sample.record(pid, args.duration, args.interval)
        except DoctorError as exc:
            if exc.code == sample.EXIT_NO_PERMISSION:
                raise
            return None  # not a Python rank (a shell, a helper that ended)

    with ThreadPoolExecutor(max_workers=max(1, len(candidates))) as pool:
        recorded = [r for r in pool.map(look, candidates) if r is not None]
    # read each rank's lines once no sampling thread runs (source.quote forks)
    pictures = [(pid, model.build(source.quote(pid, rec))) for pid, rec in recorded]
    seen = [(pid, p) for pid, p in pictures if not p.helper]
    if not seen:
        raise DoctorError(EXIT_NO_LOADER, f"no Python rank runs under process {args.job}: give torchrun's agent "
                          "(the parent of the ranks), or one rank's PID without --job")
    ranks = sorted(((_rank_of(pid, p, i), pid, p, verdict.decide(p)) for i, (pid, p) in enumerate(seen)),
                   key=lambda r: r[0])
    line, advice, culprit = verdict.decide_job(ranks)
    outs = {}
    if args.out:
        path = Path(args.out)
        for rank, _pid, p, v in ranks:
            target = path.with_name(f"{path.stem.split('.')[0]}.rank{rank}{''.join(path.suffixes)}")
            outs[rank] = _write(target, p, v, rank=rank, job=line)
    if args.json:
        print(orjson.dumps({"job": args.job, "verdict": line, "advice": advice, "rank": culprit,
                            "ranks": [snapshot.as_json(p, v)
                                      | {"rank": r, "snapshot": str(outs[r]) if r in outs else None}
                                      for r, _, p, v in ranks]}).decode())
        return 0
    print(f"loaderscope doctor: job under process {args.job}, {len(ranks)} ranks "
          "(read with py-spy --nonblocking: no process was stopped)")
    print(line)
    if advice:
        print(f"what to do: {advice}")
    for rank, pid, p, v in ranks:
        print(f"\nrank {rank} (pid {pid}):")
        _print(p, v, outs.get(rank), indent="  ")
    return 0
