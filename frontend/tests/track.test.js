// A track keeps what the page needs beside the player: notes stamped with the row they follow,
// each epoch's delivery times on the wall clock, and the shard digests of epoch ends.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Track } from '../js/track.js';
import { synthesize } from '../dev/synth.js';

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
