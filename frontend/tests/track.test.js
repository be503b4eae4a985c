// A track keeps what the page needs beside the player: notes stamped with the row they follow,
// each epoch's delivery times on the wall clock, and the shard digests of epoch ends.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Track } from '../js/track.js';
import { synthesize } from '../dev/synth.js';
import { EventTable } from '../js/event-table.js';
import { TraceReader } from '../js/trace-file.js';
import { summary } from '../js/reducer.js';

test('notes carry their row; yields are kept per epoch on the wall clock', () => {
  const tr = new Track({ rank: 1, label: 'rank 1', source: 'file' });
  const events = synthesize({ num_workers: 2, batches: 5, epochs: 2, job: 'j', world_size: 2, wall_start: 50 });
  events.splice(20, 0, { seq: 0, t: events[19].t, run: 'synth', rank: 0, kind: 'worker_stuck', worker: 0, idx: 1, elapsed: 11 });
  events.push({ seq: 0, t: 9, run: 'synth', rank: 0, kind: 'mystery' });
  events.forEach((e, i) => { e.seq = i; tr.ingest(e); });
  assert.equal(tr.wall0, 50);
  assert.deepEqual([...tr.yields.keys()], [0, 1]);
  assert.equal(tr.yields.get(0).length, 5);
  assert.ok(tr.yields.get(0)[0] >= 50);
  const stuck = tr.noteItems.find((n) => n.kind === 'worker_stuck');
  assert.equal(stuck._row, 21, 'shown once the cursor has passed it');
  assert.ok(tr.noteItems.at(-1).unknown, 'unknown kinds are shown, marked');
  assert.ok(tr.complete, 'run_end seen');
});

test('a trace read the fast way (lines into columns, batches appended) shows what the reference way shows', () => {
  // the fast way is trace-worker.js's and the page's (pushLine, batches, ingestRows); the reference
  // is every line through JSON.parse and the schema, each event applied alone
  const events = synthesize({ num_workers: 3, batches: 120, epochs: 2, pin_ms: 2, in_order: false });
  events.splice(300, 0, { seq: 0, t: events[299].t, run: 'synth', rank: 0, kind: 'worker_stuck', worker: 1, idx: 40, elapsed: 12 },
    { seq: 0, t: events[299].t, run: 'synth', rank: 0, kind: 'yield', idx: 41, wait: 1e-7, note: 'an extra field' });
  events.forEach((e, i) => { e.seq = i; });
  const text = `${JSON.stringify({ format: 'loaderscope-trace', version: 1, run: 'synth' })}\n${events.map((e) => JSON.stringify(e)).join('\n')}\n`;
  const reference = new Track({ rank: 0, label: 'reference', source: 'file' });
  const fast = new Track({ rank: 0, label: 'fast', source: 'file' });
  reference.player.every = fast.player.every = 256;
  const slow = new TraceReader({ source: 't', onHeader: () => {}, onEvent: (e) => reference.ingest(e) });
  let rows = new EventTable(64);
  let lines = 0;
  const quick = new TraceReader({ source: 't', onHeader: () => {}, onEvent: (e) => rows.push(e), accept: (e) => rows.pushValid(e),
    acceptLine: (t, s, e) => rows.pushLine(t, s, e) && (lines += 1) > 0 });
  for (let p = 0; p < text.length; p += 4096) {
    slow.push(text.slice(p, p + 4096));
    quick.push(text.slice(p, p + 4096));
    if (rows.length >= 64) { fast.ingestRows(rows); rows = new EventTable(64); }
  }
  slow.end();
  quick.end();
  fast.ingestRows(rows);
  assert.ok(lines > events.length * 0.9, `most lines go straight into columns (${lines} of ${events.length})`);
  assert.equal(fast.player.length, events.length);
  for (let i = 0; i < events.length; i++) assert.deepEqual(fast.player.event(i), reference.player.event(i), `row ${i}`);
  assert.deepEqual(summary(fast.state), summary(reference.state));
  assert.deepEqual(fast.state.violations, reference.state.violations);
  assert.deepEqual(fast.noteItems, reference.noteItems);
  assert.deepEqual([...fast.yields], [...reference.yields]);
  assert.deepEqual(fast.parkedRows, reference.parkedRows);
  const spans = (tr) => [...tr.store.workers.values(), tr.store.consumer, tr.store.pin]
    .map((c) => [...c.start.subarray(0, c.n), ...c.end.subarray(0, c.n), ...c.ref.subarray(0, c.n), ...c.ref2.subarray(0, c.n)]);
  assert.deepEqual(spans(fast), spans(reference));
  for (const i of [0, 255, 256, 1000, events.length - 1]) {
    fast.player.seek(i);
    reference.player.seek(i);
    assert.deepEqual(summary(fast.state), summary(reference.state), `cursor ${i}`);
  }
});
