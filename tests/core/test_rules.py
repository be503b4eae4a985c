"""The reducers' transition rules (contract/rules.py): one test per rule, from the rule table.

Each case cuts a simulated 2-worker run mid-epoch (the real simulator's events), adds one event of the
rule's kind aimed at a live task and its worker, and checks that state.py applied the row's table-shaped
effects (counters bumped by the row's amounts, the worker's status, the task's move, the queue, the
failed epoch, the note), and that the page's reducer.js (run by node) reaches the same state.
frontend/tests/rules.test.js runs the same agreement from the page's side on its own synthetic runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loaderscope import sim
from loaderscope.contract.events import Kind
from loaderscope.contract.generate import kinds
from loaderscope.contract.rules import RULES, Rule
from loaderscope.model.state import LoaderState, reduce
from loaderscope.scenarios.catalog import get

ROOT = Path(__file__).resolve().parents[2]
SAMPLE: dict[str, Any] = {"int": 1, "number": 0.25, "string": "x", "bool": True, "object": {"num_workers": 2},
                          "array": [], "any": 1}
SCALARS = ["send_idx", "rcvd_idx", "outstanding", "outstanding_high", "batches", "epoch_batches", "epochs_done",
           "out_of_order", "parked_high", "consumer_wait", "startup_wait", "skipped", "epoch", "status", "starts",
           "epoch_failed", "result_queue", "parked", "violations",
           *sorted({name for rule in RULES.values() for name in rule.counts})]
NODE = """
import { reduce } from './frontend/js/model/reducer.js';
import { readFileSync } from 'node:fs';
const out = {};
for (const [kind, events] of Object.entries(JSON.parse(readFileSync(0, 'utf8')))) {
  const s = reduce(events);
  out[kind] = { ...Object.fromEntries(FIELDS.map((f) => [f, s[f]])),
    where: Object.fromEntries([...s.tasks.values()].map((t) => [String(t.idx), t.where])),
    workers: Object.fromEntries([...s.workers.values()].map((w) => [String(w.id), [w.status, w.queue, w.current]])),
    notes: s.notes.map((n) => n.kind), errors: s.errors.length };
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def head() -> list[dict[str, Any]]:
    plan = get("uniform").plan({"num_workers": 2, "batch_size": 4, "dataset_size": 64, "sample_ms": 1.0})
    events = [dict(e) for e in sim.simulate(plan, run_id="rules", scenario="uniform", params={})]
    cut = next(i for i, e in enumerate(events) if e["kind"] == "yield" and e["idx"] == 4)
    return events[:cut]


def event_of(kind: Kind, head: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``kind`` event with its required fields, aimed at the prior state's latest live task."""
    live = list(reduce(head).tasks.values())[-1]
    event: dict[str, Any] = {"seq": len(head), "t": head[-1]["t"] + 0.01, "run": "rules", "rank": 0, "kind": kind.value}
    for name, field in kinds()[kind.value].items():
        if name in ("idx", "worker"):
            event[name] = live.idx if name == "idx" else live.worker
        elif field["required"] or field["type"] == "number":
            event[name] = SAMPLE[field["type"]]
    return event


def view(s: LoaderState) -> dict[str, Any]:
    """What both reducers keep alike, as JSON gives it."""
    return json.loads(json.dumps({
        **{f: getattr(s, f) for f in SCALARS},
        "where": {str(t.idx): str(t.where) for t in s.tasks.values()},
        "workers": {str(w.id): [str(w.status), w.queue, w.current] for w in s.workers.values()},
        "notes": [n["kind"] for n in s.notes], "errors": len(s.errors)}))


@pytest.fixture(scope="module")
def page(head: list[dict[str, Any]]) -> dict[str, Any]:
    """reducer.js's state after each rule's stream, from one node process."""
    node = shutil.which("node")
    assert node, "node is needed for the page's side (scripts/test.sh installs it)"
    streams = {kind.value: [*head, event_of(kind, head)] for kind in RULES}
    done = subprocess.run([node, "--input-type=module", "-e", f"const FIELDS = {json.dumps(SCALARS)};\n{NODE}"],
                          input=json.dumps(streams), capture_output=True, text=True, cwd=ROOT, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_every_kind_but_the_doctors_verdict_has_a_rule() -> None:
    assert set(Kind) - set(RULES) == {Kind.DOCTOR_VERDICT}  # shown as a note, as an unknown kind is


@pytest.mark.parametrize(("kind", "rule"), RULES.items(), ids=[k.value for k in RULES])
def test_the_rule_does_what_its_row_says_in_both_reducers(kind: Kind, rule: Rule, head: list[dict[str, Any]],
                                                          page: dict[str, Any]) -> None:
    event = event_of(kind, head)
    before, after = reduce(head), reduce([*head, event])
    task = before.tasks[event["idx"]] if "idx" in event else None
    for name, by in rule.counts.items():  # the event names a live task: a needs_task rule applies
        step = by if isinstance(by, int) else event.get(by) or 0
        assert getattr(after, name) == pytest.approx(getattr(before, name) + step), name
    if rule.worker is not None:
        assert after.workers[event["worker"]].status == rule.worker
    if rule.moves is not None and task is not None:
        sources, to = rule.moves
        assert after.tasks[task.idx].where == (to if not sources or task.where in sources else task.where)
    if rule.enters == "worker_queue":
        assert after.workers[event["worker"]].queue[-1] == event["idx"]
    if rule.enters == "parked":
        assert after.parked[-1] == event["idx"]
    if rule.leaves == "worker_queue":
        assert event["idx"] not in after.workers[event["worker"]].queue
    assert after.epoch_failed == (rule.fails or before.epoch_failed and kind != Kind.EPOCH_START)
    if rule.keeps:
        assert after.notes[-1] == event
    for name, value in view(after).items():  # reducer.js reaches the same state
        assert page[kind.value][name] == (pytest.approx(value) if isinstance(value, float) else value), name
