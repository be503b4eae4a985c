// The browser's reducer must agree with backend/loaderscope/model/state.py: a worked example
// step by step, protocol invariants over synthetic runs, and the Python reducer and diagnosis
// themselves on the same streams (python.js finds the interpreter).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { INLINED } from '../js/model/fastpath.js';
import { LoaderState, reduce, Where, WorkerStatus } from '../js/model/reducer.js';
import { summary, pyRound, median, userFrame } from '../js/model/stats.js';
import { diagnosis, pyFixed } from '../js/model/diagnosis.js';
import { invalidReason } from '../js/model/schema.js';
import { synthesize } from '../dev/synth.js';
import { ROOT, python, needsPython } from './python.js';
import { withLightSamples } from './memory-light.js';

function stream(specs) {
  let seq = 0;
  return specs.map(([t, kind, fields]) => ({ seq: seq++, t, run: 'r', rank: 0, kind, ...fields }));
}

const CONFIG = { num_workers: 4, batch_size: 2, prefetch_factor: 1, in_order: true, persistent_workers: false };

// A worked example: 4 workers, prefetch 1, tasks 0–3 dispatched round-robin; task 1 arrives before task 0
// and is parked in _task_info; then task 0 arrives and both are released in order.
const SEED = stream([
  [0.0, 'run_start', { mode: 'real', scenario: 'out_of_order', config: CONFIG }],
  [0.0, 'epoch_start', { epoch: 0 }],
  ...[0, 1, 2, 3].map((w) => [0.0, 'worker_start', { worker: w, pid: 100 + w }]),
  ...[0, 1, 2, 3].map((i) => [0.01, 'dispatch', { idx: i, worker: i, indices: [2 * i, 2 * i + 1] }]),
  ...[0, 1, 2, 3].map((i) => [0.02, 'fetch_start', { idx: i, worker: i }]),
  [0.1, 'fetch_end', { idx: 1, worker: 1, dt: 0.08 }],
  [0.11, 'arrive', { idx: 1, worker: 1 }],
  [0.11, 'parked', { idx: 1, worker: 1, waiting_for: 0 }],
  [0.2, 'fetch_end', { idx: 0, worker: 0, dt: 0.18 }],
  [0.21, 'arrive', { idx: 0, worker: 0 }],
  [0.21, 'yield', { idx: 0, wait: 0.2, from_parked: false }],
  [0.21, 'dispatch', { idx: 4, worker: 0, indices: [8, 9] }],
  [0.22, 'yield', { idx: 1, wait: 0.0, from_parked: true }],
  [0.22, 'dispatch', { idx: 5, worker: 1, indices: [10, 11] }],
]);

const at = (label) => SEED.findIndex((e, i) => label(e, i));

test('seed example: after priming, send_idx is 4, rcvd_idx 0, one task per worker', () => {
  const s = reduce(SEED, SEED[at((e) => e.kind === 'dispatch' && e.idx === 3)].seq);
  assert.equal(s.send_idx, 4);
  assert.equal(s.rcvd_idx, 0);
  assert.equal(s.outstanding, 4);
  assert.deepEqual([...s.tasks.keys()], [0, 1, 2, 3]);
  for (const w of [0, 1, 2, 3]) assert.deepEqual(s.workers.get(w).queue, [w]);
});

test('seed example: fetching empties the index queues and marks workers busy', () => {
  const s = reduce(SEED, SEED[at((e) => e.kind === 'fetch_start' && e.idx === 3)].seq);
  for (const w of [0, 1, 2, 3]) {
    assert.deepEqual(s.workers.get(w).queue, []);
    assert.equal(s.workers.get(w).current, w);
    assert.equal(s.workers.get(w).status, WorkerStatus.FETCHING);
  }
});

test('seed example: task 1 finishes first and waits on the result queue', () => {
  const s = reduce(SEED, SEED[at((e) => e.kind === 'fetch_end' && e.idx === 1)].seq);
  assert.deepEqual(s.result_queue, [1]);
  assert.equal(s.tasks.get(1).where, Where.RESULT_QUEUE);
  assert.equal(s.workers.get(1).status, WorkerStatus.IDLE);
});

test('seed example: task 1 arrives out of order and is parked in the reorder buffer', () => {
  const s = reduce(SEED, SEED[at((e) => e.kind === 'parked')].seq);
  assert.deepEqual(s.result_queue, []);
  assert.deepEqual(s.parked, [1]);
  assert.equal(s.tasks.get(1).where, Where.PARKED);
  assert.equal(s.rcvd_idx, 0);
  assert.equal(s.outstanding, 3);
  assert.equal(s.parked_high, 1);
  assert.equal(s.out_of_order, 1);
});

test('seed example: task 0 arrives, is yielded; task 1 leaves the buffer next; cursors advance', () => {
  let s = reduce(SEED, SEED[at((e) => e.kind === 'yield' && e.idx === 0)].seq);
  assert.equal(s.rcvd_idx, 1);
  assert.deepEqual(s.parked, [1]);
  // task 1 parked at 0.11 s: from then on in_order=False would have handed it over, 0.10 s of the 0.2 s wait
  assert.ok(Math.abs(s.head_of_line_wait - 0.1) < 1e-9, 'waited on the late head-of-line task while task 1 sat ready');
  s = reduce(SEED);
  assert.equal(s.rcvd_idx, 2);
  assert.equal(s.send_idx, 6);
  assert.deepEqual(s.parked, []);
  assert.deepEqual(s.yield_order, [
    [0, 0],
    [0, 1],
  ]);
  assert.equal(s.batches, 2);
  assert.deepEqual(s.violations, []);
});

test('epoch_start resets task numbering, keeps statistics', () => {
  const events = synthesize({ num_workers: 3, batches: 7, epochs: 3 });
  const s = reduce(events);
  assert.equal(s.epochs_done, 3);
  assert.equal(s.batches, 21);
  assert.deepEqual(
    s.yield_order.slice(0, 8).map(([, i]) => i),
    [0, 1, 2, 3, 4, 5, 6, 0],
  );
  assert.deepEqual(s.violations, []);
});

test('unknown kinds are kept as notes, not dropped', () => {
  const s = reduce(
    stream([
      [0, 'run_start', { mode: 'sim', config: CONFIG }],
      [0.1, 'gpu_sync', { x: 1 }],
    ]),
  );
  assert.equal(s.notes.length, 1);
  assert.equal(s.notes[0].kind, 'gpu_sync');
});

test('num_workers=0 gets one lane (the main process), window 1', () => {
  const s = reduce(synthesize({ num_workers: 0, batches: 5 }));
  assert.equal(s.workers.size, 1);
  assert.equal(s.window, 1);
  assert.equal(s.batches, 5);
  assert.deepEqual(s.violations, []);
});

test('invariants hold on synthetic runs; out-of-order arrival is parked', () => {
  for (const W of [1, 2, 4, 8]) {
    for (const pf of [1, 2, 4]) {
      const events = synthesize({ num_workers: W, prefetch_factor: pf, batches: 40 });
      const s = new LoaderState();
      for (const e of events) {
        assert.equal(invalidReason(e), null);
        s.apply(e);
        assert.ok(s.rcvd_idx <= s.send_idx, 'rcvd_idx never passes send_idx');
        assert.ok(s.outstanding <= s.window, 'window bound');
      }
      assert.deepEqual(s.violations, [], `W=${W} pf=${pf}`);
      assert.deepEqual(
        s.yield_order.map(([, i]) => i),
        [...Array(40).keys()],
      );
      if (W > 1) assert.ok(s.parked_high > 0, 'out_of_order parks results');
    }
  }
});

test('in_order=False yields in arrival order without violations', () => {
  const s = reduce(synthesize({ num_workers: 4, batches: 16, in_order: false }));
  assert.deepEqual(s.violations, []);
  assert.equal(s.batches, 16);
  assert.equal(s.parked_high, 0);
  assert.notDeepEqual(
    s.yield_order.map(([, i]) => i),
    [...Array(16).keys()],
  );
});

test('violations are reported like state.py does', () => {
  const s = reduce(
    stream([
      [0, 'run_start', { mode: 'sim', config: { ...CONFIG, num_workers: 1 } }],
      [0, 'epoch_start', { epoch: 0 }],
      [0, 'dispatch', { idx: 1, worker: 0 }],
      [0, 'yield', { idx: 1, wait: 0 }],
      [0, 'arrive', { idx: 9, worker: 0 }],
    ]),
  );
  assert.equal(s.violations.length, 4);
  assert.match(s.violations[0], /dispatch of task 1 but send_idx is 0/);
});

// --- the Python reducer on the same streams ---------------------------------------------------------
const STACK = [
  { file: '/usr/lib/python3/threading.py', line: 10, function: 'run', code: 'self._target()', user: false },
  { file: '/work/app/datasets.py', line: 220, function: '__getitem__', code: 'self.load(i)', user: true },
  { file: '/work/app/datasets.py', line: 222, function: 'load', code: 'time.sleep(seconds)', user: true },
  { file: '/usr/lib/python3/selectors.py', line: 5, function: 'select', code: 'poll()', user: false },
];

/** Trouble of every kind on top of a normal run: stuck, died, consumer stuck, timeout, error, batch_info. */
function troubled() {
  const events = synthesize({ num_workers: 3, batches: 12, pin_ms: 3 });
  const at = events.findIndex((e) => e.kind === 'fetch_start' && e.idx === 4);
  const t = events[at].t;
  const extra = [
    {
      kind: 'worker_stuck',
      worker: events[at].worker,
      pid: 1001,
      idx: 4,
      pos: 1,
      sample: 17,
      elapsed: 12.5,
      threshold: 10,
      stack: STACK,
    },
    {
      kind: 'consumer_stuck',
      elapsed: 11.25,
      threshold: 10,
      waiting_for: 4,
      held_by: events[at].worker,
      has_data: false,
      stack: STACK.slice(0, 2),
    },
    {
      kind: 'timeout',
      seconds: 1.5,
      workers: [{ worker: 0, idx: 4, pos: 0, sample: 16, elapsed: 1.25 }, { worker: 1 }],
    },
    { kind: 'batch_info', idx: 4, worker: 0, structure: { type: 'Tensor' }, pickle_s: 0.002 },
    { kind: 'step', batch: 3, h2d: 0.0015, compute: 0.004, h2d_pageable: 0.003, device: 'cuda:0' },
    { kind: 'step', batch: 4, h2d: 0.0025, compute: 0.004, h2d_pageable: 0.005, device: 'cuda:0' },
    { kind: 'worker_died', worker: 2, pid: 1002, exitcode: -9, signal: 'SIGKILL', idx: 5, pos: 0, sample: 20 },
    {
      kind: 'error',
      idx: 6,
      worker: 0,
      type: 'OSError',
      message: 'unable to write to file </torch_1>',
      traceback: 'Bus error',
    },
    { kind: 'gpu_sync', x: 1 },
  ].map((e) => ({ t, run: 'synth', rank: 0, ...e }));
  const out = [...events.slice(0, at + 1), ...extra, ...events.slice(at + 1)];
  return out.map((e, i) => ({ ...e, seq: i }));
}

/**
 * The pytorch/examples habit and a real loop's evaluation: epoch 0 is a peek (next(iter(loader)),
 * abandoned after one batch), then two epochs with fresh workers each and 2 s of evaluation between them.
 */
function lookedAt() {
  const events = synthesize({ num_workers: 2, batches: 6, epochs: 3, step: 0.01 });
  const out = [];
  let epoch = 0,
    yields = 0,
    shift = 0;
  for (const e of events) {
    if (e.kind === 'epoch_start') {
      epoch = e.epoch;
      yields = 0;
      if (epoch === 2) shift += 2;
      if (epoch > 0)
        out.push(...[0, 1].map((w) => ({ ...e, kind: 'worker_start', worker: w, pid: 2000 + 10 * epoch + w })));
    }
    if (e.kind === 'yield') yields += 1;
    if (epoch === 0 && e.kind === 'epoch_end') out.push({ ...e, abandoned: true, batches: 1 });
    else if (epoch !== 0 || yields <= 1) out.push({ ...e, t: e.t + shift });
  }
  return out.map((e, i) => ({ ...e, seq: i }));
}

/** Worker 1 fetches about 3× slower than the others, with noise on every worker (a busy machine). */
function straggling() {
  let k = 0;
  const noise = () => ((k++ * 7919) % 13) / 1000;
  return synthesize({ num_workers: 4, batches: 40, cost: (idx, w) => (w === 1 ? 0.06 : 0.02) + noise() });
}

test('agrees with backend/loaderscope/model/state.py on the same events', { skip: needsPython }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'ls-reducer-'));
  const cases = {
    seed: SEED,
    ooo: synthesize({ num_workers: 4, batches: 30, epochs: 2 }),
    unordered: synthesize({ num_workers: 3, batches: 20, in_order: false }),
    single: synthesize({ num_workers: 0, batches: 6 }),
    pinned: synthesize({ num_workers: 4, batches: 40, pin_ms: 4, step: 0.001 }),
    pinned_single: synthesize({ num_workers: 0, batches: 8, pin_ms: 2 }),
    troubled: troubled(),
    looked_at: lookedAt(),
    straggling: straggling(),
    // long enough to trim yield_order, broken enough to hit the cap on violations and notes
    bounded: [
      ...synthesize({ num_workers: 1, prefetch_factor: 1, batches: 2600, step: 0.0001 }).slice(0, -1),
      ...Array.from({ length: 1100 }, (_, i) => ({
        seq: 0,
        t: 99,
        run: 'synth',
        rank: 0,
        kind: 'arrive',
        idx: 90000 + i,
        worker: 0,
      })),
      ...Array.from({ length: 1100 }, () => ({ seq: 0, t: 99, run: 'synth', rank: 0, kind: 'mystery' })),
    ].map((e, i) => ({ ...e, seq: i })),
    // a real gpu_step run on an H100: pin thread on, pinned vs pageable copies timed per step
    h100: readFileSync(join(ROOT, 'frontend', 'tests', 'fixtures', 'gpu_step_h100.jsonl'), 'utf8')
      .split('\n')
      .slice(1)
      .filter(Boolean)
      .map((l) => JSON.parse(l)),
    // real runs with memory samples (fixtures/make_memory.py): copy-on-read, a leak, batches in flight, SIGKILL
    ...Object.fromEntries(
      ['copy_on_read', 'leak', 'in_flight', 'killed'].map((name) => [
        `memory_${name}`,
        readFileSync(join(ROOT, 'frontend', 'tests', 'fixtures', `memory_${name}.jsonl`), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l)),
      ]),
    ),
    // the leak's run with a light sample (RSS and swap only, as the probe takes between full ones) after each
    memory_light: withLightSamples(
      readFileSync(join(ROOT, 'frontend', 'tests', 'fixtures', 'memory_leak.jsonl'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l)),
    ),
  };
  const fields = [
    'send_idx',
    'rcvd_idx',
    'outstanding',
    'batches',
    'epochs_done',
    'out_of_order',
    'parked_high',
    'outstanding_high',
    'consumer_wait',
    'head_of_line_wait',
    'skipped',
    'seq',
    'epoch',
    'status',
    'pin_bytes',
    'pin_time',
    'pin_wait',
    'unpinned',
    'fetched_bytes',
    'pickled_bytes',
    'startup_wait',
    'epoch_batches',
    'steps',
    'step_h2d',
    'step_compute',
    'step_h2d_pageable',
    'step_device',
    'step_total',
    'peeks',
    'peek_batches',
    'peek_wait',
    'peek_starts',
  ];
  for (const [name, events] of Object.entries(cases)) {
    const file = join(dir, `${name}.json`);
    writeFileSync(file, JSON.stringify(events));
    const script = `
import json, sys
from loaderscope.model.state import reduce
from loaderscope.model.stats import summary
from loaderscope.model.diagnosis import diagnosis
s = reduce(json.load(open(sys.argv[1])))
out = {f: getattr(s, f) for f in ${JSON.stringify(fields)}}
out["parked"] = s.parked; out["result_queue"] = s.result_queue
out["yield_order"] = [list(p) for p in s.yield_order]; out["violations"] = s.violations
out["queues"] = {str(w.id): w.queue for w in s.workers.values()}
out["statuses"] = {str(w.id): str(w.status) for w in s.workers.values()}
out["where"] = {str(t.idx): str(t.where) for t in s.tasks.values()}
out["window"] = s.window
out["notes"] = [n["kind"] for n in s.notes]
out["batch_samples"] = len(s.batch_samples)
out["summary"] = summary(s)
out["diagnosis"] = diagnosis(s)
print(json.dumps(out))`;
    const py = python(script, { args: [file] });
    const js = reduce(events);
    for (const f of fields) {
      if (typeof py[f] === 'number' && !Number.isInteger(py[f]))
        assert.ok(Math.abs(py[f] - js[f]) < 1e-9, `${name}.${f}`);
      else assert.deepEqual(js[f], py[f], `${name}.${f}`);
    }
    assert.deepEqual(js.parked, py.parked, `${name}.parked`);
    assert.deepEqual(js.result_queue, py.result_queue, `${name}.result_queue`);
    assert.deepEqual(js.yield_order, py.yield_order);
    assert.deepEqual(js.violations, py.violations);
    assert.equal(js.window, py.window);
    assert.deepEqual(Object.fromEntries([...js.workers.values()].map((w) => [String(w.id), w.queue])), py.queues);
    assert.deepEqual(
      Object.fromEntries([...js.workers.values()].map((w) => [String(w.id), w.status])),
      py.statuses,
      `${name} statuses`,
    );
    assert.deepEqual(
      Object.fromEntries([...js.tasks.values()].map((t) => [String(t.idx), t.where])),
      py.where,
      `${name} where`,
    );
    assert.deepEqual(
      js.notes.map((n) => n.kind),
      py.notes,
      `${name} notes`,
    );
    assert.equal(js.batch_samples.length, py.batch_samples);
    const sum = summary(js);
    for (const [k, v] of Object.entries(py.summary)) {
      if (typeof v === 'number')
        assert.ok(Math.abs(v - sum[k]) < 1e-9 * Math.max(1, Math.abs(v)), `${name} summary.${k}: ${sum[k]} vs ${v}`);
      else if (k === 'consumer_split' && v) {
        for (const [rk, rv] of Object.entries(v)) {
          if (typeof rv === 'number') assert.ok(Math.abs(rv - sum[k][rk]) < 1e-12, `${name} consumer_split.${rk}`);
          else assert.deepEqual(sum[k][rk], rv);
        }
      } else if (k === 'workers' || k === 'stragglers') {
        assert.equal(sum[k].length, v.length, `${name} summary.${k}`);
        v.forEach((row, i) => {
          for (const [rk, rv] of Object.entries(row)) {
            if (typeof rv === 'number') assert.ok(Math.abs(rv - sum[k][i][rk]) < 1e-9, `${name} ${k}[${i}].${rk}`);
            else assert.deepEqual(sum[k][i][rk], rv, `${name} ${k}[${i}].${rk}`);
          }
        });
      } else assert.deepEqual(sum[k], v, `${name} summary.${k}`);
    }
    assert.deepEqual(diagnosis(js), py.diagnosis, `${name} diagnosis`);
  }
});

test('pin stage: a task is pinning between the result queue and the main process', () => {
  const events = synthesize({ num_workers: 2, batches: 4, pin_ms: 5 });
  const pinStart = events.find((e) => e.kind === 'pin_start');
  let s = reduce(events, pinStart.seq);
  assert.equal(s.tasks.get(pinStart.idx).where, Where.PINNING);
  assert.ok(!s.result_queue.includes(pinStart.idx), 'the pin thread took it off the result queue');
  const pinEnd = events.find((e) => e.kind === 'pin_end' && e.idx === pinStart.idx);
  s = reduce(events, pinEnd.seq);
  assert.equal(s.tasks.get(pinStart.idx).where, Where.RESULT_QUEUE);
  assert.ok(s.result_queue.includes(pinStart.idx), 'pinned, on the data queue for the main process');
  s = reduce(events);
  assert.equal(s.pin_bytes, 4 * 4 * 32);
  assert.ok(Math.abs(s.pin_time - 4 * 0.005) < 1e-9);
  const sum = summary(s);
  assert.ok(Math.abs(sum.pin_mb_per_s - (4 * 4 * 32) / 0.02 / 1e6) < 1e-9);
  assert.ok(sum.pin_wait_share > 0 && sum.pin_wait_share <= 1);
});

test('stuck and dead workers keep the latest report for the page; a finished fetch clears it', () => {
  const events = troubled();
  const stuck = events.find((e) => e.kind === 'worker_stuck');
  const s = reduce(events, stuck.seq);
  const w = s.workers.get(stuck.worker);
  assert.equal(w.status, WorkerStatus.STUCK);
  assert.equal(w.stuck.sample, 17);
  assert.equal(userFrame(w.stuck.stack).line, 222, 'the innermost user frame');
  const died = events.find((e) => e.kind === 'worker_died');
  const d = reduce(events, died.seq);
  assert.equal(d.workers.get(2).status, WorkerStatus.DIED);
  assert.equal(d.workers.get(2).died.signal, 'SIGKILL');
  assert.ok(d.consumer_stuck && d.consumer_stuck.waiting_for === 4);
  assert.equal(d.timeout.seconds, 1.5);
  const end = events.find((e) => e.seq > stuck.seq && e.kind === 'fetch_end' && e.idx === stuck.idx);
  assert.equal(reduce(events, end.seq).workers.get(stuck.worker).stuck, null);
});

test('Python rounding and medians', () => {
  assert.equal(pyRound(0.5), 0);
  assert.equal(pyRound(1.5), 2);
  assert.equal(pyRound(2.5), 2);
  assert.equal(pyRound(2.4), 2);
  assert.equal(median([3, 1, 2, 10]), 2.5);
  assert.equal(median([5]), 5);
  assert.equal(pyFixed(11.25, 1), '11.2');
  assert.equal(pyFixed(11.35, 1), (11.35).toFixed(1), 'no exact tie: as toFixed');
  assert.equal(pyFixed(0.5, 0), '0');
  assert.equal(pyFixed(1.5, 0), '2');
  assert.equal(pyFixed(2.5, 0), '2');
  assert.equal(pyFixed(-2.5, 0), '-2');
  assert.equal(pyFixed(0.125, 2), '0.12');
  assert.equal(pyFixed(0.375, 2), '0.38');
  assert.equal(pyFixed(12.5, 1), '12.5');
});

test('summary matches state.py formulas', () => {
  const s = reduce(SEED);
  const sum = summary(s);
  assert.equal(sum.batches, 2);
  assert.ok(Math.abs(sum.wall - 0.22) < 1e-9);
  // the epoch's time is the first batch's wait (0.2 s) and the step between the two yields (0.01 s);
  // the 0.01 s before the first next() is neither, and no time passed between epochs
  assert.ok(Math.abs(sum.epoch_wall - 0.21) < 1e-9);
  assert.ok(Math.abs(sum.step_time - 0.01) < 1e-9);
  assert.equal(sum.between_epochs, 0);
  assert.ok(Math.abs(sum.input_bound - 0.2 / 0.21) < 1e-9);
});

// state.py (and so this mirror) moves a task back to "fetching" when the worker's fetch_start /
// fetch_end reach the stream after the pin thread's pin_start / pin_end (they do: the worker's ring
// is drained later than the pin thread records), and puts it on the result queue a second time. In
// this real H100 trace the result queue ends with 17 stale entries. Requested fix: see the report
// (fetch events never move a task backwards; a task is queued once). Passes once both are fixed.
test('a real pinned trace leaves nothing on the result queue', () => {
  const events = readFileSync(join(ROOT, 'frontend', 'tests', 'fixtures', 'gpu_step_h100.jsonl'), 'utf8')
    .split('\n')
    .slice(1)
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const s = reduce(events);
  assert.deepEqual(s.result_queue, []);
  for (let i = 0; i < events.length; i++) {
    const st = reduce(events.slice(0, i + 1));
    assert.equal(
      new Set(st.result_queue).size,
      st.result_queue.length,
      `a task is on the result queue once (event ${i})`,
    );
  }
});

test('every frequent kind is applied from the columns by applyInlined: its rule is the one it was written for', () => {
  // A rule changed in contract/rules.py sends its kind back to the compiled steps (correct, slower):
  // change applyInlined and INLINED_RULES with it. track.test.js checks the rows it applies agree.
  assert.deepEqual(
    INLINED.slice(1),
    INLINED.slice(1).map(() => true),
  );
});
