"""◆ The ``loaderscope`` command: demo, serve, scenarios, run, sim, export, record, compare, show, doctor, job."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loaderscope.cli.compare import add_compare_command
from loaderscope.cli.errors import UsageError
from loaderscope.cli.job import add_job_command
from loaderscope.cli.output import add_format_option, stdout_console, to_csv, to_json
from loaderscope.cli.show import add_show_command
from loaderscope.doctor.command import add_doctor_command
from loaderscope.model.wording import say
from loaderscope.record import add_record_command
from loaderscope.version import __version__

# The scenarios, the models and the reports load inside the subcommands that use them: every command starts
# without the others' imports (`loaderscope job` without the models, `loaderscope --help` without any of them).
if TYPE_CHECKING:
    from loaderscope.events import Event
    from loaderscope.model.state import LoaderState
    from loaderscope.scenarios.catalog import Scenario
    from loaderscope.scenarios.plan import Plan

console: Console = stdout_console()


# --- parameters ---------------------------------------------------------------------------------


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs; each value read as JSON where it is one, so ``4`` is what ``4`` is in the API."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set num_workers=8")
        params[key.strip()] = _literal(value.strip())
    return params


def _literal(text: str) -> Any:
    """A command-line value: a JSON literal (number, true, [..]) or else the string itself."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def resolve(name: str, values: dict[str, Any]) -> Plan:
    """``scenarios.plan.resolve``, its ParamError shown as the dashboard shows it."""
    from loaderscope.problems import ParamError
    from loaderscope.scenarios import plan

    try:
        return plan.resolve(name, values)
    except ParamError as exc:
        raise UsageError(str(exc)) from None


# --- commands --------------------------------------------------------------------------------------


def cmd_scenarios(args: argparse.Namespace) -> int:
    table = Table("scenario", "what it shows", box=None, pad_edge=False)
    from loaderscope.scenarios.catalog import all_scenarios

    for scenario in all_scenarios():
        table.add_row(f"[bold]{scenario.name}[/]", scenario.description)
    console.print(table)
    console.print("\nRun one: [bold]loaderscope run out_of_order[/]   "
                  "parameters: [bold]loaderscope run NAME --help-params[/]")
    return 0


def print_params(scenario: Scenario) -> None:
    table = Table("parameter", "default", "allowed", "meaning", box=None, pad_edge=False)
    for name, spec in scenario.describe()["params"].items():
        allowed = spec.get("enum") or (f"{spec['minimum']}…{spec['maximum']}" if "minimum" in spec
                                       else spec.get("type", ""))
        table.add_row(name, str(spec.get("default")), str(allowed), spec.get("description", ""))
    console.print(f"[bold]{scenario.name}[/]: {scenario.description}\n")
    console.print(table)


def execute(plan: Plan, mode: str, costs: Any = None) -> tuple[list[Event], LoaderState, str | None]:
    """Run for real (worker processes) or simulated; returns events, final state and torch's error."""
    from loaderscope.runner import Collector, new_run_id

    collector = Collector()
    if mode == "sim":
        from loaderscope.sim import simulate

        collector(simulate(plan.build(), run_id=new_run_id(), scenario=plan.name, params=plan.values(), costs=costs))
        return collector.events, collector.state, None
    from loaderscope.runner import run_plan

    warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")  # about this box, not the loader
    try:
        run_plan(plan, collector)
    except Exception as exc:  # the loader's own exception: reported, the trace is still written
        return collector.events, collector.state, f"{type(exc).__name__}: {exc}"
    return collector.events, collector.state, None


def register_hub(spec: str, kwargs: dict[str, Any] | None = None) -> Scenario:
    """Make a --hub entry a scenario of this process."""
    from loaderscope.scenarios import hub
    from loaderscope.scenarios.catalog import hub_scenario, register

    try:
        return register(hub_scenario(hub.HubEntry.parse(spec, kwargs)))
    except hub.HubError as exc:
        raise UsageError(str(exc)) from None


def hub_values(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """--set values for a hub run: the loader's parameters, and the rest for the entry point."""
    from loaderscope.scenarios.params import HubParams

    loader = {k: v for k, v in values.items() if k in HubParams.model_fields}
    return loader, {k: v for k, v in values.items() if k not in loader}


def cmd_run(args: argparse.Namespace) -> int:
    values = parse_sets(args.set)
    if args.hub:
        values, entry_kwargs = hub_values(values)
        name = register_hub(args.hub, entry_kwargs).name
    elif args.scenario:
        name = args.scenario
    else:
        raise UsageError("name a scenario (see `loaderscope scenarios`) or a torch.hub entry with --hub DIR:ENTRY")
    if args.help_params:
        print_params(find_scenario(name))
        return 0
    plan = resolve(name, values)
    console.print(f"[bold]{plan.scenario.title}[/] ({args.mode}): {plan.scenario.description}")
    if args.ranks > 1 or args.rank_factor:
        return run_job(plan, args)
    events, state, error = execute(plan, args.mode, cost_model(args.costs))
    out = Path(args.out or f"{plan.name}.trace.jsonl")
    from loaderscope.traces.jsonl import write_trace

    write_trace(out, events, state.run, scenario=plan.name, mode=args.mode, params=plan.values())
    from loaderscope.cli.summary import print_report
    from loaderscope.report import run_report

    print_report(run_report(events, state=state), console)
    if error:
        console.print(f"\n[bold red]the DataLoader raised[/] {escape(error)}")
    else:  # a run the DataLoader cut short says nothing about the pace more workers would give
        print_advice(events)
    console.print(f"\ntrace: {out} ({len(events)} events) — open it with [bold]loaderscope serve --open {out}[/]")
    return 1 if error else 0


def rank_factors(specs: Sequence[str], ranks: int) -> dict[int, float]:
    """--rank-factor R=F: rank R's samples take F times as long (a slow disk, a busy node)."""
    factors = {}
    for spec in specs:
        rank, sep, factor = spec.partition("=")
        try:
            factors[int(rank)] = float(factor)
        except ValueError:
            raise UsageError(f"--rank-factor {spec!r}: expected RANK=FACTOR, e.g. --rank-factor 3=2.5") from None
        if not sep or not 0 <= int(rank) < ranks or not float(factor) > 0:
            raise UsageError(f"--rank-factor {spec!r}: need a rank from 0 to {ranks - 1} and a factor above 0")
    return factors


def run_job(plan: Plan, args: argparse.Namespace) -> int:
    """--ranks N --mode sim: a data-parallel job of N ranks, a trace per rank in a logdir."""
    from loaderscope.runner import new_run_id
    from loaderscope.sim import CostModel
    from loaderscope.sim.run import simulate_ranks
    from loaderscope.traces.jsonl import write_trace
    from loaderscope.traces.paths import trace_path

    if args.mode != "sim":
        raise UsageError("--ranks simulates a data-parallel job: add --mode sim (to watch a real job, run it with "
                         "`loaderscope record -- torchrun --nproc-per-node N train.py`)")
    if args.ranks < 2:
        raise UsageError(f"--ranks {args.ranks}: a job needs at least 2 ranks")
    base: CostModel = cost_model(args.costs) or CostModel()
    factors = rank_factors(args.rank_factor, args.ranks)
    workload = plan.build()
    fetchers = range(max(workload.settings.num_workers, 1))
    costs = [base.model_copy(update={"worker_factor": {w: base.worker_factor.get(w, 1.0) * factors.get(rank, 1.0)
                                                       for w in fetchers}})
             for rank in range(args.ranks)]
    try:
        job = simulate_ranks(workload, job=f"sim-{plan.name}-{new_run_id()[:6]}", scenario=plan.name,
                             params=plan.values(), costs=costs)
    except ValueError as exc:
        raise UsageError(f"--ranks: {exc}") from None
    logdir = Path(args.logdir or f"{plan.name}-job")
    for events in job.events:
        write_trace(trace_path(logdir, events[0]), events, events[0]["run"], scenario=plan.name, mode="sim",
                    params=plan.values())
    print_job(job)
    console.print(f"\ntraces: {logdir}/ ({args.ranks} ranks, {sum(job.counts):,} events) — open the job with "
                  f"[bold]loaderscope serve --logdir {logdir}[/]")
    return 0


def print_job(job: Any) -> None:
    from loaderscope.sim.job import rank_figures

    steps = len(job.slowest)
    console.print(f"\n{steps} steps in {job.wall:.2f} s = [bold]{steps / job.wall if job.wall else 0:.1f} steps/s[/] "
                  f"for the job; ranks step together, so the slowest rank to deliver a batch sets the pace")
    table = Table("rank", "batches/s", say("label.input_bound"), "slowest in", "worst lag", box=None, pad_edge=False)
    for row in rank_figures(job):
        lag = row["worst_lag"]
        table.add_row(str(row["rank"]), f"{row['batches_per_s']:.1f}", f"{row['input_bound']:.0%}",
                      f"{row['slowest_steps']} of {steps} steps", "-" if lag is None else f"{lag * 1000:.1f} ms")
    console.print(table)
    if job.hung:
        console.print(f"[bold red]ranks {job.hung} wait forever in the all-reduce[/]: another rank's loader ran out "
                      "of batches first (uneven inputs)")


def find_scenario(name: str) -> Scenario:
    from loaderscope.problems import UnknownScenario
    from loaderscope.scenarios import catalog

    try:
        return catalog.get(name)
    except UnknownScenario as exc:
        raise UsageError(str(exc)) from None


def print_advice(events: list[Event]) -> None:
    """The advice on num_workers, as the page and ``sim --from-trace`` give it (``sim.advice``)."""
    from loaderscope.model.advicetext import advice_text
    from loaderscope.sim.advice import advise

    console.print("\n[bold]Advice on num_workers[/] (the simulator, fitted to this run)")
    console.print(f"  • {escape(advice_text(advise(events)))}", soft_wrap=True)


def sweep_grid(specs: Sequence[str], allowed: Sequence[str]) -> dict[str, list[Any]]:
    grid = {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not values:
            raise UsageError(f"--sweep {spec!r}: expected KEY=V1,V2,..., e.g. --sweep num_workers=1,2,4,8")
        if key not in allowed:
            raise UsageError(f"--sweep {key}: not a parameter here; sweepable: {', '.join(allowed)}")
        grid[key] = [_literal(value) for value in values.split(",")]
    return grid


def read_events(path: str) -> list[Event]:
    from loaderscope.traces.jsonl import TraceError, read_trace

    try:
        return read_trace(path)[1]
    except TraceError as exc:
        raise UsageError(str(exc)) from None


def cost_model(text: str | None) -> Any:
    from pydantic import ValidationError

    from loaderscope.sim import CostModel

    if not text:
        return None
    try:
        return CostModel.model_validate_json(text)
    except ValidationError as exc:
        raise UsageError(f"--costs: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None


def cmd_sim(args: argparse.Namespace) -> int:
    from loaderscope import sim
    from loaderscope.problems import ParamError

    cost_fields = [name for name, f in sim.CostModel.model_fields.items() if f.annotation in (int, float)]
    if args.from_trace and not args.scenario:
        events = read_events(args.from_trace)
        plan = trace_plan(events)
        if plan is None:  # the trace's own loader, replayed with other settings
            try:  # what a replay can change, checked before the fit is printed
                grid = sim.replay_grid(sweep_grid(args.sweep, [*sorted(sim.TRACE_KEYS), *cost_fields]))
            except ParamError as exc:
                raise UsageError(str(exc)) from None
            fitted, off = print_fit(events, None, args.format)
            return print_sweep(lambda: sim.trace_sweep(events, grid, fitted), args.format, off)
        costs, off = print_fit(events, plan, args.format)
    elif args.scenario:
        plan = resolve(args.scenario, parse_sets(args.set))
        costs, off = print_fit(read_events(args.from_trace), None, args.format, advice=False) if args.from_trace \
            else (cost_model(args.costs), None)
    else:
        raise UsageError("name a scenario, or give --from-trace FILE to sweep a recorded run")
    grid = sweep_grid(args.sweep, [*plan.scenario.params.model_fields, *cost_fields])
    return print_sweep(lambda: sim.sweep(plan, grid, costs), args.format, off)


def print_fit(events: list[Event], plan: Plan | None, fmt: str = "table",
              advice: bool = True) -> tuple[Any, str | None]:
    """Say which costs the trace gave the simulator, how close it replays the recorded setting, and (with
    ``advice``: the trace's own loader is what is swept) the advice on num_workers for that loader.

    ``plan``: the scenario the trace recorded, if it is replayed as that scenario. Returns the model, and
    why the sweep may not recommend (its replay of the recorded setting is off by more than
    ``sim.advice.TRUST``) or None. With ``--format csv|json`` this goes to stderr, so that stdout holds
    only the table's data.
    """
    from loaderscope import sim
    from loaderscope.model.advicetext import advice_text
    from loaderscope.sim.advice import advise, untrusted

    try:
        costs = sim.fit_from_trace(events)
        check = sim.recorded_check(events, plan, costs)
    except ValueError as exc:  # a trace without a finished fetch: nothing to fit
        raise UsageError(str(exc)) from None
    out = console if fmt == "table" else Console(stderr=True, highlight=False)
    out.print("fitted from the trace:", highlight=False)
    for cost in sim.describe_fit(costs):
        out.print(f"  {cost['field']:<17} {cost['text']}", highlight=False, soft_wrap=True)
    setting = ", ".join(f"{k}={v}" for k, v in check["setting"].items())
    error = f" ({check['error']:+.1%})" if check["error"] is not None else ""
    out.print(f"at the recorded setting ({setting}): recorded {check['recorded_batches_per_s']:.2f} batches/s, "
                  f"replayed {check['predicted_batches_per_s']:.2f}{error}", highlight=False, soft_wrap=True)
    if advice:
        out.print(f"workers: {advice_text(advise(events))}", highlight=False, soft_wrap=True)
    return costs, untrusted(check["predicted_batches_per_s"], check["recorded_batches_per_s"])


def trace_plan(events: list[Event]) -> Plan | None:
    """The scenario a trace recorded, with its parameters; None for a loader of the user's own."""
    from loaderscope.scenarios import catalog

    start = next((e for e in events if e["kind"] == "run_start"), None)
    if start is None or start.get("scenario") not in {s.name for s in catalog.all_scenarios()}:
        return None
    return resolve(start["scenario"], start.get("params") or {})


def print_sweep(rows_of: Callable[[], list[dict[str, Any]]], fmt: str = "table", off: str | None = None) -> int:
    """The sweep's rows and its recommendation; ``off``: why the fit may not recommend, said instead."""
    from loaderscope import sim

    try:
        rows = rows_of()
    except ValueError as exc:  # a ParamError, or a key a replayed trace cannot change
        raise UsageError(str(exc)) from None
    recommendation = sim.recommend(rows) if off is None else off
    memory = sim.memory_notes(rows)  # settings of a recorded run that would not fit the memory it had
    if fmt == "csv":
        sys.stdout.write(to_csv(rows))
    elif fmt == "json":
        sys.stdout.write(to_json({"rows": rows, "recommendation": recommendation} |
                                 ({"memory": memory} if rows and "memory" in rows[0] else {})) + "\n")
    else:
        console.print(sim.format_table(rows), end="")
        console.print(recommendation, soft_wrap=True)
        for note in memory:
            console.print(f"memory: {note}", highlight=False, soft_wrap=True)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from loaderscope.traces.header import meta_of
    from loaderscope.traces.jsonl import TraceError, chrome_json, columnar_available, read_trace_tolerant, write_trace

    fmt = args.format or export_format(args.output)
    output = Path(args.output)
    if fmt != "chrome" and output.exists():
        raise UsageError(f"{output} already exists: remove it or name another -o (a trace is never overwritten)")
    if fmt == "parquet" and not columnar_available():
        raise UsageError("--format parquet needs pyarrow: pip install 'loaderscope[columnar]'")
    try:
        head, events, truncated = read_trace_tolerant(args.file)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    if fmt == "chrome":
        chrome = chrome_json(events)
        output.write_bytes(chrome)
        count = chrome.count(b'"ph":')
        console.print(f"{output}: {count} trace events from {len(events)} loaderscope events; "
                      "open it in https://ui.perfetto.dev or chrome://tracing")
        return 0
    write_trace(output, events, str(head.get("run")), fmt=fmt, **meta_of(head))
    note = " (the source is truncated: its writer was killed or is still writing)" if truncated else ""
    console.print(f"{output}: {len(events)} events as {fmt}{note}; open it with loaderscope serve --open {output}")
    return 0


def export_format(output: str) -> str:
    """The format ``-o`` names by its suffix: a Parquet trace, JSON lines, else Chrome trace-event JSON."""
    name = output.rstrip("/")
    return "parquet" if name.endswith(".parquet") else "jsonl" if name.endswith(".jsonl") else "chrome"


# A demo long enough to watch: out_of_order's default run is over in about a second.
DEMO_SETS = {"out_of_order": ["dataset_size=400", "sample_ms=15", "hold_every=5"]}  # keeps results parking all run


def cmd_serve(args: argparse.Namespace) -> int:
    from loaderscope.server.web.dashboard import serve

    demo = getattr(args, "scenario", None)
    options: dict[str, Any] = {}
    if demo is not None:
        sets = (DEMO_SETS.get(demo, []) if not args.set else []) + args.set
        options = {"demo": demo, "demo_params": parse_sets(sets), "demo_delay": args.delay}
    try:
        serve(host=args.host, port=args.port, token=args.token, open_browser=not args.no_browser,
              traces=getattr(args, "open", []), hub=args.hub, logdir=args.logdir, **options)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port} ({exc.strerror}); "
                         "choose another port with --port, or --port 0 for any free one") from None
    except ValueError as exc:  # a ParamError, a HubError, a bad token or trace: the message says which
        raise UsageError(str(exc)) from None
    return 0


# --- parser ----------------------------------------------------------------------------------------


def token_values_joined(argv: list[str]) -> list[str]:
    """``--token -abc`` as ``--token=-abc``: argparse takes a value that starts with ``-`` for an
    option, and a token may (``--token=VALUE`` always works). Nothing after ``--`` is touched: that is
    the command ``record`` runs."""
    out: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg == "--":
            return [*out, arg, *rest]
        value = next(rest, None) if arg == "--token" else None
        out.append(arg if value is None else f"--token={value}")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loaderscope", description="Watch torch's DataLoader work.")
    parser.add_argument("--version", action="version", version=f"loaderscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def server_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
        p.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
        p.add_argument("--token", default=None, help="access token (default: $LOADERSCOPE_TOKEN or a new one); "
                       "--token=VALUE or --token VALUE, also when VALUE starts with -")
        p.add_argument("--no-browser", action="store_true", help="do not open a browser")
        p.add_argument("--hub", action="append", default=[], metavar="DIR:ENTRY",
                       help="offer a torch.hub entry point of DIR/hubconf.py as a scenario (repeatable)")
        p.add_argument("--logdir", metavar="DIR", help="list every trace under DIR (recursively), follow the "
                       "growing ones live, and write this dashboard's runs there; kept across restarts")

    demo = sub.add_parser("demo", help="start the dashboard with a live scenario")
    demo.add_argument("scenario", nargs="?", default="out_of_order")
    demo.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a scenario parameter")
    demo.add_argument("--delay", type=float, default=0.15, help="seconds the consumer pauses per batch, so a "
                      "human can follow (default 0.15; 0: full speed)")
    server_options(demo)
    demo.set_defaults(func=cmd_serve)

    serve = sub.add_parser("serve", help="start the dashboard")
    serve.add_argument("--open", action="append", default=[], metavar="FILE",
                       help="open a recorded trace as a run (repeatable)")
    server_options(serve)
    serve.set_defaults(func=cmd_serve)

    sub.add_parser("scenarios", help="list the built-in scenarios").set_defaults(func=cmd_scenarios)

    run = sub.add_parser("run", help="run a scenario headless, print a summary, write the trace")
    run.add_argument("scenario", nargs="?")
    run.add_argument("--hub", metavar="DIR:ENTRY", help="run a torch.hub entry point of DIR/hubconf.py instead")
    run.add_argument("--mode", choices=("real", "sim"), default="real")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a scenario parameter")
    run.add_argument("--out", help="trace file to write (default: SCENARIO.trace.jsonl)")
    run.add_argument("--help-params", action="store_true", help="list the scenario's parameters and exit")
    run.add_argument("--costs", metavar="JSON",
                     help="""simulator cost model for --mode sim, e.g. '{"worker_factor": {"0": 5}}'""")
    run.add_argument("--ranks", type=int, default=1, metavar="N",
                     help="with --mode sim: a data-parallel job of N ranks stepping together, each reading its "
                          "DistributedSampler shard; a trace per rank goes to --logdir")
    run.add_argument("--rank-factor", action="append", default=[], metavar="RANK=FACTOR",
                     help="with --ranks: that rank's samples take FACTOR times as long (e.g. 3=2.5)")
    run.add_argument("--logdir", metavar="DIR", help="with --ranks: where the traces go (default: SCENARIO-job)")
    run.set_defaults(func=cmd_run)

    sim = sub.add_parser("sim", help="what-if: simulate a scenario over a grid of parameters")
    sim.add_argument("scenario", nargs="?", help="a scenario (omit with --from-trace to sweep the recorded loader)")
    sim.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,...", required=True)
    sim.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    sim.add_argument("--from-trace", metavar="FILE", help="fit the cost model to a recorded real trace")
    sim.add_argument("--costs", metavar="JSON", help="simulator cost model as JSON (see loaderscope.sim.CostModel)")
    add_format_option(sim)
    sim.set_defaults(func=cmd_sim)

    export = sub.add_parser("export", help="convert a trace: for Perfetto / chrome://tracing, or between JSON lines "
                                           "and Parquet")
    export.add_argument("file", help="a trace: NAME.trace.jsonl, or a Parquet trace NAME.trace.parquet")
    export.add_argument("--format", choices=("chrome", "jsonl", "parquet"), default=None,
                        help="chrome (Perfetto), jsonl or parquet (needs loaderscope[columnar]); default: by the -o "
                             "suffix (.parquet, .jsonl, else chrome)")
    export.add_argument("-o", "--output", required=True)
    export.set_defaults(func=cmd_export)
    add_record_command(sub)
    add_compare_command(sub)
    add_show_command(sub)
    add_doctor_command(sub)
    add_job_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(token_values_joined(sys.argv[1:] if argv is None else list(argv)))
    try:
        code: int = args.func(args)  # argparse's Namespace holds the subcommand's function untyped
        return code
    except UsageError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
