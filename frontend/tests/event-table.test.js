// The column store gives every event back as it came (same fields, same values), packs the
// frequent kinds, and keeps anything unusual whole.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventTable } from '../js/model/event-table.js';
import { pushLine } from '../js/model/table-lines.js';
import { pushColumns } from '../js/model/table-columns.js';
import { synthesize } from '../dev/synth.js';
import { invalidReason } from '../js/model/schema.js';
import { COLUMNS, COMMON_FIELDS, FREQUENT, KINDS } from '../js/model/contract.gen.js';

function strip(e) {
  const out = {};
  for (const [k, v] of Object.entries(e)) if (v !== undefined) out[k] = v;
  return out;
}

test('round trip: every event comes back equal; hot kinds are packed', () => {
  const events = synthesize({ num_workers: 4, batches: 50, pin_ms: 2, epochs: 2 });
  const extra = [
    { seq: 0, t: 0, run: 'synth', rank: 0, kind: 'fetch_end', idx: 1, worker: 0, dt: 0.5, nbytes: 32, pickled: 0 },
    { seq: 0, t: 0, run: 'synth', rank: 0, kind: 'yield', idx: 1, wait: 0, from_parked: true, worker: 2, epoch: 3 },
    { seq: 0, t: 0, run: 'synth', rank: 0, kind: 'dispatch', idx: 1, worker: 0, indices: ['a', 'b'], n: 2 },
    { seq: 0, t: 0, run: 'synth', rank: 0, kind: 'dispatch', idx: 1, worker: 0, indices: null, n: 0 },
    { seq: 0, t: 0, run: 'synth', rank: 0, kind: 'fetch_end', idx: 1, worker: 0, dt: 0.5, custom: 1 },
    { seq: 0, t: 0, run: 'other', rank: 1, kind: 'arrive', idx: 1, worker: 0 },
    { seq: 0, t: 0, run: 'synth', rank: 0, kind: 'pin_end', idx: 2, dt: 0.001, nbytes: 64, pinned: false },
    { seq: 0, t: 0, run: 'synth', rank: 0, kind: 'gpu_sync', x: [1, 2] },
  ];
  const all = [...events, ...extra].map((e, i) => ({ ...e, seq: i }));
  const table = new EventTable(8);
  for (const e of all) table.push(e);
  assert.equal(table.length, all.length);
  for (let i = 0; i < all.length; i++) {
    assert.deepEqual(strip(table.get(i)), strip(all[i]), `row ${i} (${all[i].kind})`);
    assert.equal(table.kindOf(i), all[i].kind);
  }
  assert.ok(table.packed >= events.length - 20, 'the frequent kinds are packed');
  assert.equal(table.get(all.length - 1), all.at(-1), 'kept objects come back as themselves');
  const d = events.findIndex((e) => e.kind === 'dispatch');
  assert.deepEqual(table.indicesOf(d), events[d].indices);
});

test('rowAfterTime finds the first event after a time', () => {
  const events = synthesize({ num_workers: 2, batches: 20 });
  const table = new EventTable();
  for (const e of events) table.push(e);
  const t = events[30].t;
  const i = table.rowAfterTime(t);
  assert.ok(events[i].t > t && events[i - 1].t <= t);
});

test('rows handed over as parts (a worker to the page) come back equal, and the table grows on', () => {
  const events = synthesize({ num_workers: 3, batches: 30, pin_ms: 2 });
  const odd = { seq: events.length, t: 9, run: 'synth', rank: 0, kind: 'gpu_sync', x: [1, 2] };
  const source = new EventTable(4);
  for (const e of [...events, odd]) source.push(e);
  const parts = source.toParts();
  const buffers = EventTable.transfers(parts);
  assert.equal(new Set(buffers).size, buffers.length, 'every column has its own buffer to transfer');
  const copy = EventTable.fromParts(structuredClone(parts, { transfer: buffers }));
  assert.equal(copy.length, events.length + 1);
  for (let i = 0; i < copy.length; i++)
    assert.deepEqual(strip(copy.get(i)), strip(i < events.length ? events[i] : odd));
  copy.push({ ...events[5], seq: 1000 });
  assert.deepEqual(strip(copy.get(copy.length - 1)), strip({ ...events[5], seq: 1000 }));
  const empty = EventTable.fromParts(new EventTable().toParts());
  empty.push(events[3]);
  assert.deepEqual(strip(empty.get(0)), strip(events[3]));
  const back = copy.toParts(); // handed back to be refilled: same buffers, no rows
  const again = EventTable.recycle(structuredClone(back, { transfer: EventTable.transfers(back) }));
  assert.equal(again.length, 0);
  assert.equal(again.objects.size, 0);
  for (const e of events.slice(0, 10)) again.push(e);
  for (let i = 0; i < 10; i++) assert.deepEqual(strip(again.get(i)), strip(events[i]));
});

test('reserve makes room once, keeping the rows', () => {
  const events = synthesize({ num_workers: 2, batches: 5 });
  const table = new EventTable(4);
  for (const e of events.slice(0, 3)) table.push(e);
  table.reserve(1000);
  assert.equal(table.kind.length, 1000);
  for (const e of events.slice(3)) table.push(e);
  for (let i = 0; i < events.length; i++) assert.deepEqual(strip(table.get(i)), strip(events[i]));
  table.reserve(10);
  assert.equal(table.kind.length, 1000, 'never shrinks');
});

test("append copies other tables' rows column by column: indices, kept objects, recycled buffers", () => {
  const events = synthesize({ num_workers: 2, batches: 20, pin_ms: 1 }).map((e, i) => ({ ...e, seq: i }));
  events.splice(30, 0, { seq: 30.5, t: 1, run: 'synth', rank: 0, kind: 'gpu_sync', x: [1] }); // kept whole
  const target = new EventTable(2);
  let spare = null; // a worker refills the same buffers, stale bytes and all
  for (let from = 0; from < events.length; from += 17) {
    const batch = spare ? EventTable.recycle(spare) : new EventTable(4);
    for (const e of events.slice(from, from + 17)) batch.push(e);
    assert.ok(target.append(batch));
    spare = batch.toParts();
  }
  assert.equal(target.length, events.length);
  for (let i = 0; i < events.length; i++) assert.deepEqual(strip(target.get(i)), strip(events[i]), `row ${i}`);
  const d = events.findLastIndex((e) => e.kind === 'dispatch' && e.indices);
  assert.deepEqual(target.indicesOf(d), events[d].indices);
  assert.equal(target.packed, events.length - target.objects.size);
  const other = new EventTable();
  other.push({ ...events[d], run: 'another' });
  const batch = new EventTable();
  batch.push(events[d]);
  assert.equal(other.append(batch), false, 'packed rows of another run are refused');
  assert.equal(other.length, 1);
});

test('pushValid takes only what the schema takes, and gives it back equal', () => {
  const events = synthesize({ num_workers: 3, batches: 20, pin_ms: 1 });
  const hot = events.filter((e) =>
    ['dispatch', 'fetch_start', 'fetch_end', 'arrive', 'parked', 'yield', 'skip', 'pin_start', 'pin_end'].includes(
      e.kind,
    ),
  );
  const broken = [
    { seq: 1.5 },
    { seq: 2 ** 54 },
    { t: Infinity },
    { t: 2 ** 60 },
    { t: '1' },
    { rank: 0.5 },
    { rank: 'r' },
    { worker: undefined },
    { worker: null },
    { idx: 2 ** 40 },
    { n: 2 ** 60 },
    { dt: 1e300 },
    { wait: -(2 ** 54) },
    { nbytes: 2 ** 60 },
    { pickled: 1e308 },
    { waiting_for: 1.5 },
    { indices: 'x' },
    { epoch: null },
    { extra: 1 },
  ];
  const variants = [...hot, ...hot.slice(0, 40).flatMap((e) => broken.map((b) => ({ ...e, ...b })))];
  const table = new EventTable(2);
  for (const e of variants) {
    const before = table.length;
    const took = table.pushValid(e);
    if (took) {
      assert.equal(invalidReason(e), null, JSON.stringify(e));
      assert.deepEqual(strip(table.get(before)), strip(e));
    } else assert.equal(table.length, before, 'nothing appended');
  }
  assert.ok(
    hot.every((e) => invalidReason(e) !== null || new EventTable().pushValid(e)),
    'every valid hot event of a run is taken',
  );
});

test(
  'pushLine takes a line only where JSON.parse and pushValid take it, with the same values, and ' + 'finds its end',
  () => {
    const events = synthesize({ num_workers: 3, batches: 30, pin_ms: 1 }).map((e, i) => ({ ...e, seq: i }));
    const hot = events.filter(
      (e) =>
        e.kind in
        {
          dispatch: 1,
          fetch_start: 1,
          fetch_end: 1,
          arrive: 1,
          parked: 1,
          yield: 1,
          skip: 1,
          pin_start: 1,
          pin_end: 1,
        },
    );
    const written = hot.map((e) => JSON.stringify(e));
    // text that JSON reads the same or differently, numbers at the edges, the run changing
    const edits = [
      (s) => s.replace('"t":', '"t": '),
      (s) => s.replace(/"idx":(\d+)/, '"idx":$1.0'),
      (s) => s.replace(/"idx":(\d+)/, '"idx":0$1'),
      (s) => s.replace(/"t":([\d.]+)/, '"t":$1e0'),
      (s) => s.replace(/"t":([\d.]+)/, '"t":-$1'),
      (s) => s.replace(/"t":[\d.]+/, '"t":-0'),
      (s) => s.replace(/"t":[\d.]+/, '"t":0.1000000000000000055511151231257827'),
      (s) => s.replace(/"t":[\d.]+/, '"t":9007199254740993'),
      (s) => s.replace(/"t":[\d.]+/, '"t":9007199254740992.5'),
      (s) => s.replace(/"t":[\d.]+/, '"t":1.'),
      (s) => s.replace(/"t":[\d.]+/, '"t":-'),
      (s) => s.replace(/"t":[\d.]+/, `"t":1${'0'.repeat(400)}`),
      (s) => s.replace(/"seq":\d+/, '"seq":1.5'),
      (s) => s.replace(/"seq":\d+/, '"seq":9007199254740994'),
      (s) => s.replace(/"rank":\d+/, '"rank":null'),
      (s) => s.replace('"run":"synth"', '"run":"syn\\u0074h"'),
      (s) => s.replace('"run":"synth"', '"run":"other"'),
      (s) => s.replace('"run":"synth"', '"run":"s\u00e9nth"'),
      (s) => s.replace('"run":"synth"', '"run":"s\u00e9nth"').replace(/}$/, ',"note":"\u00e9"}'),
      (s) => s.replace('"run":"synth"', '"run":"synth","run":"synth"'),
      (s) => s.replace(/,"worker":\d+/, ''),
      (s) => s.replace(/"worker":\d+/, '"worker":2147483648'),
      (s) => s.replace(/"epoch":\d+/, '"epoch":null'),
      (s) => s.replace('[', '[ '),
      (s) => s.replace(/\[\d+/, '[2147483648'),
      (s) => s.replace(/\[\d+/, '[]'),
      (s) => s.replace(/"n":\d+/, '"n":1e400'),
      (s) => s.replace('"wait":', '"wait":1,"wait":'),
      (s) => s.replace('true', 'tru'),
      (s) => s.replace('false', 'null'),
      (s) => s.replace(/}$/, ',"extra":1}'),
      (s) => s.replace(/}$/, '} '),
      (s) => s.replace(/}$/, '}\r'),
      (s) => s.slice(0, -1),
      (s) => s.replace(/"dt":[\d.e-]+/, '"dt":0.07807500000035361'),
      (s) => s.replace(/"dt":[\d.e-]+/, '"dt":123456789.123456789'),
    ];
    const lines = [...written, ...written.slice(0, 60).flatMap((s) => edits.map((edit) => edit(s)))];
    const bytes = new TextEncoder().encode(lines.join('\n') + '\n');
    const fast = new EventTable(2);
    const slow = new EventTable(2);
    let start = 0,
      taken = 0;
    for (const line of lines) {
      const end = start + new TextEncoder().encode(line).length;
      const before = fast.length;
      const lineEnd = pushLine(fast, bytes, start, bytes.length);
      if (lineEnd >= 0) {
        assert.equal(lineEnd, end, 'where the line ends');
        if (line === written[taken]) taken += 1;
        const e = JSON.parse(line);
        assert.ok(slow.pushValid(e), `taken by pushLine only: ${line}`);
        const [a, b] = [fast.get(before), slow.get(slow.length - 1)];
        assert.deepEqual(a, b, line);
        assert.ok(Object.is(a.t, b.t), line);
      } else {
        assert.equal(fast.length, before, 'nothing appended');
      }
      start = end + 1;
    }
    assert.equal(taken, written.length, 'every line as loaderscope writes it is read straight into the columns');
    const d = hot.findLastIndex((e) => e.kind === 'dispatch' && e.indices);
    assert.deepEqual(fast.indicesOf(d), hot[d].indices);
  },
);

// Every field the contract declares for a frequent kind, each alone and all together, through each
// way into the table and back out of get(): packed when the column map has a column for every field
// it carries, else kept whole, and equal either way. A field added to the contract is in this test
// without an edit here: a place that forgets it drops it or writes it over another field.
/**
 * A value of a contract field's type, different for each field (k).
 * @param {import('../js/model/event-table.js').FieldRule} rule
 * @param {number} k
 */
function sample(rule, k) {
  switch (rule.type) {
    case 'int':
      return Math.min(rule.max ?? 1000, 3 + k);
    case 'number':
      return 0.25 + k;
    case 'bool':
      return k % 2 === 0;
    case 'string':
      return `s${k}`;
    case 'array':
      return [5 + k, 1, 2];
    case 'object':
      return { k };
    default:
      return `any${k}`;
  }
}

/** Each frequent kind's events: its required fields, with each optional one alone, then with all of them. */
function everyDeclaredField() {
  const out = [];
  for (const kind of FREQUENT) {
    const own = Object.entries(KINDS[kind]).map(([name, rule], k) => [name, rule, sample(rule, k)]);
    const required = Object.fromEntries(own.filter(([, rule]) => rule.required).map(([name, , v]) => [name, v]));
    const variants = [
      required,
      ...own.filter(([, rule]) => !rule.required).map(([name, , v]) => ({ ...required, [name]: v })),
      Object.fromEntries(own.map(([name, , v]) => [name, v])),
    ];
    for (const fields of variants)
      out.push({ seq: out.length, t: 0.5 + out.length, run: 'r', rank: 0, kind, ...fields });
  }
  return out;
}

/** Whether the column map has a column for every field of `e` (it is then packed, else kept whole). */
const fits = (e) => Object.keys(e).every((name) => COMMON_FIELDS.includes(name) || name in COLUMNS[e.kind]);

/** `events` as pushColumns takes them: a column per scalar field, anything else as a row's extra fields. */
function asColumns(events) {
  const n = events.length;
  const names = [...new Set(events.flatMap((e) => Object.keys(e)))];
  const cols = {};
  const extra = new Uint8Array(n);
  const extras = events.map(() => ({}));
  for (const name of names) {
    const col = { name, present: new Uint8Array(n), num: null, ids: null, dict: [], bool: null };
    events.forEach((e, r) => {
      const v = e[name];
      if (v === undefined) return;
      if (typeof v === 'number') (col.num ??= new Float64Array(n))[r] = v;
      else if (typeof v === 'string') (col.ids ??= new Int32Array(n))[r] = col.dict.push(v) - 1;
      else if (typeof v === 'boolean') (col.bool ??= new Uint8Array(n))[r] = v ? 1 : 0;
      else {
        extras[r][name] = v;
        extra[r] = 1;
        return;
      }
      col.present[r] = 1;
    });
    cols[name] = col;
  }
  const { seq, t, run, rank, kind, ...fields } = cols;
  return [{ seq, t, run, rank, kind }, Object.values(fields), extra, (r) => extras[r]];
}

test('every declared field of every frequent kind comes back from push, pushLine and pushColumns as it went in', () => {
  const events = everyDeclaredField();
  assert.ok(
    events.some((e) => e.kind === 'fetch_end' && 'stop' in e),
    'fetch_end.stop is declared (the simulator sends it)',
  );
  const pushed = new EventTable(2);
  const read = new EventTable(2);
  const bytes = new TextEncoder().encode(events.map((e) => JSON.stringify(e)).join('\n'));
  let start = 0;
  for (const e of events) {
    pushed.push(e);
    const end = pushLine(read, bytes, start, bytes.length);
    if (end < 0) read.push(e); // what the trace reader does with a line pushLine leaves
    assert.equal(end >= 0, fits(e), `pushLine packs it exactly when every field has a column: ${JSON.stringify(e)}`);
    start = end >= 0 ? end + 1 : bytes.indexOf(10, start) + 1;
  }
  const columns = new EventTable(2);
  const [common, fields, extra, extraOf] = asColumns(events);
  pushColumns(columns, events.length, common, fields, extra, extraOf, (r) => columns.push(events[r]));
  for (const [way, table] of [
    ['push', pushed],
    ['pushLine', read],
    ['pushColumns', columns],
  ]) {
    assert.equal(table.length, events.length, way);
    events.forEach((e, i) => {
      assert.deepEqual(strip(table.get(i)), e, `${way}: ${JSON.stringify(e)}`);
      assert.equal(
        table.isObject(i),
        !fits(e),
        `${way} packs it exactly when every field has a column: ${JSON.stringify(e)}`,
      );
      for (const name of Object.keys(e)) {
        if (!table.isObject(i))
          assert.deepEqual(EventTable.field(e.kind, name)(table, i), e[name], `${way}: field(${e.kind}, ${name})`);
      }
    });
  }
});
