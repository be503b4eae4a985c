"""A doctor's picture as a loaderscope trace: the page and ``serve --open`` show it frozen.

Only what the samples saw becomes an event: a worker's lane, the task it holds since it was first
seen on it (``fetch_start``), its stack (``worker_stuck``), the training thread's wait
(``consumer_stuck``) and the verdict (``doctor_verdict``). No ``dispatch`` is made up: the samples do
not show when torch sent a task, and an invented one would break the protocol's counters.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from loaderscope.doctor.model import Picture, plain
from loaderscope.doctor.verdict import Verdict
from loaderscope.events import Event, Kind, to_json
from loaderscope.traces.jsonl import header

_HOLDING = ("fetching", "collate", "lock", "stopped", "put")


def events(p: Picture, v: Verdict, rank: int = 0, job: str | None = None) -> list[Event]:
    """The picture as events, in time order, ``t`` in seconds from the first sample."""
    end = round(p.duration, 6)
    workers = [w for w in p.workers if w.worker is not None]
    out: list[Event] = [{"t": 0.0, "kind": Kind.RUN_START, "mode": "doctor", "name": f"doctor {p.pid}", "pid": p.pid,
                         "config": {"num_workers": len(workers), "multiprocessing_context": p.start_method},
                         "snapshot": True}]
    out += [{"t": 0.0, "kind": Kind.WORKER_START, "worker": w.worker, "pid": w.pid} for w in workers]
    late: list[Event] = []
    for w in workers:
        act = w.now
        if act.state == "zombie":
            late.append({"t": end, "kind": Kind.WORKER_DIED, "worker": w.worker, "pid": w.pid, "exitcode": w.exitcode})
        if act.state not in _HOLDING or act.task is None:
            continue
        out.append({"t": max(0.0, round(end - w.held, 6)), "kind": Kind.FETCH_START, "idx": act.task,
                    "worker": w.worker, "n": len(act.indices or [])})
        if w.steady:
            stuck: Event = {"t": end, "kind": Kind.WORKER_STUCK, "worker": w.worker, "idx": act.task,
                            "elapsed": round(w.held, 6), "threshold": round(w.held, 6), "pid": w.pid,
                            "stack": plain(act.stack), "state": act.state}
            if act.sample is not None:
                stuck["sample"] = act.sample
                if act.indices and act.sample in act.indices:
                    stuck["pos"] = act.indices.index(act.sample)
            late.append(stuck)
    out.sort(key=lambda e: e["t"])
    if p.memory:  # before a death's note, which takes the dead worker's last memory from it
        out.append({"t": end, "kind": Kind.MEMORY, "source": "smaps_rollup", "procs": p.memory, **(p.host or {})})
    tr = p.training
    if tr.place in ("next", "in_process") and tr.steady:
        late.append({"t": end, "kind": Kind.CONSUMER_STUCK, "elapsed": round(tr.held, 6),
                     "threshold": round(tr.held, 6), "stack": plain(tr.stack),
                     "waiting_for": v.task if v.worker is not None else None, "held_by": v.worker})
    late.append({"t": end, "kind": Kind.DOCTOR_VERDICT, "text": v.text, "cause": v.cause, "advice": v.advice,
                 "worker": v.worker, "idx": v.task, "sample": v.sample, "indices": v.indices, "where": v.where,
                 "details": v.details, "pid": p.pid, "samples": p.samples, "duration": round(p.duration, 6),
                 "training": tr.place, "job": job})
    late.append({"t": end, "kind": Kind.RUN_END, "reason": "stopped"})
    return [dict(e, seq=i, rank=rank) for i, e in enumerate(out + late)]


def write(path: str | Path, p: Picture, v: Verdict, rank: int = 0, job: str | None = None) -> Path:
    """Write the snapshot trace; its header says it is one (``mode: "doctor"``).

    doctor may run as root in a directory others can write: the trace goes to a new file beside
    ``path`` (``O_CREAT | O_EXCL | O_NOFOLLOW``, a random name) that is then renamed onto ``path``.
    Whatever ``path`` was (a symlink or hard link another user planted), only that name is replaced,
    never the file it led to.

    Raises:
        OSError: the directory does not exist or cannot be written, or ``path`` is a directory.
    """
    target = Path(path)
    head = header(f"doctor-{p.pid}", mode="doctor", doctor={"pid": p.pid, "cause": v.cause})
    body = b"".join(to_json(item) + b"\n" for item in [head, *events(p, v, rank, job)])
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)  # a name only: unlink never follows a link
        raise
    return target


def as_json(p: Picture, v: Verdict) -> dict[str, Any]:
    """What ``--json`` prints for one process."""
    tr = p.training
    return {"pid": p.pid, "samples": p.samples, "duration": round(p.duration, 3), "verdict": v.as_dict(),
            "training": {"place": tr.place, "detail": tr.detail, "held": round(tr.held, 3), "steady": tr.steady,
                         "thread": tr.thread, "asleep": _rounded(tr.asleep), "stack": plain(tr.stack)},
            "workers": [{"worker": w.worker, "pid": w.pid, "state": w.now.state, "task": w.now.task,
                         "indices": w.now.indices, "sample": w.now.sample, "held": round(w.held, 3),
                         "steady": w.steady, "asleep": _rounded(w.asleep), "cpu": w.cpu, "writing": w.now.writing,
                         "exitcode": w.exitcode, "stack": plain(w.now.stack)} for w in p.workers],
            "start_method": p.start_method, "moving": p.moving, "paused_s": 0.0, "memory": p.memory,
            "host": p.host}


def _rounded(seconds: float | None) -> float | None:
    return round(seconds, 3) if seconds is not None else None
