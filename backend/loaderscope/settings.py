"""The DataLoader's settings: one typed record, from a request's edge to torch and to the simulator.

``LoaderSettings`` holds ``num_workers``, ``batch_size``, ``prefetch_factor``, ``persistent_workers``,
``in_order``, ``timeout``, ``pin_memory`` and ``drop_last`` as torch resolves them
(``torch/utils/data/dataloader.py``, ``DataLoader.__init__``): its defaults are torch's, and
``prefetch_factor`` is 2 with workers and None without, as torch sets it. The real runner passes
``kwargs()`` to ``DataLoader``; the simulator takes the record itself (``SimConfig.loader``);
``config()`` is what ``run_start.config`` records and ``from_config`` reads a recording back.

Each field's type carries the bounds a request may ask for (``NumWorkers`` ... ``Timeout``): the
scenarios' parameters use the same types, so the command line, ``POST /api/runs``, ``POST /api/sweeps``
and ``POST /api/runs/{id}/sweeps`` refuse a value in the same words (``check``). A recorded loader
is a fact, not a request: ``from_config`` takes whatever torch accepted. ``table()`` is the bounds
as plain data. Pure: no torch (``tests/core/test_settings.py`` checks the defaults against torch itself).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Annotated, Any, get_type_hints

from pydantic import Field, TypeAdapter, ValidationError

from loaderscope.contract.loader import (
    BATCH_SIZE,
    DROP_LAST,
    IN_ORDER,
    NUM_WORKERS,
    PERSISTENT_WORKERS,
    PIN_MEMORY,
    PREFETCH_FACTOR,
    TIMEOUT,
    TORCH_PREFETCH_FACTOR,
    Setting,
)
from loaderscope.contract.replay import TRACE_KEYS
from loaderscope.problems import ParamError, Problem, allowed_by


def _field(setting: Setting[Any]) -> Any:
    """pydantic's Field for a setting of the contract: its bounds and meaning."""
    return Field(ge=setting.low, le=setting.high, description=setting.about)


# The types of the settings, with the contract's bounds (contract/loader.py): the scenarios' parameters use them too.
NumWorkers = Annotated[int, _field(NUM_WORKERS)]
BatchSize = Annotated[int, _field(BATCH_SIZE)]
PrefetchFactor = Annotated[int, _field(PREFETCH_FACTOR)]
Timeout = Annotated[float, _field(TIMEOUT)]
PersistentWorkers = Annotated[bool, _field(PERSISTENT_WORKERS)]
InOrder = Annotated[bool, _field(IN_ORDER)]
DropLast = Annotated[bool, _field(DROP_LAST)]
PinMemory = Annotated[bool, _field(PIN_MEMORY)]

# What a replay of a recorded loader may change: it keeps the recorded batches, which batch_size
# and drop_last made; a timeout only decides when a run fails.
REPLAYABLE = TRACE_KEYS


@dataclass(frozen=True)
class LoaderSettings:
    """DataLoader settings as torch resolves them: its defaults filled in, what it refuses cleared.

    ``batch_size`` is None when a batch sampler makes the batches; ``prefetch_factor`` is None and
    ``persistent_workers`` False without workers (torch raises for either there), and
    ``prefetch_factor`` is torch's 2 with workers when none is given.
    """

    num_workers: NumWorkers = NUM_WORKERS.default
    batch_size: BatchSize | None = BATCH_SIZE.default
    drop_last: DropLast = DROP_LAST.default
    prefetch_factor: PrefetchFactor | None = PREFETCH_FACTOR.default
    persistent_workers: PersistentWorkers = PERSISTENT_WORKERS.default
    in_order: InOrder = IN_ORDER.default
    timeout: Timeout = TIMEOUT.default
    pin_memory: PinMemory = PIN_MEMORY.default

    def __post_init__(self) -> None:
        # Resolved here, once, so a changed num_workers (a sweep, a replayed trace) stays a call torch accepts.
        if self.num_workers == 0:
            object.__setattr__(self, "prefetch_factor", None)
            object.__setattr__(self, "persistent_workers", False)
        elif self.prefetch_factor is None:
            object.__setattr__(self, "prefetch_factor", TORCH_PREFETCH_FACTOR)

    @property
    def max_tasks(self) -> int:
        """Most tasks torch keeps in flight (see ``max_tasks``)."""
        return max_tasks(self.num_workers, self.prefetch_factor)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``DataLoader``: only what torch accepts next to the others."""
        kwargs: dict[str, Any] = {"num_workers": self.num_workers, "timeout": self.timeout,
                                  "pin_memory": self.pin_memory}
        if not self.in_order:  # torch's default; the argument exists from torch 2.6 on
            kwargs["in_order"] = False
        if self.batch_size is not None:
            kwargs |= {"batch_size": self.batch_size, "drop_last": self.drop_last}
        if self.num_workers > 0:
            kwargs |= {"prefetch_factor": self.prefetch_factor, "persistent_workers": self.persistent_workers}
        return kwargs

    def config(self) -> dict[str, Any]:
        """The fields ``run_start.config`` records (the probe reads the same ones off a real loader)."""
        return asdict(self)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LoaderSettings:
        """The settings a recorded ``run_start.config`` names (torch's defaults for the rest).

        Not checked against the bounds: torch accepted them, and a replay must hold the loader that ran.
        """
        given = {k: v for k, v in config.items() if k in _NAMES and (v is not None or k == "batch_size")}
        return cls(**given)

    def with_values(self, values: Mapping[str, Any]) -> LoaderSettings:
        """These settings with some changed (a sweep): the changed values are checked, the rest kept."""
        return LoaderSettings(**(asdict(self) | check(values)))


_NAMES = frozenset(f.name for f in fields(LoaderSettings))


def max_tasks(num_workers: int, prefetch_factor: int | None) -> int:
    """Most tasks torch keeps in flight: ``prefetch_factor × num_workers`` with workers
    (``_MultiProcessingDataLoaderIter._reset`` primes that many, ``_try_put_index`` stops there), 1 in
    the main process. ``prefetch_factor`` None with workers is torch's default, as ``DataLoader`` sets it.
    """
    if num_workers <= 0:
        return 1
    return num_workers * (TORCH_PREFETCH_FACTOR if prefetch_factor is None else prefetch_factor)


@functools.cache
def _adapters() -> dict[str, TypeAdapter[Any]]:
    """One validator per setting, from its field's type and bounds."""
    hints = get_type_hints(LoaderSettings, include_extras=True)
    return {f.name: TypeAdapter(hints[f.name]) for f in fields(LoaderSettings)}


def check(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` typed and checked one by one against their settings' bounds ("4" becomes 4).

    Raises:
        ParamError: one problem per bad value or unknown name, each naming the setting, the value,
            the bound and what is allowed (the words ``scenarios.resolve`` uses).
    """
    adapters, checked, problems = _adapters(), {}, []
    for name, value in values.items():
        if name not in adapters:
            problems.append(Problem(name, value, f"{name!r} is not a DataLoader setting", ", ".join(adapters)))
            continue
        try:
            checked[name] = adapters[name].validate_python(value)
        except ValidationError as exc:
            message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            problems.append(Problem(name, value, message, allowed_by(_schema(name))))
    if problems:
        raise ParamError(problems)
    return checked


def _schema(name: str) -> dict[str, Any]:
    """A setting's JSON schema without its null branch (None is torch's "decide for me", not a bound)."""
    schema = _adapters()[name].json_schema()
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    return dict(branches[0])


def table() -> list[dict[str, Any]]:
    """The settings as plain data: name, type (JSON schema's), torch's default, min, max, whether a
    replay of a recorded loader may sweep it, whether None is allowed, and what it means."""
    defaults = asdict(LoaderSettings())
    rows = []
    for name, adapter in _adapters().items():
        schema = _schema(name)
        rows.append({"name": name, "type": schema["type"], "default": defaults[name],
                     "min": schema.get("minimum"), "max": schema.get("maximum"), "sweepable": name in REPLAYABLE,
                     "nullable": "anyOf" in adapter.json_schema(), "description": schema.get("description", "")})
    return rows
