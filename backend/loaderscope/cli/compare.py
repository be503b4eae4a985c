"""``loaderscope compare A B``: two runs side by side in the terminal.

A and B are trace files or run ids. A run id is read from a dashboard (``--url``, else
``$LOADERSCOPE_URL``, else the one ``loaderscope serve`` published on this machine) through
``GET /api/runs/{id}/events``. The comparison itself is ``compare.compare`` (pure); this module only
finds the events and prints the result.
"""

from __future__ import annotations

import argparse
import http.client
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loaderscope.cli.errors import UsageError
from loaderscope.cli.output import add_format_option, stdout_console, to_csv, to_json
from loaderscope.cli.summary import mb

RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # the dashboard's run ids (server/runs/producers.py)
PAGE = 10_000  # events per request: the route's maximum (api.MAX_EVENTS_PER_REQUEST)
TIMEOUT = 30.0
SPARK = " ▁▂▃▄▅▆▇█"


class CompareError(Exception):
    """A run that cannot be read: the message says which and what to pass instead."""


def add_compare_command(subparsers: Any) -> None:
    """Add ``compare`` to the ``loaderscope`` command's subparsers."""
    p = subparsers.add_parser("compare", help="compare two runs: settings, throughput, fetch times, diagnosis")
    p.add_argument("a", metavar="A", help="a trace file, or a run id on the dashboard")
    p.add_argument("b", metavar="B", help="the run to compare it with (trace file or run id)")
    p.add_argument("--url", default=None, help="the dashboard holding run ids (default: $LOADERSCOPE_URL, "
                   "else the dashboard `loaderscope serve` runs on this machine)")
    add_format_option(p)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace, console: Console | None = None) -> int:
    """Print the comparison of ``args.a`` with ``args.b``; a run that cannot be read is a usage error (2)."""
    try:
        events = [load_run(ref, args.url) for ref in (args.a, args.b)]
    except CompareError as exc:
        raise UsageError(str(exc)) from None
    from loaderscope.model.compare import compare, run_memory  # the models load when the command runs
    from loaderscope.model.state import reduce

    result = compare(events[0], events[1], labels=(args.a, args.b))
    memory = [run_memory(reduce(e)) for e in events]
    out = console or stdout_console()
    fmt = getattr(args, "format", "table")
    if fmt == "json":
        out.out(to_json({**result, "memory": {"a": memory[0], "b": memory[1]}}), highlight=False)
    elif fmt == "csv":
        out.out(to_csv(comparison_rows(result) + memory_rows(memory)), end="", highlight=False)
    else:
        print_comparison(result, out)
        print_memory_pair(memory, out)
    return 0


def comparison_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The settings that differ and the headline statistics, one row each, for ``--format csv``."""
    settings = [{"section": "setting", "name": row["key"], "a": row["a"], "b": row["b"], "delta": None, "ratio": None}
                for row in result["settings"]["changed"]]
    metrics = [{"section": "metric", "name": row["key"], "a": row["a"], "b": row["b"], "delta": row["delta"],
                "ratio": row["ratio"]} for row in result["metrics"]]
    return settings + metrics


PROC_FIGURES = ("uss", "pss", "rss", "shared", "high_uss", "high_pss", "high_rss")  # bytes, of each process
RUN_FIGURES = ("headroom", "headroom_low", "total_high", "in_flight_high", "shm_high")  # bytes, of the run


def _change(a: Any, b: Any) -> dict[str, Any]:
    both = a is not None and b is not None
    return {"a": a, "b": b, "delta": b - a if both else None, "ratio": b / a if both and a else None}


def memory_rows(pair: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """``--format csv``'s memory: a row per figure of each process and of the run (section ``memory``,
    bytes; empty for a run without it), then a row per memory verdict (``memory_verdict``, its code)."""
    procs = [_procs(m) for m in pair]
    rows = [{"section": "memory", "name": f"{name} {key}", **_change(*(p[name][key] if name in p else None
                                                                        for p in procs))}
            for name in _names(procs) for key in PROC_FIGURES]
    rows += [{"section": "memory", "name": key, **_change(*(None if m is None else m[key] for m in pair))}
             for key in RUN_FIGURES if any(m is not None for m in pair)]
    for side, memory in zip("ab", pair, strict=True):
        for verdict in memory["verdicts"] if memory else []:
            rows.append({"section": "memory_verdict", "name": verdict["code"], "a": None, "b": None, "delta": None,
                         "ratio": None} | {side: verdict["text"]})
    return rows


# --- finding the runs -------------------------------------------------------------------------------


def load_run(ref: str, url: str | None) -> list[dict[str, Any]]:
    """The events of a trace file, or of a run id on the dashboard."""
    from loaderscope.traces.jsonl import TraceError, read_trace

    path = Path(ref)
    if path.exists() or not RUN_ID.match(ref):
        try:
            return list(read_trace(path)[1])
        except TraceError as exc:
            raise CompareError(str(exc)) from None
    return fetch_events(*dashboard(url, ref), ref)


def dashboard(url: str | None, ref: str) -> tuple[str, str | None]:
    """(base URL, token) of the dashboard to ask for run ids; never starts one (unlike ``watch()``)."""
    from loaderscope import discovery

    base, token = discovery.dashboard_address(url)
    if base:
        return base, token
    if token and discovery.accepts(discovery.DEFAULT_URL, token, discovery.COMMAND_TIMEOUT):
        return discovery.DEFAULT_URL, token
    published = discovery.read_state(discovery.private_dir())
    if published is not None and discovery.accepts(published.url, published.token, discovery.COMMAND_TIMEOUT):
        return published.url, published.token
    raise CompareError(f"{ref}: no such file, and no dashboard to look it up as a run id on: pass the dashboard's "
                       f"URL with --url 'http://127.0.0.1:8000/?token=...' (or set ${discovery.URL_ENV})")


def _get(base: str, path: str, token: str | None) -> tuple[int, bytes]:
    parts = urlsplit(base)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise CompareError(f"cannot reach the dashboard at {base}: {exc}") from None
    finally:
        conn.close()


def fetch_events(base: str, token: str | None, run_id: str) -> list[dict[str, Any]]:
    """Every event of ``run_id``, page by page; what the dashboard no longer holds is an error."""
    events: list[dict[str, Any]] = []
    after = -1
    while True:
        status, body = _get(base, f"/api/runs/{quote(run_id)}/events?after={after}&limit={PAGE}", token)
        if status == 404:
            raise CompareError(f"{run_id}: no such file, and the dashboard at {base} has no run with that id")
        if status in (401, 403):
            raise CompareError(f"the dashboard at {base} refused the token: pass its URL with ?token=... to --url")
        if status != 200:
            raise CompareError(f"the dashboard at {base} answered {status} for run {run_id}")
        page = orjson.loads(body)
        if page.get("gap"):
            gap = page["gap"]
            raise CompareError(f"the dashboard no longer holds events {gap['from']}..{gap['to']} of run {run_id}: "
                               "compare its trace file instead")
        events += page["events"]
        if not page["events"] or events[-1]["seq"] >= page["last_seq"]:
            return events
        after = events[-1]["seq"]


# --- printing ---------------------------------------------------------------------------------------


def _value(v: Any) -> str:
    return "—" if v is None else orjson.dumps(v).decode() if isinstance(v, (dict, list)) else str(v)


def fmt_seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def fmt_metric(value: float, unit: str) -> str:
    if unit == "rate":
        return f"{value:.1f} batches/s"
    if unit == "share":
        return f"{value:.0%}"
    if unit == "seconds":
        return fmt_seconds(value)
    return f"{value:.0f}"


def fmt_change(row: dict[str, Any]) -> str:
    """B against A: percentage points for shares, a factor for the rest."""
    if row["unit"] == "share":
        return f"{row['delta'] * 100:+.0f} pts"
    if row["ratio"] is None:
        return ""
    return f"×{row['ratio']:.2f}"


def sparkline(counts: list[int]) -> str:
    top = max(counts, default=0)
    return "".join(SPARK[0 if not c else max(1, round(c / top * (len(SPARK) - 1)))] for c in counts)


def _who(run: dict[str, Any]) -> str:
    what = " · ".join(str(x) for x in (run["scenario"] or run["name"], run["mode"], f"rank {run['rank']}",
                                        run["status"], run["run"]) if x)
    return f"[bold]{escape(run['label'])}[/] ({escape(what)})"


def print_comparison(result: dict[str, Any], console: Console) -> None:
    a, b = result["runs"]
    console.print(f"A: {_who(a)}\nB: {_who(b)}")
    settings = result["settings"]
    console.print("\n[bold]Settings that differ[/]")
    if settings["changed"]:
        table = Table("setting", "A", "B", box=None, pad_edge=False)
        for row in settings["changed"]:
            table.add_row(row["key"], escape(_value(row["a"])), escape(_value(row["b"])))
        console.print(table)
    else:
        console.print("  none: both runs have the same settings")
    console.print(f"  ({len(settings['same'])} other settings are the same)")
    console.print("\n[bold]Throughput and waiting[/]")
    table = Table("", "A", "B", "B vs A", box=None, pad_edge=False)
    for row in result["metrics"]:
        table.add_row(row["label"], fmt_metric(row["a"], row["unit"]), fmt_metric(row["b"], row["unit"]),
                      fmt_change(row))
    console.print(table)
    print_histograms(result["histograms"], console)
    print_diagnosis(result["diagnosis"], console)


def print_histograms(hist: dict[str, Any], console: Console) -> None:
    edges = hist["edges"]
    if not edges:
        console.print("\n[bold]Fetch time per worker[/]: no fetch finished in either run")
        return
    console.print(f"\n[bold]Fetch time per worker[/], one scale for both runs: {fmt_seconds(edges[0])} … "
                  f"{fmt_seconds(edges[-1])} (log)")
    table = Table("run", "worker", "tasks", "p50", "p95", "histogram", box=None, pad_edge=False)
    for side in ("a", "b"):
        for w in hist[side]:
            table.add_row(side.upper(), "main" if w["in_process"] else str(w["worker"]), str(w["tasks"]),
                          fmt_seconds(w["p50"]), fmt_seconds(w["p95"]), f"[blue]{sparkline(w['counts'])}[/]")
    console.print(table)


def print_diagnosis(diff: dict[str, Any], console: Console) -> None:
    console.print("\n[bold]Diagnosis[/]")
    for title, texts in (("gone in B (only in A)", diff["only_a"]), ("new in B (only in B)", diff["only_b"])):
        if texts:
            console.print(f"  [bold]{title}[/]")
            for text in texts:
                console.print(f"    • {escape(text)}")
    if diff["both"]:
        console.print("  [bold]in both[/]")
    for pair in diff["both"]:
        if pair["changed"]:
            console.print(f"    • A: {escape(pair['a'])}\n      B: {escape(pair['b'])}")
        else:
            console.print(f"    • {escape(pair['a'])}")
    if not (diff["only_a"] or diff["only_b"] or diff["both"]):
        console.print("  no findings in either run")


def _procs(memory: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    if memory is None:
        return {}
    procs = ([memory["main"]] if memory["main"] else []) + memory["workers"]
    return {"main" if p["worker"] is None else f"worker {p['worker']}": p for p in procs}


def _names(procs: list[dict[str, dict[str, Any]]]) -> list[str]:
    """The processes of either run: ``main`` first, then the workers by id."""
    return sorted({*procs[0], *procs[1]}, key=lambda n: (n != "main", int(n.split()[-1]) if n != "main" else 0))


def _figures(proc: dict[str, Any] | None) -> str:
    return "-" if proc is None else f"{mb(proc['uss'])} / {mb(proc['pss'])} / {mb(proc['rss'])}"


def print_memory_pair(pair: list[dict[str, Any] | None], console: Console) -> None:
    """Both runs' memory (``run_memory``'s) beside each other: each process at its last sample (USS / PSS /
    RSS), the processes' PSS summed at its high, the host's headroom at the end and at its lowest. Nothing when
    neither sampled."""
    if all(m is None for m in pair):
        return
    console.print("\n[bold]Memory[/], MB (each process at its last sample)")
    table = Table("", "A", "B", box=None, pad_edge=False)
    procs = [_procs(m) for m in pair]
    for name in _names(procs):
        table.add_row(f"{name} USS / PSS / RSS", *(_figures(p.get(name)) for p in procs))
    for label, key in (("PSS summed, at its high", "total_high"), ("headroom at the end", "headroom"),
                       ("headroom at its lowest", "headroom_low"), ("batches in flight, at most", "in_flight_high")):
        table.add_row(label, *("-" if m is None else mb(m[key]) for m in pair))
    console.print(table)
