"""How one run reads in the terminal: ``loaderscope run`` prints it as the run ends, ``show`` for a trace.

Sections, each under a plain heading so that the text reads without colours (over SSH, piped into a
file): settings, throughput, waiting, the workers, the reordering, the diagnosis. Everything printed
comes from a ``report.RunReport``, the same data ``show --json`` gives, so the text and the JSON
cannot say different things. On a terminal a long line wraps under its own indent; piped, it stays
one line (``cli/output.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from loaderscope.model.wording import say

if TYPE_CHECKING:  # a report is built by the command that prints it: importing this module builds nothing
    from loaderscope.report import RunReport

# Characters a terminal acts on (an escape sequence, a carriage return) in text read from a trace,
# which another user may have written into a shared logdir: shown as their \x.. codes, never sent raw.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(value: Any) -> str:
    """``value`` as text that prints literally: no rich markup, no terminal control characters."""
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return escape(CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def python_value(value: Any) -> str:
    """A setting as the DataLoader's argument is written in Python (``True``, ``None``); objects as JSON."""
    return plain(value if isinstance(value, (str, dict, list)) else repr(value))


def line(console: Console, text: str, indent: int = 2) -> None:
    """A line of ``text`` (markup) indented, its wrapped continuation lines under the same indent."""
    console.print(Padding(text, (0, 0, 0, indent), expand=False))


def bullets(console: Console, texts: list[str]) -> None:
    """Plain texts as a list, each wrapped under its own first word."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column()
    grid.add_column()
    for text in texts:
        grid.add_row("  •", plain(text))
    console.print(grid)


def heading(console: Console, title: str) -> None:
    console.print(f"\n[bold]{title}[/]")


def print_report(report: RunReport, console: Console) -> None:
    """The sections of one run, for ``run`` and ``show``."""
    stats = report["summary"]
    print_settings(report, console)
    heading(console, "Throughput")
    line(console, say("cli.rate", batches=say("n.batches", n=stats["batches"]), wall=f"{stats['epoch_wall']:.2f}",
                      rate=f"{stats['batches_per_s']:.1f}"))
    print_waiting(stats, console)
    print_workers(report, console)
    print_memory(stats["memory"], console)
    print_reordering(report, console)
    heading(console, "Diagnosis")
    bullets(console, [finding["text"] for finding in report["findings"]])
    if not report["findings"]:
        line(console, "no findings: the run has no batch yet")
    if stats["violations"]:
        line(console, f"protocol violations: {plain('; '.join(stats['violations'][:5]))}")


def print_settings(report: RunReport, console: Console) -> None:
    """The loader's class, its settings as torch resolved them, and a scenario's other parameters."""
    heading(console, "Settings")
    loader = report["identity"]["loader"]
    if loader:
        line(console, f"loader {plain(loader)}")
    settings = report["settings"]
    line(console, "  ".join(f"{plain(k)}={python_value(v)}" for k, v in settings.items())
         or "unknown: the trace has no run_start")
    params = {k: v for k, v in (report["params"] or {}).items() if k not in settings}
    if params:
        line(console, "scenario parameters: " + "  ".join(f"{plain(k)}={python_value(v)}" for k, v in params.items()))


def print_waiting(stats: Mapping[str, Any], console: Console) -> None:
    """Where the loop's time inside this loader's epochs went: its wait, other loaders', its step."""
    wall = stats["epoch_wall"]
    heading(console, "Waiting")
    line(console, say("cli.time", wall=f"{wall:.2f}"))
    step = stats["step_time"]
    rows = (
        (say("label.input_bound"), stats["consumer_wait"], stats["input_bound"],
         say("cli.time.startup", startup=f"{stats['startup_wait']:.2f}", share=f"{stats['startup_share']:.0%}")),
        (say("cli.time.others"), stats["other_wait"], stats["other_share"], ""),
        (say("cli.time.step"), stats["step_total"], stats["step_total"] / wall if wall > 0 else 0.0,
         say("cli.time.step_mean", step=f"{step * 1000:.1f}") if step is not None else ""),
    )
    table = Table(show_header=False, box=None, pad_edge=False)
    for label, seconds, share, note in rows:
        table.add_row("  " + label, f"{seconds:.2f} s", f"{share:.0%}", note)
    console.print(table)
    line(console, say("cli.time.steady", steady=f"{stats['input_bound_steady']:.0%}"))
    others = say("waited.outside.others", others=f"{stats['between_others']:.2f}") \
        if stats["between_others"] >= 0.005 else ""
    line(console, say("cli.time.outside", outside=f"{stats['between_epochs']:.2f}", others=others))


def print_workers(report: RunReport, console: Console) -> None:
    """A row per worker: its fetch times, bytes and idle share (``main``: in-process loading)."""
    in_process = not report["settings"].get("num_workers")
    heading(console, "Workers")
    table = Table("  worker", "pid", "status", "tasks", "fetch p50", "p95", "max", "MB", "idle", box=None,
                  pad_edge=False)
    for w in report["summary"]["workers"]:
        pid = "main" if in_process else "-" if w["pid"] is None else str(w["pid"])  # "-": never started
        table.add_row(f"  {w['worker']}", pid, plain(w["status"]), str(w["tasks"]),
                      f"{w['fetch_p50'] * 1000:.1f} ms", f"{w['fetch_p95'] * 1000:.1f} ms",
                      f"{w['fetch_max'] * 1000:.1f} ms", f"{w['bytes'] / 1e6:.2f}", f"{w['idle_share']:.0%}")
    console.print(table)


def mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f}"


def print_memory(memory: Mapping[str, Any] | None, console: Console) -> None:
    """A row per process at its last sample and its high-water mark; the host's headroom, /dev/shm and the
    batches in flight (nothing for a trace without ``memory`` samples)."""
    if memory is None:
        return
    heading(console, "Memory")
    line(console, say("cli.memory", samples=say("n.samples", n=memory["samples"]), source=plain(memory["source"]),
                      full=memory["full_samples"]))
    table = Table("  process", "pid", "USS MB", "PSS MB", "RSS MB", "shared MB", "high RSS MB", "grew MB",
                  box=None, pad_edge=False)
    for proc in ([memory["main"]] if memory["main"] else []) + memory["workers"]:
        name = "main" if proc["worker"] is None else f"worker {proc['worker']}"
        table.add_row(f"  {name}", str(proc["pid"]), mb(proc["uss"]), mb(proc["pss"]), mb(proc["rss"]),
                      mb(proc["shared"]), mb(proc["high_rss"]), mb(proc["grown"]) if proc["worker"] is not None else "")
    console.print(table)
    if memory["headroom"] is not None:
        limit = say("cli.memory.cgroup", limit=mb(memory["cgroup_limit"])) if memory["cgroup_limit"] is not None else ""
        line(console, say("cli.memory.headroom", now=mb(memory["headroom"]), low=mb(memory["headroom_low"]),
                          cgroup=limit))
    if memory["shm_total"]:
        line(console, say("cli.memory.shm", high=mb(memory["shm_high"]), total=mb(memory["shm_total"])))
    line(console, say("cli.memory.in_flight", high=mb(memory["in_flight_high"]),
                      batches=say("n.batches", n=memory["in_flight_batches"]), pss=mb(memory["total_high"])))


def print_reordering(report: RunReport, console: Console) -> None:
    """How many results waited in the reorder buffer, and the first epoch's orders and story."""
    stats, orders = report["summary"], report["reordering"]
    heading(console, "Reordering")
    line(console, say("cli.reorder", results=say("n.results", n=stats["out_of_order"]), high=stats["parked_high"],
                      high_out=stats["outstanding_high"], window=stats["window"]))
    arrivals, yields = orders["arrivals"], orders["yields"]
    if arrivals and arrivals == yields:
        line(console, say("cli.reorder.same", tasks=say("n.tasks", n=len(arrivals))))
    elif arrivals:
        line(console, say("cli.reorder.how"))
        line(console, f"arrival order: {' '.join(map(str, arrivals))}", 4)
        line(console, f"yield order:   {' '.join(map(str, yields))}", 4)
        for step in orders["story"]:  # "   404.7 ms  task 1 arrived ...": the times right-aligned
            line(console, plain(step))
