"""◆ ``loaderscope job DIR``: the job table of every trace under DIR, from DuckDB (``jobquery``): a row
per loader of each rank, per loader the rank most often last to deliver a step, and what the table
lacks: the ranks its world size expects that it has not, and each trace unreadable, empty or cut short."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from loaderscope.cli.errors import UsageError
from loaderscope.cli.output import add_format_option, stdout_console, to_csv, to_json

if TYPE_CHECKING:  # the query and its table load when the command runs: every other command starts without them
    from loaderscope.traces.jobtable import JobTable


def add_job_command(subparsers: Any) -> None:
    """Add ``job`` to the ``loaderscope`` command's subparsers."""
    p = subparsers.add_parser("job", help="a data-parallel job's table of ranks from its traces, per loader: the "
                              "slowest rank, each rank's pace and wait, its slowest worker, the shard check")
    p.add_argument("dir", metavar="DIR", help="the job's directory of traces (LOGDIR/<job>, or --logdir of "
                   "`loaderscope run --ranks`); an fsspec URL (s3://, gs://) with the `remote` extra")
    add_format_option(p)
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    p.set_defaults(func=cmd_job)


def load(root: str) -> JobTable:
    from loaderscope.traces.jobbudget import JobBudget, JobQueryError
    from loaderscope.traces.jobquery import job_table

    fs = None
    try:
        budget = JobBudget().from_environment()
        if "://" in root and not root.startswith("file://"):
            fs, root = _filesystem(root)
        return job_table(root.removeprefix("file://"), fs, budget=budget)
    except JobQueryError as exc:
        raise UsageError(str(exc)) from None


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec  # type: ignore[import-untyped]  # the optional `remote` extra: only URLs need it
    except ImportError:
        raise UsageError(f"{url}: a URL needs fsspec: pip install 'loaderscope[remote]'") from None
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:  # the protocol's own package missing (s3fs, gcsfs), or unknown
        raise UsageError(f"{url}: {exc} (pip install 'loaderscope[remote]' and the protocol's package, "
                         "e.g. s3fs or gcsfs)") from None
    return fs, root


def in_order(table: JobTable) -> list[dict[str, Any]]:
    """Each loader's rows together, in the table's order of loaders; in a loader, most often last first,
    then the slowest pace."""
    place = {(entry["job"], entry["loader"]): i for i, entry in enumerate(table.loaders())}
    return sorted(table.ranks, key=lambda r: (place[(r["job"], r["loader"])], -r["slowest_steps"],
                                              r["batches_per_s"], r["rank"]))


def cmd_job(args: argparse.Namespace, console: Console | None = None) -> int:
    from loaderscope.traces.jobtable import shard_text_of

    console = console or stdout_console()
    table = load(args.dir)
    rows = [{k: v for k, v in row.items() if k != "file"} | {"trace": row["file"]} for row in in_order(table)]
    if args.format == "json":
        console.print(to_json(table.as_json() | {"ranks": rows}), markup=False)
        return 0
    if args.format == "csv":
        console.print(to_csv(rows), markup=False, end="")
        return 0
    for line in sentences(table):
        console.print(line)
    for line in table.notices():  # the ranks the table lacks, and the traces it could not read whole
        console.print(f"[yellow]{escape(line)}[/]")
    steps = {(entry["job"], entry["loader"]): entry["steps"] for entry in table.loaders()}
    jobs = len({row["job"] for row in rows}) > 1
    print_table(console, [*(["job"] if jobs else []), "loader", "rank", "batches", "batches/s", "waiting for data",
                          "slowest worker", "its p95", "last in", "worst lag"],
                [_cells(row, steps[(row["job"], row["loader"])], jobs) for row in rows])
    for check in table.shards:
        console.print(escape(_named(table, check) + shard_text_of(check)))
    return 0


def _cells(row: dict[str, Any], steps: int, jobs: bool) -> list[str]:
    worker, p95, lag = row["slowest_worker"], row["slowest_worker_p95"], row["worst_lag"]
    return [*([str(row["job"])] if jobs else []), row["loader"], str(row["rank"]), str(row["batches"]),
            f"{row['batches_per_s']:.1f}", f"{row['input_bound']:.0%}", "-" if worker is None else str(worker),
            "-" if p95 is None else f"{p95 * 1000:.1f} ms", f"{row['slowest_steps']} of {steps} steps",
            "-" if lag is None else f"{lag * 1000:.1f} ms"]


def print_table(console: Console, headers: list[str], rows: list[list[str]]) -> None:
    """The rows under their headers as rich's ``Table(box=None, pad_edge=False)`` prints them, made as
    one text: rich lays out and renders each cell on its own, which took 1.5 s of a 1,024-rank job's
    table (bench/job_table.py). Where rich would lay the table out otherwise (wider than the console:
    it wraps cells; a cell of other than printable ASCII: its width is not its length), rich prints it."""
    widths = [max(map(len, column)) for column in zip(headers, *rows, strict=True)]
    if sum(widths) + 2 * (len(widths) - 1) > console.width or \
            not all(cell.isascii() and cell.isprintable() for row in (headers, *rows) for cell in row):
        out = Table(*headers, box=None, pad_edge=False)
        for row in rows:
            out.add_row(*map(escape, row))
        console.print(out)
        return
    text = Text(end="\n")
    for place, (header, width) in enumerate(zip(headers, widths, strict=True)):
        # the header's cells and their padding, each its own span as rich's Table styles them
        text.append_tokens([(" ", "table.header")] * (2 if place else 0) + [(header.ljust(width), "table.header")])
    text.append("".join("\n" + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                        for row in rows))
    console.print(text)


def sentences(table: JobTable) -> list[str]:
    """A sentence per loader (``slowest_sentence``), named by its loader when the table has several."""
    return [_named(table, entry) + slowest_sentence(entry) for entry in table.loaders()]


def _named(table: JobTable, entry: dict[str, Any]) -> str:
    loaders = table.loaders()
    if len(loaders) < 2:
        return ""
    jobs = len({other["job"] for other in loaders}) > 1
    return escape(f"job {entry['job']} · " if jobs else "") + escape(f"{entry['loader']}: ")


def slowest_sentence(loader: dict[str, Any]) -> str:
    """One loader's sentence (``JobTable.loaders``): the rank most often last to deliver a step, or why none was."""
    top = loader["slowest"]
    if top is None:
        counts = f"{_count(loader['ranks'], 'rank')}, {_count(loader['steps'], 'step')}"
        if loader["ranks"] == 1:
            return f"{counts}: one rank waits for no other"
        return f"{counts}: no rank was last to deliver a step (every step's batches came within 1 µs of each other)"
    return (f"[bold]rank {top['rank']} is the slowest[/]: last to deliver {top['steps']} of {top['of']} steps, "
            f"up to {top['worst_lag'] * 1000:.1f} ms after the first rank; ranks step together, so it sets the pace")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
