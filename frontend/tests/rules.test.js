// One agreement test per transition rule of the contract (RULES in contract.gen.js, from
// backend/loaderscope/contract/rules.py): the page's reducer and state.py apply the same rule to the
// same prior state. Each test reduces a synthetic run cut mid-epoch, then one event of the rule's kind
// aimed at a live task and its worker, made from the contract's own description of the kind's fields,
// on both sides, and compares the state. tests/core/test_rules.py runs the same from the Python side.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { reduce } from '../js/model/reducer.js';
import { summary } from '../js/model/stats.js';
import { KINDS, RULES } from '../js/model/contract.gen.js';
import { synthesize } from '../dev/synth.js';
import { python, needsPython } from './python.js';

/** @type {Record<string, unknown>} a value of each contract type, for a field the event must carry */
const SAMPLE = { int: 1, number: 0.25, string: 'x', bool: true, object: { num_workers: 2 }, array: [], any: 1 };
/** @type {Record<string, {counts?: Record<string, number|string>}>} */
const rules = RULES;
// the state's scalars, and every counter a rule's row bumps
const FIELDS = [
  ...new Set([
    'send_idx',
    'rcvd_idx',
    'outstanding',
    'batches',
    'epochs_done',
    'out_of_order',
    'parked_high',
    'consumer_wait',
    'skipped',
    'epoch',
    'status',
    'pin_bytes',
    'fetched_bytes',
    'steps',
    'peeks',
    'epoch_failed',
    'starts',
    'result_queue',
    'parked',
    'outstanding_high',
    'startup_wait',
    'epoch_batches',
    ...Object.values(rules).flatMap((r) => Object.keys(r.counts ?? {})),
  ]),
];

/** The run's first events up to the middle, then one `kind` event with its required fields, aimed at a live task. */
function streamEndingIn(kind) {
  const run = synthesize({ num_workers: 2, batches: 8 });
  const head = run.slice(0, Math.floor(run.length / 2));
  const live = [...reduce(head).tasks.values()].at(-1);
  /** @type {Record<string, any>} */
  const own = /** @type {any} */ (KINDS)[kind];
  const event = { seq: head.length, t: head[head.length - 1].t + 0.01, run: head[0].run, rank: 0, kind };
  for (const [name, rule] of Object.entries(own)) {
    if (name === 'idx') event.idx = live?.idx ?? 1;
    else if (name === 'worker') event.worker = live?.worker ?? 1;
    else if (rule.required || rule.type === 'number') event[name] = SAMPLE[rule.type];
  }
  return [...head, event];
}

const kinds = Object.keys(rules);
const script = `
import json, sys
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
out = {}
for kind, events in json.load(sys.stdin).items():
    s = reduce(events)
    state = {f: getattr(s, f) for f in ${JSON.stringify(FIELDS)}}
    state["where"] = {str(t.idx): str(t.where) for t in s.tasks.values()}
    state["workers"] = {str(w.id): [str(w.status), w.queue, w.current] for w in s.workers.values()}
    state["notes"] = [n["kind"] for n in s.notes]
    state["errors"] = len(s.errors)
    state["violations"] = s.violations
    state["summary_batches"] = summary(s)["batches"]
    out[kind] = state
print(json.dumps(out))`;
const streams = Object.fromEntries(kinds.map((kind) => [kind, streamEndingIn(kind)]));
const py = needsPython ? null : python(script, { input: JSON.stringify(streams) });

test('every kind of the contract has its rule', () => {
  assert.deepEqual(
    Object.keys(KINDS).filter((k) => !(k in rules)),
    ['doctor_verdict'],
  ); // shown as a note, as unknown kinds are
});

for (const kind of kinds) {
  test(`the ${kind} rule gives the same state in reducer.js and state.py`, { skip: needsPython }, () => {
    const s = reduce(streams[kind]);
    const want = py[kind];
    const state = /** @type {Record<string, unknown>} */ (/** @type {unknown} */ (s));
    for (const f of FIELDS) {
      const got = state[f];
      if (typeof want[f] === 'number' && !Number.isInteger(want[f]))
        assert.ok(Math.abs(want[f] - Number(got)) < 1e-9, `${kind}: ${f}`);
      else assert.deepEqual(got, want[f], `${kind}: ${f}`);
    }
    assert.deepEqual(
      Object.fromEntries([...s.tasks.values()].map((t) => [String(t.idx), t.where])),
      want.where,
      `${kind}: where`,
    );
    assert.deepEqual(
      Object.fromEntries([...s.workers.values()].map((w) => [String(w.id), [w.status, w.queue, w.current]])),
      want.workers,
      `${kind}: workers`,
    );
    assert.deepEqual(
      s.notes.map((n) => n.kind),
      want.notes,
      `${kind}: notes`,
    );
    assert.equal(s.errors.length, want.errors, `${kind}: errors`);
    assert.deepEqual(s.violations, want.violations, `${kind}: violations`);
    assert.equal(summary(s).batches, want.summary_batches, `${kind}: summary`);
  });
}
