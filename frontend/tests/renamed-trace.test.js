// Traces written before the reorder event was renamed (kind `buffer`, yield's `from_buffer`: now
// `parked` and `from_parked`, the contract's RENAMED_KINDS and RENAMED_FIELDS) read on the page as
// the same trace written today: JSON lines through the workers' fast path and JSON.parse, Parquet
// parts through their columns. The old traces are a real recording checked in before the rename
// (fixtures/gpu_step_h100.jsonl and its .trace.parquet); today's is its lines with the new names.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventTable } from '../js/model/event-table.js';
import { reduce } from '../js/model/reducer.js';
import { summary } from '../js/model/stats.js';
import { pushLine } from '../js/model/table-lines.js';
import { renamed } from '../js/model/schema.js';
import { partIntoTable, zstdReady } from '../js/views/parquet-trace.js';
import { PART_NAME } from '../js/views/trace-file.js';
import { TraceReader } from '../js/views/trace-file.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');
const OLD = readFileSync(join(FIXTURES, 'gpu_step_h100.jsonl'), 'utf8');
const TODAY = OLD.replaceAll('"kind":"buffer"', '"kind":"parked"').replaceAll('"from_buffer":', '"from_parked":');

/** How many lines of the last trace `lines` read went straight into the columns (pushLine). */
let fast = 0;

/** A trace file's events as the page's workers read them (trace-worker.js). @param {string} text */
function lines(text) {
  const table = new EventTable(16);
  fast = 0;
  const reader = new TraceReader({
    source: 't',
    onHeader: () => {},
    onEvent: (e) => table.push(e),
    accept: (e) => table.pushValid(e),
    acceptLine: (bytes, start, end) => {
      const at = pushLine(table, bytes, start, end);
      if (at >= 0) fast += 1;
      return at;
    },
  });
  reader.push(new TextEncoder().encode(text));
  return events(table);
}

/** @param {EventTable} table */
const events = (table) => Array.from({ length: table.length }, (_, i) => structuredClone(table.get(i)));

test("an old JSON-lines trace reads as the same trace with today's names, to the same state", () => {
  assert.ok(OLD.includes('"kind":"buffer"') && OLD.includes('"from_buffer":true'), 'written before the rename');
  const old = lines(OLD);
  const oldFast = fast;
  const today = lines(TODAY);
  assert.deepEqual(old, today);
  assert.equal(oldFast, fast, 'an old name takes the fast path as its new one does');
  assert.ok(fast > 400, `most lines straight into the columns (${fast})`);
  const s = reduce(old);
  assert.ok(s.parked_high > 0 && s.out_of_order === old.filter((e) => e.kind === 'parked').length);
  assert.ok(old.some((e) => e.kind === 'yield' && e.from_parked === true));
  assert.deepEqual(summary(s), summary(reduce(today)));
});

test('an old Parquet trace reads as the JSON lines of today, to the same state', async () => {
  await zstdReady();
  const dir = join(FIXTURES, 'gpu_step_h100.trace.parquet'); // its yield column: from_buffer
  const table = new EventTable(16);
  for (const name of readdirSync(dir)
    .filter((n) => PART_NAME.test(n))
    .sort()) {
    const b = readFileSync(join(dir, name));
    partIntoTable(b.buffer.slice(b.byteOffset, b.byteOffset + b.length), name, table);
  }
  const today = lines(TODAY);
  assert.deepEqual(events(table), today);
  assert.deepEqual(summary(reduce(events(table))), summary(reduce(today)));
});

test('renamed gives an event its names of today and leaves any other as it is', () => {
  assert.deepEqual(renamed({ kind: 'yield', idx: 1, wait: 0, from_buffer: true }), {
    kind: 'yield',
    idx: 1,
    wait: 0,
    from_parked: true,
  });
  assert.deepEqual(renamed({ kind: 'buffer', idx: 1 }), { kind: 'parked', idx: 1 });
  assert.deepEqual(renamed({ kind: 'fetch_end', from_buffer: 1 }), { kind: 'fetch_end', from_buffer: 1 });
  assert.deepEqual(renamed({ kind: 'constructor' }), { kind: 'constructor' });
  assert.equal(renamed(null), null);
});
