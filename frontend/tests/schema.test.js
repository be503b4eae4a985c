// schema.js reads the contract's tables from contract.gen.js, generated from backend/loaderscope/contract/:
// every kind's required fields and the run statuses must be the same as Python's, in both directions (a
// kind or status only one side knows fails here, not on a user's page; `--check` catches a stale file).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { REQUIRED, KNOWN_KINDS, RunStatus, ENDED, MAX_NUMBER, invalidReason } from '../js/model/schema.js';
import { python, needsPython } from './python.js';

const PY_SCHEMA = `
import json
from loaderscope.events import ENDED, MAX_NUMBER, REQUIRED, Kind, RunStatus
print(json.dumps({"required": {str(k): list(v) for k, v in REQUIRED.items()}, "kinds": [str(k) for k in Kind],
                  "statuses": {s.name: s.value for s in RunStatus}, "ended": sorted(ENDED), "max": MAX_NUMBER}))`;

const py = needsPython ? null : python(PY_SCHEMA);

test('every kind has the same required fields in schema.js and events.py', { skip: needsPython }, () => {
  const js = Object.fromEntries(Object.entries(REQUIRED).map(([k, v]) => [k, [...v]]));
  for (const kind of Object.keys(py.required)) assert.ok(kind in js, `events.py's ${kind} is missing from schema.js`);
  for (const kind of Object.keys(js)) assert.ok(kind in py.required, `schema.js's ${kind} is not in events.py`);
  assert.deepEqual(js, py.required);
  assert.deepEqual([...KNOWN_KINDS].sort(), [...py.kinds].sort(), 'every Kind has a REQUIRED entry');
});

test('RunStatus and the ended statuses are the same in schema.js and events.py', { skip: needsPython }, () => {
  assert.deepEqual({ ...RunStatus }, py.statuses);
  assert.deepEqual([...ENDED].sort(), py.ended);
});

test('numbers beyond ±2**53 are refused on both sides', { skip: needsPython }, () => {
  assert.equal(MAX_NUMBER, py.max);
  const ok = { seq: 0, t: 1.5, run: 'r', rank: 0, kind: 'yield', idx: 3, wait: 0.1 };
  assert.equal(invalidReason(ok), null);
  assert.match(invalidReason({ ...ok, t: 1.7e308 }), /within \+-2\*\*53/);
  assert.match(invalidReason({ ...ok, seq: 2 ** 64 }), /within \+-2\*\*53/);
});
