"""What if: simulate a scenario over a grid of values, tabulate, and recommend a worker count.

``sweep`` runs one simulation per combination of the grid (scenario parameters such as
``num_workers`` or ``prefetch_factor``, or scalar cost-model fields such as ``transfer_ms``) and
keeps the numbers the diagnosis (docs/DESIGN.md) speaks of: batches/s, the consumer's wait share
(input-bound), the reorder buffer's high-water mark and the workers' utilisation.
``trace_sweep`` does the same for a recorded loader without a scenario, costs fitted by ``fit_from_trace``;
``replay_grid`` checks its grid with the bounds and words every loader setting is checked with
(``settings.check``), before a run is read.

A sweep takes a resolved ``scenarios.Plan`` and varies it with ``Plan.with_values``: the scenarios
check every combination and build the workloads; this module never imports a builder or torch.
"""

from __future__ import annotations

import io
import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from loaderscope.contract.replay import TRACE_KEYS as TRACE_KEYS  # what a sweep of a trace may change
from loaderscope.events import Event
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.model.wording import say
from loaderscope.problems import ParamError, Problem
from loaderscope.scenarios.workload import Workload
from loaderscope.settings import LoaderSettings, check
from loaderscope.sim.costs import CostModel
from loaderscope.sim.fit import fit_from_trace
from loaderscope.sim.footprint import MEMORY_KEYS, annotate, footprint, gb, over_texts
from loaderscope.sim.run import simulate

if TYPE_CHECKING:
    from loaderscope.scenarios.plan import Plan

# The consumer counts as fed when it waits inside next() at most this share of its time in the
# epochs, each epoch's first wait left out (stats.summary's input_bound_steady): that batch always
# waits for the pipeline to fill, however many workers fill it.
FED_SHARE = 0.10
# The recommendation is the smallest worker count whose throughput is within this of the best.
SATURATION = 0.98
# Events simulated by one sweep, all combinations together: ~15 s of one core and under 1 GB at the
# simulator's ~150,000 events/s (one combination at its own 2M cap alone took 20 s and 737 MB).
MAX_SWEEP_EVENTS = 2_000_000
# Parameters that change the loader or the costs but never the sampler order: sweeping them can
# reuse one iteration of the real samplers.
ORDER_NEUTRAL = frozenset({
    "num_workers", "prefetch_factor", "persistent_workers", "in_order", "timeout", "pin_memory",
    "sample_ms", "step_ms", "slow_worker", "slow_factor",
})
METRICS = ("batches_per_s", "input_bound", "input_bound_steady", "parked_high", "worker_util", "wall", "batches",
           "status", *MEMORY_KEYS)


@dataclass(frozen=True)
class Variant:
    """One combination of a sweep: the swept keys and values, the plan and the costs it runs with."""

    values: dict[str, Any]
    plan: Plan
    costs: CostModel


def row_stats(events: Sequence[Event]) -> dict[str, Any]:
    """The sweep's numbers for one simulated run (from the summary in its ``run_end``)."""
    stats = events[-1].get("stats", {})
    workers = stats.get("workers", [])
    util = statistics.fmean(1 - w["idle_share"] for w in workers) if workers else 0.0
    return {
        "batches_per_s": stats.get("batches_per_s", 0.0),
        "input_bound": stats.get("input_bound", 0.0),
        "input_bound_steady": stats.get("input_bound_steady", 0.0),
        "parked_high": stats.get("parked_high", 0),
        "worker_util": util,
        "wall": stats.get("wall", 0.0),
        "batches": stats.get("batches", 0),
        "status": stats.get("status", events[-1].get("reason")),
    }


def _combinations(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def _variant(values: dict[str, Any], plan: Plan, costs: CostModel) -> Variant:
    """``values`` split between the scenario's parameters and the cost model's fields.

    Raises:
        ParamError: naming a key that is neither a parameter of the scenario nor a cost field, or a
            value the scenario does not accept.
    """
    param_keys, cost_keys = set(plan.scenario.params.model_fields), set(CostModel.model_fields)
    unknown = sorted(set(values) - param_keys - cost_keys)
    if unknown:
        raise ParamError([Problem(key, values[key], f"cannot sweep {key}: not a parameter of {plan.name} nor a cost",
                                  ", ".join(sorted(param_keys | cost_keys))) for key in unknown])
    # A cost the model sets overrides the scenario's (step_ms): sweep it there too.
    update = {k: v for k, v in values.items()
              if k in cost_keys and (k not in param_keys or k in costs.model_fields_set)}
    variant = plan.with_values({k: v for k, v in values.items() if k in param_keys})
    try:
        costs = CostModel.model_validate(costs.model_dump(exclude_unset=True) | update)
    except ValidationError as exc:
        raise ParamError.of(exc, CostModel, "the cost model") from None
    # the values as validated ("4" from a command line becomes 4, and sorts as a number)
    swept = {k: getattr(variant.params, k) if k in param_keys else getattr(costs, k) for k in values}
    return Variant(swept, variant, costs)


def variants(plan: Plan, grid: Mapping[str, Sequence[Any]], costs: CostModel | None = None) -> list[Variant]:
    """Every combination of ``grid`` applied to ``plan``, all checked before any runs (torch-free).

    Raises:
        ParamError: for a key or a value the scenario (or the cost model) does not take.
    """
    return [_variant(values, plan, costs or CostModel()) for values in _combinations(grid)]


def simulate_variants(chosen: Sequence[Variant]) -> list[dict[str, Any]]:
    """One simulated run per variant: its swept values, then the metrics."""
    orders: dict[tuple[Any, ...], list[list[list[Any]]]] = {}
    rows = []
    for number, variant in enumerate(chosen):
        workload = variant.plan.build()
        params = variant.plan.values()
        key = (variant.plan.name, *sorted((k, v) for k, v in params.items() if k not in ORDER_NEUTRAL))
        if key not in orders:
            orders[key] = workload.sampler_order().batches
        events = simulate(workload, run_id=f"sweep-{number}", scenario=variant.plan.name, params=params,
                          costs=variant.costs, batches=orders[key])
        rows.append(variant.values | row_stats(events))
    return rows


def sweep(plan: Plan, grid: Mapping[str, Sequence[Any]], costs: CostModel | None = None) -> list[dict[str, Any]]:
    """One simulated run per combination of ``grid`` on top of ``plan``: the swept values, then the metrics.

    Raises:
        ParamError: naming a key or value the scenario does not accept (before anything runs).
    """
    return simulate_variants(variants(plan, grid, costs))


def trace_sweep(events: Sequence[Event], grid: dict[str, list[Any]],
                costs: CostModel | None = None) -> list[dict[str, Any]]:
    """``sweep`` for a recorded loader without a scenario: replayed with its own batches, costs fitted from it.

    Its grid may change the loader settings in ``TRACE_KEYS`` and the scalar cost fields, checked by
    ``replay_grid``. (A trace of a scenario is swept as that scenario: ``sweep(resolve(name, params),
    grid, fit_from_trace(events))``.) ``costs``: the model ``fit_from_trace(events)`` returned, if the
    caller has it already.

    Raises:
        ParamError: for a key the replay cannot change or a value out of its bounds (a ValueError).
        ValueError: for a trace without ``run_start``.
    """
    grid = replay_grid(grid)
    start = next((e for e in events if e["kind"] == "run_start"), None)
    if start is None:
        raise ValueError("the trace has no run_start event: cannot tell which loader it recorded")
    costs = costs or fit_from_trace(events)
    workload, batches = plan_from_trace(events)
    recorded = {"num_workers": workload.settings.num_workers, "prefetch_factor": workload.settings.prefetch_factor}
    rows = []
    for number, values in enumerate(_combinations(grid)):
        loader = {k: v for k, v in values.items() if k in TRACE_KEYS}
        cost_values = {k: v for k, v in values.items() if k not in TRACE_KEYS}
        replay = replace(workload, settings=workload.settings.with_values(loader))
        run = simulate(replay, run_id=f"sweep-{number}", scenario=start.get("scenario") or "trace", params=values,
                       costs=costs.model_copy(update=cost_values), batches=batches)
        rows.append(values | row_stats(run))
    return annotate(rows, footprint(events), recorded)  # a run with memory samples: each setting's memory


def replay_grid(grid: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """``grid`` for a replay of a recorded loader, each value typed and checked (torch-free).

    Loader settings are checked against their bounds as every request is (``settings.check``), cost
    fields by the cost model.

    Raises:
        ParamError: naming each key the replay cannot change and each value out of bounds.
    """
    costs = set(CostModel.model_fields)
    checked: dict[str, list[Any]] = {}
    problems: list[Problem] = []
    for key, values in grid.items():
        if key not in TRACE_KEYS | costs:
            problems.append(Problem(key, values, f"cannot sweep {key} in a replay of a recorded loader (its dataset "
                                    "and batches stay as recorded)", ", ".join(sorted(TRACE_KEYS) + sorted(costs))))
            continue
        try:
            checked[key] = [check({key: v})[key] if key in TRACE_KEYS else _cost_value(key, v) for v in values]
        except ParamError as exc:
            problems += exc.problems[:1]
    if problems:
        raise ParamError(problems)
    return checked


def _cost_value(key: str, value: Any) -> Any:
    try:
        return getattr(CostModel.model_validate({key: value}), key)
    except ValidationError as exc:
        raise ParamError.of(exc, CostModel, "the cost model") from None


def recorded_check(events: Sequence[Event], plan: Plan | None = None,
                   costs: CostModel | None = None) -> dict[str, Any]:
    """The fit's own check: batches/s recorded and predicted at the setting the trace recorded.

    Both are ``stats.summary``'s batches/s (batches over the time from the loader's first event
    to its last batch, the loop's steps and its gaps between epochs included), so they compare.
    ``plan``: the scenario a scenario's trace recorded (replayed as that scenario, as ``sim`` does);
    ``costs``: the model ``fit_from_trace(events)`` returned, if the caller has it already.

    Raises:
        ValueError: as ``trace_sweep`` and ``fit_from_trace`` do, for a trace with nothing to fit.
    """
    start = next((e for e in events if e["kind"] == "run_start"), None)
    config = (start or {}).get("config", {})
    setting = {k: config[k] for k in sorted(TRACE_KEYS) if k in config}
    costs = costs or fit_from_trace(events)
    rows = (sweep(plan, {}, costs) if plan is not None
            else trace_sweep(events, {}, costs))  # the recorded settings, as they are (beyond a request's bounds too)
    recorded, predicted = summary(reduce(events))["batches_per_s"], rows[0]["batches_per_s"]
    return {"setting": setting, "recorded_batches_per_s": recorded, "predicted_batches_per_s": predicted,
            "error": predicted / recorded - 1 if recorded > 0 else None}


def plan_from_trace(events: Sequence[Event]) -> tuple[Workload, list[list[list[Any]]]]:
    """A workload and per-epoch batches that replay a trace's loader (costs come from the fitted model).

    Sample indices a dispatch event cut short (``n`` beyond the indices kept) are replaced by -1,
    which the fitted model charges from its distribution. An epoch left early (a peek with
    ``next(iter(loader))``, a ``break``) replays the batches it yielded, not those it prefetched.
    An iterable stream is split evenly.
    """
    start = next(e for e in events if e["kind"] == "run_start")
    config = start.get("config", {})
    epoch = 0
    per_epoch: dict[int, list[tuple[int, list[Any]]]] = {}
    yielded: dict[int, int] = {}  # epochs left early: the batches they yielded
    for event in events:
        if event["kind"] == "epoch_start":
            epoch = event["epoch"]
        elif event["kind"] == "dispatch":
            indices, n = event.get("indices") or [], event.get("n") or 0
            full = indices if len(indices) == n and None not in indices else [-1] * n
            per_epoch.setdefault(event.get("epoch", epoch), []).append((event["idx"], full))
        elif event["kind"] == "epoch_end" and event.get("abandoned") and event.get("batches") is not None:
            yielded[event.get("epoch", epoch)] = event["batches"]
    batches = [[b for _, b in sorted(per_epoch[e])][:yielded.get(e)] for e in sorted(per_epoch)]
    kind = config.get("dataset_kind", "map")
    total = max((sum(len(b) for b in epoch_batches) for epoch_batches in batches), default=0)
    workload = Workload(
        settings=LoaderSettings.from_config(config),
        dataset_kind=kind,
        length=config.get("dataset_length") or total,
        sample_cost=_free,
        make_dataset=_no_dataset,
        epochs=max(len(batches), 1),
        shard_sizes=(lambda workers: _even(total, workers)) if kind == "iterable" else None,
        describe={k: config[k] for k in ("sampler", "batch_sampler") if config.get(k)},
    )
    return workload, batches


def _free(index: int, worker: int) -> float:
    return 0.0


def _no_dataset() -> None:
    return None


def _even(total: int, workers: int) -> list[int]:
    share, rest = divmod(total, max(workers, 1))
    return [share + (1 if w < rest else 0) for w in range(max(workers, 1))]


def recommend(rows: Iterable[Mapping[str, Any]], fed_share: float = FED_SHARE) -> str:
    """The smallest ``num_workers`` that keeps the consumer fed, per combination of the other keys."""
    rows = [r for r in rows if "num_workers" in r]
    if not rows:
        return "sweep num_workers (e.g. num_workers=0,1,2,4,8) for a recommendation"
    others = [k for k in rows[0] if k not in METRICS and k != "num_workers"]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:  # keyed by their text: a cost field's value may be a mapping (worker_factor), unhashable
        groups.setdefault(", ".join(f"{k}={row[k]}" for k in others), []).append(row)
    lines = []
    for where, group in groups.items():
        lines.append((f"{where}: " if where else "") + _recommend_one(choose(group, fed_share)))
    return "\n".join(lines)


@dataclass(frozen=True)
class Choice:
    """Where a sweep of ``num_workers`` levels off: the smallest worker count within ``SATURATION`` of
    the best batches/s (``row``), whether the consumer is fed there (waits at most ``FED_SHARE`` after
    each epoch's first batch), and whether that is the most workers swept with throughput still rising."""

    row: Mapping[str, Any]
    fed: bool
    rising: bool


def choose(rows: Iterable[Mapping[str, Any]], fed_share: float = FED_SHARE) -> Choice:
    """The choice among rows of one sweep of ``num_workers`` (the other keys alike); the advice and
    ``recommend`` both take it, so a run's advice and a sweep of the same values name the same count.

    Raises:
        ValueError: for no rows.
    """
    group = sorted(rows, key=lambda r: r["num_workers"])
    if not group:
        raise ValueError("no rows to choose a worker count from")
    best = max(r["batches_per_s"] for r in group)
    row = next(r for r in group if r["batches_per_s"] >= SATURATION * best)
    return Choice(row, row["input_bound_steady"] <= fed_share, row is group[-1] and len(group) > 1)


def _recommend_one(choice: Choice) -> str:
    r = choice.row
    if choice.fed:
        return (f"num_workers={r['num_workers']} keeps the consumer fed: it waits {r['input_bound_steady']:.0%} of "
                f"the time after each epoch's first batch, {r['batches_per_s']:.1f} batches/s")
    if choice.rising:
        return (f"the consumer is still starved at num_workers={r['num_workers']} (waits {r['input_bound_steady']:.0%} "
                f"of the time after each epoch's first batch) and throughput still rises "
                f"({r['batches_per_s']:.1f} batches/s): sweep more workers")
    return (f"throughput levels off at num_workers={r['num_workers']} ({r['batches_per_s']:.1f} batches/s), where the "
            f"consumer still waits {r['input_bound_steady']:.0%} of the time after each epoch's first batch: more "
            "workers will not help, cheaper samples or a faster main process might")


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The sweep as a text table (rich), swept keys first."""
    from rich.console import Console
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    keys = [k for k in (rows[0] if rows else {}) if k not in METRICS]
    for key in keys:
        table.add_column(key, justify="right")
    memory = bool(rows) and "memory" in rows[0]  # a recorded run's sweep, with memory samples
    titles = ("batches/s", say("label.input_bound"), say("label.input_bound_steady"), "buffer high", "worker util",
              "status", *(("memory",) if memory else ()))
    for title in titles:
        table.add_column(title, justify="right", no_wrap=True)  # a title cut over two lines reads as two
    for row in rows:
        table.add_row(*(str(row[k]) for k in keys), f"{row['batches_per_s']:.1f}", f"{row['input_bound']:.0%}",
                      f"{row['input_bound_steady']:.0%}", str(row["parked_high"]), f"{row['worker_util']:.0%}",
                      str(row["status"]), *((memory_cell(row),) if memory else ()))
    out = io.StringIO()
    width = (12 if memory else 0) + sum(max(len(key), 8) + 3 for key in keys) + sum(len(title) + 3 for title in titles)
    Console(file=out, width=max(80, width), color_system=None).print(table)
    return out.getvalue()


def memory_cell(row: Mapping[str, Any]) -> str:
    """A row's expected memory, marked where it would not fit the room the run had."""
    return gb(row["memory"]) + (" (over)" if row["memory_fits"] is False else "")


def memory_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The settings of a recorded run's sweep that would not fit the memory the run had, each in a sentence."""
    return over_texts(rows, [k for k in (rows[0] if rows else {}) if k not in METRICS])
