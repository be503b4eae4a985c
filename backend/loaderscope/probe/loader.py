"""InstrumentedDataLoader: a real ``torch.utils.data.DataLoader`` that reports its protocol.

Only ``_get_iterator`` is overridden; batches, order and exceptions are torch's own. The probe
mixin also instruments loaders built by other libraries (see ``watch``) by subclassing their class.
"""

from __future__ import annotations

import os
import platform
import socket
import uuid
import weakref
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, Sampler

from loaderscope.probe.adopt import Adoption, install_hook
from loaderscope.probe.faults import report, without_probe_frames
from loaderscope.probe.iterators import EpochCounter, MultiProcessProbe
from loaderscope.probe.liveness import StuckRule
from loaderscope.probe.memory import watch_memory
from loaderscope.probe.protocol import followable
from loaderscope.probe.recorder import Recorder, Sink
from loaderscope.traces.paths import launcher_job

T_co = TypeVar("T_co", covariant=True)


def _name(obj: Any) -> str | None:
    return None if obj is None else type(obj).__name__


def _context_name(context: Any) -> str | None:
    if context is None:
        return None
    getter = getattr(context, "get_start_method", None)
    return getter() if callable(getter) else str(context)


def _length(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:
        return None


def _drawing_sampler(loader: DataLoader[Any]) -> Any:
    """The sampler that actually draws the indices.

    Given a ``batch_sampler``, ``DataLoader.__init__`` still builds a ``SequentialSampler`` (or
    ``_InfiniteConstantSampler``) as ``loader.sampler`` and never uses it
    (``torch/utils/data/dataloader.py``); the indices come from the batch sampler's own sampler,
    perhaps nested in an adapter (accelerate's ``BatchSamplerShard`` holds the user's
    ``BatchSampler``), else from the batch sampler itself.
    """
    if loader.batch_size is not None or loader.batch_sampler is None:  # torch built the BatchSampler
        return loader.sampler
    return _inner_sampler(loader.batch_sampler, depth=3) or loader.batch_sampler


def _inner_sampler(outer: Any, depth: int) -> Any:
    """The first ``Sampler`` held by ``outer`` that is not itself a batch sampler, breadth first."""
    level = [outer]
    for _ in range(depth):
        held = [value for obj in level for value in _attributes(obj) if isinstance(value, Sampler)]
        for value in held:
            if getattr(value, "batch_size", None) is None:
                return value
        level = held
    return None


def _attributes(obj: Any) -> list[Any]:
    """``sampler`` and ``batch_sampler`` first (the usual names), then the rest of the instance's fields."""
    fields = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    first = [fields.pop(name) for name in ("sampler", "batch_sampler") if name in fields]
    return first + list(fields.values())


def _distributed(loader: DataLoader[Any]) -> bool:
    """Shards are worth checking: a DistributedSampler, or a process group is up."""
    return isinstance(_drawing_sampler(loader), DistributedSampler) or (dist.is_available() and dist.is_initialized())


def loader_config(loader: DataLoader[Any]) -> dict[str, Any]:
    """Every DataLoader argument that changes the protocol, for ``run_start.config``."""
    dataset = loader.dataset
    iterable = isinstance(dataset, IterableDataset)
    batch_sampler = loader.batch_sampler
    # len(loader) of an IterableDataset is remembered by torch, which then warns once an epoch yields
    # more samples than that (NOTE [ IterableDataset and __len__ ]): the probe's own look must not count.
    len_called = getattr(loader, "_IterableDataset_len_called", None)
    try:
        batches: int | None = len(loader)
    except TypeError:
        batches = None
    finally:
        object.__setattr__(loader, "_IterableDataset_len_called", len_called)
    length = _length(dataset)
    workers = loader.num_workers
    return {
        "num_workers": workers,
        "batch_size": (loader.batch_size if loader.batch_size is not None
                       else getattr(batch_sampler, "batch_size", None)),
        "prefetch_factor": loader.prefetch_factor if workers else None,
        "persistent_workers": loader.persistent_workers,
        "in_order": getattr(loader, "in_order", True),
        "drop_last": loader.drop_last,
        "timeout": loader.timeout,
        "pin_memory": loader.pin_memory,
        "pin_memory_active": _pins(loader),
        "multiprocessing_context": _context_name(loader.multiprocessing_context) if workers else None,
        "sampler": _name(_drawing_sampler(loader)),
        "batch_sampler": _name(batch_sampler),
        "collate_fn": getattr(loader.collate_fn, "__name__", _name(loader.collate_fn)),
        "dataset": _name(dataset),
        "dataset_kind": "iterable" if iterable else "map",
        "dataset_length": length,
        "batches_per_epoch": batches,
    }


def _pins(loader: DataLoader[Any]) -> bool:
    """Whether the iterator will pin, by torch's rule in ``_BaseDataLoaderIter.__init__``
    (``torch/utils/data/dataloader.py``): in torch 2.13, when ``torch.accelerator`` has one; in torch
    2.4, which has no ``torch.accelerator``, when CUDA is available or a ``pin_memory_device`` is named."""
    if not loader.pin_memory:
        return False
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(loader.pin_memory_device) or torch.cuda.is_available()


def distributed_identity() -> tuple[int, int]:
    """(rank, world size): from torch.distributed when a process group is up, else the launcher's
    environment (torchrun's RANK/WORLD_SIZE, LOCAL_RANK/LOCAL_WORLD_SIZE as Lightning sets them
    before its group exists, SLURM's SLURM_PROCID/SLURM_NTASKS), else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                                 ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, size = _int_env(rank_name), _int_env(size_name)
        if rank is not None:
            return rank, max(size or 1, rank + 1)
    return 0, 1


def job_id(world_size: int) -> str | None:
    """What the ranks of one job share: the launcher's run id (``paths.launcher_job``), else the
    rendezvous address."""
    env = os.environ
    named = launcher_job()
    if named:
        return named
    if world_size > 1 and env.get("MASTER_PORT"):  # Lightning's own launcher sets only these
        return f"{env.get('MASTER_ADDR', 'localhost')}:{env['MASTER_PORT']}"
    return None


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


class ProbeMixin(DataLoader[T_co]):
    """What makes a DataLoader class instrumented; mixed in before any DataLoader subclass.

    It derives from DataLoader and adds no slots, so ``watch()`` can switch an existing loader's
    class to ``(ProbeMixin, TheirLoader)``: Python allows that only between equal object layouts.
    A loader re-created from its class (``type(loader)(*args, **kwargs)``, as Lightning does) has no
    probe yet: it gets one at its first ``iter()`` from the class's ``_probe_destination``.
    """

    _probe: Recorder
    _probe_epochs: EpochCounter
    _probe_meta: dict[str, Any]
    _probe_started: bool
    _probe_iterators: weakref.WeakSet[Any]
    _probe_destination: Any = None  # set on watched classes: how a re-created loader gets its probe
    _probe_base: type | None = None  # set on watched classes: the user's own loader class

    def _init_probe(self, sink: Sink | None, *, run_id: str | None, rank: int | None, meta: dict[str, Any]) -> None:
        recorder = Recorder(sink, run_id=run_id or uuid.uuid4().hex[:12], rank=rank or 0)
        # object.__setattr__: DataLoader.__setattr__ guards some names after init, not ours, but
        # going around it keeps the probe invisible to subclasses that override __setattr__ too.
        object.__setattr__(self, "_probe", recorder)
        recorder.hold(self)  # a loader dropped without close() still stops its thread, once its iterators go
        object.__setattr__(self, "_probe_epochs", EpochCounter(recorder))
        object.__setattr__(self, "_probe_meta", {**meta, "rank_given": rank is not None})
        object.__setattr__(self, "_probe_started", False)
        # weakly: torch shuts workers down when the training loop drops its iterator
        object.__setattr__(self, "_probe_iterators", weakref.WeakSet())

    def _probe_ready(self) -> bool:
        """Whether this loader has a probe, making one from its class's destination if need be."""
        if "_probe" not in vars(self):
            if self._probe_destination is None:
                return False
            self._probe_destination.attach(self)
        if getattr(self, "_probe_closed", False):
            return False
        self._start_probe()
        return True

    def _start_probe(self) -> None:
        if self._probe_started:
            return
        if self._probe_destination is not None:
            self._probe_destination.open(self)
        object.__setattr__(self, "_probe_started", True)
        rank, world_size = distributed_identity()
        if not self._probe_meta.get("rank_given"):
            self._probe.rank = rank  # read at the first iter(): Lightning starts its process group late
        if _distributed(self):
            self._probe_epochs.shard_length = _length(self.dataset)
        self._probe.note(
            "run_start",
            mode="real",
            scenario=self._probe_meta.get("scenario"),
            name=self._probe_meta.get("name"),
            job=self._probe_meta.get("job") or job_id(world_size),
            params=self._probe_meta.get("params"),
            config=loader_config(self) | self._probe_meta.get("describe", {}),
            loader=_qualified(self._probe_base or type(self)),
            torch=torch.__version__,
            python=platform.python_version(),
            host=socket.gethostname(),
            pid=os.getpid(),
            wall_start=self._probe.wall0,
            world_size=world_size,
        )
        self._probe.start()
        watch_memory(self._probe)

    def _get_iterator(self) -> Any:
        try:
            # A torch without the private names the probe follows runs every loader unwatched (said once).
            ready = followable() and self._probe_ready()
            if ready:
                install_hook()
                rule = StuckRule(self._probe_meta.get("stuck_after"))
                adoption = Adoption(self, self._probe, self._probe_epochs, rule)
        except Exception as exc:
            report("probe start", exc)
            ready = False
        try:
            if not ready:
                return super()._get_iterator()
            with adoption:
                iterator = super()._get_iterator()
        except BaseException as exc:  # the user's sampler or worker_init_fn, an argument torch refuses
            without_probe_frames(exc)
            raise
        adoption.finish(iterator)
        if isinstance(iterator, MultiProcessProbe):
            self._probe_iterators.add(iterator)
        return iterator

    @property
    def run_id(self) -> str:
        return self._probe.run_id

    def flush(self) -> None:
        """Hand every event recorded so far to the sink now."""
        self._probe.flush()

    def ask_values(self) -> None:
        """Describe the next batch of each worker (or of the main process) with a few values of
        every leaf, as a ``batch_info`` event: the batch inspector's values, only when asked."""
        self._probe.values_asked = True
        for reader in list(self._probe.readers.values()):
            reader.ask_values()

    def _probe_shut_down(self) -> None:
        """Stop the workers of every iterator still alive (e.g. one a traceback still holds after an error).

        Until then torch's SIGCHLD handler (torch/utils/data/_utils/signal_handling.py) raises wherever the
        main thread is, for a worker that died; in the shutdown's join it raises after torch's own finally has
        stopped the rest. The death is recorded, and vanilla torch meets it in the iterator's ``__del__``,
        which swallows it: so does this, and the run can end."""
        for iterator in list(self._probe_iterators):
            try:
                iterator._shutdown_workers()
            except RuntimeError:
                pass

    def close(self, reason: str = "done", stats: dict[str, Any] | None = None,
              error: dict[str, str] | None = None, exitcode: int | None = None) -> None:
        """End the run: shut persistent workers down, emit ``run_end``, flush, stop the probe thread.

        ``exitcode``: the process's exit status, when the run ends because the process exits."""
        if getattr(self, "_probe_closed", False) or "_probe" not in vars(self):
            return
        object.__setattr__(self, "_probe_closed", True)
        self._probe_shut_down()
        try:
            if self._probe_started:
                self._probe.drain_all()  # the workers' last records belong before run_end
                self._probe_epochs.end_open()
                extra = ({"error": error} if error else {}) | ({"exitcode": exitcode} if exitcode is not None else {})
                self._probe.end(reason=reason, stats=stats or {}, **extra)
            self._probe.close()
        except Exception as exc:
            report("run end", exc)
        transport = getattr(self, "_probe_transport", None)
        if transport is not None:
            transport.close()

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles carry the loader, not its run: a copy starts a run of its own."""
        inherited = super().__getstate__() if hasattr(super(), "__getstate__") else vars(self)
        state = dict(inherited) if isinstance(inherited, dict) else dict(vars(self))  # object's: None for no attributes
        return {name: value for name, value in state.items() if not name.startswith("_probe")}

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self._probe_base is None:  # InstrumentedDataLoader: a class with a name
            return super().__reduce_ex__(protocol)
        # A watched class is made at run time and cannot be found by name: rebuild it.
        return (_rebuild, (self._probe_base, self._probe_destination), self.__getstate__())

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, _tb: Any) -> None:
        if exc is None:
            self.close("done")
        elif isinstance(exc, KeyboardInterrupt):
            self.close("stopped")
        else:
            self.close("error", error=failure(exc))


def failure(exc: BaseException) -> dict[str, str]:
    """``run_end.error``: what a run ended with."""
    return {"type": type(exc).__name__, "message": str(exc)[:1000]}


def _rebuild(base: type, destination: Any) -> Any:
    cls = destination.loader_class(base)
    return cls.__new__(cls)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class InstrumentedDataLoader(ProbeMixin[T_co]):
    """A drop-in ``DataLoader`` whose ``sink`` receives lists of ◆ event dicts.

    Args:
        sink: called from the probe's thread with lists of events (keep it quick, never block).
        run_id: names the run in every event (random by default).
        rank: distributed rank (default: torch.distributed's, else the launcher's environment, else 0).
        stuck_after: seconds after which a fetch (or the consumer's wait) is reported stuck, with
            the live stack (default: the larger of 10 s and 20× the median fetch time so far).
        scenario, params, describe, name: recorded in ``run_start``.
        Everything else: exactly ``torch.utils.data.DataLoader``'s arguments.
    """

    def __init__(
        self,
        *args: Any,
        sink: Sink,
        run_id: str | None = None,
        rank: int | None = None,
        scenario: str | None = None,
        params: dict[str, Any] | None = None,
        describe: dict[str, Any] | None = None,
        name: str | None = None,
        stuck_after: float | None = None,
        **kwargs: Any,
    ) -> None:
        meta = {"scenario": scenario, "params": params, "describe": describe or {}, "name": name,
                "stuck_after": stuck_after}
        self._init_probe(sink, run_id=run_id, rank=rank, meta=meta)
        try:
            super().__init__(*args, **kwargs)
        except BaseException as exc:  # an argument torch refuses, said as torch says it
            without_probe_frames(exc)
            raise
