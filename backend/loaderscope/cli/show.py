"""◆ ``loaderscope show TRACE|DIR [--json]``: what ``run`` prints, for recorded runs, in the terminal.

TRACE is one trace (JSON lines, or a Parquet trace: its directory or a file); DIR is a logdir or a
job's directory, whose every trace is shown, grouped by job, then loader name, then rank. A trace
under DIR that cannot be read is named with the reason, after the others (exit 1); a PATH that
holds nothing to show is a usage error (exit 2). ``--json`` gives the same as one document
(``ShowDocument``, docs/DESIGN.md §14).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from rich.console import Console

from loaderscope.cli.errors import UsageError
from loaderscope.cli.output import stdout_console, to_json
from loaderscope.cli.summary import bullets, plain, print_report
from loaderscope.traces.formats import SUFFIXES

if TYPE_CHECKING:  # reports are built when the command runs: every other command starts without the models
    from loaderscope.report import RunReport

TRACE_SUFFIXES = tuple(SUFFIXES.values())  # what the dashboard lists from a logdir (a Parquet trace: a directory)
UNREADABLE_EXIT = 1


class Unreadable(TypedDict):
    file: str
    error: str  # what is wrong with it (``TraceError``'s message, or the OS's)


class ShowDocument(TypedDict):
    """``show --json``: every run shown, in the order printed, and the traces that could not be read."""

    runs: list[RunReport]
    unreadable: list[Unreadable]


def add_show_command(subparsers: Any) -> None:
    """Add ``show`` to the ``loaderscope`` command's subparsers."""
    p = subparsers.add_parser("show", help="what `run` prints, for recorded runs: settings, throughput, waiting, "
                              "workers, reordering, diagnosis")
    p.add_argument("path", metavar="TRACE|DIR", help="a trace (NAME.trace.jsonl, NAME.trace.parquet), or a "
                   "directory of them: a logdir of `loaderscope record`, or one job's directory in it")
    p.add_argument("--json", action="store_true", help="one JSON document: per run its identity, settings, "
                   "summary numbers, findings with their cause codes, and reordering")
    p.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace, console: Console | None = None) -> int:
    """Print the runs under ``args.path``; 1 when a trace under a directory could not be read."""
    out = console or stdout_console()
    document = show(Path(args.path))
    if args.json:
        out.out(to_json(document), highlight=False)
    else:
        print_document(document, out)
    return UNREADABLE_EXIT if document["unreadable"] else 0


def show(path: Path) -> ShowDocument:
    """The runs of a trace, or of every trace under a directory, in the order they are shown."""
    from loaderscope.traces.jsonl import TraceError  # the readers load when the command runs

    if path.is_dir() and not path.name.endswith(SUFFIXES["parquet"]):
        return shown(trace_files(path))
    if not os.path.lexists(path):
        raise UsageError(f"{path}: no such file or directory; give a trace (NAME.trace.jsonl or NAME.trace.parquet) "
                         "or a directory of them (a logdir of `loaderscope record`)")
    try:
        return {"runs": [load(path)], "unreadable": []}
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def trace_files(root: Path) -> list[Path]:
    """Every trace under ``root``, sorted; a Parquet trace's directory is one trace, never searched."""
    found = []
    for directory, subdirs, files in os.walk(root):  # links to directories are not followed
        found += [Path(directory, d) for d in subdirs if is_trace(d)]
        subdirs[:] = sorted(d for d in subdirs if not is_trace(d) and not d.startswith("."))
        found += [Path(directory, f) for f in files if is_trace(f)]
    if not found:
        raise UsageError(f"{root}: no traces (*{SUFFIXES['jsonl']}, *{SUFFIXES['parquet']}) under it; record "
                         f"some with `loaderscope record --logdir {root} -- python train.py`, or give a trace file")
    return sorted(found)


def is_trace(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.startswith(".")  # a dot name: a writer's unfinished file


def shown(paths: list[Path]) -> ShowDocument:
    """Each trace read; those that cannot be read named with the reason, the rest in a stable order."""
    from loaderscope.traces.jsonl import TraceError

    runs: list[RunReport] = []
    unreadable: list[Unreadable] = []
    for path in paths:
        try:
            runs.append(load(path))
        except TraceError as exc:
            unreadable.append({"file": str(path), "error": str(exc)})
        except OSError as exc:
            unreadable.append({"file": str(path), "error": f"{path}: cannot be read ({exc.strerror or exc})"})
    return {"runs": sorted(runs, key=order), "unreadable": unreadable}


def load(path: Path) -> RunReport:
    from loaderscope.report import run_report
    from loaderscope.traces.jsonl import read_trace_tolerant

    head, events, truncated = read_trace_tolerant(path)
    return run_report(events, head, file=str(path), truncated=truncated)


def order(report: RunReport) -> tuple[Any, ...]:
    """By job, loader name, rank; then pid and file, so that the order never depends on the disk's."""
    who = report["identity"]
    return (who["job"] or "", who["name"] or "", who["rank"], who["pid"] or 0, who["file"] or "")


# --- printing ---------------------------------------------------------------------------------------


def print_document(document: ShowDocument, console: Console) -> None:
    job: str | None = None  # the job whose heading was printed last
    for report in document["runs"]:
        if job != (report["identity"]["job"] or ""):
            job = report["identity"]["job"] or ""
            console.print(f"\n[bold]job {plain(job)}[/]" if job else "\n[bold]no job[/] (not recorded in a job)")
        print_heading(report, console)
        print_report(report, console)
    if document["unreadable"]:
        console.print(f"\n[bold]could not read {len(document['unreadable'])} of "
                      f"{len(document['unreadable']) + len(document['runs'])} traces[/]")
        bullets(console, [bad["error"] for bad in document["unreadable"]])


def print_heading(report: RunReport, console: Console) -> None:
    """Which run this is: its loader's name, rank, process and host, its status, its trace."""
    who, stats = report["identity"], report["summary"]
    name = who["name"] or who["scenario"] or (who["loader"] or "DataLoader").rsplit(".", 1)[-1]
    rank = f"rank {who['rank']}" + (f" of {who['world_size']}" if who["world_size"] else "")
    where = f"pid {who['pid']}" + (f" on {who['host']}" if who["host"] else "") if who["pid"] else who["host"]
    status = ("truncated: no run_end (its process is still writing it, or was killed)" if who["truncated"]
              else stats["status"])
    console.print(f"\n[bold]{plain(name)}[/] · {plain(' · '.join(filter(None, [rank, where, status])))}")
    found = {"trace": who["file"], "run": who["run"], "mode": who["mode"]}
    # one line, wrapped by the terminal if at all: a path copied from it has no line break in it
    console.print("  " + " · ".join(f"{label} {plain(value)}" for label, value in found.items() if value is not None),
                  soft_wrap=True)
