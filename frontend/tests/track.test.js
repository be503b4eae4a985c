// A track keeps what the page needs beside the player: notes stamped with the row they follow,
// each epoch's delivery times on the wall clock, and the shard digests of epoch ends.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Track } from '../js/model/track.js';
import { synthesize } from '../dev/synth.js';
import { EventTable } from '../js/model/event-table.js';
import { pushLine } from '../js/model/table-lines.js';
import { TraceReader } from '../js/views/trace-file.js';
import { summary } from '../js/model/stats.js';
import { readFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

test('notes carry their row; yields are kept per epoch on the wall clock', () => {
  const tr = new Track({ rank: 1, label: 'rank 1', source: 'file' });
  const events = synthesize({ num_workers: 2, batches: 5, epochs: 2, job: 'j', world_size: 2, wall_start: 50 });
  events.splice(20, 0, {
    seq: 0,
    t: events[19].t,
    run: 'synth',
    rank: 0,
    kind: 'worker_stuck',
    worker: 0,
    idx: 1,
    elapsed: 11,
  });
  events.push({ seq: 0, t: 9, run: 'synth', rank: 0, kind: 'mystery' });
  events.forEach((e, i) => {
    e.seq = i;
    tr.ingest(e);
  });
  assert.equal(tr.wall0, 50);
  assert.deepEqual([...tr.yields.keys()], [0, 1]);
  assert.equal(tr.yields.get(0).length, 5);
  assert.ok(tr.yields.get(0)[0] >= 50);
  const stuck = tr.noteItems.find((n) => n.kind === 'worker_stuck');
  assert.equal(stuck._row, 21, 'shown once the cursor has passed it');
  assert.ok(tr.noteItems.at(-1).unknown, 'unknown kinds are shown, marked');
  assert.ok(tr.complete, 'run_end seen');
});

/**
 * Read `text` (a trace file) both ways into two tracks: the fast way is trace-worker.js's and the
 * page's (pushLine, batches, ingestRows: packed rows applied straight from the columns); the
 * reference is every line through JSON.parse and the schema, each event applied alone.
 * @param {string} text @param {number} batch rows per batch @param {number} every rows per snapshot
 */
function bothWays(text, batch, every) {
  const reference = new Track({ rank: 0, label: 'reference', source: 'file' });
  const fast = new Track({ rank: 0, label: 'fast', source: 'file' });
  reference.player.every = fast.player.every = every;
  const slow = new TraceReader({ source: 't', onHeader: () => {}, onEvent: (e) => reference.ingest(e) });
  let rows = new EventTable(batch);
  let lines = 0;
  const quick = new TraceReader({
    source: 't',
    onHeader: () => {},
    onEvent: (e) => rows.push(e),
    accept: (e) => rows.pushValid(e),
    acceptLine: (b, s, e) => {
      const end = pushLine(rows, b, s, e);
      if (end >= 0) lines += 1;
      return end;
    },
  });
  const bytes = new TextEncoder().encode(text);
  for (let p = 0; p < bytes.length; p += 4096) {
    slow.push(bytes.subarray(p, p + 4096));
    quick.push(bytes.subarray(p, p + 4096));
    if (rows.length >= batch) {
      fast.ingestRows(rows);
      rows = new EventTable(batch);
    }
  }
  slow.end();
  quick.end();
  fast.ingestRows(rows);
  return { reference, fast, lines };
}

/** Everything the two tracks keep agrees: rows, state, notes, spans, snapshots, and the state at any cursor. */
function assertSame(fast, reference) {
  const n = reference.player.length;
  assert.equal(fast.player.length, n);
  for (let i = 0; i < n; i++) assert.deepEqual(fast.player.event(i), reference.player.event(i), `row ${i}`);
  assert.deepEqual(summary(fast.state), summary(reference.state));
  assert.deepEqual(fast.player.full, reference.player.full, 'the whole state, tasks and workers included');
  assert.deepEqual(fast.noteItems, reference.noteItems);
  assert.deepEqual([...fast.yields], [...reference.yields]);
  assert.deepEqual(fast.parkedRows, reference.parkedRows);
  assert.deepEqual(fast.parked, reference.parked);
  assert.deepEqual(fast.player.snapshots, reference.player.snapshots);
  const store = (tr) => ({ ...tr.store, table: null });
  assert.deepEqual(store(fast), store(reference), 'spans, open fetches, marks, the time range');
  for (const i of [0, 1, fast.player.every - 1, fast.player.every, Math.floor(n / 2), n - 1, n]) {
    fast.player.seek(i);
    reference.player.seek(i);
    assert.deepEqual(fast.state, reference.state, `cursor ${i}`);
  }
}

test(
  'a trace read the fast way (lines into columns, batches applied from the columns) shows what the reference ' +
    'way shows',
  () => {
    for (const inOrder of [false, true]) {
      const events = synthesize({ num_workers: 3, batches: 120, epochs: 2, pin_ms: 2, in_order: inOrder });
      events.splice(
        300,
        0,
        { seq: 0, t: events[299].t, run: 'synth', rank: 0, kind: 'worker_stuck', worker: 1, idx: 40, elapsed: 12 },
        { seq: 0, t: events[299].t, run: 'synth', rank: 0, kind: 'yield', idx: 41, wait: 1e-7, note: 'an extra field' },
        { seq: 0, t: events[299].t, run: 'synth', rank: 0, kind: 'skip', worker: 1, idx: 43 },
      ); // torch drops a task (an iterable's worker ran out)
      events.forEach((e, i) => {
        e.seq = i;
      });
      const text =
        `${JSON.stringify({ format: 'loaderscope-trace', version: 1, run: 'synth' })}\n` +
        `${events.map((e) => JSON.stringify(e)).join('\n')}\n`;
      const { reference, fast, lines } = bothWays(text, 64, 256);
      assert.ok(lines > events.length * 0.9, `most lines go straight into columns (${lines} of ${events.length})`);
      assert.ok(fast.state.violations.length > 0, 'the stray yield breaks an invariant');
      if (inOrder) assert.ok(fast.parkedRows.length > 0, 'results parked in the reorder buffer');
      assertSame(fast, reference);
    }
  },
);

test(
  'a real recorded trace (a pinned 4-worker run on an H100) applied from the columns agrees with each event ' +
    'applied alone',
  () => {
    const text = readFileSync(join(ROOT, 'frontend', 'tests', 'fixtures', 'gpu_step_h100.jsonl'), 'utf8');
    for (const [batch, every] of [
      [64, 32],
      [1000, 4096],
      [7, 5],
    ]) {
      const { reference, fast, lines } = bothWays(text, batch, every);
      assert.ok(lines > 400, `packed rows (${lines})`);
      assertSame(fast, reference);
    }
  },
);
