// A Parquet trace gives the page the events its JSON lines give, row for row, in every layout a
// writer may choose; anything else is refused by name. The fixtures are a real recording
// (fixtures/gpu_step_h100.jsonl) written by loaderscope/traces/parquet.py and by pyarrow other ways
// (fixtures/make_parquet.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventTable } from '../js/model/event-table.js';
import { countRows, indicesOnly, partIntoTable, readPart, zstdReady } from '../js/views/parquet-trace.js';
import { PART_NAME } from '../js/views/trace-file.js';
import { TraceError } from '../js/views/trace-file.js';
import { renamed } from '../js/model/schema.js';
import { groupTraces } from '../js/views/trace-open.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures');
const LINES = readFileSync(join(FIXTURES, 'gpu_step_h100.jsonl'), 'utf8')
  .split('\n')
  .filter((l) => l.trim());
// the fixtures were written before the reorder event's rename: the page reads them with today's names
const EVENTS = LINES.slice(1).map((l) => renamed(JSON.parse(l)));

/** @param {string} path */
function buffer(path) {
  const b = readFileSync(path);
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.length);
}

/** Every file of a trace into one table, as the page's workers read its parts. @param {string[]} paths */
function read(paths) {
  const table = new EventTable(16);
  const headers = paths.map((path) => partIntoTable(buffer(path), path, table).header);
  return { table, headers };
}

test('a trace written by loaderscope comes back event for event, the frequent kinds in columns', async () => {
  await zstdReady();
  const dir = join(FIXTURES, 'gpu_step_h100.trace.parquet');
  const parts = readdirSync(dir)
    .filter((name) => PART_NAME.test(name))
    .sort();
  assert.ok(parts.length > 1, 'several parts');
  const { table, headers } = read(parts.map((name) => join(dir, name)));
  assert.equal(table.length, EVENTS.length);
  for (let i = 0; i < EVENTS.length; i++) assert.deepEqual(table.get(i), EVENTS[i], `event ${i}`);
  const blobs = parts.map((name) => Object.assign(new Blob([readFileSync(join(dir, name))]), { name }));
  assert.equal(await countRows(blobs, 'h100'), EVENTS.length, 'counted from the footers alone');
  const json = JSON.parse(LINES[0]);
  for (const h of headers)
    assert.deepEqual(
      { format: h.format, version: h.version, run: h.run },
      { format: json.format, version: json.version, run: json.run },
    );
  // only rare kinds (run_start, worker_start, epochs, run_end...) are kept as objects
  const hot = new Set([
    'dispatch',
    'fetch_start',
    'fetch_end',
    'arrive',
    'parked',
    'yield',
    'skip',
    'pin_start',
    'pin_end',
  ]);
  const packable = EVENTS.filter((e) => hot.has(e.kind) && e.pinned === undefined).length;
  assert.ok(table.packed >= packable, `${table.packed} packed of ${packable}`);
});

test('a trace of the previous writer (every column in every part, wall_start in extra) reads the same', async () => {
  await zstdReady();
  const dir = join(FIXTURES, 'gpu_step_h100.v1.trace.parquet'); // never rewritten: make_parquet.py leaves it
  const parts = readdirSync(dir)
    .filter((name) => PART_NAME.test(name))
    .sort();
  const { table } = read(parts.map((name) => join(dir, name)));
  assert.equal(table.length, EVENTS.length);
  for (let i = 0; i < EVENTS.length; i++) assert.deepEqual(table.get(i), EVENTS[i], `event ${i}`);
});

test('pages v2 with Snappy, uncompressed PLAIN, delta and byte-stream-split give the same events', async () => {
  await zstdReady();
  for (const name of ['v2-snappy', 'plain', 'encoded']) {
    const { table } = read([join(FIXTURES, `gpu_step_h100.${name}.parquet`)]);
    assert.equal(table.length, EVENTS.length, name);
    for (let i = 0; i < EVENTS.length; i++) assert.deepEqual(table.get(i), EVENTS[i], `${name}: event ${i}`);
  }
});

test('strings past ASCII come back as written, a long one too', async () => {
  await zstdReady();
  const names = JSON.parse(readFileSync(join(FIXTURES, 'named.json'), 'utf8'));
  const { table } = read([join(FIXTURES, 'named.plain.parquet')]);
  assert.equal(table.length, EVENTS.length);
  for (let i = 0; i < EVENTS.length; i++) {
    const e = EVENTS[i];
    assert.deepEqual(table.get(i), e.kind === 'run_start' ? { ...e, ...names } : e, `event ${i}`);
  }
  assert.ok(new TextEncoder().encode(names.job).length > 127, 'a value whose length takes two bytes');
});

test('files that are not Parquet traces are refused with what they are', async () => {
  await zstdReady();
  const jsonl = new TextEncoder().encode(LINES.join('\n')).buffer;
  assert.throws(
    () => readPart(jsonl, 'x.parquet'),
    (err) => err instanceof TraceError && /x.parquet is not a Parquet file/.test(err.message),
  );
  assert.throws(() => readPart(new ArrayBuffer(3), 'y.parquet'), /y.parquet is not a Parquet file/);
  const notParquet = Object.assign(new Blob([jsonl]), { name: 'part-000000.parquet' });
  await assert.rejects(
    countRows([notParquet], 'z.trace.parquet'),
    /z.trace.parquet\/part-000000.parquet is not a Parquet file/,
  );
});

test('picked and dropped files make one trace per JSON-lines file and per directory of parts', () => {
  const file = (name) => /** @type {File} */ ({ name, size: 10 });
  const traces = groupTraces([
    { file: file('rank0.trace.jsonl') },
    { file: file('part-000001.parquet'), dir: 'a.trace.parquet' },
    { file: file('part-000000.parquet'), dir: 'a.trace.parquet' },
    { file: file('.part-000002.parquet.tmp'), dir: 'a.trace.parquet' }, // a writer's unfinished part
    { file: file('part-000000.parquet'), dir: 'b.trace.parquet' },
    { file: file('one.parquet') },
  ]);
  assert.deepEqual(
    traces.map((t) => [t.name, t.size, t.parts?.map((p) => p.name) ?? t.file?.name]),
    [
      ['rank0.trace.jsonl', 10, 'rank0.trace.jsonl'],
      ['a.trace.parquet', 20, ['part-000000.parquet', 'part-000001.parquet']],
      ['b.trace.parquet', 10, ['part-000000.parquet']],
      ['one.parquet', 10, 'one.parquet'],
    ],
  );
  const picked = groupTraces([{ file: file('part-000001.parquet') }, { file: file('part-000000.parquet') }]);
  assert.deepEqual(
    picked.map((t) => t.parts?.map((p) => p.name)),
    [['part-000000.parquet', 'part-000001.parquet']],
  );
});

test("a dispatch's indices are read as JSON.parse reads them, or left to it", () => {
  const taken = ['{"indices":[]}', '{"indices":[0]}', '{"indices":[9370]}', '{"indices":[1,22,333,999999999]}'];
  for (const text of taken) assert.deepEqual(indicesOnly(text), JSON.parse(text), text);
  const left = [
    '{"indices":[01]}',
    '{"indices":[1,]}',
    '{"indices":[,1]}',
    '{"indices":[-1]}',
    '{"indices":[1.5]}',
    '{"indices":[1e3]}',
    '{"indices":[ 1]}',
    '{"indices":[1234567890]}',
    '{"indices":[1]} ',
    '{"indices":[1],"n":1}',
    '{"pinned":true}',
  ];
  for (const text of left) assert.equal(indicesOnly(text), null, text);
});
