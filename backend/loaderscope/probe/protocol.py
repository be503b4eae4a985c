"""The private torch names the probe follows, checked once, when a probe first attaches.

The probe records torch's own decisions by standing beside torch's private iterator code (§2 of
docs/DESIGN.md): the classes in ``torch/utils/data/dataloader.py``, the worker loop in
``torch/utils/data/_utils/worker.py``, the pin-memory functions in
``torch/utils/data/_utils/pin_memory.py`` and ``ExceptionWrapper`` in ``torch/_utils.py``. None of
that is public API. ``NEEDS`` lists every such name: a class, function or method that must exist,
the parameters it must take, and the attributes its code must set or read (read from its compiled
code's ``co_names``, so an attribute torch renames is seen before a batch is loaded). If one is missing,
``followable()`` says so once, naming torch's version and what is missing, and every loader then runs
unwatched: exactly torch's own iterator, nothing of the probe in front of it.

The probe's modules import the private names through ``private()``, which never fails: a name this
torch lacks is ``Absent`` there, and the check keeps the probe from ever using it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from typing import Any, NamedTuple

import torch

SUPPORTED = "2.4 to 2.14"  # the oldest and newest torch scripts/test_torch_versions.sh tests


class Need(NamedTuple):
    """One private name: ``module:attribute.path``, the parameters it takes, the names its code uses."""

    path: str
    params: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    only: bool = False  # its code uses exactly ``uses``: the probe does the same steps itself


_DL = "torch.utils.data.dataloader"
_MULTI = f"{_DL}:_MultiProcessingDataLoaderIter"
NEEDS: tuple[Need, ...] = (
    # ProbeMixin overrides _get_iterator; Adoption lends the context behind multiprocessing_context;
    # watch() refuses a loader whose _iterator exists; loader_config restores _IterableDataset_len_called.
    Need(f"{_DL}:DataLoader._get_iterator"),
    Need(f"{_DL}:DataLoader.__init__", uses=("_iterator", "_IterableDataset_len_called")),
    Need(f"{_DL}:DataLoader.multiprocessing_context.fset", uses=("_DataLoader__multiprocessing_context",)),
    # adopt.install_hook wraps this __init__, at whose end every iterator is adopted.
    Need(f"{_DL}:_BaseDataLoaderIter.__init__", params=("self", "loader"),
         uses=("_pin_memory", "_pin_memory_device", "_timeout", "_num_yielded")),
    # TorchSingleProcessProbe does torch's four-line _next_data itself, with clock reads between.
    Need(f"{_DL}:_SingleProcessDataLoaderIter._next_data", only=True,
         uses=("_next_index", "_dataset_fetcher", "fetch", "_pin_memory", "_utils", "pin_memory",
               "_pin_memory_device")),
    Need(f"{_DL}:_SingleProcessDataLoaderIter.__init__", uses=("_dataset_fetcher",)),
    # MultiProcessProbe: every task's transition is a change to _task_info (DESIGN §2).
    Need(f"{_MULTI}.__init__", uses=("_workers", "_data_queue", "_reset")),
    Need(f"{_MULTI}._reset", params=("self", "loader", "first_iter"), uses=("_task_info", "_send_idx", "_rcvd_idx")),
    # iterators.tap_dispatch records a task where _try_put_index puts it on the worker's index queue.
    Need(f"{_MULTI}._try_put_index", uses=("_index_queues", "put", "_task_info", "_send_idx")),
    Need(f"{_MULTI}._get_data"),
    Need(f"{_MULTI}._next_data", uses=("_task_info", "_rcvd_idx", "_get_data", "_process_data")),
    Need(f"{_MULTI}._process_data", params=("self", "data")),
    Need(f"{_MULTI}._shutdown_workers", uses=("_workers",)),
    # probe/worker.py taps the two queues the worker loop is handed, found by parameter name.
    Need("torch.utils.data._utils.worker:_worker_loop", params=("index_queue", "data_queue", "worker_id")),
    Need("torch.utils.data._utils.worker:_IterableDatasetStopIteration"),
    Need("torch.utils.data._utils.pin_memory:pin_memory", params=("data", "device")),
    Need("torch.utils.data._utils.pin_memory:_pin_memory_loop", params=("in_queue", "out_queue")),
    Need("torch._utils:ExceptionWrapper.__init__", uses=("exc_type", "exc_msg", "where")),
)


class Absent:
    """Stands for a private name this torch lacks: nothing is an instance of it, the probe never calls it."""


def private(path: str) -> Any:
    """The object at ``module:attribute.path``, or ``Absent``."""
    try:
        return _resolve(path)
    except (ImportError, AttributeError):
        return Absent


def _resolve(path: str) -> Any:
    module, _, attributes = path.partition(":")
    obj: Any = importlib.import_module(module)
    for name in attributes.split("."):
        obj = getattr(obj, name)
    return obj


def missing(needs: tuple[Need, ...] = NEEDS) -> list[str]:
    """What this torch lacks of ``needs``, one phrase per name."""
    gone = []
    for need in needs:
        try:
            obj = _resolve(need.path)
        except (ImportError, AttributeError):
            gone.append(need.path)
            continue
        gone += [f"{need.path}: {problem}" for problem in _shape(obj, need)]
    return gone


def _shape(obj: Any, need: Need) -> list[str]:
    problems = []
    if need.params:
        try:
            taken = list(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            taken = []
        absent = [name for name in need.params if name not in taken]
        if absent:
            problems.append(f"no parameter {', '.join(absent)}")
    if need.uses:
        code = getattr(inspect.unwrap(obj), "__code__", None)  # under a wrapper of ours (adopt, watch)
        used = set(getattr(code, "co_names", ()))
        absent = [name for name in need.uses if name not in used]
        if absent:
            problems.append(f"its code no longer uses {', '.join(absent)}")
        elif need.only and used != set(need.uses):
            problems.append(f"its code also uses {', '.join(sorted(used - set(need.uses)))}")
    return problems


@functools.cache
def followable() -> bool:
    """Whether this torch has every name the probe follows; if not, say so once (stderr)."""
    gone = missing()
    if gone:
        print(f"loaderscope: torch {torch.__version__} lacks private names the probe follows "
              f"({'; '.join(gone)}). DataLoaders run unwatched, exactly as torch runs them. loaderscope "
              f"supports torch {SUPPORTED}.", file=sys.stderr, flush=True)
    return not gone
