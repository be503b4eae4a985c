"""The cause of a hang in plain words, from the picture ``model.build`` made. Pure.

The sentences follow the live diagnosis (``diagnosis.py``): "stuck: worker 1 has been fetching task
3, sample 2 (index 13) … at data.py:7 in __getitem__: …". They live in one table (``TEXT``), each
with what to do about it, so that their wording can be read and changed in one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from loaderscope.doctor.model import Activity, Picture, Worker, short, user_frame

# A worker on the same lines in every sample that runs (state R every time, or over half a core) is
# looping, not waiting: on a busy machine its share of a core says less than its state.
BUSY_CPU = 0.5

# cause: (what it is, what to do). Fields: worker pid task sample where held cpu name how tasks …
TEXT: dict[str, tuple[str, str]] = {
    "stuck_sample": (
        "stuck: worker {worker} (pid {pid}) has been fetching task {task}{sample} for at least {held:.1f} s{where}; "
        "the training loop waits for it in next()",
        "look at that line for sample index {index}: a read that never returns (a network file system, a remote "
        "store, a subprocess) or a wait without a timeout. Give it a timeout, or pass DataLoader(timeout=S) so "
        "torch raises instead of hanging"),
    "busy_loop": (
        "stuck in a busy loop: worker {worker} (pid {pid}) has been fetching task {task}{sample} for at least "
        "{held:.1f} s, running on the CPU in every sample ({cpu:.0%} of a core){where}",
        "that code never finishes for sample index {index}: check the loop's exit condition with that sample"),
    "fork_lock": (
        "stuck on a lock held at fork: worker {worker} (pid {pid}) has waited at least {held:.1f} s for a lock"
        "{where}, {doing}. The worker was started by fork while another thread of the main process held that "
        "lock; the worker's copy of it is never released (the classic logging / OpenMP / OpenCV deadlock)",
        "start the workers with DataLoader(multiprocessing_context=\"spawn\") (or \"forkserver\"), or create the "
        "lock in the worker (worker_init_fn); for OpenCV call cv2.setNumThreads(0) in worker_init_fn"),
    "lock": (
        "stuck on a lock: worker {worker} (pid {pid}) has waited at least {held:.1f} s for a lock{where}, {doing}",
        "find who holds that lock: another thread of the worker, or another process sharing it"),
    # Python resets its global import lock in a forked child, not the lock of each module being imported
    "import_fork_lock": (
        "stuck on an import held at fork: worker {worker} (pid {pid}) has waited at least {held:.1f} s to import "
        "{module}{where}, {doing}. Another thread of the main process was importing {module} when the worker was "
        "forked; the worker's copy of that module's import lock is never released",
        "import {module} in the main thread before the loader starts its workers (before the first iter(loader)), "
        "so that no other thread is importing it at fork; or start the workers with "
        "DataLoader(multiprocessing_context=\"spawn\") (or \"forkserver\")"),
    "import_lock": (
        "stuck on an import: worker {worker} (pid {pid}) has waited at least {held:.1f} s to import {module}"
        "{where}, {doing}, which another thread of the worker is importing",
        "that thread's import of {module} waits for something: `py-spy dump --pid {pid}` shows every thread"),
    "collate": (
        "stuck in collate: worker {worker} (pid {pid}) has been collating task {task} (samples {indices}) for at "
        "least {held:.1f} s{where}",
        "look at collate_fn with those samples: it loops or waits"),
    "init": (
        "stuck in worker_init_fn: worker {worker} (pid {pid}) has been starting for at least {held:.1f} s{where}",
        "worker_init_fn runs once per worker before any sample: make it return (no waits on the main process)"),
    "stopped": (
        "worker {worker} (pid {pid}) is stopped (state T in /proc: SIGSTOP, Ctrl-Z or a debugger){holding}{where}; "
        "the training loop waits for it in next()",
        "resume it with `kill -CONT {pid}`, or detach the debugger that holds it"),
    "dead_worker": (
        "worker {worker} (pid {pid}) has exited ({how}) and nobody reaped it{holding}; the training loop waits in "
        "next()",
        "a worker killed by SIGKILL is usually the OOM killer (check `dmesg`); SIGBUS usually means /dev/shm is "
        "full. Torch's SIGCHLD handler normally raises here: if it did not, the main process is blocked elsewhere"),
    "all_idle": (
        "every worker is idle on its index queue while the training loop has waited in next() for at least "
        "{held:.1f} s: the task it waits for is in no worker (lost with a worker that died, or never sent)",
        "look for a worker that died (dmesg: the OOM killer) and for a sampler or IterableDataset that yields "
        "nothing more on some worker; DataLoader(timeout=S) makes torch raise instead of waiting for ever"),
    "blocked_put": (
        "worker {worker} (pid {pid}) has been blocked for at least {held:.1f} s writing its result to the main "
        "process{reader}",
        "the result pipe is full: the main process must read (not block in its training step while the loader "
        "is alive); if /dev/shm is full (df -h /dev/shm), enlarge it (docker --shm-size) or call "
        "torch.multiprocessing.set_sharing_strategy('file_system')"),
    "uneven": (
        "uneven inputs: this rank's DataLoader has nothing in flight and its training thread has waited at least "
        "{held:.1f} s in {name}{where}: it waits for another rank that is still loading, not for data",
        "give every rank the same number of batches (DistributedSampler pads map-style shards to equal length; "
        "an IterableDataset must stop every rank at the shortest shard) or wrap the loop in "
        "torch.distributed.algorithms.join.Join; run `loaderscope doctor --job PID` on the job's parent to see "
        "the rank that is missing"),
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
        "the pin-memory thread has been pinning one batch for at least {held:.1f} s{where}; the training loop "
        "waits for it in next()",
        "pinning needs the accelerator's driver: check it answers (nvidia-smi); try pin_memory=False"),
    "in_process": (
        "stuck: the main process (num_workers=0) has been fetching{sample} for at least {held:.1f} s{where}",
        "look at that line for sample index {index}: a read that never returns, or a wait without a timeout"),
    "starting": (
        "the DataLoader has been starting (iter(loader)) for at least {held:.1f} s{where}",
        "starting workers that do not come up: with spawn or forkserver the dataset must pickle and the script "
        "must be guarded by `if __name__ == \"__main__\":`"),
    "moving": (
        "slow but moving, not a hang: over {duration:.1f} s the workers went through tasks {tasks}, and the "
        "training loop waited in next() in {waiting} of {samples} samples",
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
    if f is None:
        return ""
    return f" at {str(f['file']).rsplit('/', 1)[-1]}:{f['line']} in {short(f['function'])}: {f.get('code') or '?'}"


def _sample(act: Activity) -> str:
    if act.sample is None:
        return ""
    pos = act.indices.index(act.sample) if act.indices and act.sample in act.indices else None
    return f", sample {pos + 1} (index {act.sample})" if pos is not None else f", sample index {act.sample}"


def _doing(act: Activity) -> str:
    """What a blocked worker was at: the task it fetches, else where in its start."""
    if act.task is not None:
        return f"fetching task {act.task}{_sample(act)}"
    loop = (act.stack[0].get("code") if act.stack else None) or ""
    return "in worker_init_fn" if "init_fn(" in loop else "while starting, before its first task"


def _frame(stack: list[dict[str, Any]]) -> dict[str, Any] | None:
    f = user_frame(stack)
    return {k: f[k] for k in ("file", "line", "function", "code")} if f else None


def _say(cause: str, **fields: Any) -> tuple[str, str]:
    what, todo = TEXT[cause]
    return what.format(**fields), todo.format(**fields)


def _about(cause: str, w: Worker, **extra: Any) -> Verdict:
    act = w.now
    fields = {"worker": w.worker, "pid": w.pid, "task": act.task, "sample": _sample(act), "held": w.held,
              "doing": _doing(act),
              "where": _where(act.stack), "index": act.sample if act.sample is not None else act.indices,
              "indices": act.indices, "cpu": w.cpu or 0.0} | extra
    text, advice = _say(cause, **fields)
    return Verdict(cause, text, advice, w.worker, w.pid, act.task, act.indices, act.sample, _frame(act.stack))


def describe_worker(w: Worker) -> str:
    """One line per worker for the report."""
    act = w.now
    doing = {"idle": "idle on its index queue", "fetching": f"fetching task {act.task}{_sample(act)}",
             "collate": f"collating task {act.task}", "init": "in worker_init_fn",
             "put": f"putting task {act.task}'s result on the result queue",
             "lock": f"{f'waiting to import {act.module}' if act.module else 'waiting for a lock'}, {_doing(act)}",
             "starting": "starting", "stopped": "stopped (state T)", "zombie": f"exited (exit code {w.exitcode}), not reaped"}
    text = f"worker {w.worker} (pid {w.pid}): {doing.get(act.state, act.state)}"
    if act.state in ("fetching", "collate", "init", "lock", "stopped"):
        text += _where(act.stack)
    if act.writing:
        text += "; its result is stuck in the pipe to the main process"
    cpu = f", {w.cpu:.0%} CPU" if w.cpu is not None else ""
    return f"{text} ({'for at least ' if w.steady else 'for '}{w.held:.1f} s{cpu})"


def _busy(p: Picture) -> list[Worker]:
    """Workers held on one task in every sample, the oldest task first (the one next() waits for)."""
    busy = [w for w in p.workers if w.steady and w.now.state in ("fetching", "collate", "init", "lock", "stopped")]
    return sorted(busy, key=lambda w: (w.now.task is None, w.now.task or 0))


def decide(p: Picture) -> Verdict:
    """The cause, most specific first; never one the samples do not show."""
    tr = p.training
    base = {"held": tr.held, "where": _where(tr.stack), "name": tr.detail, "pid": p.pid}
    verdict = _decide(p, base)
    verdict.details = [f"training thread: {_training_line(p)}", *(describe_worker(w) for w in p.workers)]
    return verdict


def _training_line(p: Picture) -> str:
    tr = p.training
    places = {"next": "in next(), waiting for data (torch's _next_data)", "in_process": "loading in next() (num_workers=0)",
              "shutdown": "in _shutdown_workers", "pin": "in pin_memory", "collective": f"in the collective {tr.detail}",
              "starting": "starting the DataLoader", "step": f"in {tr.detail}, outside the DataLoader"}
    return f"{places.get(tr.place, tr.place)}{_where(tr.stack)} ({'for at least ' if tr.steady else 'for '}{tr.held:.1f} s)"


def _decide(p: Picture, base: dict[str, Any]) -> Verdict:
    tr = p.training
    if tr.place == "collective":
        idle = not any(w.now.state not in ("idle", "zombie") for w in p.workers)
        cause = "uneven" if p.has_loader and idle else "collective"
        return Verdict(cause, *_say(cause, **base), where=_frame(tr.stack))
    if not p.has_loader:
        return Verdict("no_loader", *_say("no_loader", **base), pid=p.pid, where=_frame(tr.stack))
    if p.moving and not _busy(p) and tr.place in ("next", "step", "pin", "in_process"):
        tasks = sorted({t for w in p.workers for t in w.tasks_seen})
        span = f"{tasks[0]}–{tasks[-1]}" if tasks else "none"
        waiting = sum(place == "next" for place in tr.places_seen)
        return Verdict("moving", *_say("moving", duration=p.duration, tasks=span, waiting=waiting, samples=p.samples))
    writers = [w for w in p.workers if w.now.writing and w.steady]
    if tr.place == "next":
        return _waiting(p, base)
    if tr.place == "in_process" and tr.loading is not None:
        act = tr.loading
        v = _say("in_process", sample=_sample(act), held=tr.held, where=_where(tr.stack), index=act.sample)
        return Verdict("in_process", *v, task=None, indices=act.indices, sample=act.sample, where=_frame(tr.stack))
    if tr.place == "shutdown":
        busy = _busy(p)
        extra = f"; {describe_worker(busy[0])}" if busy else ""
        return Verdict("shutdown", *_say("shutdown", busy=extra, **base))
    if writers:
        reader = f": the main process is not reading (its training thread is in {tr.detail}{_where(tr.stack)})"
        return _about("blocked_put", writers[0], reader=reader)
    if tr.place in ("pin", "starting"):
        return Verdict(tr.place, *_say(tr.place, **base), where=_frame(tr.stack))
    return Verdict("not_loader", *_say("not_loader", **base), where=_frame(tr.stack))


def _waiting(p: Picture, base: dict[str, Any]) -> Verdict:
    """The training loop waits in next(): which worker holds it up, and how."""
    for w in p.workers:
        if w.now.state == "zombie":
            how = f"signal {-w.exitcode}" if w.exitcode is not None and w.exitcode < 0 else f"exit code {w.exitcode}"
            return _about("dead_worker", w, how=how, holding="")
    if p.pinning is not None:
        v = _say("pin_thread", held=p.duration, where=_where(p.pinning))
        return Verdict("pin_thread", *v, where=_frame(p.pinning))
    busy = _busy(p)
    if busy:
        w = busy[0]
        state = w.now.state
        if state == "stopped":
            holding = f" holding task {w.now.task}{_sample(w.now)}" if w.now.task is not None else ""
            return _about("stopped", w, holding=holding)
        if state == "lock":
            forked = w.start_method == "fork"
            if w.now.module is not None:
                return _about("import_fork_lock" if forked else "import_lock", w, module=w.now.module)
            return _about("fork_lock" if forked else "lock", w)
        if state in ("collate", "init"):
            return _about(state, w)
        if w.running or (w.cpu is not None and w.cpu >= BUSY_CPU):
            return _about("busy_loop", w)
        return _about("stuck_sample", w)
    writers = [w for w in p.workers if w.now.writing and w.steady]
    if writers:
        return _about("blocked_put", writers[0], reader=" (/dev/shm full, or a result too large for the pipe "
                      "while the main process reads slowly)")
    if p.workers and all(w.now.state == "idle" and w.steady for w in p.workers) and p.training.steady:
        return Verdict("all_idle", *_say("all_idle", **base))
    return Verdict("not_loader", *_say("not_loader", **base), where=_frame(p.training.stack))


def decide_job(ranks: list[tuple[int, int, Picture, Verdict]]) -> tuple[str, int | None]:
    """One sentence for a job of ranks (rank, pid, picture, verdict): the rank not in the collective the
    others wait in, and why; returns it with that rank."""
    waiting = [(r, p) for r, _, p, _ in ranks if p.training.place == "collective"]
    others = [(r, pid, v) for r, pid, p, v in ranks if p.training.place != "collective"]
    if waiting and others:
        names = sorted({p.training.detail for _, p in waiting})
        r, pid, v = others[0]
        who = ", ".join(str(rank) for rank, _ in waiting)
        return (f"rank {r} (pid {pid}) is not in the collective that rank(s) {who} wait in ({', '.join(names)}): "
                f"{v.text}"), r
    if waiting:
        each = "; ".join(f"rank {r}: {p.training.detail}" for r, p in waiting)
        return f"every rank waits in a collective ({each}): they wait for each other or for a rank outside this job", None
    return "no rank waits in a collective: each rank's own verdict follows", None
