"""The simulator's cost model: how long each step of the protocol takes on the virtual clock.

Everything is optional. Left empty, a simulation charges exactly what the scenario's real dataset
sleeps (``Workload.sample_cost``) and what its consumer sleeps (``Workload.step_cost``), so the
two modes agree by construction. The fields answer "what if" questions on top: noisy samples, a
slow worker, a stall, a crash, a slow pin-memory copy, slow worker start-up.

Pure: no torch, no I/O; randomness comes from the ``random.Random`` the caller injects.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MB = 1024 * 1024
# torch's scenarios return one float32 tensor of shape (8,) per sample (scenarios.datasets.make_sample).
DEFAULT_SAMPLE_BYTES = 32


class SampleDist(BaseModel):
    """Per-sample fetch time drawn from a distribution (mean and standard deviation in ms)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    dist: Literal["constant", "normal", "lognormal", "exponential"] = "constant"
    mean_ms: float = Field(ge=0, description="mean fetch time of one sample, ms")
    sd_ms: float = Field(0.0, ge=0, description="standard deviation, ms (ignored by constant and exponential)")


class Stall(BaseModel):
    """Task ``task`` of epoch ``epoch`` takes ``seconds`` longer in whichever worker fetches it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    task: int = Field(ge=0, description="task (batch) number within the epoch")
    seconds: float = Field(gt=0, description="extra seconds the fetch hangs")
    epoch: int = Field(0, ge=0)


class Death(BaseModel):
    """The worker that fetches task ``task`` of epoch ``epoch`` is killed ``after_ms`` into the fetch."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    task: int = Field(ge=0, description="task (batch) number within the epoch")
    epoch: int = Field(0, ge=0)
    after_ms: float = Field(0.0, ge=0)


class CostModel(BaseModel):
    """What each step costs; every field is optional and defaults to the plan's own latencies."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    sample: SampleDist | None = Field(None, description="per-sample fetch time; default: the plan's sample_cost")
    sample_table_ms: dict[Annotated[int, Field(ge=0)], Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="fetch time per sample index, ms")
    collate_ms: float = Field(0.0, ge=0, description="collate cost per batch, ms")
    worker_factor: dict[Annotated[int, Field(ge=0)], Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="multiplies a worker's fetch times (2.0: twice as slow)"
    )
    stalls: list[Stall] = Field(default_factory=list)
    die: Death | None = None
    step_ms: float | None = Field(None, ge=0, description="consumer step per batch, ms; default: the plan's")
    epoch_gap_ms: float = Field(
        0.0, ge=0, description="the training loop's time between an epoch's end and the next iter() (eval), ms"
    )
    pin_ms_per_mb: float = Field(0.0, ge=0, description="pin-memory copy cost, ms per MB (0: no pin stage)")
    startup_ms: float = Field(0.0, ge=0, description="a worker's boot time once started, before its first task, ms")
    worker_startup_ms: dict[Annotated[int, Field(ge=0)], Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="a listed worker's own boot time, ms (wins over startup_ms)")
    spawn_ms: float = Field(
        0.0, ge=0, description="main-process time to start each worker process (one after another), ms"
    )
    transfer_ms: float = Field(0.0, ge=0, description="result queue latency per batch (pickle, pipe), ms")
    first_result_ms: float = Field(
        0.0, ge=0, description="a worker process's first result reaches the result queue this much later than the "
                               "others (multiprocessing.Queue starts its feeder thread on the first put), ms")
    get_ms: float = Field(
        0.0, ge=0, description="main-process time inside next() to take one result off the queue (unpickle), ms"
    )
    sample_overhead_ms: float = Field(0.0, ge=0, description="fixed cost added to every sample fetched, ms")
    task_overhead_ms: float = Field(
        0.0, ge=0, description="a worker's time per task outside the fetch (putting the result, taking the next "
                               "index), ms")
    sample_bytes: int = Field(DEFAULT_SAMPLE_BYTES, ge=0, description="bytes per collated sample")
    stuck_after_s: float = Field(10.0, gt=0, description="a fetch this long (or 20x the median) is reported stuck")
    seed: int | None = Field(None, description="seed for the distributions; default: the scenario's seed")


SampleCostFn = Callable[[int, int], float]


def _sampler(dist: SampleDist, rng: random.Random) -> Callable[[], float]:
    """A zero-argument draw in seconds; negative normal draws are clipped to zero (time cannot run back)."""
    mean, sd = dist.mean_ms / 1000, dist.sd_ms / 1000
    if dist.dist == "constant" or (sd == 0 and dist.dist != "exponential"):
        return lambda: mean
    if dist.dist == "normal":
        return lambda: max(0.0, rng.gauss(mean, sd))
    if dist.dist == "exponential":
        return (lambda: rng.expovariate(1 / mean)) if mean > 0 else (lambda: 0.0)
    # lognormal parameterised by the mean and sd of the samples themselves, not of their logarithm
    if mean <= 0:
        return lambda: 0.0
    # sigma² = ln(1 + cv²), computed in logs when cv² would overflow (a tiny mean with a real sd)
    log_cv = math.log(sd) - math.log(mean)
    var = math.log1p(math.exp(2 * log_cv)) if log_cv < 300 else 2 * log_cv
    mu, sigma = math.log(mean) - var / 2, math.sqrt(var)
    return lambda: rng.lognormvariate(mu, sigma)


class TaskCosts:
    """A CostModel compiled against a plan's latencies; what the simulator core asks for.

    Args:
        model: the cost model (an empty ``CostModel()`` charges the plan's latencies).
        sample_cost: the plan's seconds per (sample index, worker), used where the model has no answer.
        step_s: the plan's consumer step in seconds, unless the model overrides it.
        rng: the injected random generator for distributions.
        pin_memory: whether the loader pins; the pin stage exists only with it and a pin cost.
    """

    def __init__(
        self,
        model: CostModel,
        sample_cost: SampleCostFn | None,
        step_s: float,
        rng: random.Random,
        *,
        pin_memory: bool = True,
    ) -> None:
        self.model = model
        self.step = model.step_ms / 1000 if model.step_ms is not None else step_s
        self.startup = model.startup_ms / 1000
        self._startups = {int(w): ms / 1000 for w, ms in model.worker_startup_ms.items()}
        self.spawn = model.spawn_ms / 1000
        self.transfer = model.transfer_ms / 1000
        self.get = model.get_ms / 1000
        self.first_result = model.first_result_ms / 1000
        self.epoch_gap = model.epoch_gap_ms / 1000
        self._overhead = model.sample_overhead_ms / 1000
        self.task_overhead = model.task_overhead_ms / 1000
        self.collate = model.collate_ms / 1000
        self.pin_active = pin_memory and model.pin_ms_per_mb > 0
        self._pin_per_byte = model.pin_ms_per_mb / 1000 / MB
        self._factor = {int(w): f for w, f in model.worker_factor.items()}
        self._table = {int(i): ms / 1000 for i, ms in model.sample_table_ms.items()}
        self._draw = _sampler(model.sample, rng) if model.sample is not None else None
        self._plan_cost = sample_cost
        self._stalls = {(s.epoch, s.task): s.seconds for s in model.stalls}
        self.stuck_after = model.stuck_after_s

    def fetch(self, samples: Sequence[int], worker: int) -> float:
        """Seconds worker ``worker`` spends fetching ``samples`` and collating them into one batch."""
        draw, plan = self._draw, self._plan_cost
        # The common cases without an extra call per sample: an ImageNet epoch is 1.28 M samples.
        if self._table:
            total = sum(map(self._one(worker), samples))
        elif draw is not None:
            total = sum([draw() for _ in samples])
        elif plan is not None:
            total = sum(map(plan, samples, itertools.repeat(worker, len(samples))))
        else:
            total = 0.0
        return (total + self._overhead * len(samples) + self.collate) * self._factor.get(worker, 1.0)

    def _one(self, worker: int) -> Callable[[int], float]:
        """Seconds for one sample: from the table, else the distribution, else the plan."""
        table, draw, plan = self._table, self._draw, self._plan_cost
        if draw is not None:
            base: Callable[[int], float] = lambda i: draw()  # noqa: E731
        elif plan is not None:
            base = lambda i: plan(i, worker)  # noqa: E731
        else:
            base = lambda i: 0.0  # noqa: E731
        return lambda i: table[i] if i in table else base(i)

    def startup_of(self, worker: int) -> float:
        """Seconds worker ``worker`` boots before it can take a task."""
        return self._startups.get(worker, self.startup)

    def stall(self, epoch: int, idx: int) -> float:
        return self._stalls.get((epoch, idx), 0.0) if self._stalls else 0.0

    def dies(self, epoch: int, idx: int) -> float | None:
        """Seconds into the fetch at which its worker is killed, or None."""
        die = self.model.die
        if die is not None and (die.epoch, die.task) == (epoch, idx):
            return die.after_ms / 1000
        return None

    def nbytes(self, n: int) -> int:
        return n * self.model.sample_bytes

    def pin(self, nbytes: int) -> float:
        return nbytes * self._pin_per_byte
