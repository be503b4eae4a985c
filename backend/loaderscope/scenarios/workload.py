"""What a built scenario runs: the DataLoader's arguments, its dataset and samplers, and the latency model.

The real runner and the simulator take the same ``Workload``: its ``sample_cost`` and ``step_cost``
are plain functions, so the real dataset sleeps exactly what the simulator charges on its virtual
clock, and its ``LoaderArgs`` are the arguments as torch resolves them. Pure: no torch here
(``make_*`` build torch objects when called; ``sampler_order`` imports torch when asked).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

# DataLoader's prefetch_factor when it has workers and none is given; torch's other defaults are
# LoaderArgs' field defaults. tests/test_resolve.py checks both against torch itself.
TORCH_PREFETCH_FACTOR = 2


class SampleCost(Protocol):
    """Seconds a worker spends producing one sample (picklable: it travels to worker processes)."""

    def __call__(self, index: int, worker: int) -> float: ...


@dataclass(frozen=True)
class LoaderArgs:
    """DataLoader arguments as torch resolves them: its defaults filled in, what it ignores cleared.

    ``batch_size`` is None when a batch sampler makes the batches; ``prefetch_factor`` is None and
    ``persistent_workers`` False without workers (torch refuses either there).
    """

    num_workers: int = 0
    batch_size: int | None = 1
    drop_last: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    in_order: bool = True
    timeout: float = 0.0
    pin_memory: bool = False
    collate_fn: Callable[[list[Any]], Any] | None = None

    def __post_init__(self) -> None:
        # Resolved here, once, so a changed num_workers (a sweep, a replayed trace) stays a valid call.
        if self.num_workers == 0:
            object.__setattr__(self, "prefetch_factor", None)
            object.__setattr__(self, "persistent_workers", False)
        elif self.prefetch_factor is None:
            object.__setattr__(self, "prefetch_factor", TORCH_PREFETCH_FACTOR)

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
        if self.collate_fn is not None:
            kwargs["collate_fn"] = self.collate_fn
        return kwargs

    def config(self) -> dict[str, Any]:
        """The fields ``run_start.config`` records (the probe reads the same ones off a real loader)."""
        return {"num_workers": self.num_workers, "batch_size": self.batch_size,
                "prefetch_factor": self.prefetch_factor, "persistent_workers": self.persistent_workers,
                "in_order": self.in_order, "drop_last": self.drop_last, "timeout": self.timeout,
                "pin_memory": self.pin_memory}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LoaderArgs:
        """The arguments a recorded ``run_start.config`` names (torch's defaults for the rest)."""
        names = {f.name for f in fields(cls)} - {"collate_fn"}
        given = {k: v for k, v in config.items() if k in names and (v is not None or k == "batch_size")}
        return cls(**given)


@dataclass(frozen=True)
class SamplerOrder:
    """Sample indices of every batch of every epoch, and the names of the samplers that made them."""

    batches: list[list[list[Any]]]
    sampler: str
    batch_sampler: str


@dataclass(frozen=True)
class Workload:
    """Everything needed to run a scenario, really or simulated.

    ``make_dataset``/``make_sampler``/``make_batch_sampler`` build torch objects (the real loader,
    and the sampler order the simulator dispatches); ``sample_cost`` and ``step_cost`` are the
    latency model both share.
    """

    args: LoaderArgs
    dataset_kind: Literal["map", "iterable"]
    length: int
    sample_cost: SampleCost
    make_dataset: Callable[[], Any]
    make_sampler: Callable[[Any], Any] | None = None
    make_batch_sampler: Callable[[Any], Any] | None = None
    epochs: int = 1
    step_cost: float = 0.0
    # Iterable datasets: the samples each worker's shard yields, for a given worker count.
    shard_sizes: Callable[[int], Sequence[int]] | None = None
    describe: dict[str, Any] = field(default_factory=dict)
    # A consumer step of its own (called with each batch, returns timings): replaces step_cost.
    make_step: Callable[[], Callable[[Any], dict[str, Any]]] | None = None

    def sampler_order(self) -> SamplerOrder:
        """The batches this workload's own torch samplers yield, epoch by epoch (imports torch)."""
        from loaderscope.scenarios.order import sampler_order

        return sampler_order(self)
