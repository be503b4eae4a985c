"""The nested values events carry (a stack frame, a timed-out worker, a batch's structure, the
loader's settings), declared once for the page's types and the reference.

The validator takes these fields loosely (``list[Any]``, ``dict[str, Any]``: a frame read by py-spy
may lack a line, a scenario adds its own config keys), so a value of another shape is kept and
shown rather than refused. A field names its shape with ``doc(..., js="Frame[]")``
(``contract/events.py``); ``contract/jsdoc.py`` writes each shape as a JSDoc typedef, and
``tests/probe/test_contract_producers.py`` checks that what the producers nest has only these fields.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, Meta, Struct, UnsetType


def doc(text: str, js: str | None = None) -> Meta:
    """A field's meaning (the reference's and the JSON Schema's description) and, for a field the
    validator takes loosely, its type on the page: a JSDoc type over the shapes below (``Frame[]``)."""
    return Meta(description=text, extra={"js": js} if js else None)


class Frame(Struct, kw_only=True):
    """One frame of a Python stack, outermost first (probe/stacks.py; the doctor's from py-spy)."""

    file: Annotated[str, doc("the source file's path")]
    line: Annotated[int | None, doc("the line (null: py-spy saw none)")]
    function: Annotated[str, doc("the function's name")]
    code: Annotated[str | None | UnsetType, doc("the line's source text")] = UNSET
    user: Annotated[bool | UnsetType, doc("the frame is in the user's code (not the standard library, "
                                                "an installed package or loaderscope)")] = UNSET


class TimeoutWorker(Struct, kw_only=True):
    """What one worker was doing when ``DataLoader(timeout=...)`` expired (idle: only ``worker``)."""

    worker: Annotated[int, doc("the worker")]
    idx: Annotated[int | None | UnsetType, doc("the task it was fetching")] = UNSET
    pos: Annotated[int | None | UnsetType, doc("the sample's position in the task")] = UNSET
    sample: Annotated[Any | UnsetType, doc("the sample's index")] = UNSET
    elapsed: Annotated[float | None | UnsetType, doc("seconds since it began the task")] = UNSET


class BatchStructure(Struct, kw_only=True):
    """A batch as collated, down to its leaves (probe/batchinfo.py ``describe``): a container's items, a
    tensor's or array's shape, dtype and bytes; a few values only when asked."""

    type: Annotated[str, doc("the Python type's name")]
    items: Annotated[list[BatchStructure] | dict[str, BatchStructure] | UnsetType,
                     doc("a container's items (the first 16 of a list, 32 of a dict)")] = UNSET
    length: Annotated[int | UnsetType, doc("a list's or tuple's length")] = UNSET
    shape: Annotated[list[int] | UnsetType, doc("a tensor's or array's shape")] = UNSET
    dtype: Annotated[str | UnsetType, doc("its dtype")] = UNSET
    bytes: Annotated[int | UnsetType, doc("its payload")] = UNSET
    shared: Annotated[bool | UnsetType, doc("a tensor in shared memory")] = UNSET
    pinned: Annotated[bool | None | UnsetType, doc("a tensor in page-locked memory")] = UNSET
    via: Annotated[str | UnsetType, doc("how it crosses to the main process: `shared memory` or "
                                              "`pickle`")] = UNSET
    values: Annotated[list[Any] | UnsetType, doc("a leaf's first values, when asked")] = UNSET
    value: Annotated[str | UnsetType, doc("another leaf's repr, when asked")] = UNSET


class RunError(Struct, kw_only=True):
    """The exception a run ended with (probe/loader.py ``failure``)."""

    type: Annotated[str, doc("the exception's class name (`SystemExit` for a non-zero exit without one)")]
    message: Annotated[str, doc("its message (`exit status N`)")]


class LoaderConfig(Struct, kw_only=True):
    """``run_start.config``: what the probe reads off the loader (probe/loader.py ``loader_config``),
    then the scenario's own ``describe`` fields, which the page shows as they come; null where unknown.
    The simulator sends the same keys but ``multiprocessing_context``, ``collate_fn`` and ``dataset``,
    and adds ``epochs`` and ``costs``."""

    num_workers: Annotated[int | UnsetType, doc("the DataLoader's argument as torch resolved it")] = UNSET
    batch_size: Annotated[int | None | UnsetType, doc("the DataLoader's argument, else its batch "
                                                             "sampler's")] = UNSET
    prefetch_factor: Annotated[int | None | UnsetType, doc("null without workers")] = UNSET
    persistent_workers: Annotated[bool | UnsetType, doc("the DataLoader's argument")] = UNSET
    in_order: Annotated[bool | UnsetType, doc("the DataLoader's argument (true before torch 2.6)")] = UNSET
    drop_last: Annotated[bool | UnsetType, doc("the DataLoader's argument")] = UNSET
    timeout: Annotated[float | UnsetType, doc("the DataLoader's argument, s")] = UNSET
    pin_memory: Annotated[bool | UnsetType, doc("the DataLoader's argument")] = UNSET
    pin_memory_active: Annotated[bool | UnsetType, doc(
        "`pin_memory` and an accelerator is there (torch silently skips pinning otherwise)")] = UNSET
    multiprocessing_context: Annotated[str | None | UnsetType, doc("the start method, or null")] = UNSET
    sampler: Annotated[str | None | UnsetType, doc(
        "the class of the sampler that draws the indices: given a batch sampler, its own sampler (found through "
        "adapters such as accelerate's BatchSamplerShard), else the batch sampler")] = UNSET
    batch_sampler: Annotated[str | None | UnsetType, doc("the batch sampler's class")] = UNSET
    collate_fn: Annotated[str | None | UnsetType, doc("the collate function's name")] = UNSET
    dataset: Annotated[str | None | UnsetType, doc("the dataset's class")] = UNSET
    dataset_kind: Annotated[str | None | UnsetType, doc("`map` or `iterable`")] = UNSET
    dataset_length: Annotated[int | None | UnsetType, doc("len(dataset), null where unknown")] = UNSET
    batches_per_epoch: Annotated[int | None | UnsetType, doc("len(loader), null where unknown")] = UNSET
    epochs: Annotated[int | UnsetType, doc("the simulator: the epochs it runs")] = UNSET
    costs: Annotated[dict[str, Any] | UnsetType, doc("the simulator: the cost model's fields that are not "
                                                           "their defaults")] = UNSET


class MemoryProcess(Struct, kw_only=True):
    """One process of a ``memory`` sample (probe/memory.py): the main process (no ``worker``) or a worker."""

    pid: Annotated[int, doc("its process id")]
    rss: Annotated[int, doc("resident bytes (smaps_rollup's Rss; a light sample's: /proc/PID/status's VmRSS)")]
    worker: Annotated[int | UnsetType, doc("the worker; absent for the main process")] = UNSET
    uss: Annotated[int | None | UnsetType, doc(
        "unique bytes: pages no other process maps (Private_Clean + Private_Dirty + Private_Hugetlb); absent in a "
        "light sample, as are `pss` and `shared`")] = UNSET
    pss: Annotated[int | None | UnsetType, doc(
        "proportional bytes: each resident page divided among the processes that map it (null: psutil gives "
        "none here)")] = UNSET
    shared: Annotated[int | None | UnsetType, doc(
        "resident bytes another process maps too (RSS less USS): a forked worker starts with its parent's pages "
        "shared, and copy-on-read makes them private")] = UNSET
    swap: Annotated[int | None | UnsetType, doc("bytes swapped out")] = UNSET


class MemoryEvidence(Struct, kw_only=True):
    """What the reducers add to a ``worker_died`` note: the dead worker's last ``memory`` sample and the
    host's headroom in that sample (state.py, reducer.js)."""

    t: Annotated[float, doc("the sample's time")]
    rss: Annotated[int, doc("the worker's resident bytes then")]
    uss: Annotated[int | None, doc("its unique bytes then")]
    headroom: Annotated[int | None, doc(
        "bytes the host had left then: the smaller of MemAvailable and the cgroup's limit less its working set")]
    available: Annotated[int | None, doc("the host's MemAvailable then")]
    cgroup_limit: Annotated[int | None, doc("the memory cgroup's limit, where one applies")]


# Every shape, in the order the page's types list them; an open one (LoaderConfig) may carry other keys.
SHAPES: tuple[type[Struct], ...] = (Frame, TimeoutWorker, BatchStructure, RunError, LoaderConfig, MemoryProcess,
                                    MemoryEvidence)
OPEN: frozenset[str] = frozenset({"LoaderConfig"})
