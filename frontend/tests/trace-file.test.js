// Trace files are read as data, in pieces of any size, and anything else is refused by name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TraceReader, TraceError, readTraceFile } from '../js/views/trace-file.js';
import { synthesize } from '../dev/synth.js';

const HEADER = JSON.stringify({ format: 'loaderscope-trace', version: 1, run: 'r', created: 0, loaderscope: '0.1.0' });

function read(text, pieces = 7) {
  const events = [];
  let header = null;
  const r = new TraceReader({
    source: 'x.jsonl',
    onHeader: (h) => {
      header = h;
    },
    onEvent: (e) => events.push(e),
  });
  const bytes = new TextEncoder().encode(text); // pieces cut anywhere, inside a character too
  const size = Math.max(1, Math.ceil(bytes.length / pieces));
  for (let i = 0; i < bytes.length; i += size) r.push(bytes.subarray(i, i + size));
  r.end();
  return { header, events };
}

test('a trace in pieces of any size gives back its header and every event', () => {
  const events = synthesize({ num_workers: 2, batches: 10 });
  events.splice(3, 0, { ...events[3], note: 'été ✓ 🚀' }); // characters of 2, 3 and 4 bytes, cut by some pieces
  const text = `${HEADER}\n${events.map((e) => JSON.stringify(e)).join('\n')}\n`;
  for (const pieces of [1, 3, 50, 997, text.length]) {
    const got = read(text, pieces);
    assert.equal(got.header.run, 'r');
    assert.deepEqual(got.events, events);
  }
  assert.equal(read(`${HEADER}\n${JSON.stringify(events[0])}`).events.length, 1, 'no final newline');
});

test('other files are refused with a message that says what is wrong', () => {
  const bad = [
    ['', /is empty/],
    ['  ', /is empty/],
    ['PK\u0003\u0004 zip', /not a loaderscope trace: its first line is not JSON/],
    ['{"hello": 1}\n', /the first line must be a header/],
    ['[1,2]\n', /the first line must be a header/],
    [
      `${JSON.stringify({ format: 'loaderscope-trace', version: 2, loaderscope: '9' })}\n`,
      /version 2 trace; this loaderscope reads version 1/,
    ],
    [`${HEADER}\n{"seq": 0, "t": 0, "kind": "dispatch"}\n`, /line 2: dispatch event is missing its 'idx' field/],
    [
      `${HEADER}\n{"seq": 0, "t": 0, "kind": "yield", "idx": 1, "wait": 0}\n{"seq": 1, "t": 0,\n`,
      /line 3: not valid JSON/,
    ],
  ];
  for (const [text, message] of bad)
    assert.throws(
      () => read(text),
      (err) => err instanceof TraceError && message.test(err.message),
      text.slice(0, 30),
    );
});

test('readTraceFile reads a Blob, reports progress, and refuses a huge one before reading it', async () => {
  const events = synthesize({ num_workers: 2, batches: 40 });
  const blob = new Blob([`${HEADER}\n${events.map((e) => JSON.stringify(e)).join('\n')}\n`]);
  const got = [];
  let progress = 0;
  const r = await readTraceFile(blob, {
    onHeader: () => {},
    onEvent: (e) => got.push(e),
    onProgress: (d) => {
      progress = d;
    },
    sliceMs: 0,
  });
  assert.equal(r.events, events.length);
  assert.equal(got.length, events.length);
  assert.equal(progress, blob.size);
  const huge = {
    size: 3 * 2 ** 30,
    name: 'huge.jsonl',
    stream: () => {
      throw new Error('must not read');
    },
  };
  await assert.rejects(
    readTraceFile(/** @type {any} */ (huge), { onHeader: () => {}, onEvent: () => {} }),
    /huge.jsonl is 3072 MiB, more than the 2048 MiB/,
  );
});
