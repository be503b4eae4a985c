"""The loader's state in torch's terms, rebuilt from repeated stack samples of a process that ran
without loaderscope. Pure: it reads a recording (``sample.py`` makes one), never the process.

What can be read is what torch keeps in frames and locals: ``_worker_loop``'s ``worker_id``, ``idx``
and ``index`` (torch/utils/data/_utils/worker.py), the fetcher's ``possibly_batched_index`` and the
sample ``idx`` of its list comprehension (torch/utils/data/_utils/fetch.py), and which of
``_MultiProcessingDataLoaderIter``'s methods the training thread is in (torch/utils/data/dataloader.py).
A recording is plain JSON, so a test can replay one without py-spy.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

Frame = dict[str, Any]
Recording = dict[str, Any]

_DATA = "torch/utils/data/"
WORKER_COMM = "pt_data_worker"  # the name torch gives a worker's thread (torch/utils/data/_utils/worker.py)
_WORKER_PY = "torch/utils/data/_utils/worker.py"
_BOOTSTRAP = "<frozen importlib._bootstrap>"
_LIBRARY = re.compile(r"/(?:site-packages|dist-packages)/|/lib/python3\.\d+/|^<|/loaderscope/(?!scenarios/)")
# torch.distributed's collectives (torch/distributed/distributed_c10d.py); a frame in one means the
# thread waits for the other ranks.
COLLECTIVES = frozenset({
    "all_reduce", "barrier", "monitored_barrier", "broadcast", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
    "all_to_all_single", "gather", "scatter", "send", "recv", "broadcast_object_list", "wait",
})
# Wrappers that all-reduce (or reduce-scatter) gradients inside backward(), from C++ hooks that have
# no Python frame (torch/nn/parallel/distributed.py's Reducer; FSDP's post-backward hooks).
_GRADIENT_SYNC = ("DistributedDataParallel", "FullyShardedDataParallel")
_LOADER_PLACES = ("next", "in_process", "shutdown", "starting")


@dataclass
class LockWait:
    """Who holds the lock a thread waits for, as far as its process's stacks show: a ``with`` block
    of the same name in the waiting thread's own stack (``self``), in another thread's (``thread``),
    in none while no other thread runs the user's code and the waiting stack was read whole
    (``absent``: the holder is not in the process), else none seen (``unseen``)."""

    lock: str | None  # as the waiting line names it: `LOCK`, `self._lock`
    holder: str
    at: Frame | None = None  # the frame inside the holding ``with``
    taken: int | None = None  # the line of that ``with``
    thread: str | None = None  # the holding thread's name
    sure: bool = True  # the same object (one module's global, or one ``self``), not only the same words


@dataclass
class Activity:
    """What one worker (or the in-process loader) is doing in one sample."""

    state: str  # idle, fetching, collate, init, put, lock, starting, stopped, zombie, gone
    task: int | None = None
    indices: list[int] | None = None
    sample: int | None = None
    stack: list[Frame] = field(default_factory=list)  # outermost first, from torch's loop down
    writing: bool = False  # its queue's feeder thread is blocked writing a result to the pipe
    module: str | None = None  # the module whose import lock it waits for (state ``lock``)
    lock: LockWait | None = None  # for another lock (state ``lock``): who holds it

    def key(self) -> tuple[Any, ...]:
        """What must stay the same between samples for the activity to count as one: a loop moves
        between lines of its function, so the innermost function, not its line."""
        inner = self.stack[-1] if self.stack else {}
        return (self.state, self.task, self.sample, inner.get("file"), inner.get("function"))


@dataclass
class Worker:
    pid: int
    worker: int | None
    now: Activity
    held: float  # seconds the same activity was seen, up to the last sample ("at least that long")
    steady: bool  # the same activity in every sample
    cpu: float | None  # share of one core over the samples
    start_method: str | None
    tasks_seen: list[int]
    exitcode: int | None = None
    running: bool = False  # state R (on a CPU or waiting for one) in every sample: it computes, it does not wait
    asleep: float | None = None  # seconds its thread has slept without running once (/proc), at the last sample


@dataclass
class Training:
    """The training thread: where it is (next, in_process, shutdown, pin, collective, starting, step)."""

    place: str
    detail: str  # the collective's name, or the function it is in
    stack: list[Frame]
    held: float
    steady: bool
    places_seen: list[str]
    loading: Activity | None = None  # num_workers=0: the sample it loads in its own process
    tid: Any = None  # its thread id (py-spy's os_thread_id)
    thread: str | None = None  # the thread's name when it is not the main thread (a prefetcher)
    main: list[Frame] | None = None  # then the main thread's stack
    asleep: float | None = None  # seconds it has slept without running once (/proc), at the last sample


@dataclass
class Picture:
    pid: int
    duration: float
    samples: int
    training: Training
    workers: list[Worker]
    has_loader: bool
    moving: bool
    start_method: str | None
    threads: int
    helper: bool  # multiprocessing's resource tracker or forkserver: a child that is no rank
    pinning: list[Frame] | None = None  # the pin-memory thread's stack, when it pinned in every sample
    world_size: int | None = None  # $WORLD_SIZE (torchrun)
    gradient_sync: str | None = None  # "`model` in train is a DistributedDataParallel": backward waits for the ranks
    # each process's memory at the last sample (the main process: no ``worker``), smaps_rollup's figures
    memory: list[dict[str, Any]] = field(default_factory=list)
    host: dict[str, int] | None = None  # MemAvailable and MemTotal then


_HELPERS = ("multiprocessing/resource_tracker.py", "multiprocessing/forkserver.py")


def is_user(path: str) -> bool:
    """The user's own code: not the standard library, an installed package or loaderscope (its
    scenarios stand in for user code), as the live probe counts it (probe/stacks.py)."""
    return bool(path) and not _LIBRARY.search(path)


def frames_of(thread: dict[str, Any]) -> list[Frame]:
    """py-spy's frames (innermost first) as loaderscope stack frames (outermost first), locals kept."""
    out = []
    for f in reversed(thread.get("frames") or []):
        path = f.get("filename") or ""
        out.append({"file": path, "line": f.get("line"), "function": f.get("name", "?"),
                    "code": f.get("code", ""), "user": is_user(path), "holding": f.get("holding") or [],
                    "locals": {v.get("name"): v.get("repr") for v in f.get("locals") or []}})
    return out


def plain(stack: list[Frame]) -> list[Frame]:
    """A stack as events carry it (§10): no locals, no ``with`` blocks."""
    return [{k: v for k, v in f.items() if k not in ("locals", "holding")} for f in stack]


def held_withs(text: str, lines: list[int]) -> dict[int, list[dict[str, Any]]]:
    """For each line of a source text, the ``with`` blocks of its own function whose body holds it,
    outermost first: ``{"expr": "LOCK", "line": 9}``. A thread standing on that line holds what
    those ``with`` statements took. A line in a ``with``'s own header is taking it, not holding it."""
    try:
        tree = ast.parse(text)  # the target's text, parsed as data only
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    scopes: list[tuple[ast.AST, list[ast.With | ast.AsyncWith]]] = []

    def visit(node: ast.AST, scope: list[ast.With | ast.AsyncWith]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                inner: list[ast.With | ast.AsyncWith] = []
                scopes.append((child, inner))
                visit(child, inner)
                continue
            if isinstance(child, (ast.With, ast.AsyncWith)):
                scope.append(child)
            visit(child, scope)

    top: list[ast.With | ast.AsyncWith] = []
    scopes.append((tree, top))
    try:
        visit(tree, top)
    except RecursionError:
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    for n in lines:
        own = min((s for s in scopes if _spans(s[0], n)), key=lambda s: _extent(s[0]), default=None)
        if own is None:
            continue
        held = [w for w in own[1] if w.lineno < w.body[0].lineno <= n <= (w.end_lineno or w.lineno)]
        out[n] = [{"expr": ast.unparse(item.context_expr), "line": w.lineno}
                  for w in sorted(held, key=lambda w: w.lineno) for item in w.items]
    return out


def _spans(node: ast.AST, line: int) -> bool:
    if isinstance(node, ast.Module):
        return True
    start, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", None) or 0
    return bool(start <= line <= end)


def _extent(node: ast.AST) -> int:
    if isinstance(node, ast.Module):
        return 1 << 62
    return int((getattr(node, "end_lineno", None) or 0) - getattr(node, "lineno", 0))


def user_frame(stack: list[Frame]) -> Frame | None:
    for f in reversed(stack):
        if f["user"]:
            return f
    return None


def where(stack: list[Frame]) -> str:
    """``file:line in function`` of the innermost user frame, else the innermost frame."""
    f = user_frame(stack) or (stack[-1] if stack else None)
    return f"{f['file']}:{f['line']} in {short(f['function'])}" if f else "an unknown place"


def short(function: str) -> str:
    return function.rsplit(".", 1)[-1] if not function.endswith(">") else function


def int_or_none(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _ints(text: Any) -> list[int] | None:
    try:
        value = ast.literal_eval(str(text))  # a repr read from the target: parsed as data only
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _in(frame: Frame, suffix: str, function: str | None = None) -> bool:
    return frame["file"].endswith(suffix) and (function is None or short(frame["function"]) == function)


def _main_thread(threads: list[dict[str, Any]], pid: int) -> dict[str, Any] | None:
    for t in threads:
        if t.get("os_thread_id") == pid or t.get("thread_name") == "MainThread":
            return t
    return threads[0] if threads else None


def _fetching(inner: list[Frame], lock_wait: bool) -> Activity:
    """Inside torch's fetcher: the sample and the task's indices from fetch.py's locals."""
    sample = indices = None
    for f in inner:
        if f["file"].endswith("_utils/fetch.py"):
            indices = _ints(f["locals"].get("possibly_batched_index")) or indices
            sample = int_or_none(f["locals"].get("idx")) if "idx" in f["locals"] else sample
    # collate: torch's default_collate, or the fetcher's own line calling a custom collate_fn
    called = [f for f in inner if f["file"].endswith("_utils/fetch.py")]
    collating = any(f["file"].endswith("_utils/collate.py") for f in inner) or \
        bool(called and "collate_fn(" in (called[-1]["code"] or ""))
    state = "collate" if collating else "fetching"
    if lock_wait:
        state = "lock"
    return Activity(state, None, indices, sample, inner)


def _waits_for_lock(stack: list[Frame], wchan: str | None) -> bool:
    """Blocked taking a lock: asleep on a futex at a line that takes one (``with lock:``, ``acquire``).
    Without wchan (a kernel that hides it) the line alone cannot tell a lock from a sleep."""
    if not stack or not wchan or "futex" not in wchan:
        return False
    code = stack[-1]["code"] or ""
    return bool(re.match(r"with\b", code)) or "acquire(" in code or _in(stack[-1], _BOOTSTRAP, "acquire")


def _importing(stack: list[Frame]) -> str | None:
    """The module whose import lock the innermost frames wait for (importlib's ``_ModuleLock.acquire``,
    in ``<frozen importlib._bootstrap>``, which has no source line to read): the ``name`` argument of
    the import under it (``_lock_unlock_module`` or ``_find_and_load``). Asked only of a stack that
    ``_waits_for_lock`` found blocked."""
    if not stack or not _in(stack[-1], _BOOTSTRAP, "acquire"):
        return None
    for f in reversed(stack):
        if _in(f, _BOOTSTRAP) and "name" in f["locals"]:
            return str(f["locals"]["name"]).strip("\"'")
    return "a module"


_WITH = re.compile(r"with\s+(.+?)\s*(?:\bas\s+[\w.]+\s*)?:\s*(?:#.*)?$")
_ACQUIRE = re.compile(r"([\w.]+)\.acquire\(")


def lock_name(code: str) -> str | None:
    """The lock a line takes, as the line names it: ``with LOCK:`` → LOCK, ``self._lock.acquire()`` →
    self._lock."""
    found = _WITH.match(code) or _ACQUIRE.search(code)
    return found.group(1) if found else None


def lock_wait(stack: list[Frame], others: list[tuple[str, list[Frame]]]) -> LockWait:
    """Who holds the lock the innermost frame of ``stack`` waits for; ``others``: the process's other
    threads (name, frames). Only a ``with`` block shows a holder (``holding``, from the source)."""
    name = lock_name(stack[-1]["code"] or "") if stack else None
    if name is None:
        return LockWait(None, "unseen")
    waiting = stack[-1]
    for holder, frames in [(None, stack), *others]:
        for f in frames:
            taken = next((h["line"] for h in f["holding"] if h["expr"] == name), None)
            if taken is not None:
                return LockWait(name, "self" if holder is None else "thread", f, taken, holder, _same(name, waiting, f))
    # absent only when every frame of the user's in this stack was read: an unread one may hold it
    could = any(f["user"] for _, frames in others for f in frames) or any(f["user"] and not f["code"] for f in stack)
    return LockWait(name, "unseen" if could else "absent")


def _same(name: str, a: Frame, b: Frame) -> bool:
    """Whether ``name`` is one object in frames ``a`` and ``b``: a global of one module (a local of
    neither, in one file), or locals whose repr names one address (py-spy's ``<Data at 0x…>``)."""
    base = re.split(r"[.\[(]", name, maxsplit=1)[0]
    ra, rb = a["locals"].get(base), b["locals"].get(base)
    if ra is None and rb is None:
        return bool(a["file"] == b["file"])
    return ra is not None and ra == rb and " at 0x" in str(ra)


def worker_activity(frames: list[Frame], wchan: str | None) -> tuple[int | None, Activity, str | None] | None:
    """(worker id, activity, start method) of a process whose main thread runs torch's
    ``_worker_loop``; None for any other process."""
    at = next((i for i, f in enumerate(frames) if _in(f, _WORKER_PY, "_worker_loop")), None)
    if at is None:
        return None
    loop, inner = frames[at], frames[at + 1:]
    above = " ".join(f["file"] for f in frames[:at])
    method = ("forkserver" if "forkserver" in above else "spawn" if "spawn.py" in above
              else "fork" if "popen_fork" in above else None)
    wid = int_or_none(loop["locals"].get("worker_id"))
    code = loop["code"] or ""
    stack = frames[at:]
    lock = _waits_for_lock(stack, wchan)
    module = _importing(stack) if lock else None
    if "index_queue.get" in code:
        return wid, Activity("idle", stack=stack), method
    if "init_fn(" in code:
        return wid, Activity("lock" if lock else "init", stack=stack, module=module), method
    if "data_queue.put" in code:
        act = Activity("put", int_or_none(loop["locals"].get("idx")), _ints(loop["locals"].get("index")), stack=stack)
        return wid, act, method
    if any(f["file"].endswith("_utils/fetch.py") for f in inner) or "fetch(" in code:
        act = _fetching(inner, lock)
        act.task, act.stack, act.module = int_or_none(loop["locals"].get("idx")), stack, module
        act.indices = act.indices or _ints(loop["locals"].get("index"))
        return wid, act, method
    return wid, Activity("lock" if lock else "starting", stack=stack, module=module), method


def _feeder_writing(threads: list[dict[str, Any]]) -> bool:
    """A multiprocessing.Queue's feeder thread inside a pipe write: the reader is not keeping up."""
    for t in threads:
        frames = frames_of(t)
        if any(_in(f, "multiprocessing/queues.py", "_feed") for f in frames) and \
                any(f["file"].endswith("multiprocessing/connection.py") and "send" in short(f["function"])
                    for f in frames):
            return True
    return False


def training_place(frames: list[Frame]) -> tuple[str, str]:
    """Where the training thread is, in torch's terms, and the function that says so."""
    names = [(f["file"], short(f["function"]), f["function"]) for f in frames]
    for file, name, _full in names:
        if file.endswith(_DATA + "dataloader.py") and name == "_shutdown_workers":
            return "shutdown", name
    for file, name, full in names:
        if file.endswith(_DATA + "dataloader.py") and name == "_next_data":
            return ("in_process" if "SingleProcess" in full else "next"), full
    for file, name, _full in names:
        if file.endswith(_DATA + "_utils/pin_memory.py"):
            return "pin", name
    for file, name, _full in names:
        if "torch/distributed/" in file and name in COLLECTIVES:
            return "collective", name
    for file, name, _full in names:
        if "torch/autograd/" in file and name in ("backward", "_engine_run_backward", "grad"):
            return "backward", "backward"
    for file, name, full in names:
        if file.endswith(_DATA + "dataloader.py") and name in ("__iter__", "__init__", "_get_iterator", "_reset"):
            return "starting", full
    inner = user_frame(frames) or (frames[-1] if frames else None)
    return "step", short(inner["function"]) if inner else "?"


def _pinning(threads: list[dict[str, Any]]) -> list[Frame] | None:
    """The pin-memory thread's stack while it pins a batch (not while it waits on its queue)."""
    for t in threads:
        frames = frames_of(t)
        loop = next((i for i, f in enumerate(frames) if _in(f, _DATA + "_utils/pin_memory.py", "_pin_memory_loop")),
                    None)
        if loop is not None and "pin_memory(" in (frames[loop]["code"] or ""):
            return frames[loop:]
    return None


def _has_loader(threads: list[dict[str, Any]]) -> bool:
    for t in threads:
        for f in t.get("frames") or []:
            if _DATA in (f.get("filename") or ""):
                return True
            for v in f.get("locals") or []:
                r = str(v.get("repr") or "")
                if r.startswith("<DataLoader at") or "DataLoaderIter at" in r:
                    return True
    return False


def _held(times: list[float], keys: list[Any]) -> tuple[float, bool]:
    """How long the last key has been seen without a change, and whether it was seen throughout."""
    start = len(keys) - 1
    while start > 0 and keys[start - 1] == keys[-1]:
        start -= 1
    return times[-1] - times[start], start == 0


def _cpu(samples: list[dict[str, Any]], pid: str, tck: float) -> float | None:
    seen: list[tuple[float, int]] = [(s["t"], s["procs"][pid]["cpu"]) for s in samples
                                     if pid in s["procs"] and s["procs"][pid].get("cpu") is not None]
    if len(seen) < 2 or seen[-1][0] <= seen[0][0]:
        return None
    return (seen[-1][1] - seen[0][1]) / tck / (seen[-1][0] - seen[0][0])


def _proc_activity(proc: dict[str, Any], pid: int) -> tuple[int | None, Activity, str | None] | None:
    threads = proc.get("threads") or []
    main = _main_thread(threads, pid)
    if main is None:
        return None
    found = worker_activity(frames_of(main), (proc.get("wchan") or {}).get(str(pid)))
    if found is None:
        return None
    wid, act, method = found
    others = [t for t in threads if t is not main]
    act.writing = _feeder_writing(others)
    if act.state == "lock" and act.module is None:
        act.lock = lock_wait(frames_of(main), [(str(t.get("thread_name") or t.get("os_thread_id")), frames_of(t))
                                               for t in others])
    if proc.get("state") in ("T", "t"):
        busy = act.state != "idle"
        act = Activity("stopped", act.task if busy else None, act.indices if busy else None,
                       act.sample, act.stack, act.writing)
    return wid, act, method


def _loader_thread(samples: list[dict[str, Any]], pid: int) -> Any:
    """The id of the thread that iterates the DataLoader: the main thread, unless another thread is
    seen in the loader (next(), the in-process fetch, its start or shutdown) and the main thread never
    is (a prefetcher thread that fills a queue the training loop reads)."""
    seen: dict[Any, int] = {}
    for s in samples:
        for t in (s["procs"].get(str(pid)) or {}).get("threads") or []:
            if training_place(frames_of(t))[0] in _LOADER_PLACES:
                seen[t.get("os_thread_id")] = seen.get(t.get("os_thread_id"), 0) + 1
    main = _main_thread((samples[-1]["procs"].get(str(pid)) or {}).get("threads") or [], pid)
    main_id = main.get("os_thread_id") if main else None
    return main_id if not seen or main_id in seen else max(seen, key=lambda tid: seen[tid])


def _thread(proc: dict[str, Any], tid: Any, pid: int) -> dict[str, Any] | None:
    threads = proc.get("threads") or []
    return next((t for t in threads if t.get("os_thread_id") == tid), None) or _main_thread(threads, pid)


def _gradient_sync(frames: list[Frame]) -> str | None:
    """A local of the training thread that all-reduces gradients in backward (DDP, FSDP), said as
    the evidence: "`model` in train is a DistributedDataParallel"."""
    for f in reversed(frames):
        for name, r in f["locals"].items():
            kind = next((k for k in _GRADIENT_SYNC if str(r).startswith(f"<{k} at ")), None)
            if kind is not None:
                return f"`{name}` in {short(f['function'])} is a {kind}"
    return None


def _training(rec: Recording, times: list[float]) -> Training:
    """The thread that iterates the DataLoader, sample by sample: where it is, and for how long."""
    pid, samples = rec["pid"], rec["samples"]
    tid = _loader_thread(samples, pid)
    per_sample = []
    for s in samples:
        t = _thread(s["procs"].get(str(pid)) or {}, tid, pid)
        frames = frames_of(t) if t else []
        per_sample.append((frames, training_place(frames)))
    frames, (place, detail) = per_sample[-1]
    keys = [(p, (fr[-1]["file"], fr[-1]["line"]) if fr else None) for fr, (p, _) in per_sample]
    held, steady = _held(times, keys)
    last = samples[-1]["procs"].get(str(pid)) or {}
    main = _main_thread(last.get("threads") or [], pid)
    asleep = (last.get("asleep") or {}).get(str(tid))
    training = Training(place, detail, frames, held, steady, [p for _, (p, _) in per_sample], tid=tid, asleep=asleep)
    named = _thread(last, tid, pid)
    if main is not None and named is not None and named is not main:
        training.thread = str(named.get("thread_name") or tid)
        training.main = frames_of(main)
    if asleep is not None and asleep > held:  # asleep all that time: on that very line since then
        training.held, training.steady = asleep, steady or asleep >= times[-1] - times[0]
    return training


def build(rec: Recording) -> Picture:
    """The picture a recording shows: the training thread, each worker, and whether anything moved."""
    pid, samples = rec["pid"], rec["samples"]
    times = [s["t"] for s in samples]
    last = samples[-1]["procs"]
    main_proc = last[str(pid)]
    threads = main_proc.get("threads") or []
    training = _training(rec, times)
    frames, place = training.stack, training.place
    if place == "in_process":
        inner = [f for f in frames if f["file"].endswith("_utils/fetch.py")]
        start = frames.index(inner[0]) if inner else len(frames)
        wchan = (main_proc.get("wchan") or {}).get(str(training.tid))
        training.loading = _fetching(frames[start:], _waits_for_lock(frames, wchan))
    workers = _workers(rec, times)
    methods = {w.start_method for w in workers if w.start_method}
    moving = len(set(training.places_seen)) > 1 or any(len(set(w.tasks_seen)) > 1 for w in workers)
    has_loader = bool(workers) or any(_has_loader((s["procs"].get(str(pid)) or {}).get("threads") or [])
                                      for s in samples)
    helper = any(f["file"].endswith(_HELPERS) for f in frames)
    pins = [_pinning((s["procs"].get(str(pid)) or {}).get("threads") or []) for s in samples]
    pinning = pins[-1] if all(pins) else None
    world = str((rec.get("env") or {}).get("WORLD_SIZE", ""))
    return Picture(pid, times[-1] - times[0], len(samples), training, workers, has_loader, moving,
                   methods.pop() if len(methods) == 1 else None, len(threads), helper, pinning,
                   int(world) if world.isdigit() else None, _gradient_sync(frames), _memory(last, pid, workers),
                   samples[-1].get("host"))


def _memory(last: dict[str, Any], pid: int, workers: list[Worker]) -> list[dict[str, Any]]:
    """The main process's and each worker's memory at the last sample, where it was read."""
    found = [{"pid": pid, **figures} for figures in [(last.get(str(pid)) or {}).get("memory")] if figures]
    for w in workers:
        figures = (last.get(str(w.pid)) or {}).get("memory")
        if figures and w.worker is not None:
            found.append({"worker": w.worker, "pid": w.pid, **figures})
    return found


def _workers(rec: Recording, times: list[float]) -> list[Worker]:
    samples, tck = rec["samples"], float(rec.get("clk_tck", 100))
    out = []
    for key, proc in samples[-1]["procs"].items():
        if int(key) == rec["pid"]:
            continue
        history: list[tuple[float, Activity]] = []
        wid = method = None
        for s in samples:
            p = s["procs"].get(key)
            if p is None:
                continue
            found = _proc_activity(p, int(key)) if p.get("threads") else None
            if found is not None:
                wid, act, method = found
            elif p.get("state") in ("Z", "X") and (wid is not None or p.get("comm") == WORKER_COMM):
                act = Activity("zombie")
            elif p.get("state") in ("T", "t") and history:
                last = history[-1][1]
                act = Activity("stopped", last.task, last.indices, last.sample, last.stack)
            else:
                continue
            history.append((s["t"], act))
        if not history or (wid is None and proc.get("comm") != WORKER_COMM):
            continue  # not a DataLoader worker (a zombie counts when torch's name for one is on it)
        held, steady = _held([t for t, _ in history], [a.key() for _, a in history])
        steady = steady and len(history) == len(samples)
        asleep = (proc.get("asleep") or {}).get(key)  # its main thread, the one in torch's loop
        if asleep is not None and asleep > held:  # asleep all that time: on that very line since then
            held, steady = asleep, steady or asleep >= times[-1] - times[0]
        tasks = [a.task for _, a in history if a.task is not None]
        states = [s["procs"][key].get("state") for s in samples if key in s["procs"]]
        out.append(Worker(int(key), wid, history[-1][1], held, steady, _cpu(samples, key, tck), method, tasks,
                          proc.get("exitcode"), len(states) >= 2 and all(st == "R" for st in states), asleep))
    return sorted(out, key=lambda w: (w.worker is None, w.worker if w.worker is not None else 0, w.pid))
