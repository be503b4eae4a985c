"""One wording table for the verdicts, shared by the terminal and the page.

The diagnosis (``diagnosis.py``, its mirror ``frontend/js/model/diagnosis.js``), the shard check
(``ranks.py``, ``frontend/js/model/ranks.js``) and the CLI's summary take their sentences from here, so that
the same situation reads the same everywhere. The page reads ``frontend/js/model/wording.gen.js``, generated
from this table by ``python -m loaderscope.model.wording --write`` (``--check``, which
tests/core/test_contract_generated.py runs, fails when it drifts).

A template's ``{name}`` fields are filled with values the caller has already formatted (Python's
number formatting, which ``diagnosis.js`` reproduces). An entry with ``one``/``other`` forms is chosen
by the value ``n``: "1 result", "2 results".
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from loaderscope.contract import generated

Entry = str | dict[str, str]

WORDS: dict[str, Entry] = {
    # names of the statistics, in the CLI's tables and the page's
    "label.input_bound": "training loop waiting",
    "label.input_bound_steady": "waiting after start-up",
    # counted things
    "n.results": {"one": "1 result", "other": "{n} results"},
    "n.workers": {"one": "1 worker", "other": "{n} workers"},
    "n.batches": {"one": "1 batch", "other": "{n} batches"},
    "n.iterators": {"one": "1 iterator", "other": "{n} iterators"},
    "n.starts": {"one": "1 worker start-up", "other": "{n} worker start-ups"},
    "n.indices": {"one": "1 index", "other": "{n} indices"},
    "n.indices_read": {"one": "1 index read", "other": "{n} indices read"},
    "n.tasks": {"one": "1 task", "other": "{n} tasks"},
    "n.samples": {"one": "1 sample", "other": "{n} samples"},
    # whether loading or the step limits the run
    "waited": "training waited for data {share} of the time ({wait} s of {wall} s{startup})",
    "waited.startup": ", {startup} s of it for the first batch of an epoch",
    "waited.others": "; it spent {others} s ({share}) inside other loaders' next()",
    "waited.outside": "; the {outside} s between epochs are neither step nor wait{others}",
    "waited.outside.others": " ({others} s of them inside other loaders' next())",
    "too_early": "too early to tell what limits the loop: {batches} so far, a verdict needs {least}",
    "step_bound": ";{after} the training step is the bottleneck ({step}{rate} batches/s)",
    "step_bound.after": " after start-up it waited {steady}, so",
    "step_bound.step": "{step} ms per batch (mean), ",
    "startup_bound": "; worker start-up is the bottleneck ({rate} batches/s): {share} of the time went to the first "
                     "batch of each epoch ({starts}){fix}",
    "startup_bound.persistent": ": persistent_workers=True keeps the workers between epochs",
    "startup_bound.rebuilt": ": if this loader is built again for each epoch, build it once "
                             "(with persistent_workers=True)",
    "startup_bound.main": ": with num_workers=0 no worker starts, so the dataset's first fetch of each epoch is slow",
    "others_bound": "; other loaders are the bottleneck ({rate} batches/s): the loop spent {share} of this loader's "
                    "epochs inside their next() (see their runs)",
    "loading_bound": "; loading is the bottleneck: {rate} batches/s from {workers}",
    "loading_bound.main": "the main process",
    "no_verdict": "no verdict on the bottleneck: {why}, so the timings show the failure, not the pipeline's pace",
    "why.died": "a worker died",
    "why.stuck": "a worker was stuck",
    "why.error": "the dataset or collate_fn raised",
    "why.consumer_stuck": "the training loop was stuck in next()",
    "why.timeout": "timeout= expired",
    "straggler": "straggler: worker {worker} fetches {factor}× slower than the others "
                 "(median {median} ms vs {others} ms)",
    "reorder": "reorder cost: {results} arrived out of order and waited in the reorder buffer (high-water {high}); "
               "{hol} s of the loop's wait came after a later batch had arrived, which in_order=False would "
               "have handed over at once",
    "split": "per batch (means) the training loop waited {wait} ms for data{step}; its step events timed the copy "
             "to {device} at {h2d} ms and the compute at {compute} ms",
    "split.step": " and spent {step} ms in its step",
    "peeks": "peeks: {iterators} left after at most {batches} (next(iter(loader)) before an epoch, say), "
             "not counted as epochs; cost: {starts}, {wait} s inside next()",
    "unpinned": "{batches} left the pin thread without pinned tensors "
                "(a custom batch type needs a pin_memory() method)",
    # memory (memory.py's figures, diagnosis.py's verdicts)
    "memory.copy_on_read": "copy-on-read: the workers' private memory (USS) grew {grown} MB in all ({per} MB per "
                           "worker) as they fetched {samples} samples, {copied} MB of it pages they had shared with "
                           "the main process: reading Python objects (lists, dicts, strings) writes their reference "
                           "counts, and each written page is copied into every worker. Keep the dataset's items in "
                           "numpy or Arrow buffers (np.frombuffer on encoded bytes) instead of Python objects",
    "memory.leak": "memory leak: {who}'s resident memory grew at every epoch's end, {rate} MB per epoch over "
                   "{epochs} epochs ({first} MB to {last} MB){why}",
    "memory.leak.persistent": ": persistent workers keep whatever an epoch leaves behind (caches, references "
                              "held by the dataset)",
    "memory.headroom": "headroom: the loader's processes grew {rate} MB/s over the last {span} s; at this rate the "
                       "host's {headroom} MB of headroom lasts {minutes} min{epochs}",
    "memory.headroom.epochs": " (about {epochs} epochs)",
    "memory.shm": "/dev/shm nearly full: {free} MB of {total} MB were free at the fullest; torch's workers hand "
                  "tensors over through it and a worker that cannot write there dies of SIGBUS: enlarge it "
                  "(docker --shm-size) or lower prefetch_factor",
    "memory.in_flight": "batches in flight held {held} MB at their peak ({batches} fetched and not yet handed to "
                        "the training loop) while the loader's processes held {pss} MB (PSS): up to "
                        "prefetch_factor × num_workers = {window} batches wait fetched; lower prefetch_factor or "
                        "the batch size to hold less",
    "memory.killed": "its last memory sample, {ago} s before, held {rss} MB resident ({uss} MB its own when last "
                     "read in full); the host had {headroom} MB left then",
    # the terminal's summary lines
    "cli.rate": "{batches} in {wall} s inside its epochs = {rate} batches/s",
    "cli.time": "where the loop's {wall} s inside this loader's epochs went:",
    "cli.time.startup": "{startup} s ({share}) of it for the first batch of each epoch: worker start-up, the "
                        "pipeline filling",
    "cli.time.others": "inside other loaders' next()",
    "cli.time.step": "its own step",
    "cli.time.step_mean": "{step} ms per step (mean)",
    "cli.time.steady": "after start-up it waited {steady} of the time",
    "cli.time.outside": "between epochs: {outside} s, neither step nor wait{others}",
    "cli.memory": "{samples} of the loader's processes ({source}), {full} full and the others light (RSS "
                  "alone); each process at its last sample, USS, PSS and shared at its last full one, in MB "
                  "(10^6 bytes):",
    "cli.memory.headroom": "host headroom {now} MB now, {low} MB at the lowest{cgroup}",
    "cli.memory.cgroup": " (the memory cgroup's limit: {limit} MB)",
    "cli.memory.shm": "/dev/shm: {high} MB of {total} MB used at the fullest",
    "cli.memory.in_flight": "batches in flight: {high} MB at the most ({batches}); the processes' PSS: {pss} MB at "
                            "the most",
    "cli.reorder": "{results} arrived out of order; reorder buffer high-water {high}; in flight at most {high_out} "
                   "of {window}",
    "cli.reorder.how": "in the first epoch, results reached the main process in the order workers finished; the "
                       "in-order cursor rcvd_idx handed them to the training loop in sampler order:",
    "cli.reorder.same": "the first epoch's first {tasks} arrived in the order they were handed over",
    # the ranks' sample shards (ranks.shard_report)
    "shards": "epoch {epoch} shards: {verdict} · {coverage}",
    "shards.disjoint": "disjoint ✓",
    "shards.padding": "padding: {indices} twice, as DistributedSampler pads ranks to equal length "
                      "(torch/utils/data/distributed.py) ✓",
    "shards.overlap": "OVERLAP: {indices} by more than one rank (e.g. {sample})",
    "shards.complete": "complete ✓",
    "shards.missing": "MISSING: {indices} by no rank (e.g. {sample})",
}

_FIELD = re.compile(r"\{(\w+)\}")


def say(key: str, **values: Any) -> str:
    """The table's sentence for ``key`` with its fields filled (``n`` picks the singular or plural form)."""
    entry = WORDS[key]
    template = entry if isinstance(entry, str) else entry["one" if values.get("n") == 1 else "other"]
    return _FIELD.sub(lambda m: str(values[m.group(1)]), template)


JS_PATH = generated.ROOT / "frontend" / "js" / "model" / "wording.gen.js"

_JS_SAY = """
const FIELD = /\\{(\\w+)\\}/g;

/**
 * The table's sentence for `key` with its fields filled (`n` picks the singular or plural form).
 * @param {string} key @param {Record<string, unknown>} [values]
 */
export function say(key, values = {}) {
  const entry = /** @type {Record<string, string | {one: string, other: string}>} */ (WORDS)[key];
  const template = typeof entry === 'string' ? entry : entry[values.n === 1 ? 'one' : 'other'];
  return template.replace(FIELD, (_, name) => String(values[name]));
}
"""


def render_js() -> str:
    """``frontend/js/model/wording.gen.js``: the table and ``say`` for the page."""
    table = json.dumps(WORDS, ensure_ascii=False, indent=2)
    return ("// Generated from backend/loaderscope/model/wording.py by `python -m loaderscope.model.wording --write`: "
            "edit the table there.\n\n"
            f"export const WORDS = Object.freeze({table});\n{_JS_SAY}")


if __name__ == "__main__":
    sys.exit(generated.main(sys.argv[1:], {JS_PATH: render_js}, "backend/loaderscope/model/wording.py",
                            "python -m loaderscope.model.wording --write"))
