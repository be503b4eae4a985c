"""The ``doctor`` subcommand's arguments: the command itself (``doctor/cli.py``, with py-spy's sampling and the
verdicts) is imported only when it runs, so that every other ``loaderscope`` command starts without it. It takes
what it needs of the arguments from ``args`` (the sampling interval too): it never imports this module back."""

from __future__ import annotations

import argparse
from typing import Any

DEFAULT_DURATION = 2.0
INTERVAL = 0.5


def add_doctor_command(sub: Any) -> None:
    p = sub.add_parser("doctor", help="say why a running training process is stuck (no setup needed)",
                       description="Read a live training process with py-spy (it is never stopped, no code runs "
                                   "in it) and say what its DataLoader is doing and why it is stuck.")
    p.add_argument("pid", nargs="?", type=int, help="the training process (the one that iterates the DataLoader)")
    p.add_argument("--job", type=int, metavar="PID", help="every rank under this parent (torchrun's agent, or the "
                   "process that called torch.multiprocessing.spawn)")
    p.add_argument("--duration", type=float, default=DEFAULT_DURATION, metavar="S",
                   help=f"seconds to sample over (default {DEFAULT_DURATION}; samples every {INTERVAL} s, the last "
                        "one beginning S s after the first ended)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--out", metavar="FILE", help="write a snapshot trace: `loaderscope serve --open FILE` shows it "
                   "(with --job, one file per rank: FILE's name gets .rankN)")
    p.set_defaults(func=run_doctor, interval=INTERVAL)


def run_doctor(args: argparse.Namespace) -> int:
    from loaderscope.doctor.cli import cmd_doctor

    return cmd_doctor(args)
