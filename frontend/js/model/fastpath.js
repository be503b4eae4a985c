// The fast path: a big trace's packed rows (an EventTable's columns) applied to a LoaderState with
// no event built, by the same rules as reducer.js's apply. Mirrors backend/loaderscope/model/fastpath.py.
// Pure: no DOM, no I/O, no clock.

import { FREQUENT, WHERE as Where, WORKER_STATUS as WorkerStatus } from './contract.gen.js';
import { EventTable } from './event-table.js';
import { HOT_CODE, remove } from './hot-code.js';
import { ALL_RULES, compile } from './reducer.js';

/** @typedef {import('./reducer.js').LoaderState} LoaderState */
/** @typedef {import('./reducer.js').Effect} Effect */
/** @typedef {import('./reducer.js').Rule} Rule */

/**
 * Advance the state by row i of `table`, exactly as s.apply(table.get(i)) would: a packed row is read
 * from the columns by the same rules, with no event built (a big trace has ten million of them).
 * @param {LoaderState} s @param {EventTable} table @param {number} i
 */
export function applyRow(s, table, i) {
  if (table.isObject(i)) return s.apply(table.get(i));
  s.seq = table.seq[i];
  s.t = table.t[i];
  if (s.first_t === null) s.first_t = s.t;
  const code = table.kind[i];
  if (INLINED[code]) {
    applyInlined(s, table, i, code);
    return;
  }
  const [needsTask, effects] = COLUMN_STEPS[code];
  if (needsTask && s.task(table.kindOf(i), table.idx[i]) === undefined) return;
  for (const effect of effects) effect(s, table, i);
}

/**
 * The frequent kinds' steps over a packed row, by the row's kind code (FREQUENT's order from 1;
 * code 0, a row kept whole, goes through STEPS). The same rules, read from the columns.
 * @type {Array<[boolean, Effect[]]>}
 */
const COLUMN_STEPS = [
  [false, []],
  ...FREQUENT.map((kind) =>
    compile(
      kind,
      ALL_RULES[kind],
      (name) => EventTable.field(kind, name),
      (table, i) => table.get(i),
    ),
  ),
];

// --- the frequent kinds' rows, their effects written out in one switch --------------------------

// The rules applyInlined writes out, as they were when it was written (state.py's _INLINED_RULES):
// a kind whose rule in the contract changes goes through its compiled steps (COLUMN_STEPS) until
// applyInlined is changed with it. One call per effect through a list of them was a call site no
// engine can inline, a tenth of the page's thread on a big trace.
/** @type {Record<string, Omit<Rule, 'says'>>} */
const INLINED_RULES = {
  dispatch: { enters: 'worker_queue', counts: { outstanding: 1 } },
  fetch_start: {
    worker: WorkerStatus.FETCHING,
    moves: { from: [Where.INDEX_QUEUE], to: Where.FETCHING },
    leaves: 'worker_queue',
  },
  fetch_end: { counts: { fetched_bytes: 'nbytes', pickled_bytes: 'pickled' } },
  arrive: { needs_task: true, counts: { outstanding: -1 } },
  parked: { needs_task: true, moves: { from: [], to: Where.PARKED }, enters: 'parked', counts: { out_of_order: 1 } },
  yield: { counts: { batches: 1, consumer_wait: 'wait', epoch_wait: 'wait' } },
  skip: { counts: { skipped: 1 } },
  pin_start: {},
  pin_end: { counts: { pin_bytes: 'nbytes', pin_time: 'dt' } },
};

/** A rule as plain data with its keys in order, to compare two. @param {object} rule @returns {string} */
const ruleText = (rule) =>
  JSON.stringify(rule, (key, value) =>
    value && typeof value === 'object' && !Array.isArray(value)
      ? Object.fromEntries(
          Object.entries(value)
            .filter(([k]) => k !== 'says')
            .sort(([a], [b]) => (a < b ? -1 : 1)),
        )
      : value,
  );

/** By kind code: whether applyInlined applies that kind's rows. */
export const INLINED = [
  false,
  ...FREQUENT.map((kind) => kind in INLINED_RULES && ruleText(ALL_RULES[kind]) === ruleText(INLINED_RULES[kind])),
];

const CODE_OF = Object.fromEntries(FREQUENT.map((kind, k) => [kind, k + 1]));
/** @param {string} kind @returns {Effect} the kind's own code (HOT_CODE) over the columns */
const hotOverColumns = (kind) => HOT_CODE[kind]((name) => EventTable.field(kind, name));
const [DISPATCH, FETCH_START, FETCH_END, ARRIVE, PARKED, YIELD, SKIP, PIN_START, PIN_END] = [
  hotOverColumns('dispatch'),
  hotOverColumns('fetch_start'),
  hotOverColumns('fetch_end'),
  hotOverColumns('arrive'),
  hotOverColumns('parked'),
  hotOverColumns('yield'),
  hotOverColumns('skip'),
  hotOverColumns('pin_start'),
  hotOverColumns('pin_end'),
];
const WORKER_OF = EventTable.field('dispatch', 'worker');
const NBYTES_OF = EventTable.field('fetch_end', 'nbytes'),
  PICKLED_OF = EventTable.field('fetch_end', 'pickled');
const PIN_NBYTES_OF = EventTable.field('pin_end', 'nbytes'),
  PIN_DT_OF = EventTable.field('pin_end', 'dt');

/**
 * Row i of `table`, a packed row of kind `code`, applied as its compiled steps would: INLINED_RULES'
 * effects in compile()'s order (worker status, moves, enters, leaves, counts), then the kind's own code.
 * @param {LoaderState} s @param {EventTable} table @param {number} i @param {number} code
 */
function applyInlined(s, table, i, code) {
  const idx = table.idx[i];
  switch (code) {
    case CODE_OF.dispatch:
      s.worker(WORKER_OF(table, i)).queue.push(idx);
      s.outstanding += 1;
      DISPATCH(s, table, i);
      break;
    case CODE_OF.fetch_start: {
      const w = s.worker(WORKER_OF(table, i));
      w.status = WorkerStatus.FETCHING;
      const task = s.tasks.get(idx);
      if (task !== undefined && task.where === Where.INDEX_QUEUE) task.where = Where.FETCHING;
      remove(w.queue, idx);
      FETCH_START(s, table, i);
      break;
    }
    case CODE_OF.fetch_end:
      s.fetched_bytes += NBYTES_OF(table, i) || 0;
      s.pickled_bytes += PICKLED_OF(table, i) || 0;
      FETCH_END(s, table, i);
      break;
    case CODE_OF.arrive:
      if (s.task('arrive', idx) === undefined) return;
      s.outstanding -= 1;
      ARRIVE(s, table, i);
      break;
    case CODE_OF.parked: {
      const task = s.task('parked', idx);
      if (task === undefined) return;
      task.where = Where.PARKED;
      s.parked.push(idx);
      s.out_of_order += 1;
      PARKED(s, table, i);
      break;
    }
    case CODE_OF.yield: {
      const wait = table.a[i] || 0;
      s.batches += 1;
      s.consumer_wait += wait;
      s.epoch_wait += wait;
      YIELD(s, table, i);
      break;
    }
    case CODE_OF.skip:
      s.skipped += 1;
      SKIP(s, table, i);
      break;
    case CODE_OF.pin_start:
      PIN_START(s, table, i);
      break;
    default: // pin_end
      s.pin_bytes += PIN_NBYTES_OF(table, i) || 0;
      s.pin_time += PIN_DT_OF(table, i) || 0;
      PIN_END(s, table, i);
  }
}
