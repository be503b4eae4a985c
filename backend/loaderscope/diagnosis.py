"""The diagnosis: what a loader's state means, in plain words, most important first.

Kept apart from the reducer (``state.py``) so that the rules of the protocol and the English that
explains a run can change independently; ``frontend/js/diagnosis.js`` mirrors it sentence by
sentence (frontend/tests/reducer.test.js compares the two on the same streams).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from loaderscope.events import Kind
from loaderscope.state import LoaderState, summary, user_frame
from loaderscope.wording import say

def _where(stack: list[dict[str, Any]] | None) -> str:
    frame = user_frame(stack)
    if frame is None:
        return ""
    name = str(frame.get("file", "?")).rsplit("/", 1)[-1]
    return f" at {name}:{frame.get('line')} in {frame.get('function')}: {frame.get('code') or '?'}"


def _sample(note: Mapping[str, Any]) -> str:
    if note.get("sample") is None:
        return ""
    return f", sample {note.get('pos', 0) + 1} (index {note['sample']})"


SHM_SIGNS = ("bus error", "unable to write to file", "no space left on device", "sigbus", "/dev/shm")


def _safely(describe: Callable[[Mapping[str, Any]], str | None], note: Mapping[str, Any]) -> str | None:
    """A note from a producer is data from outside: one with odd field types is listed as it is
    instead of failing the whole diagnosis (and the server's GET /api/runs/{id} with it)."""
    try:
        return describe(note)
    except (TypeError, ValueError, KeyError, AttributeError):
        return f"{note.get('kind')}: {dict(note)}"


def _note_finding(note: Mapping[str, Any]) -> str | None:
    kind = note["kind"]
    if kind == Kind.WORKER_DIED:
        how = note.get("signal") or f"exit code {note.get('exitcode')}"
        holding = f" while fetching task {note['idx']}{_sample(note)}" if note.get("idx") is not None else ""
        oom = " (SIGKILL is what the kernel's OOM killer sends: check memory)" if note.get("signal") == "SIGKILL" else ""
        shm = " (SIGBUS in a worker usually means /dev/shm is full: enlarge it or use file_system sharing)" \
            if note.get("signal") == "SIGBUS" else ""
        return f"worker {note['worker']} (pid {note.get('pid')}) died by {how}{holding}{oom}{shm}"
    if kind == Kind.WORKER_STUCK:
        return (f"stuck: worker {note['worker']} has been fetching task {note['idx']}{_sample(note)} for "
                f"{note['elapsed']:.1f} s (threshold {note.get('threshold', 0):.1f} s){_where(note.get('stack'))}")
    if kind == Kind.CONSUMER_STUCK:
        held = f" held by worker {note['held_by']}" if note.get("held_by") is not None else ""
        return (f"stuck: the training loop has waited {note['elapsed']:.1f} s inside next() for task "
                f"{note.get('waiting_for')}{held}{_where(note.get('stack'))}")
    if kind == Kind.TIMEOUT:
        busy = [f"worker {w['worker']} on task {w['idx']}{_sample(w)} for {w['elapsed']:.1f} s"
                for w in note.get("workers", []) if w.get("idx") is not None]
        doing = "; ".join(busy) if busy else "every worker was idle"
        return f"timeout: no batch arrived within {note['seconds']} s; at that moment {doing}"
    if kind == Kind.RUN_END:
        return f"the script died of {note['error']['type']}: {note['error']['message']}"
    if kind == Kind.EPOCH_RESUME:
        return (f"epoch {note['epoch']} resumed from a checkpoint at batch {note['batch']} (load_state_dict); "
                f"{note.get('replayed', 0)} batch(es) were fetched again to restore it")
    if kind == Kind.PROBE_ERROR:
        return (f"loaderscope's probe failed in {note['where']} ({note['type']}: {note['message']}); training went "
                "on, but this run may miss events")
    return None


PICKLE_HEAVY_BYTES = 1_000_000  # pickled bytes per batch worth a finding
MIN_STEP = 0.002  # below this the "step" is only loop overhead: no worker count would keep up
INPUT_BOUND = 0.2  # waiting for data more than this share of the time makes loading the bottleneck


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _input_bound_finding(stats: Mapping[str, Any], workers: int) -> str:
    share, rate, steady = stats["input_bound"], stats["epoch_batches_per_s"], stats["input_bound_steady"]
    step = stats["step_time"]  # the training loop's own time per batch, within epochs
    startup = say("waited.startup", startup=f"{stats['startup_wait']:.2f}") if stats["startup_wait"] >= 0.05 else ""
    text = say("waited", share=f"{share:.0%}", wait=f"{stats['consumer_wait']:.2f}", wall=f"{stats['epoch_wall']:.2f}",
               startup=startup)
    if stats["between_epochs"] >= 0.05:
        text += say("waited.outside", outside=f"{stats['between_epochs']:.2f}")
    if steady <= INPUT_BOUND:
        after = say("step_bound.after", steady=f"{steady:.0%}") if share > INPUT_BOUND else ""
        per = say("step_bound.step", step=_ms(step)) if step is not None else ""
        return text + say("step_bound", after=after, step=per, rate=f"{rate:.1f}")
    who = say("n.workers", n=workers) if workers else say("loading_bound.main")
    text += say("loading_bound", workers=who, rate=f"{rate:.1f}")
    task = stats["median_task"]
    if step is not None and step >= MIN_STEP and task > 0:
        needed = math.ceil(task / step)
        text += say("keep_up", consume=f"{1 / step:.1f}", task=_ms(task), needed=say("n.workers", n=needed),
                    step=_ms(step))
        if needed <= workers:
            text += say("keep_up.have")
            see = [say(key) for key, shown in (("see.stragglers", stats["stragglers"]),
                                               ("see.reorder", stats["out_of_order"])) if shown]
            text += say("keep_up.see", what=", ".join(see)) if see else ""
    return text


def _failure(s: LoaderState, stats: Mapping[str, Any]) -> str | None:
    """What cut the run short, if anything did: then its timings say nothing about the pipeline's pace."""
    kinds = {note.get("kind") for note in s.notes}
    why = [say(f"why.{name}") for name, seen in (
        ("died", Kind.WORKER_DIED in kinds), ("stuck", Kind.WORKER_STUCK in kinds), ("error", stats["errors"] > 0),
        ("consumer_stuck", Kind.CONSUMER_STUCK in kinds), ("timeout", Kind.TIMEOUT in kinds)) if seen]
    return ", ".join(why) or None


def _peeks_finding(stats: Mapping[str, Any]) -> str:
    return say("peeks", iterators=say("n.iterators", n=stats["peeks"]),
               batches=say("n.batches", n=stats["peek_batches"]),
               starts=say("n.starts", n=stats["peek_worker_starts"]), wait=f"{stats['peek_wait']:.2f}")


def diagnosis(s: LoaderState, stats: Mapping[str, Any] | None = None) -> list[str]:
    """Findings in plain words, most important first (``stats``: ``summary(s)``, if the caller has it)."""
    stats = summary(s) if stats is None else stats
    findings = []
    for err in s.errors:
        where = f" in task {err['idx']} (worker {err.get('worker')}, samples {err.get('indices')})" \
            if err.get("idx") is not None else ""
        findings.append(f"error{where}: {err['type']}: {err['message']}")
        if any(sign in (err.get("traceback") or err["message"]).lower() for sign in SHM_SIGNS):
            findings.append("shared memory (/dev/shm) is exhausted: enlarge it (docker --shm-size) or call "
                            "torch.multiprocessing.set_sharing_strategy('file_system')")
    findings += [text for note in s.notes if (text := _safely(_note_finding, note))]
    if stats["batches"]:
        failure = _failure(s, stats)
        findings.append(say("no_verdict", why=failure) if failure
                        else _input_bound_finding(stats, s.config.get("num_workers", 0) or 0))
    if stats["peeks"]:
        findings.append(_peeks_finding(stats))
    for slow in stats["stragglers"]:
        findings.append(say("straggler", worker=slow["worker"], factor=f"{slow['factor']:.1f}",
                            median=f"{slow['median'] * 1000:.0f}", others=f"{slow['others'] * 1000:.0f}"))
    if stats["out_of_order"]:
        findings.append(say("reorder", results=say("n.results", n=stats["out_of_order"]), high=stats["buffer_high"],
                            hol=f"{stats['head_of_line_wait']:.2f}"))
    if s.config.get("pin_memory") and not s.config.get("pin_memory_active", False) and s.mode == "real":
        findings.append("pin_memory=True, but this machine has no accelerator, so torch silently turned pinning "
                        "off: batches stay in pageable memory and no pin-memory thread runs")
    per_batch = stats["pickled_bytes"] / max(stats["batches"], 1)
    if per_batch >= PICKLE_HEAVY_BYTES and s.mode != "sim" and (s.config.get("num_workers") or 0) > 0:
        findings.append(f"batches cross from the workers as {per_batch / 1e6:.1f} MB of pickled data per batch "
                        f"(numpy arrays or Python objects; pickling a sampled batch took "
                        f"{stats['pickle_s'] * 1000:.1f} ms): return tensors from collate_fn so they travel "
                        "through shared memory")
    if stats["pin_mb_per_s"]:
        findings.append(f"pinning: {stats['pin_bytes'] / 1e6:.1f} MB copied to page-locked memory at "
                        f"{stats['pin_mb_per_s']:.0f} MB/s; {stats['pin_wait_share']:.0%} of the consumer's wait "
                        f"was spent behind the pin thread")
    split = stats["consumer_split"]
    if split:
        findings.append(f"per batch the training loop waited {split['wait'] * 1000:.2f} ms for data, copied to "
                        f"{split['device']} in {split['h2d'] * 1000:.2f} ms and computed {split['compute'] * 1000:.2f} ms")
        if split["h2d_pageable"] and split["h2d"] > 0:
            findings.append(f"pinned memory pays: the same batch copied from pageable memory took "
                            f"{split['h2d_pageable'] * 1000:.2f} ms, {split['h2d_pageable'] / split['h2d']:.1f}× "
                            f"the pinned copy's {split['h2d'] * 1000:.2f} ms")
    if s.unpinned:
        findings.append(say("unpinned", batches=say("n.batches", n=s.unpinned)))
    return findings
