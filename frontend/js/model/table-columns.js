// Value columns (a Parquet part's, parquet-trace.js) straight into an EventTable (pushColumns): the
// frequent kinds' rows into its columns, any other row rebuilt as the event it was and kept. Pure.

import { LINE_KEYS, NUMBER_SLOTS, OBJECT, SLOT_BY_NAME, V, isInt, kindCode, within } from './event-columns.js';

/** @typedef {import('./event-table.js').EventTable} EventTable */
/** @typedef {import('./event-table.js').ValueColumn} ValueColumn */

/**
 * Append `n` rows given column by column (a Parquet trace's part: parquet-trace.js): a frequent
 * kind's row straight into the columns, taking exactly what pushValid() takes of the event it
 * makes (and no null, which pushValid() leaves to push()), with the same values; any other row by
 * `other(r)`, which must append that one row (push() or pushValid() its event). Each column is
 * checked in one pass over its rows: a row at a time was twice the cost.
 * @param {EventTable} table
 * @param {number} n
 * @param {{seq?: ValueColumn, t?: ValueColumn, run?: ValueColumn, rank?: ValueColumn, kind?: ValueColumn}} common
 * @param {ValueColumn[]} fields the other columns that hold values
 * @param {Uint8Array|null} hasExtra which rows have fields without a column, `extraOf(r)` gives them
 * @param {(r: number) => Record<string, unknown>|null} extraOf
 * @param {(r: number) => void} other
 */
export function pushColumns(table, n, common, fields, hasExtra, extraOf, other) {
  const n0 = table.n;
  if (n0 + n > table.kind.length) table.alloc(Math.max(n0 + n, table.kind.length * 2));
  const code = new Uint8Array(n); // 0: the row goes to other()
  const kind = common.kind;
  if (kind?.ids) {
    const codes = kind.dict.map(kindCode);
    for (let r = 0; r < n; r++) if (kind.present[r]) code[r] = codes[kind.ids[r]];
  }
  const { seq, t, rank, run } = common;
  if (!seq?.num || !t?.num || !rank?.num || !run?.ids) {
    // no common columns to read: every row as an event
    for (let r = 0; r < n; r++) other(r);
    return;
  }
  for (let r = 0; r < n; r++) {
    if (!code[r]) continue;
    const s = seq.num[r],
      time = t.num[r],
      k = rank.num[r];
    if (
      !seq.present[r] ||
      !t.present[r] ||
      !rank.present[r] ||
      !run.present[r] ||
      !Number.isInteger(s) ||
      !within(s) ||
      !within(time) ||
      !Number.isInteger(k) ||
      !within(k)
    )
      code[r] = OBJECT;
    table.seq[n0 + r] = s;
    table.t[n0 + r] = time;
    table.flags[n0 + r] = 0;
  }
  const seen = new Int32Array(n);
  for (const col of fields) columnValues(table, col, n, n0, code, seen);
  for (let r = 0; r < n; r++) {
    const c = code[r];
    if (c && restOfRow(table, c, n0 + r, run.dict[run.ids[r]], rank.num[r], seen[r], hasExtra?.[r] ? extraOf(r) : null))
      continue;
    other(r);
  }
}

/**
 * One column's values into rows n0 + r of the columns, for the rows of a frequent kind (code[r]);
 * a row whose kind has no such field, or whose value does not fit, gets code 0.
 * @param {EventTable} table
 * @param {ValueColumn} col @param {number} n @param {number} n0 @param {Uint8Array} code @param {Int32Array} seen
 */
export function columnValues(table, col, n, n0, code, seen) {
  const bits = Int8Array.from(LINE_KEYS, (keys) => keys.bits.get(col.name) ?? -1);
  const { present, num, ids, bool, dict } = col;
  // a field goes to the same place whatever its kind (V.A: none, bits are -1)
  const slot = SLOT_BY_NAME.get(col.name) ?? V.A;
  if (!num || slot === V.BOOL || slot === V.INDICES) {
    // strings, booleans: as putValue() puts them
    for (let r = 0; r < n; r++) {
      const c = code[r];
      if (!c || !present[r]) continue;
      const k = bits[c];
      const flags =
        k < 0
          ? -1
          : table.putValue(slot, num ? num[r] : ids ? dict[ids[r]] : bool?.[r] === 1, n0 + r, table.flags[n0 + r]);
      if (flags < 0) {
        code[r] = OBJECT;
        continue;
      }
      seen[r] |= 1 << k;
      table.flags[n0 + r] = flags;
    }
    return;
  }
  // numbers: the checks and the column of putValue(), without a call per row
  const [name, bit, integer] = NUMBER_SLOTS[slot];
  const dest = table[name];
  const flags = table.flags;
  for (let r = 0; r < n; r++) {
    const c = code[r];
    if (!c || !present[r]) continue;
    const k = bits[c];
    const v = num[r];
    if (k < 0 || !(integer ? isInt(v) : within(v))) {
      code[r] = OBJECT;
      continue;
    }
    seen[r] |= 1 << k;
    dest[n0 + r] = v;
    flags[n0 + r] |= bit;
  }
}

/**
 * Row i (its columns' values in place) checked against the table's run and rank, given its
 * `extra` fields, and counted: false, and nothing counted, when it does not fit.
 * @param {EventTable} table
 * @param {number} code @param {number} i @param {string} run @param {number} rank @param {number} seen
 * @param {Record<string, unknown>|null} extra
 */
export function restOfRow(table, code, i, run, rank, seen, extra) {
  if (table.run !== undefined && (run !== table.run || rank !== table.rank)) return false;
  let flags = table.flags[i];
  if (extra) {
    const keys = LINE_KEYS[code];
    for (const name in extra) {
      const k = keys.bits.get(name);
      if (k === undefined || seen & (1 << k)) return false;
      seen |= 1 << k;
      flags = table.putValue(keys.slots[k], extra[name], i, flags);
      if (flags < 0) return false;
    }
  }
  return table.commit(code, table.seq[i], table.t[i], run, rank, seen, flags);
}
