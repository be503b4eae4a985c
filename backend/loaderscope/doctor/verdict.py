"""The cause of a hang in plain words, from the picture ``model.build`` made. Pure.

The sentences follow the live diagnosis (``diagnosis.py``): "stuck: worker 1 has been fetching task
3, sample 2 (index 13) … at data.py:7 in __getitem__: …". They live in one table (``TEXT``), each
with what to do about it, so that their wording can be read and changed in one place. A value the
samples did not show is said in words ("a task", "a worker"), never printed as None; a cause the
samples show only in part is said as "likely", with what they show.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from loaderscope.doctor.model import Activity, LockWait, Picture, Worker, short, user_frame

# A worker on the same lines in every sample that runs (state R every time, or over half a core) is
# looping, not waiting: on a busy machine its share of a core says less than its state.
BUSY_CPU = 0.5

# cause: (what it is, what to do). Fields: who held where doing task for_index cpu lock name …
TEXT: dict[str, tuple[str, str]] = {
    "stuck_sample": (
        "stuck: {who} has been {doing} for at least {held:.1f} s{where}; {loop} waits for it in next()",
        "look at that line{for_index}: a read that never returns (a network file system, a remote store, a "
        "subprocess) or a wait without a timeout. Give it a timeout, or pass DataLoader(timeout=S) so torch raises "
        "instead of hanging"),
    "busy_loop": (
        "stuck in a busy loop: {who} has been {doing} for at least {held:.1f} s, running on the CPU in every sample "
        "({cpu:.0%} of a core){where}",
        "that code does not finish{for_index}: check the loop's exit condition with that sample"),
    "fork_lock": (
        "stuck on a lock {likely}held at fork: {who} has waited at least {held:.1f} s for {lock}{where}, {doing}. "
        "{why}; the worker's copy of that lock is never released (the classic logging / OpenMP / OpenCV deadlock)",
        "start the workers with DataLoader(multiprocessing_context=\"spawn\") (or \"forkserver\"), or create the "
        "lock in the worker (worker_init_fn); for OpenCV call cv2.setNumThreads(0) in worker_init_fn"),
    "self_deadlock": (
        "deadlock: {who} has waited at least {held:.1f} s for {lock}{where}, {doing}, which its own thread "
        "{holds}: it took it at {taken}. A threading.Lock is not reentrant: the worker waits for itself, for ever",
        "do not take {lock} again while holding it: release it before that call, or make it a threading.RLock "
        "(reentrant). Starting the workers another way (spawn) would not help"),
    "lock": (
        "stuck on a lock: {who} has waited at least {held:.1f} s for {lock}{where}, {doing}{holder}",
        "{find}"),
    # Python resets its global import lock in a forked child, not the lock of each module being imported
    "import_fork_lock": (
        "stuck on an import held at fork: {who} has waited at least {held:.1f} s to import {module}{where}, "
        "{doing}. Another thread of the main process was importing {module} when the worker was forked; the "
        "worker's copy of that module's import lock is never released",
        "import {module} in the main thread before the loader starts its workers (before the first iter(loader)), "
        "so that no other thread is importing it at fork; or start the workers with "
        "DataLoader(multiprocessing_context=\"spawn\") (or \"forkserver\")"),
    "import_lock": (
        "stuck on an import: {who} has waited at least {held:.1f} s to import {module}{where}, {doing}, which "
        "another thread of the worker is importing",
        "that thread's import of {module} waits for something: `py-spy dump --pid {pid}` shows every thread"),
    "collate": (
        "stuck in collate: {who} has been collating {task}{samples} for at least {held:.1f} s{where}",
        "look at collate_fn with those samples: it loops or waits"),
    "init": (
        "stuck in worker_init_fn: {who} has been starting for at least {held:.1f} s{where}",
        "worker_init_fn runs once per worker before any sample: make it return (no waits on the main process)"),
    "stopped": (
        "{who} is stopped (state T in /proc: SIGSTOP, Ctrl-Z or a debugger){holding}{where}; {loop} waits for it "
        "in next()",
        "resume it with `kill -CONT {pid}`, or detach the debugger that holds it"),
    "dead_worker": (
        "{who} has exited ({how}) and nobody reaped it; {loop} waits in next()",
        "a worker killed by SIGKILL is usually the OOM killer (check `dmesg`); SIGBUS usually means /dev/shm is "
        "full. Torch's SIGCHLD handler normally raises here: if it did not, the main process is blocked elsewhere"),
    "all_idle": (
        "every worker is idle on its index queue while {loop} has waited in next() for at least {held:.1f} s: the "
        "task it waits for is in no worker (lost with a worker that died, or never sent)",
        "look for a worker that died (dmesg: the OOM killer) and for a sampler or IterableDataset that yields "
        "nothing more on some worker; DataLoader(timeout=S) makes torch raise instead of waiting for ever"),
    "blocked_put": (
        "{who} has been blocked for at least {held:.1f} s writing its result to the main process{reader}",
        "the result pipe is full: the main process must read (not block in its training step while the loader "
        "is alive); if /dev/shm is full (df -h /dev/shm), enlarge it (docker --shm-size) or call "
        "torch.multiprocessing.set_sharing_strategy('file_system')"),
    "uneven": (
        "uneven inputs: this rank's DataLoader has nothing in flight and its training thread has waited at least "
        "{held:.1f} s in {name}{where}: this rank has run out of batches and waits for a rank that still has some "
        "(or is stuck), not for data",
        "give every rank the same number of batches (DistributedSampler pads map-style shards to equal length; "
        "an IterableDataset must stop every rank at the shortest shard) or wrap the loop in "
        "torch.distributed.algorithms.join.Join; run `loaderscope doctor --job PID` on the job's parent to see "
        "the other ranks"),
    "ddp_backward": (
        "likely waiting for another rank in the gradient all-reduce: the training thread has been inside "
        "backward() for at least {held:.1f} s{where}, and {evidence}, which all-reduces the gradients with every "
        "rank there (from C++ hooks, which the Python stack does not show); a rank that has stopped training (run "
        "out of batches, or stuck) holds it, not the DataLoader",
        "run `loaderscope doctor --job PID` on the job's parent (torchrun's agent) to see the rank that is "
        "elsewhere. If it has run out of batches (uneven inputs), wrap the loop in `with model.join():` "
        "(torch.distributed.algorithms.join.Join), or give every rank the same number of batches: "
        "DistributedSampler(drop_last=True), DataLoader(drop_last=True)"),
    "collective": (
        "not a DataLoader problem: this rank waits for another rank, not for data: the training thread has been "
        "in {name} for at least {held:.1f} s{where}",
        "run `loaderscope doctor --job PID` on the job's parent (torchrun's agent) to see which rank does not "
        "join, and why"),
    "shutdown": (
        "the training thread has been in torch's _shutdown_workers for at least {held:.1f} s (an epoch's end): "
        "it joins workers that do not exit{busy}",
        "a worker that does not exit is still in user code (see its stack); persistent_workers=True avoids "
        "shutting the workers down at every epoch"),
    "pin": (
        "the training thread has been pinning a batch (pin_memory) for at least {held:.1f} s{where}",
        "pinning needs the accelerator's driver: check it answers (nvidia-smi); try pin_memory=False"),
    "pin_thread": (
        "the pin-memory thread has been pinning one batch for at least {held:.1f} s{where}; {loop} waits for it "
        "in next()",
        "pinning needs the accelerator's driver: check it answers (nvidia-smi); try pin_memory=False"),
    "in_process": (
        "stuck: the main process (num_workers=0) has been fetching{sample} for at least {held:.1f} s{where}",
        "look at that line{for_index}: a read that never returns, or a wait without a timeout"),
    "starting": (
        "the DataLoader has been starting (iter(loader)) for at least {held:.1f} s{where}",
        "starting workers that do not come up: with spawn or forkserver the dataset must pickle and the script "
        "must be guarded by `if __name__ == \"__main__\":`"),
    "moving": (
        "slow but moving, not a hang: over {duration:.1f} s {moved}",
        "loading is slow, not stuck: `loaderscope record -- python train.py` records the run and says where the "
        "time goes"),
    "not_loader": (
        "not a DataLoader problem: the training thread has been in {name} for at least {held:.1f} s{where}",
        "the loader is waiting for the training loop, not the other way round: look at that line"),
    "no_loader": (
        "no DataLoader in process {pid}: no worker process and no torch.utils.data frame; its main thread is in "
        "{name}{where}",
        "give the PID of the process that iterates the DataLoader (its workers are its children), or the "
        "agent's PID with --job for torchrun"),
}

JOIN_ADVICE = ("wrap the training loop in `with model.join():` (torch.distributed.algorithms.join.Join), so that a "
               "rank that has run out of batches joins the others' all-reduces; or give every rank the same number "
               "of batches: DistributedSampler(drop_last=True), DataLoader(drop_last=True), an IterableDataset that "
               "stops every rank at the shortest shard")


@dataclass
class Verdict:
    cause: str
    text: str
    advice: str
    worker: int | None = None
    pid: int | None = None
    task: int | None = None
    indices: list[int] | None = None
    sample: int | None = None
    where: dict[str, Any] | None = None  # the user's frame: file, line, function, code
    details: list[str] = field(default_factory=list)  # one line per worker and the training thread

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _where(stack: list[dict[str, Any]]) -> str:
    # else the innermost frame with a source line: importlib's own (<frozen importlib._bootstrap>) have none
    f = user_frame(stack) or next((f for f in reversed(stack) if not f["file"].startswith("<frozen")),
                                  stack[-1] if stack else None)
    return f" at {_at(f)}: {f.get('code') or '?'}" if f is not None else ""


def _at(f: dict[str, Any]) -> str:
    line = f["line"] if f["line"] is not None else "?"
    return f"{str(f['file']).rsplit('/', 1)[-1]}:{line} in {short(f['function'])}"


def _sample(act: Activity) -> str:
    if act.sample is None:
        return ""
    pos = act.indices.index(act.sample) if act.indices and act.sample in act.indices else None
    return f", sample {pos + 1} (index {act.sample})" if pos is not None else f", sample index {act.sample}"


def _task(act: Activity) -> str:
    return f"task {act.task}" if act.task is not None else "a task"


def _doing(act: Activity) -> str:
    """What a blocked worker was at: the task it fetches, else where in its start."""
    loop = (act.stack[0].get("code") if act.stack else None) or ""
    if act.task is not None or act.indices is not None or act.sample is not None or "fetch(" in loop:
        return f"fetching {_task(act)}{_sample(act)}"
    return "in worker_init_fn" if "init_fn(" in loop else "while starting, before its first task"


def _for_index(act: Activity) -> str:
    if act.sample is not None:
        return f" for sample index {act.sample}"
    return f" for the samples {act.indices}" if act.indices else ""


def _who(w: Worker) -> str:
    return f"worker {w.worker} (pid {w.pid})" if w.worker is not None else f"a worker (pid {w.pid})"


def _loop(p: Picture) -> str:
    """Who calls next(): the training loop, or the thread that iterates the DataLoader for it."""
    return f"thread \"{p.training.thread}\" (it iterates the DataLoader)" if p.training.thread else "the training loop"


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "its exit status unreadable"
    return f"killed by signal {-exitcode}" if exitcode < 0 else f"exit code {exitcode}"


def _frame(stack: list[dict[str, Any]]) -> dict[str, Any] | None:
    f = user_frame(stack)
    return {k: f[k] for k in ("file", "line", "function", "code")} if f else None


def _say(cause: str, **fields: Any) -> tuple[str, str]:
    what, todo = TEXT[cause]
    return what.format(**fields), todo.format(**fields)


def _about(cause: str, p: Picture, w: Worker, **extra: Any) -> Verdict:
    act = w.now
    fields = {"who": _who(w), "pid": w.pid, "task": _task(act), "held": w.held, "doing": _doing(act),
              "where": _where(act.stack), "for_index": _for_index(act), "cpu": w.cpu or 0.0, "loop": _loop(p)} | extra
    text, advice = _say(cause, **fields)
    return Verdict(cause, text, advice, w.worker, w.pid, act.task, act.indices, act.sample, _frame(act.stack))


def _lock(lw: LockWait | None) -> str:
    return f"`{lw.lock}`" if lw is not None and lw.lock else "a lock"


def _lock_verdict(p: Picture, w: Worker) -> Verdict:
    """A worker asleep taking a lock: a deadlock on itself, a lock another of its threads holds, or
    one held at fork (no thread of the worker holds it, and it was forked)."""
    lw, forked = w.now.lock, w.start_method == "fork"
    lock = _lock(lw)
    if lw is not None and lw.at is not None and lw.holder == "self":
        holds = "holds" if lw.sure else f"likely holds (a `with {lw.lock}:` of the same name; the stack does not say " \
            "whether the same object)"
        return _about("self_deadlock", p, w, lock=lock, holds=holds, taken=f"{_at({**lw.at, 'line': lw.taken})}")
    if lw is not None and lw.at is not None and lw.holder == "thread":
        same = "" if lw.sure else "likely "
        holder = (f"; its thread \"{lw.thread}\" {same}holds it, inside `with {lw.lock}:` "
                  f"at {_at({**lw.at, 'line': lw.taken})}")
        find = f"look at what thread \"{lw.thread}\" does while it holds {lock} (`py-spy dump --pid {w.pid}`)"
        return _about("lock", p, w, lock=lock, holder=holder, find=find)
    if forked:
        if lw is not None and lw.holder == "absent":
            why = ("No thread of the worker holds it (none runs your code but this one, whose stack is in no "
                   f"`with {lw.lock}:`), so another thread of the main process held it when the worker was forked")
            return _about("fork_lock", p, w, lock=lock, likely="", why=why)
        why = ("No thread of the worker shows it holding it (one could, without a `with` block), so another thread of "
               "the main process likely held it when the worker was forked")
        return _about("fork_lock", p, w, lock=lock, likely="likely ", why=why)
    return _about("lock", p, w, lock=lock, holder="",
                  find="find who holds that lock: another thread of the worker, or another process sharing it")


def describe_worker(w: Worker) -> str:
    """One line per worker for the report."""
    act = w.now
    doing = {"idle": "idle on its index queue", "fetching": f"fetching {_task(act)}{_sample(act)}",
             "collate": f"collating {_task(act)}", "init": "in worker_init_fn",
             "put": f"putting {_task(act)}'s result on the result queue",
             "lock": f"{f'waiting to import {act.module}' if act.module else f'waiting for {_lock(act.lock)}'}, "
                     f"{_doing(act)}",
             "starting": "starting", "stopped": "stopped (state T)",
             "zombie": f"exited ({_how(w.exitcode)}), not reaped"}
    text = f"{_who(w)}: {doing.get(act.state, act.state)}"
    if act.state in ("fetching", "collate", "init", "lock", "stopped"):
        text += _where(act.stack)
    if act.writing:
        text += "; its result is stuck in the pipe to the main process"
    return f"{text} ({_how_long(w.held, w.steady, w.asleep)}{f', {w.cpu:.0%} CPU' if w.cpu is not None else ''})"


def _how_long(held: float, steady: bool, asleep: float | None) -> str:
    """"for at least 412.3 s, asleep all that time (/proc)": the kernel's account when it says more
    than the samples."""
    since = ", asleep all that time (the kernel's scheduler, /proc)" if asleep is not None and asleep >= held else ""
    return f"{'for at least ' if steady else 'for '}{held:.1f} s{since}"


def _busy(p: Picture) -> list[Worker]:
    """Workers held on one task in every sample, the oldest task first (the one next() waits for)."""
    busy = [w for w in p.workers if w.steady and w.now.state in ("fetching", "collate", "init", "lock", "stopped")]
    return sorted(busy, key=lambda w: (w.now.task is None, w.now.task or 0))


def decide(p: Picture) -> Verdict:
    """The cause, most specific first; never one the samples do not show."""
    tr = p.training
    base = {"held": tr.held, "where": _where(tr.stack), "name": _name(tr.detail), "pid": p.pid, "loop": _loop(p)}
    verdict = _decide(p, base)
    verdict.details = [_training_line(p), *(describe_worker(w) for w in p.workers)]
    if tr.main is not None:
        verdict.details.insert(1, f"main thread: {_where(tr.main).removeprefix(' ') or 'no Python frame'}")
    return verdict


def _name(detail: str) -> str:
    return detail if detail and detail != "?" else "an unnamed place"


def _training_line(p: Picture) -> str:
    tr = p.training
    places = {"next": "in next(), waiting for data (torch's _next_data)",
              "in_process": "loading in next() (num_workers=0)",
              "shutdown": "in _shutdown_workers", "pin": "in pin_memory",
              "collective": f"in the collective {tr.detail}",
              "backward": "in backward()", "starting": "starting the DataLoader",
              "step": f"in {_name(tr.detail)}, outside the DataLoader"}
    who = f"thread \"{tr.thread}\" (it iterates the DataLoader)" if tr.thread else "training thread"
    return f"{who}: {places.get(tr.place, tr.place)}{_where(tr.stack)} ({_how_long(tr.held, tr.steady, tr.asleep)})"


def _decide(p: Picture, base: dict[str, Any]) -> Verdict:
    tr = p.training
    if tr.place == "collective":
        idle = not any(w.now.state not in ("idle", "zombie") for w in p.workers)
        cause = "uneven" if p.has_loader and idle else "collective"
        return Verdict(cause, *_say(cause, **base), where=_frame(tr.stack))
    if tr.place == "backward" and tr.steady and (p.gradient_sync or (p.world_size or 0) > 1):
        evidence = p.gradient_sync or f"the job has {p.world_size} ranks ($WORLD_SIZE): a DistributedDataParallel model"
        return Verdict("ddp_backward", *_say("ddp_backward", evidence=evidence, **base), where=_frame(tr.stack))
    if not p.has_loader:
        return Verdict("no_loader", *_say("no_loader", **base), pid=p.pid, where=_frame(tr.stack))
    moved = len(set(tr.places_seen)) > 1  # the training loop got a batch, whatever a worker holds
    if (moved or (p.moving and not _busy(p))) and tr.place in ("next", "step", "pin", "in_process", "backward"):
        return Verdict("moving", *_say("moving", duration=p.duration, moved=_moved(p)))
    writers = [w for w in p.workers if w.now.writing and w.steady]
    if tr.place == "next":
        return _waiting(p, base)
    if tr.place == "in_process" and tr.loading is not None:
        act = tr.loading
        v = _say("in_process", sample=_sample(act), held=tr.held, where=_where(tr.stack), for_index=_for_index(act))
        return Verdict("in_process", *v, task=None, indices=act.indices, sample=act.sample, where=_frame(tr.stack))
    if tr.place == "shutdown":
        busy = _busy(p)
        extra = f"; {describe_worker(busy[0])}" if busy else ""
        return Verdict("shutdown", *_say("shutdown", busy=extra, **base))
    if writers:
        reader = f": the main process is not reading (its training thread is in {_name(tr.detail)}{_where(tr.stack)})"
        return _about("blocked_put", p, writers[0], reader=reader)
    if tr.place in ("pin", "starting"):
        return Verdict(tr.place, *_say(tr.place, **base), where=_frame(tr.stack))
    return Verdict("not_loader", *_say("not_loader", **base), where=_frame(tr.stack))


def _moved(p: Picture) -> str:
    """What moved over the samples: the tasks the workers went through, the training loop's batches."""
    tasks = sorted({t for w in p.workers for t in w.tasks_seen})
    tr = p.training
    parts = [f"the workers went through tasks {tasks[0]}–{tasks[-1]}"] if len(tasks) > 1 else []
    waiting = sum(place in ("next", "in_process") for place in tr.places_seen)
    if len(set(tr.places_seen)) > 1:
        parts.append(f"{_loop(p)} got batches: it was in next() in {waiting} of {p.samples} samples")
    else:
        parts.append(f"{_loop(p)} waited in next() in {waiting} of {p.samples} samples")
    return ", and ".join(parts)


def _waiting(p: Picture, base: dict[str, Any]) -> Verdict:
    """The training loop waits in next(): which worker holds it up, and how."""
    for w in p.workers:
        if w.now.state == "zombie":
            return _about("dead_worker", p, w, how=_how(w.exitcode))
    if p.pinning is not None:
        v = _say("pin_thread", held=p.duration, where=_where(p.pinning), loop=_loop(p))
        return Verdict("pin_thread", *v, where=_frame(p.pinning))
    busy = _busy(p)
    if busy:
        w = busy[0]
        state = w.now.state
        if state == "stopped":
            holding = f" holding {_task(w.now)}{_sample(w.now)}" if w.now.task is not None else ""
            return _about("stopped", p, w, holding=holding)
        if state == "lock" and w.now.module is not None:
            return _about("import_fork_lock" if w.start_method == "fork" else "import_lock", p, w, module=w.now.module)
        if state == "lock":
            return _lock_verdict(p, w)
        if state == "collate":
            return _about("collate", p, w, samples=f" (samples {w.now.indices})" if w.now.indices else "")
        if state == "init":
            return _about("init", p, w)
        if w.running or (w.cpu is not None and w.cpu >= BUSY_CPU):
            return _about("busy_loop", p, w)
        return _about("stuck_sample", p, w)
    writers = [w for w in p.workers if w.now.writing and w.steady]
    if writers:
        return _about("blocked_put", p, writers[0], reader=" (/dev/shm full, or a result too large for the pipe "
                      "while the main process reads slowly)")
    if p.workers and all(w.now.state == "idle" and w.steady for w in p.workers) and p.training.steady:
        return Verdict("all_idle", *_say("all_idle", **base))
    return Verdict("not_loader", *_say("not_loader", **base), where=_frame(p.training.stack))


Rank = tuple[int, int, Picture, Verdict]  # rank, pid, picture, verdict


def decide_job(ranks: list[Rank]) -> tuple[str, str | None, int | None]:
    """One sentence for a job of ranks, what to do, and the rank it names: the rank that ran out of
    batches while others wait for it in backward's all-reduce (DDP's uneven inputs), else the rank
    not in the collective the others wait in."""
    waiting = [(r, pid, p, v) for r, pid, p, v in ranks if p.training.place == "collective"]
    backward = [(r, pid, p, v) for r, pid, p, v in ranks if v.cause == "ddp_backward"]
    if backward and waiting:
        return _uneven_ddp(waiting, backward)
    others = [(r, pid, v) for r, pid, p, v in ranks if p.training.place != "collective"]
    if waiting and others:
        names = sorted({p.training.detail for _, _, p, _ in waiting})
        r, pid, v = others[0]
        who = ", ".join(str(rank) for rank, _, _, _ in waiting)
        return (f"rank {r} (pid {pid}) is not in the collective that rank(s) {who} wait in ({', '.join(names)}): "
                f"{v.text}"), v.advice, r
    if waiting:
        each = "; ".join(f"rank {r}: {p.training.detail}" for r, _, p, _ in waiting)
        return (f"every rank waits in a collective ({each}): they wait for each other or for a rank outside this job",
                None, None)
    return "no rank waits in a collective: each rank's own verdict follows", None, None


def _uneven_ddp(waiting: list[Rank], backward: list[Rank]) -> tuple[str, str, int]:
    """DDP's uneven inputs: a rank left the training loop (it waits in another collective) while the
    others wait for it in backward's gradient all-reduce, which it no longer joins."""
    r, pid, p, v = waiting[0]
    out = "has run out of batches (its DataLoader has nothing in flight)" if v.cause == "uneven" else \
        "has left the training loop"
    b, _, bp, _ = backward[0]
    evidence = bp.gradient_sync or f"$WORLD_SIZE is {bp.world_size}"
    more = "".join(f", rank {other}" for other, _, _, _ in backward[1:])
    line = (f"DDP uneven inputs: rank {r} (pid {pid}) {out} and waits in "
            f"{p.training.detail}{_where(p.training.stack)}, "
            f"while rank {b}{more} waits for it inside backward(){_where(bp.training.stack)}, likely in the gradient "
            f"all-reduce ({evidence}), which rank {r} no longer joins")
    return line, JOIN_ADVICE, r
