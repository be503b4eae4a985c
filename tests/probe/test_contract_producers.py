"""Every field every producer sends is declared in the contract (contract/events.py), and every value it
nests has only the fields of its shape (contract/shapes.py): the real probe on each built-in scenario
(a stuck worker, a death, a timeout and a raising dataset among them), a watch()ed loader that resumes
from a checkpoint and one whose `with` block raises, the simulator with every fault of its cost model,
and the doctor on a hung process. A field the contract does not declare is dropped or misfiled by the
page's column store and missing from the page's types and the reference."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from msgspec import inspect as mi

from loaderscope.contract import shapes
from loaderscope.contract.events import COMMON_FIELDS, STRUCTS
from loaderscope.runner import Collector, run_real
from loaderscope.scenarios.catalog import BUILT_INS, get
from loaderscope.sim.costs import CostModel, Death, Stall
from loaderscope.sim.run import simulate, simulate_ranks
from tests.conftest import TORCH_DEATH_ERRORS
from tests.stacks.checks import Events

SHAPES = {shape.__name__: mi.type_info(shape) for shape in shapes.SHAPES if shape.__name__ not in shapes.OPEN}


def _nested(js: str | None) -> mi.Type | None:
    """The shape a field's `js` type names (`Frame[]`: a list of frames), when the test can check it."""
    found = re.fullmatch(r"(\w+)(\[\])?", js or "")
    if found is None or found.group(1) not in SHAPES:
        return None
    shape = SHAPES[found.group(1)]
    return mi.ListType(shape, None, None) if found.group(2) else shape


def _declared(kind: str) -> dict[str, mi.Type | None]:
    """A known kind's fields, each with the shape it nests (None: nothing to check inside)."""
    fields = {f.name: f.type for f in mi.type_info(STRUCTS[kind]).fields}  # type: ignore[attr-defined]
    return {name: _nested((t.extra or {}).get("js") if isinstance(t, mi.Metadata) else None)
            for name, t in fields.items()}


def _stray(info: mi.Type, value: Any, path: str) -> Iterator[str]:
    """The paths inside `value` that its shape does not declare."""
    if isinstance(info, mi.Metadata):
        info = info.type
    for option in info.types if isinstance(info, mi.UnionType) else (info,):
        if isinstance(option, mi.StructType) and isinstance(value, dict):
            own = {f.name: f.type for f in option.fields}
            for name, inner in value.items():
                yield from (_stray(own[name], inner, f"{path}.{name}") if name in own else [f"{path}.{name}"])
        elif isinstance(option, mi.ListType) and isinstance(value, list):
            for item in value:
                yield from _stray(option.item_type, item, f"{path}[]")
        elif isinstance(option, mi.DictType) and isinstance(value, dict):
            for item in value.values():
                yield from _stray(option.value_type, item, f"{path}{{}}")


def undeclared(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """`kind.field` (and `kind.field[].key` inside a shape) for each thing sent that the contract lacks."""
    out: set[str] = set()
    for event in events:
        kind = str(event["kind"])
        if kind not in STRUCTS:
            out.add(kind)
            continue
        declared = _declared(kind)
        for name, value in event.items():
            if name in COMMON_FIELDS:
                continue
            if name not in declared:
                out.add(f"{kind}.{name}")
            elif (shape := declared[name]) is not None:
                out.update(_stray(shape, value, f"{kind}.{name}"))
    return out


def test_the_check_names_a_field_and_a_nested_key_the_contract_lacks() -> None:
    sent = [{"kind": "fetch_end", "t": 0, "idx": 0, "worker": 0, "queue_len": 7},
            {"kind": "worker_stuck", "t": 0, "idx": 0, "worker": 0, "elapsed": 1.0,
             "stack": [{"file": "a.py", "line": 1, "function": "f", "locals": {}}]},
            {"kind": "batch_info", "t": 0, "idx": 0, "worker": 0,
             "structure": {"type": "dict", "items": {"x": {"type": "Tensor", "strides": [1]}}}}]
    assert undeclared(sent) == {"fetch_end.queue_len", "worker_stuck.stack[].locals",
                                "batch_info.structure.items{}.strides"}


SMALL = {"num_workers": 2, "dataset_size": 16, "sample_ms": 1.0}
# Each scenario's own fault made quick: its stuck sample, death, raising sample or timeout in the second task.
FAULTS: dict[str, dict[str, Any]] = {
    "stuck_worker": {"stuck_after": 0.3, "stuck_seconds": 1.0, "stuck_index": 5},
    "crash_worker": {"crash_index": 5},
    "raising_dataset": {"bad_index": 5},
    "timeout": {"timeout": 0.5, "stuck_index": 5, "stuck_seconds": 1.5},
    "gpu_step": {"image_size": 8},
    "pickle_heavy": {"image_size": 8},
    "io_bound": {"file_kib": 1},
    "samplers": {"sampler": "distributed"},
}


def _params(name: str) -> dict[str, Any]:
    return SMALL | FAULTS.get(name, {})


def test_the_simulators_events_are_declared() -> None:
    sent: list[dict[str, Any]] = []
    for scenario in BUILT_INS:
        plan = get(scenario.name).plan(_params(scenario.name))
        sent += simulate(plan, run_id="sim", scenario=scenario.name, params=_params(scenario.name))
    stalled = get("uniform").plan(SMALL | {"timeout": 5.0})  # stuck after 1 s, timed out after 5
    sent += simulate(stalled, run_id="stall", scenario="uniform", params=SMALL,
                     costs=CostModel(stalls=[Stall(task=1, seconds=30.0)], stuck_after_s=1.0))
    pinned = get("uniform").plan(SMALL | {"pin_memory": True})
    sent += simulate(pinned, run_id="death", scenario="uniform", params=SMALL,
                     costs=CostModel(die=Death(task=2, after_ms=5.0), pin_ms_per_mb=1.0))
    sent += simulate(pinned, run_id="cut", scenario="uniform", params=SMALL, max_events=40)
    job = simulate_ranks(get("samplers").plan(_params("samplers")), job="job", scenario="samplers",
                         params=_params("samplers"), costs=[CostModel(), CostModel()])
    sent += [e for events in job.events for e in events]
    kinds = {str(e["kind"]) for e in sent}
    assert {"worker_stuck", "worker_died", "error", "timeout", "pin_end", "skip", "parked"} <= kinds, kinds
    assert undeclared(sent) == set()


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:.*suggested max number of worker")
@pytest.mark.parametrize("name", [scenario.name for scenario in BUILT_INS])
def test_the_probes_events_are_declared(name: str) -> None:
    collector = Collector()
    try:
        run_real(name, _params(name), collector)
    except (*TORCH_DEATH_ERRORS, ValueError):
        assert get(name).fails, f"{name} raised"
    assert collector.events[-1]["kind"] == "run_end"
    assert undeclared(collector.events) == set()


@pytest.mark.slow
def test_a_watched_loaders_events_are_declared(tmp_path: Path) -> None:
    """watch() on torchdata's StatefulDataLoader resumed from a checkpoint (epoch_resume), in-process and
    with workers, and a `with` block that raises (run_end's error)."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    import loaderscope

    sent = Events()
    dataset = torch.utils.data.TensorDataset(torch.arange(32.0))
    for workers in (0, 2):
        first = loaderscope.watch(StatefulDataLoader(dataset, batch_size=4, num_workers=workers), sink=sent)
        iterator = iter(first)
        next(iterator), next(iterator)
        state = first.state_dict()
        del iterator
        first.close()
        with loaderscope.watch(StatefulDataLoader(dataset, batch_size=4, num_workers=workers),
                               sink=sent) as resumed:
            resumed.load_state_dict(state)
            list(resumed)
    with pytest.raises(KeyError):
        with loaderscope.watch(torch.utils.data.DataLoader(dataset, batch_size=4), sink=sent) as loader:
            next(iter(loader))
            raise KeyError("the loop's own failure")
    assert {"epoch_resume", "run_end"} <= {str(e["kind"]) for e in sent.items}
    assert any(e["kind"] == "run_end" and e.get("error") for e in sent.items)
    assert undeclared(sent.items) == set()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_doctor_snapshots_events_are_declared(hung: Any, tmp_path: Path) -> None:
    from loaderscope.traces.jsonl import read_trace
    from tests.doctor.hangs import SLEEPS, doctor

    h = hung(SLEEPS)
    h.wait()
    out = tmp_path / "snap.trace.jsonl"
    rc, _ = doctor(str(h.proc.pid), "--duration", "1.5", "--out", str(out))
    assert rc == 0
    _, sent = read_trace(out)
    assert {"worker_stuck", "consumer_stuck", "doctor_verdict"} <= {e["kind"] for e in sent}
    assert undeclared(sent) == set()
