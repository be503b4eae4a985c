// Scrubbing: the state at any cursor equals the reducer run from the start up to there, whichever
// way the cursor got there (forward, back, jumps across snapshots); steps move by event or batch.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Player } from '../js/model/player.js';
import { Track } from '../js/model/track.js';
import { EventTable } from '../js/model/event-table.js';
import { reduce, MAX_KEPT } from '../js/model/reducer.js';
import { summary } from '../js/model/stats.js';
import { synthesize } from '../dev/synth.js';

function fingerprint(s) {
  return JSON.stringify({
    seq: s.seq,
    t: s.t,
    send: s.send_idx,
    rcvd: s.rcvd_idx,
    out: s.outstanding,
    rq: s.result_queue,
    buf: s.parked,
    tasks: [...s.tasks.values()],
    workers: [...s.workers.values()].map((w) => ({ ...w, stuck: !!w.stuck })),
    sum: summary(s),
    yields: s.yield_order.length,
    notes: s.notes.length,
    epoch: s.epoch,
    status: s.status,
  });
}

function load(events, every) {
  const p = new Player({ every });
  for (const e of events) p.append(e);
  return p;
}

test('state at any cursor equals a fresh reduce of the events before it', () => {
  const events = synthesize({ num_workers: 3, batches: 60, epochs: 2, pin_ms: 2 });
  const p = load(events, 37);
  assert.equal(p.cursor, events.length);
  assert.equal(fingerprint(p.state), fingerprint(reduce(events)));
  const order = [5, 200, 199, 0, events.length - 1, 120, 121, 122, 400, 37, 36, 74, events.length, 3];
  for (const i of order) {
    p.seek(i);
    assert.equal(p.cursor, i);
    assert.equal(fingerprint(p.state), fingerprint(reduce(events.slice(0, i))), `cursor ${i}`);
  }
});

test('seeking never disturbs the full state, and loading goes on behind a paused cursor', () => {
  const events = synthesize({ num_workers: 2, batches: 30 });
  const p = new Player({ every: 16 });
  for (const e of events.slice(0, 50)) p.append(e);
  p.seek(10);
  for (const e of events.slice(50)) p.append(e);
  assert.equal(p.cursor, 10, 'the cursor stays where the user put it');
  assert.equal(fingerprint(p.full), fingerprint(reduce(events)));
  p.follow();
  assert.equal(p.cursor, events.length);
});

test('step one event, one batch, forward and back', () => {
  const events = synthesize({ num_workers: 2, batches: 10 });
  const p = load(events, 8);
  p.seek(0);
  p.stepEvent(1);
  assert.equal(p.cursor, 1);
  p.stepBatch(1);
  assert.equal(p.state.batches, 1);
  assert.equal(events[p.cursor - 1].kind, 'yield', 'stops right after the yield');
  p.stepBatch(1);
  assert.equal(p.state.batches, 2);
  p.stepBatch(-1);
  assert.equal(p.state.batches, 1);
  assert.equal(events[p.cursor - 1].kind, 'yield');
  p.stepBatch(-1);
  assert.equal(p.state.batches, 0);
  p.stepEvent(-1);
  assert.equal(p.cursor, 0);
});

test('the cursor time and the row at a time agree', () => {
  const events = synthesize({ num_workers: 2, batches: 10 });
  const p = load(events, 8);
  const row = p.rowAt(events[40].t);
  p.seek(row);
  assert.equal(p.time, events[row - 1].t);
  assert.ok(row >= 41);
});

test('a cursor parked at the end stays there while more events load', () => {
  const events = synthesize({ num_workers: 2, batches: 20 });
  const p = new Player({ every: 16 });
  p.following = false;
  for (const e of events.slice(0, 40)) p.append(e);
  assert.equal(p.cursor, 0);
  p.seek(40);
  for (const e of events.slice(40)) p.append(e);
  assert.equal(p.cursor, 40);
  assert.equal(fingerprint(p.state), fingerprint(reduce(events.slice(0, 40))));
  assert.equal(fingerprint(p.full), fingerprint(reduce(events)));
});

test('seeks stay exact across the reducer trimming yield_order', () => {
  const events = synthesize({ num_workers: 1, prefetch_factor: 1, batches: 2600, step: 0.0001 });
  const p = load(events, 512);
  for (const i of [events.length - 3, 14000, 12010, 6001, 100, events.length]) {
    p.seek(i);
    const fresh = reduce(events.slice(0, i));
    assert.equal(fingerprint(p.state), fingerprint(fresh), `cursor ${i}`);
    assert.deepEqual(p.state.yield_order.slice(-5), fresh.yield_order.slice(-5));
  }
});

test('a snapshot holds no list that grows with the run: a 10M-event trace takes thousands of them', () => {
  // every list in the state that only grows is kept by its length; one copied whole made opening
  // a long trace quadratic (step_gaps: 17M numbers copied into the snapshots of a 1M-event trace)
  const events = synthesize({ num_workers: 1, prefetch_factor: 1, batches: 2600, step: 0.0001 });
  const p = load(events, 512);
  const longest = Math.max(
    ...p.snapshots.flatMap((s) => Object.values(s.values).map((v) => (Array.isArray(v) ? v.length : 0))),
  );
  assert.ok(longest <= 2 * MAX_KEPT, `a snapshot copies a list of ${longest} items`);
  p.seek(events.length - 7);
  assert.equal(fingerprint(p.state), fingerprint(reduce(events.slice(0, events.length - 7))));
});

test('a track given batches of rows ends where one given each event ends, timeline and notes too', () => {
  const events = synthesize({ num_workers: 3, batches: 80, epochs: 2, pin_ms: 2 });
  events.splice(100, 0, {
    seq: 0,
    t: events[99].t,
    run: 'synth',
    rank: 0,
    kind: 'worker_stuck',
    worker: 0,
    idx: 30,
    elapsed: 11,
  });
  events.forEach((e, i) => {
    e.seq = i;
  });
  const one = new Track({ rank: 0, label: 'one', source: 'file' });
  const bulk = new Track({ rank: 0, label: 'bulk', source: 'file' });
  one.player.every = bulk.player.every = 64;
  for (const e of events) one.ingest(e);
  for (let from = 0; from < events.length; from += 50) {
    const rows = new EventTable();
    for (const e of events.slice(from, from + 50)) rows.push(e);
    bulk.ingestRows(rows);
  }
  assert.equal(fingerprint(bulk.state), fingerprint(one.state));
  assert.equal(bulk.player.cursor, events.length);
  assert.deepEqual(bulk.noteItems, one.noteItems);
  assert.deepEqual([...bulk.yields], [...one.yields]);
  assert.deepEqual(bulk.parkedRows, one.parkedRows);
  const spans = (tr) =>
    [...tr.store.workers.values(), tr.store.consumer, tr.store.pin].map((c) => [
      ...c.ref.subarray(0, c.n),
      ...c.ref2.subarray(0, c.n),
      ...c.end.subarray(0, c.n),
    ]);
  assert.deepEqual(spans(bulk), spans(one));
  for (const i of [0, 63, 64, 500, events.length - 1]) {
    bulk.player.seek(i);
    assert.equal(fingerprint(bulk.state), fingerprint(reduce(events.slice(0, i))), `cursor ${i}`);
  }
});
