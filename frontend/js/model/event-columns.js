// How EventTable packs a frequent kind's row: each field's column and slot (from the contract's
// generated map, COLUMNS in contract.gen.js), the presence flags, what get() reads back, the common
// fields' line text pushLine expects, and the schema checks a packed row needs. Pure.

import {
  COLUMNS as COLUMN_MAP,
  COMMON_FIELDS,
  FREQUENT,
  KINDS,
  LIMITS,
  RENAMED_FIELDS,
  RENAMED_KINDS,
} from './contract.gen.js';

/** @typedef {{type: string, nullable: boolean, required: boolean, min?: number, max?: number}} FieldRule */
/** @type {Record<string, Record<string, FieldRule>>} each kind's own fields (contract.gen.js) */
export const OWN = /** @type {any} */ (KINDS);
/** @type {Record<string, Record<string, string>>} each frequent kind's fields and their columns */
export const MAP = /** @type {any} */ (COLUMN_MAP);

/** @typedef {import('./types.js').LoaderEvent} LoaderEvent */

export const HOT = FREQUENT;
export const CODE = new Map(HOT.map((k, i) => [k, i + 1]));
/**
 * @type {Array<[string, number]>} a frequent kind's name before a rename (RENAMED_KINDS), and its code: pushLine reads
 *   both
 */
export const OLD_KIND_CODES = Object.entries(RENAMED_KINDS).flatMap(([old, now]) =>
  CODE.has(now) ? [/** @type {[string, number]} */ ([old, /** @type {number} */ (CODE.get(now))])] : [],
);
/** @type {Record<string, Record<string, string>>} each kind's fields' names today, by the names they had before */
const OLD_FIELDS = /** @type {any} */ (RENAMED_FIELDS);
export const OBJECT = 0; // the row is a kept object

// Where a field's value goes (putValue's slot): its column in the map, and for a float64 column
// whether the field is an integer (checked as one).
export const V = { IDX: 0, WORKER: 1, EPOCH: 2, INDICES: 3, BOOL: 4, A: 5, B: 6, C: 7, INT_A: 8, INT_B: 9, INT_C: 10 };
/** @type {Record<string, number>} */
const SLOT = { idx: V.IDX, worker: V.WORKER, epoch: V.EPOCH, indices: V.INDICES, bool: V.BOOL, a: V.A, b: V.B, c: V.C };
/** The slot of field `name` of frequent kind `kind` (one in the map). @param {string} kind @param {string} name */
export function slotOf(kind, name) {
  const slot = SLOT[MAP[kind][name]];
  return slot >= V.A && OWN[kind][name].type === 'int' ? slot + (V.INT_A - V.A) : slot;
}
// A field has one column in every frequent kind (columns.py), so a column of values by name (a
// Parquet part's) goes to one slot whatever its rows' kinds.
/** @type {Map<string, number>} */
export const SLOT_BY_NAME = new Map(
  HOT.flatMap((kind) => Object.keys(MAP[kind]).map((name) => [name, slotOf(kind, name)])),
);

// Each kind code's fields that have a column, by their k: pushLine's keys (as bytes), their slots,
// and a bit mask of those the row must carry (the contract's required fields; worker is checked on
// its own, see WORKERLESS). pushColumns takes the same names as strings (`bits`: each name's k), and
// pack() looks every key of an event up in `keys` (k, or -1 for a common field).
// A field's name before a rename (RENAMED_FIELDS) is one more literal, read into the same slot and
// counted as the same field (`field`: each literal's k): an older trace's lines take the fast path too.
/**
 * @typedef {{names: string[], slots: number[], literals: Literal[], field: number[], bits: Map<string, number>,
 *   keys: Map<string, number>, required: number}} LineKeys
 */
/** @type {LineKeys[]} */
export const LINE_KEYS = [
  { names: [], slots: [], literals: [], field: [], bits: new Map(), keys: new Map(), required: 0 },
  ...HOT.map((kind) => {
    const names = Object.keys(MAP[kind]);
    let required = 0;
    for (const [k, name] of names.entries()) if (OWN[kind][name].required && name !== 'worker') required |= 1 << k;
    const bits = new Map(names.map((name, k) => [name, k]));
    const old = Object.entries(OLD_FIELDS[kind] ?? {}).filter(([, now]) => bits.has(now));
    const field = [...names.keys(), ...old.map(([, now]) => /** @type {number} */ (bits.get(now)))];
    return {
      names,
      slots: field.map((k) => slotOf(kind, names[k])),
      literals: [...names, ...old.map(([name]) => name)].map((name) => literal(`,"${name}":`)),
      field,
      bits,
      keys: new Map([...COMMON_FIELDS.map((name) => /** @type {[string, number]} */ ([name, -1])), ...bits]),
      required,
    };
  }),
];

/** A hot kind's code (1, 2, ...), or OBJECT (0) for any other kind. @param {unknown} kind */
export function kindCode(kind) {
  return (typeof kind === 'string' && CODE.get(kind)) || OBJECT;
}

// flags: which optional fields were present, and booleans
export const F = { A: 1, B: 2, C: 4, TRUE: 8, FALSE: 16, WORKER: 32, INDICES: 64, EPOCH: 128 };
/**
 * @type {Record<number, ['idx'|'worker'|'epoch'|'a'|'b'|'c', number, boolean]>} a number slot's column, flag and
 *   whether an int (as putValue())
 */
export const NUMBER_SLOTS = {
  [V.IDX]: ['idx', 0, true],
  [V.WORKER]: ['worker', F.WORKER, true],
  [V.EPOCH]: ['epoch', F.EPOCH, true],
  [V.A]: ['a', F.A, false],
  [V.B]: ['b', F.B, false],
  [V.C]: ['c', F.C, false],
  [V.INT_A]: ['a', F.A, true],
  [V.INT_B]: ['b', F.B, true],
  [V.INT_C]: ['c', F.C, true],
};
const INT_MAX = 2 ** 31 - 1;

// What get() reads for each kind code: each field but idx (set first), its column and presence flag.
export const BOOL_READ = 'bool',
  INDICES_READ = 'indices';
/** @typedef {'worker'|'epoch'|'a'|'b'|'c'} NumberColumn */
/** @type {Array<{names: string[], columns: Array<NumberColumn|'bool'|'indices'>, bits: number[]}>} */
export const READS = LINE_KEYS.map(({ names, slots }) => {
  const read = names
    .map((name, k) => {
      const slot = slots[k];
      if (slot === V.BOOL) return { name, column: BOOL_READ, bit: F.TRUE | F.FALSE };
      if (slot === V.INDICES) return { name, column: INDICES_READ, bit: F.INDICES };
      const [column, bit] = NUMBER_SLOTS[slot];
      return { name, column, bit };
    })
    .filter((r) => r.column !== 'idx');
  return {
    names: read.map((r) => r.name),
    columns: /** @type {any} */ (read.map((r) => r.column)),
    bits: read.map((r) => r.bit),
  };
});

// The typed columns, in the order toParts() hands them over.
/** @type {ReadonlyArray<'kind' | 'flags' | 'seq' | 't' | 'idx' | 'worker' | 'epoch' | 'a' | 'b' | 'c'>} */
export const COLUMNS = Object.freeze(['kind', 'flags', 'seq', 't', 'idx', 'worker', 'epoch', 'a', 'b', 'c']);

// What schema.js's invalidReason demands of a hot event beyond what pack() checks anyway: seq an
// integer, t finite, rank an integer if given, worker present where the kind requires it, and
// every number within +-2**53 (the contract's MAX_NUMBER). pushValid() relies on it.
const MAX_NUMBER = LIMITS.MAX_NUMBER;
const WORKERLESS = new Set(HOT.filter((kind) => !OWN[kind].worker.required));
// by kind code, for commit(): the required fields' bits (LINE_KEYS), and whether worker may be absent
export const REQUIRED = Int32Array.from(LINE_KEYS, (keys) => keys.required);
export const WORKER_OPTIONAL = Uint8Array.from([0, ...HOT.map((kind) => (WORKERLESS.has(kind) ? 1 : 0))]);
/** @type {string[]} */
const BOUNDED = [
  ...new Set(HOT.flatMap((kind) => Object.keys(OWN[kind]).filter((name) => OWN[kind][name].type === 'number'))),
];
// The common fields, which a line of the trace writer carries first, in the contract's order: the
// text pushLine expects before each one's value (a string's opening quote included).
export const [SEQ, T, RUN, RANK, KIND] = [0, 1, 2, 3, 4];
/** @type {Record<string, number>} */
const HEAD_FIELD = { seq: SEQ, t: T, run: RUN, rank: RANK, kind: KIND };
export const HEAD = COMMON_FIELDS.map((name, i) => ({
  field: HEAD_FIELD[name],
  text: literal(`${i ? ',' : '{'}"${name}":${name === 'run' || name === 'kind' ? '"' : ''}`),
}));
export const TRUE = literal('true');
export const FALSE = literal('false');
/** @param {unknown} v @returns {v is number} */
export const within = (v) => typeof v === 'number' && Math.abs(v) <= MAX_NUMBER;

/** True when a hot event that pack() accepts also passes invalidReason (the schema's check). @param {LoaderEvent} e */
export function schemaValid(e) {
  if (!Number.isInteger(e.seq) || !within(e.seq) || !within(e.t)) return false;
  if (e.rank !== undefined && e.rank !== null && !(Number.isInteger(e.rank) && within(e.rank))) return false;
  if (e.worker === undefined && !WORKERLESS.has(e.kind)) return false;
  for (const key of BOUNDED) {
    const v = /** @type {Record<string, unknown>} */ (e)[key];
    if (typeof v === 'number' && !within(v)) return false;
  }
  return true;
}

/** @param {unknown} v @returns {v is number} */
export const isInt = (v) => typeof v === 'number' && Number.isInteger(v) && v >= -INT_MAX && v <= INT_MAX;

/**
 * Text pushLine expects, as UTF-8 bytes and as little-endian 32-bit words: comparing a word at a
 * time was a third of the time a line took.
 * @typedef {{bytes: Uint8Array, words: Uint32Array}} Literal
 * @param {string} text @returns {Literal}
 */
export function literal(text) {
  const bytes = new TextEncoder().encode(text);
  const words = new Uint32Array(bytes.length >> 2);
  const view = new DataView(bytes.buffer);
  for (let k = 0; k < words.length; k++) words[k] = view.getUint32(4 * k, true);
  return { bytes, words };
}
