"""What the simulator works on: the loader it simulates with its sampler order (``SimConfig``), and
its copies of torch's own records in ``_MultiProcessingDataLoaderIter`` (torch/utils/data/dataloader.py):
a task on a worker's index queue, a result on the result queue, a worker and its ``_worker_loop``
flags, a ``_task_info`` entry. Data only, kept apart from the engine's handlers (``engine.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from loaderscope.settings import LoaderSettings


@dataclass(frozen=True)
class SimConfig:
    """The DataLoader being simulated (``loader``: the same record the real loader is built from), and
    the order its sampler produces.

    ``batches[e]`` lists the sample indices of each batch of epoch ``e`` (map-style datasets);
    ``shard_sizes[w]`` is how many samples worker ``w`` of an iterable dataset yields (with
    ``num_workers=0``: one shard, the whole stream). ``config`` is copied into ``run_start``.
    """

    loader: LoaderSettings
    dataset_kind: Literal["map", "iterable"] = "map"
    epochs: int = 1
    batches: Sequence[Sequence[Sequence[Any]]] = ()
    shard_sizes: Sequence[int] = ()
    run_id: str = "sim"
    rank: int = 0  # this loader's rank in a data-parallel job (``sim.job``)
    scenario: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    extra_start: dict[str, Any] = field(default_factory=dict)  # more run_start fields (params, ...)


@dataclass
class Result:
    """What a worker puts on the result queue: ``(idx, data)`` or ``_IterableDatasetStopIteration``."""

    epoch: int
    idx: int
    worker: int
    nbytes: int
    stop: bool = False


@dataclass
class Task:
    epoch: int
    idx: int
    samples: Sequence[Any]  # what the cost model charges for (sample indices; None for iterables)


@dataclass
class Worker:
    """One worker process: its index queue and ``_worker_loop`` flags."""

    wid: int
    pid: int
    queue: deque[Task | None] = field(default_factory=deque)  # None: the "exit" sentinel
    alive: bool = True
    ready: bool = False
    current: Task | None = None
    iteration_end: bool = False  # iterable exhausted: later tasks are dropped unfetched
    shard_pos: int = 0  # next sample of its iterable shard
    feeder_from: float | None = None  # when its result queue's feeder thread runs (started by the first put)


@dataclass
class Info:
    """An entry of torch's ``_task_info``: (worker,) or, once fetched out of order, (worker, data)."""

    worker: int
    data: Result | None = None
