// The stream client against fake transports: nothing missing, nothing twice, gaps reported.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RunStream, normalizePage } from '../js/views/stream.js';

const ev = (seq, kind = 'dispatch') => ({ seq, t: seq / 100, run: 'r', rank: 0, kind, idx: seq, worker: 0 });
const range = (a, b) => Array.from({ length: b - a + 1 }, (_, i) => ev(a + i));
const tick = () => new Promise((r) => setTimeout(r, 0));

function harness(store = range(0, 99)) {
  const sockets = [];
  const got = [];
  const notes = [];
  const timers = [];
  const s = new RunStream({
    openSocket(after) {
      const ws = {
        after,
        closed: false,
        close() {
          this.closed = true;
          this.onclose?.();
        },
      };
      sockets.push(ws);
      return ws;
    },
    async fetchEvents(after, limit) {
      return store.filter((e) => e.seq > after).slice(0, limit);
    },
    onEvents: (events) => got.push(...events),
    onNote: (n) => notes.push(n),
    setTimer: (fn) => timers.push(fn),
  });
  const send = (x) => sockets.at(-1).onmessage({ data: JSON.stringify(x) });
  return { s, sockets, got, notes, timers, send };
}

const seqs = (events) => events.map((e) => e.seq);

test('frames are applied in order; duplicates are dropped', () => {
  const h = harness();
  h.s.start();
  h.send(range(0, 4));
  h.send(range(3, 7));
  assert.deepEqual(seqs(h.got), [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.equal(h.s.duplicates, 2);
});

test('reconnect asks for after=lastSeq and loses nothing', async () => {
  const h = harness();
  h.s.start();
  assert.equal(h.sockets[0].after, -1);
  h.send(range(0, 9));
  h.sockets[0].onclose();
  assert.equal(h.timers.length, 1);
  h.timers[0]();
  assert.equal(h.sockets[1].after, 9);
  h.send(range(10, 12));
  assert.deepEqual(seqs(h.got), [...Array(13).keys()]);
});

test('resync meta fetches the skipped range over REST, then applies queued frames', async () => {
  const h = harness();
  h.s.start();
  h.send(range(0, 9));
  h.send({ type: 'resync', from: 10, to: 59 });
  h.send(range(60, 64)); // arrives while catching up
  await tick();
  await tick();
  assert.deepEqual(seqs(h.got), [...Array(65).keys()]);
});

test('a hole in the frames is filled from REST before going on', async () => {
  const h = harness();
  h.s.start();
  h.send(range(0, 4));
  h.send(range(8, 9));
  await tick();
  await tick();
  assert.deepEqual(seqs(h.got), [...Array(10).keys()]);
});

test('gap meta is shown and the cursor moves past it', () => {
  const h = harness();
  h.s.start();
  h.send({ type: 'gap', from: 0, to: 19, reason: 'evicted' });
  h.send(range(20, 21));
  assert.deepEqual(seqs(h.got), [20, 21]);
  assert.equal(h.notes[0].type, 'gap');
});

test('a range the server no longer has becomes a gap note, not a silent skip', async () => {
  const h = harness(range(30, 40));
  h.s.start();
  h.send(range(0, 4));
  h.send({ type: 'resync', from: 5, to: 29 });
  await tick();
  await tick();
  assert.ok(h.notes.some((n) => n.type === 'gap' && n.from === 5));
  h.send(range(41, 42));
  assert.ok(seqs(h.got).includes(42));
});

test('invalid events are reported, not applied', () => {
  const h = harness();
  h.s.start();
  h.send([ev(0), { seq: 1, t: 0, kind: 'dispatch', idx: 'x', worker: 0 }, ev(2)]);
  assert.deepEqual(seqs(h.got), [0, 2]);
  assert.equal(h.notes[0].type, 'invalid');
  h.sockets[0].onmessage({ data: 'not json' });
  assert.equal(h.notes.at(-1).type, 'bad');
});

test('after run_end a closing socket is not reconnected', () => {
  const h = harness();
  h.s.start();
  h.send([ev(0, 'run_end')].map((e) => ({ ...e, reason: 'done' })));
  h.sockets[0].onclose();
  assert.equal(h.timers.length, 0);
});

test('REST pages may be lists or objects', () => {
  assert.deepEqual(normalizePage([1]).events, [1]);
  assert.deepEqual(normalizePage({ events: [2], gap: { from: 0, to: 1 } }).gap, { from: 0, to: 1 });
  assert.deepEqual(normalizePage(null).events, []);
});

test('messages, their characters and resyncs are counted (what bench/pipeline.py reports per message)', async () => {
  const h = harness();
  h.s.start();
  h.send(range(0, 9));
  h.send({ type: 'resync', from: 10, to: 19 });
  await tick();
  assert.equal(h.s.messages, 2);
  assert.equal(
    h.s.chars,
    JSON.stringify(range(0, 9)).length + JSON.stringify({ type: 'resync', from: 10, to: 19 }).length,
  );
  assert.equal(h.s.resyncs, 1);
});
