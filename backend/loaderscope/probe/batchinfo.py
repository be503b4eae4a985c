"""What a batch is made of and how it crosses from a worker to the main process.

Tensors travel through shared memory (torch's multiprocessing reductions pickle only a handle,
torch/multiprocessing/reductions.py registers ``reduce_tensor``/``reduce_storage`` with ``ForkingPickler``);
everything else — numpy arrays, lists of numbers, strings — is pickled by value through the result queue's pipe.
``sizes`` tells the two apart cheaply for every batch; ``describe`` gives the full structure for the few batches
the inspector samples, with a few values of small leaves, never the whole batch.
"""

from __future__ import annotations

import time
from typing import Any

from torch import Tensor

FEW_VALUES = 8  # values shown per leaf when values are asked for
VALUES_UP_TO = 4096  # ...of leaves with at most this many elements (larger ones: structure only)
MEASURE_PICKLE_BYTES = 64 * 1024  # below this, pickled bytes are estimated, not measured by pickling


def sizes(data: Any) -> tuple[int, int]:
    """(payload bytes, of which pickled by value) of a (possibly nested) batch."""
    if type(data) is Tensor or hasattr(data, "untyped_storage"):  # a tensor: shared memory
        return data.nbytes, 0
    nbytes = getattr(data, "nbytes", None)
    if isinstance(nbytes, int):  # a numpy array or a bytes-like object: pickled
        return nbytes, nbytes
    if isinstance(data, (bytes, bytearray, str)):
        return len(data), len(data)
    items = data.values() if isinstance(data, dict) else data if isinstance(data, (list, tuple)) else ()
    total = pickled = 0
    for item in items:
        t, p = sizes(item)
        total, pickled = total + t, pickled + p
    return total, pickled


def first_tensor(data: Any) -> Any:
    """The first tensor in a batch: in lists, tuples, dicts, or the attributes of a custom batch type."""
    if hasattr(data, "is_pinned"):
        return data
    if isinstance(data, dict):
        values: Any = data.values()
    elif isinstance(data, (list, tuple)):
        values = data
    else:
        values = getattr(data, "__dict__", {}).values()
    for item in values:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


def is_pinned(data: Any) -> bool | None:
    """Whether the batch's (first) tensor is in page-locked memory; None if it holds no tensor."""
    tensor = first_tensor(data)
    return None if tensor is None else bool(tensor.is_pinned())


def _leaf(data: Any, values: bool) -> dict[str, Any]:
    leaf: dict[str, Any] = {"type": type(data).__name__}
    if hasattr(data, "untyped_storage"):
        leaf |= {"shape": list(data.shape), "dtype": str(data.dtype).removeprefix("torch."), "bytes": data.nbytes,
                 "shared": bool(data.is_shared()), "pinned": bool(data.is_pinned()), "via": "shared memory"}
        if values and data.numel() <= VALUES_UP_TO:
            leaf["values"] = data.flatten()[:FEW_VALUES].tolist()
    elif hasattr(data, "dtype") and hasattr(data, "shape"):  # numpy
        leaf |= {"shape": list(data.shape), "dtype": str(data.dtype), "bytes": int(data.nbytes), "via": "pickle"}
        if values and data.size <= VALUES_UP_TO:
            leaf["values"] = data.flatten()[:FEW_VALUES].tolist()
    else:
        leaf["via"] = "pickle"
        if values:
            text = repr(data)
            leaf["value"] = text if len(text) <= 80 else text[:77] + "..."
    return leaf


def describe(data: Any, depth: int = 0, values: bool = False) -> dict[str, Any]:
    """The batch's structure as collated: dicts, lists and tuples down to leaves; a few values of
    each leaf only when asked (``values``): the probe never keeps or ships a batch's contents."""
    if depth > 8:
        return {"type": type(data).__name__}
    if isinstance(data, dict):
        return {"type": "dict", "items": {str(k): describe(v, depth + 1, values) for k, v in list(data.items())[:32]}}
    if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
        return {"type": type(data).__name__, "length": len(data),
                "items": [describe(v, depth + 1, values) for v in data[:16]]}
    if isinstance(data, tuple):  # a namedtuple
        fields: tuple[str, ...] = getattr(data, "_fields")  # noqa: B009  (not on tuple's type: hasattr said so)
        return {"type": type(data).__name__,
                "items": {k: describe(getattr(data, k), depth + 1, values) for k in fields}}
    return _leaf(data, values)


def transfer(data: Any, values: bool = False) -> dict[str, Any]:
    """Structure plus what pickling this batch for the result queue costs (size and time).

    Only batches that carry payload by value are pickled to measure it: for tensors, pickling
    means moving storages to shared memory, a real cost the probe must not add.
    """
    from multiprocessing.reduction import ForkingPickler  # torch registers its tensor reductions here

    info: dict[str, Any] = {"structure": describe(data, values=values), "pickle_bytes": sizes(data)[1],
                            "pickle_s": None, "values": values}
    if info["pickle_bytes"] >= MEASURE_PICKLE_BYTES:
        start = time.perf_counter()
        info["pickle_bytes"] = len(ForkingPickler.dumps(data))
        info["pickle_s"] = time.perf_counter() - start
    return info
