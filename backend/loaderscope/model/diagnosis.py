"""The diagnosis: what a loader's state means, in plain words, most important first.

Kept apart from the reducer (``state.py``) so that the rules of the protocol and the English that
explains a run can change independently; ``frontend/js/model/diagnosis.js`` mirrors it sentence by
sentence (frontend/tests/reducer.test.js compares the two on the same streams).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from loaderscope.events import Kind
from loaderscope.model.state import LoaderState
from loaderscope.model.stats import summary, user_frame
from loaderscope.model.wording import say


@dataclass(frozen=True)
class Finding:
    """One finding: ``code`` names its cause for scripts (``loaderscope show --json``), ``text`` says it."""

    code: str
    text: str


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


def _safely(describe: Callable[[Mapping[str, Any]], tuple[str, str] | None],
            note: Mapping[str, Any]) -> tuple[str, str] | None:
    """A note from a producer is data from outside: one with odd field types is listed as it is
    instead of failing the whole diagnosis (and the server's GET /api/runs/{id} with it)."""
    try:
        return describe(note)
    except (TypeError, ValueError, KeyError, AttributeError):
        return "odd_note", f"{note.get('kind')}: {dict(note)}"


def _note_finding(note: Mapping[str, Any]) -> tuple[str, str] | None:
    """A note (a death, a stuck fetch or wait, a timeout...) as (code, text), or None for a note that is none."""
    kind = note["kind"]
    if kind == Kind.WORKER_DIED:
        how = note.get("signal") or f"exit code {note.get('exitcode')}"
        holding = f" while fetching task {note['idx']}{_sample(note)}" if note.get("idx") is not None else ""
        oom = _killed(note) if note.get("signal") == "SIGKILL" else ""
        shm = " (SIGBUS in a worker usually means /dev/shm is full: enlarge it or use file_system sharing)" \
            if note.get("signal") == "SIGBUS" else ""
        return "worker_died", f"worker {note['worker']} (pid {note.get('pid')}) died by {how}{holding}{oom}{shm}"
    if kind == Kind.WORKER_STUCK:
        if note.get("recovered") is not None:
            return "stuck_recovered", (
                f"recovered: worker {note['worker']} was stuck on task {note['idx']}{_sample(note)}"
                f"{_past(note)}{_where(note.get('stack'))}, then finished it: the fetch took {note['recovered']:.1f} s")
        threshold = f" (threshold {note['threshold']:.1f} s)" if note.get("threshold") is not None else ""
        return "stuck", (f"stuck: worker {note['worker']} has been fetching task {note['idx']}{_sample(note)} for "
                         f"{note['elapsed']:.1f} s{threshold}{_where(note.get('stack'))}")
    if kind == Kind.CONSUMER_STUCK:
        held = f" held by worker {note['held_by']}" if note.get("held_by") is not None else ""
        task = f" for task {note['waiting_for']}" if note.get("waiting_for") is not None else ""
        if note.get("recovered") is not None:
            return "consumer_stuck_recovered", (
                f"recovered: the training loop waited {note['recovered']:.1f} s inside next(){task}{held} (stuck"
                f"{_past(note)}{_where(note.get('stack'))}), then got its batch")
        return "consumer_stuck", (f"stuck: the training loop has waited {note['elapsed']:.1f} s inside next(){task}"
                                  f"{held}{_where(note.get('stack'))}")
    if kind == Kind.TIMEOUT:
        busy = [f"worker {w['worker']} on task {w['idx']}{_sample(w)} for {w['elapsed']:.1f} s"
                for w in note.get("workers", []) if w.get("idx") is not None]
        doing = "; ".join(busy) if busy else "every worker was idle"
        return "timeout", f"timeout: no batch arrived within {note['seconds']} s; at that moment {doing}"
    if kind == Kind.RUN_END:
        return "script_died", f"the script died of {note['error']['type']}: {note['error']['message']}"
    if kind == Kind.EPOCH_RESUME:
        return "epoch_resume", (f"epoch {note['epoch']} resumed from a checkpoint at batch {note['batch']} "
                                f"(load_state_dict); {note.get('replayed', 0)} batch(es) were fetched again "
                                "to restore it")
    if kind == Kind.PROBE_ERROR:
        return "probe_error", (f"loaderscope's probe failed in {note['where']} ({note['type']}: {note['message']}); "
                               "training went on, but this run may miss events")
    return None


def _killed(note: Mapping[str, Any]) -> str:
    """What a SIGKILLed worker held at its last memory sample, where one was taken: the OOM killer's evidence."""
    evidence = note.get("memory")
    if not evidence:
        return " (SIGKILL is what the kernel's OOM killer sends: check memory)"
    return " (SIGKILL is what the kernel's OOM killer sends: " + say(
        "memory.killed", ago=f"{max(0.0, note['t'] - evidence['t']):.1f}", rss=_mb(evidence["rss"]),
        uss=_mb(evidence["uss"]), headroom=_mb(evidence["headroom"])) + ")"


def _mb(value: float | None) -> str:
    return "?" if value is None else f"{value / 1e6:.1f}"


COPY_MIN = 8 * 2**20  # shared pages a worker turned private, on average, before copy-on-read is named
LEAK_MIN = 2**20  # RSS growth per epoch named a leak
HEADROOM_HORIZON = 3600.0  # seconds: headroom that lasts longer at the recent rate is not named
HEADROOM_SPAN = 5.0  # seconds of samples a rate needs before it is extrapolated
SHM_LOW = 0.1  # /dev/shm's free share named "nearly full"
IN_FLIGHT_SHARE = 0.5  # batches in flight named when they are this share of the loader's memory
IN_FLIGHT_MIN = 64 * 2**20


def _memory_findings(s: LoaderState, stats: Mapping[str, Any]) -> Iterator[Finding]:
    """What the memory samples show (memory.py's figures): the thresholds are this module's constants."""
    m = stats["memory"]
    if m is None:
        return
    workers = m["workers"]
    copied = sum(w["copied"] for w in workers)
    if workers and copied >= COPY_MIN * len(workers):
        grown = sum(w["grown"] for w in workers)
        yield Finding("copy_on_read", say("memory.copy_on_read", grown=_mb(grown), per=_mb(grown / len(workers)),
                                          samples=f"{sum(w['copied_samples'] for w in workers):,}", copied=_mb(copied)))
    for proc in [m["main"], *workers] if m["main"] else workers:
        if proc["leak_per_epoch"] is not None and proc["leak_per_epoch"] >= LEAK_MIN:
            who = "the main process" if proc["worker"] is None else f"worker {proc['worker']}"
            why = say("memory.leak.persistent") if proc["worker"] is not None else ""
            yield Finding("memory_leak", say("memory.leak", who=who, rate=_mb(proc["leak_per_epoch"]),
                                             epochs=proc["epochs"], first=_mb(proc["epoch_first"]),
                                             last=_mb(proc["epoch_last"]), why=why))
    left = m["headroom_s"]
    if left is not None and left <= HEADROOM_HORIZON and m["trend_span"] >= HEADROOM_SPAN:
        per_epoch = stats["epoch_wall"] / stats["epochs"] if stats["epochs"] else 0
        epochs = say("memory.headroom.epochs", epochs=f"{left / per_epoch:.1f}") if per_epoch > 0 else ""
        yield Finding("headroom", say("memory.headroom", rate=_mb(m["growth_per_s"]), span=f"{m['trend_span'] / 2:.0f}",
                                      headroom=_mb(m["headroom"]), minutes=f"{left / 60:.0f}", epochs=epochs))
    if m["shm_free_low"] is not None and m["shm_total"] and m["shm_free_low"] < SHM_LOW * m["shm_total"]:
        yield Finding("shm_low", say("memory.shm", free=_mb(m["shm_free_low"]), total=_mb(m["shm_total"])))
    held = m["in_flight_high"]
    if held >= IN_FLIGHT_MIN and m["in_flight_pss"] and held >= IN_FLIGHT_SHARE * m["in_flight_pss"]:
        yield Finding("in_flight", say("memory.in_flight", held=_mb(held),
                                       batches=say("n.batches", n=m["in_flight_batches"]),
                                       pss=_mb(m["in_flight_pss"]), window=s.window))


def _past(note: Mapping[str, Any]) -> str:
    """" past the 10.0 s threshold", when the producer said its threshold (the simulator does not)."""
    return f" past the {note['threshold']:.1f} s threshold" if note.get("threshold") is not None else ""


def _latest_notes(notes: list[dict[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """The notes to say, in order: a stuck fetch (or wait) that the probe noted again every few seconds
    with a fresh stack is one finding, its latest note."""
    def key(note: Mapping[str, Any]) -> tuple[Any, ...] | None:
        if note.get("kind") == Kind.WORKER_STUCK:
            return ("worker", note.get("worker"), note.get("idx"))
        if note.get("kind") == Kind.CONSUMER_STUCK:
            return ("consumer", note.get("waiting_for"))
        return None
    keys = [key(note) for note in notes]
    for i, note in enumerate(notes):
        if keys[i] is None or keys[i] not in keys[i + 1:]:
            yield note


PICKLE_HEAVY_BYTES = 1_000_000  # pickled bytes per batch worth a finding
INPUT_BOUND = 0.2  # waiting (for data, or for another loader) more than this share of the time is the bottleneck
MIN_VERDICT_BATCHES = 8  # fewer batches tell nothing yet: the first ones are start-up and the pipeline filling


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _time_finding(stats: Mapping[str, Any]) -> str:
    """Where the time inside this loader's epochs went, and what happened between them."""
    startup = say("waited.startup", startup=f"{stats['startup_wait']:.2f}") if stats["startup_wait"] >= 0.05 else ""
    text = say("waited", share=f"{stats['input_bound']:.0%}", wait=f"{stats['consumer_wait']:.2f}",
               wall=f"{stats['epoch_wall']:.2f}", startup=startup)
    if stats["other_wait"] >= 0.05:
        text += say("waited.others", others=f"{stats['other_wait']:.2f}", share=f"{stats['other_share']:.0%}")
    if stats["between_epochs"] >= 0.05:
        others = say("waited.outside.others", others=f"{stats['between_others']:.2f}") \
            if stats["between_others"] >= 0.05 else ""
        text += say("waited.outside", outside=f"{stats['between_epochs']:.2f}", others=others)
    return text


def _verdict(stats: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[str, str]:
    """What limits the loop inside this loader's epochs: worker start-up, other loaders, the step or loading."""
    workers, rate = config.get("num_workers", 0) or 0, f"{stats['batches_per_s']:.1f}"
    shares = {"startup": stats["startup_share"], "others": stats["other_share"],
              "loading": stats["input_bound"] - stats["startup_share"]}
    biggest = max(shares, key=lambda name: shares[name])
    if shares[biggest] > INPUT_BOUND and biggest == "startup":
        if not workers:
            fix = say("startup_bound.main")
        elif not config.get("persistent_workers") and stats["epochs"] + stats["peeks"] > 1:
            fix = say("startup_bound.persistent")
        else:
            fix = say("startup_bound.rebuilt")
        return "startup_bound", say("startup_bound", rate=rate, share=f"{stats['startup_share']:.0%}",
                                    starts=say("n.starts", n=stats["worker_starts"]), fix=fix)
    if shares[biggest] > INPUT_BOUND and biggest == "others":
        return "other_loaders_bound", say("others_bound", rate=rate, share=f"{stats['other_share']:.0%}")
    if stats["input_bound_steady"] <= INPUT_BOUND:
        after = say("step_bound.after", steady=f"{stats['input_bound_steady']:.0%}") \
            if stats["input_bound"] > INPUT_BOUND else ""
        step = say("step_bound.step", step=_ms(stats["step_time"])) if stats["step_time"] is not None else ""
        return "step_bound", say("step_bound", after=after, step=step, rate=rate)
    who = say("n.workers", n=workers) if workers else say("loading_bound.main")
    return "input_bound", say("loading_bound", workers=who, rate=rate)


def _failure(s: LoaderState, stats: Mapping[str, Any]) -> str | None:
    """What cut the run short, if anything did: then its timings say nothing about the pipeline's pace.
    A stuck fetch or wait that recovered cut nothing short."""
    kinds = {note.get("kind") for note in s.notes if note.get("recovered") is None}
    why = [say(f"why.{name}") for name, seen in (
        ("died", Kind.WORKER_DIED in kinds), ("stuck", Kind.WORKER_STUCK in kinds), ("error", stats["errors"] > 0),
        ("consumer_stuck", Kind.CONSUMER_STUCK in kinds), ("timeout", Kind.TIMEOUT in kinds)) if seen]
    return ", ".join(why) or None


def _peeks_finding(stats: Mapping[str, Any]) -> str:
    return say("peeks", iterators=say("n.iterators", n=stats["peeks"]),
               batches=say("n.batches", n=stats["peek_batches"]),
               starts=say("n.starts", n=stats["peek_worker_starts"]), wait=f"{stats['peek_wait']:.2f}")


def _pace_findings(s: LoaderState, stats: Mapping[str, Any]) -> Iterator[Finding]:
    """The verdict on what limits the loop, once there is enough to tell."""
    failure = _failure(s, stats)
    if failure:
        yield Finding("no_verdict", say("no_verdict", why=failure))
        return
    if stats["batches"] < MIN_VERDICT_BATCHES:
        yield Finding("too_early", say("too_early", batches=say("n.batches", n=stats["batches"]),
                                       least=MIN_VERDICT_BATCHES))
        return
    code, verdict = _verdict(stats, s.config)
    yield Finding(code, _time_finding(stats) + verdict)


def _error_findings(s: LoaderState) -> Iterator[Finding]:
    for err in s.errors:
        where = f" in task {err['idx']} (worker {err.get('worker')}, samples {err.get('indices')})" \
            if err.get("idx") is not None else ""
        yield Finding("error", f"error{where}: {err['type']}: {err['message']}")
        if any(sign in (err.get("traceback") or err["message"]).lower() for sign in SHM_SIGNS):
            yield Finding("shm_full", "shared memory (/dev/shm) is exhausted: enlarge it (docker --shm-size) or call "
                                      "torch.multiprocessing.set_sharing_strategy('file_system')")


def _transfer_findings(s: LoaderState, stats: Mapping[str, Any]) -> Iterator[Finding]:
    """How batches cross from the workers and to the device."""
    if s.config.get("pin_memory") and not s.config.get("pin_memory_active", False) and s.mode == "real":
        yield Finding("pin_inactive", "pin_memory=True, but this machine has no accelerator, so torch silently turned "
                                      "pinning off: batches stay in pageable memory and no pin-memory thread runs")
    per_batch = stats["pickled_bytes"] / max(stats["batches"], 1)
    if per_batch >= PICKLE_HEAVY_BYTES and s.mode != "sim" and (s.config.get("num_workers") or 0) > 0:
        yield Finding("pickle_heavy", f"batches cross from the workers as {per_batch / 1e6:.1f} MB of pickled data per "
                      f"batch (numpy arrays or Python objects; pickling a sampled batch took "
                      f"{stats['pickle_s'] * 1000:.1f} ms): return tensors from collate_fn so they travel "
                      "through shared memory")
    if stats["pin_mb_per_s"]:
        yield Finding("pinning", f"pinning: {stats['pin_bytes'] / 1e6:.1f} MB copied to page-locked memory at "
                      f"{stats['pin_mb_per_s']:.0f} MB/s; {stats['pin_wait_share']:.0%} of the consumer's wait "
                      f"was spent behind the pin thread")
    split = stats["consumer_split"]
    if split:
        step = say("split.step", step=f"{split['step'] * 1000:.2f}") if split["step"] is not None else ""
        yield Finding("step_split", say("split", wait=f"{split['wait'] * 1000:.2f}", step=step,
                                        device=split["device"] or "the device", h2d=f"{split['h2d'] * 1000:.2f}",
                                        compute=f"{split['compute'] * 1000:.2f}"))
        if split["h2d_pageable"] and split["h2d"] > 0:
            yield Finding("pinned_pays", f"pinned memory pays: the same batch copied from pageable memory took "
                          f"{split['h2d_pageable'] * 1000:.2f} ms, {split['h2d_pageable'] / split['h2d']:.1f}× "
                          f"the pinned copy's {split['h2d'] * 1000:.2f} ms")
    if s.unpinned:
        yield Finding("unpinned", say("unpinned", batches=say("n.batches", n=s.unpinned)))


def findings(s: LoaderState, stats: Mapping[str, Any] | None = None) -> list[Finding]:
    """Findings with their cause codes, most important first (``stats``: ``summary(s)``, if the caller has it)."""
    stats = summary(s) if stats is None else stats
    found = list(_error_findings(s))
    found += [Finding(*said) for note in _latest_notes(s.notes) if (said := _safely(_note_finding, note))]
    if stats["batches"]:
        found += _pace_findings(s, stats)
    if stats["peeks"]:
        found.append(Finding("peeks", _peeks_finding(stats)))
    for slow in stats["stragglers"]:
        found.append(Finding("straggler", say("straggler", worker=slow["worker"], factor=f"{slow['factor']:.1f}",
                                              median=f"{slow['median'] * 1000:.0f}",
                                              others=f"{slow['others'] * 1000:.0f}")))
    if stats["out_of_order"]:
        found.append(Finding("reorder", say("reorder", results=say("n.results", n=stats["out_of_order"]),
                                            high=stats["parked_high"], hol=f"{stats['head_of_line_wait']:.2f}")))
    found += _transfer_findings(s, stats)
    found += _memory_findings(s, stats)
    return found


# The findings about memory: _memory_findings' codes and a full /dev/shm; a worker dead of one of
# MEMORY_SIGNALS (the OOM killer's SIGKILL, with its last figures as evidence; a full /dev/shm's SIGBUS).
MEMORY_CODES = frozenset({"copy_on_read", "memory_leak", "headroom", "shm_low", "in_flight", "shm_full"})
MEMORY_SIGNALS = frozenset({"SIGKILL", "SIGBUS"})


def memory_findings(s: LoaderState, stats: Mapping[str, Any] | None = None) -> list[Finding]:
    """The memory verdicts, in ``findings()``' order and words: ``loaderscope compare``'s (the page's
    ``memory-compare.js`` ``memoryVerdicts`` mirrors it)."""
    killed = {said[1] for note in s.notes
              if note.get("kind") == Kind.WORKER_DIED and note.get("signal") in MEMORY_SIGNALS
              and (said := _safely(_note_finding, note))}
    return [f for f in findings(s, stats) if f.code in MEMORY_CODES or (f.code == "worker_died" and f.text in killed)]


def diagnosis(s: LoaderState, stats: Mapping[str, Any] | None = None) -> list[str]:
    """Findings in plain words, most important first (``stats``: ``summary(s)``, if the caller has it)."""
    return [finding.text for finding in findings(s, stats)]
