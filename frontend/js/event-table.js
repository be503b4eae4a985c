// Every event of a run, kept column-wise so a million of them cost tens of megabytes, not hundreds,
// and the garbage collector never walks them. The frequent kinds (dispatch, fetch, pin, arrive,
// buffer, yield, skip) go into typed arrays, each field into the column the contract's generated map
// gives it (COLUMNS in contract.gen.js, from backend/loaderscope/contract/columns.py); anything else —
// rare kinds, unknown kinds, a field the map has no column for, a value a column cannot hold — is kept
// as the object it came as. `get(i)` gives the event back as a plain object (the same object each time
// for the kept ones). A trace line of a frequent kind can go straight from its bytes to columns
// (pushLine), and a whole table into another (append), without an object per event. Pure.

import { COLUMNS as COLUMN_MAP, COMMON_FIELDS, FREQUENT, KINDS, LIMITS } from './contract.gen.js';

/** @typedef {{type: string, nullable: boolean, required: boolean, min?: number, max?: number}} FieldRule */
/** @type {Record<string, Record<string, FieldRule>>} each kind's own fields (contract.gen.js) */
const OWN = /** @type {any} */ (KINDS);
/** @type {Record<string, Record<string, string>>} each frequent kind's fields and their columns */
const MAP = /** @type {any} */ (COLUMN_MAP);

/** @typedef {import('./types.js').LoaderEvent} LoaderEvent */

const HOT = FREQUENT;
const CODE = new Map(HOT.map((k, i) => [k, i + 1]));
const OBJECT = 0; // the row is a kept object

// Where a field's value goes (putValue's slot): its column in the map, and for a float64 column
// whether the field is an integer (checked as one).
const V = { IDX: 0, WORKER: 1, EPOCH: 2, INDICES: 3, BOOL: 4, A: 5, B: 6, C: 7, INT_A: 8, INT_B: 9, INT_C: 10 };
/** @type {Record<string, number>} */
const SLOT = { idx: V.IDX, worker: V.WORKER, epoch: V.EPOCH, indices: V.INDICES, bool: V.BOOL, a: V.A, b: V.B, c: V.C };
/** The slot of field `name` of frequent kind `kind` (one in the map). @param {string} kind @param {string} name */
function slotOf(kind, name) {
  const slot = SLOT[MAP[kind][name]];
  return slot >= V.A && OWN[kind][name].type === 'int' ? slot + (V.INT_A - V.A) : slot;
}
// A field has one column in every frequent kind (columns.py), so a column of values by name (a
// Parquet part's) goes to one slot whatever its rows' kinds.
/** @type {Map<string, number>} */
const SLOT_BY_NAME = new Map(HOT.flatMap((kind) => Object.keys(MAP[kind]).map((name) => [name, slotOf(kind, name)])));

// Each kind code's fields that have a column, by their k: pushLine's keys (as bytes), their slots,
// and a bit mask of those the row must carry (the contract's required fields; worker is checked on
// its own, see WORKERLESS). pushColumns takes the same names as strings (`bits`: each name's k), and
// pack() looks every key of an event up in `keys` (k, or -1 for a common field).
/** @typedef {{names: string[], slots: number[], literals: Literal[], bits: Map<string, number>, keys: Map<string, number>, required: number}} LineKeys */
/** @type {LineKeys[]} */
const LINE_KEYS = [{ names: [], slots: [], literals: [], bits: new Map(), keys: new Map(), required: 0 }, ...HOT.map((kind) => {
  const names = Object.keys(MAP[kind]);
  let required = 0;
  for (const [k, name] of names.entries()) if (OWN[kind][name].required && name !== 'worker') required |= 1 << k;
  const bits = new Map(names.map((name, k) => [name, k]));
  return { names, slots: names.map((name) => slotOf(kind, name)), literals: names.map((name) => literal(`,"${name}":`)),
    bits, keys: new Map([...COMMON_FIELDS.map((name) => /** @type {[string, number]} */ ([name, -1])), ...bits]), required };
})];

/** A hot kind's code (1, 2, ...), or OBJECT (0) for any other kind. @param {unknown} kind */
function kindCode(kind) {
  return (typeof kind === 'string' && CODE.get(kind)) || OBJECT;
}

// flags: which optional fields were present, and booleans
const F = { A: 1, B: 2, C: 4, TRUE: 8, FALSE: 16, WORKER: 32, INDICES: 64, EPOCH: 128 };
/** @type {Record<number, ['idx'|'worker'|'epoch'|'a'|'b'|'c', number, boolean]>} a number slot's column, flag and whether an int (as putValue()) */
const NUMBER_SLOTS = {
  [V.IDX]: ['idx', 0, true], [V.WORKER]: ['worker', F.WORKER, true], [V.EPOCH]: ['epoch', F.EPOCH, true],
  [V.A]: ['a', F.A, false], [V.B]: ['b', F.B, false], [V.C]: ['c', F.C, false],
  [V.INT_A]: ['a', F.A, true], [V.INT_B]: ['b', F.B, true], [V.INT_C]: ['c', F.C, true],
};
const INT_MAX = 2 ** 31 - 1;

// What get() reads for each kind code: each field but idx (set first), its column and presence flag.
const BOOL_READ = 'bool', INDICES_READ = 'indices';
/** @typedef {'worker'|'epoch'|'a'|'b'|'c'} NumberColumn */
/** @type {Array<{names: string[], columns: Array<NumberColumn|'bool'|'indices'>, bits: number[]}>} */
const READS = LINE_KEYS.map(({ names, slots }) => {
  const read = names.map((name, k) => {
    const slot = slots[k];
    if (slot === V.BOOL) return { name, column: BOOL_READ, bit: F.TRUE | F.FALSE };
    if (slot === V.INDICES) return { name, column: INDICES_READ, bit: F.INDICES };
    const [column, bit] = NUMBER_SLOTS[slot];
    return { name, column, bit };
  }).filter((r) => r.column !== 'idx');
  return { names: read.map((r) => r.name), columns: /** @type {any} */ (read.map((r) => r.column)), bits: read.map((r) => r.bit) };
});

// The typed columns, in the order toParts() hands them over.
/** @type {ReadonlyArray<'kind' | 'flags' | 'seq' | 't' | 'idx' | 'worker' | 'epoch' | 'a' | 'b' | 'c'>} */
const COLUMNS = Object.freeze(['kind', 'flags', 'seq', 't', 'idx', 'worker', 'epoch', 'a', 'b', 'c']);

// What schema.js's invalidReason demands of a hot event beyond what pack() checks anyway: seq an
// integer, t finite, rank an integer if given, worker present where the kind requires it, and
// every number within +-2**53 (the contract's MAX_NUMBER). pushValid() relies on it.
const MAX_NUMBER = LIMITS.MAX_NUMBER;
const WORKERLESS = new Set(HOT.filter((kind) => !OWN[kind].worker.required));
// by kind code, for commit(): the required fields' bits (LINE_KEYS), and whether worker may be absent
const REQUIRED = Int32Array.from(LINE_KEYS, (keys) => keys.required);
const WORKER_OPTIONAL = Uint8Array.from([0, ...HOT.map((kind) => (WORKERLESS.has(kind) ? 1 : 0))]);
/** @type {string[]} */
const BOUNDED = [...new Set(HOT.flatMap((kind) => Object.keys(OWN[kind]).filter((name) => OWN[kind][name].type === 'number')))];
// The common fields, which a line of the trace writer carries first, in the contract's order: the
// text pushLine expects before each one's value (a string's opening quote included).
const [SEQ, T, RUN, RANK, KIND] = [0, 1, 2, 3, 4];
/** @type {Record<string, number>} */
const HEAD_FIELD = { seq: SEQ, t: T, run: RUN, rank: RANK, kind: KIND };
const HEAD = COMMON_FIELDS.map((name, i) => ({ field: HEAD_FIELD[name], text: literal(`${i ? ',' : '{'}"${name}":${name === 'run' || name === 'kind' ? '"' : ''}`) }));
const TRUE = literal('true');
const FALSE = literal('false');
/** @param {unknown} v @returns {v is number} */
const within = (v) => typeof v === 'number' && Math.abs(v) <= MAX_NUMBER;

/** True when a hot event that pack() accepts also passes invalidReason (the schema's check). @param {LoaderEvent} e */
function schemaValid(e) {
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
const isInt = (v) => typeof v === 'number' && Number.isInteger(v) && v >= -INT_MAX && v <= INT_MAX;

// 10**k for k <= 22: exact doubles, so an integer below 2**53 divided by one is rounded once, the
// way JSON.parse rounds the decimal it came from (Clinger's fast path).
const POW10 = Array.from({ length: 23 }, (_, k) => Number(`1e${k}`));
const D0 = 48, D9 = 57, MINUS = 45, DOT = 46, QUOTE = 34, BACKSLASH = 92, COMMA = 44, OPEN = 91, CLOSE = 93, NEWLINE = 10;
const BRACE = 125;
// each hot kind's name closed by its quote, as pushLine finds it after `"kind":"`
const KIND_NAMES = HOT.map((kind) => literal(`${kind}"`));

/**
 * Text pushLine expects, as UTF-8 bytes and as little-endian 32-bit words: comparing a word at a
 * time was a third of the time a line took.
 * @typedef {{bytes: Uint8Array, words: Uint32Array}} Literal
 * @param {string} text @returns {Literal}
 */
function literal(text) {
  const bytes = new TextEncoder().encode(text);
  const words = new Uint32Array(bytes.length >> 2);
  const view = new DataView(bytes.buffer);
  for (let k = 0; k < words.length; k++) words[k] = view.getUint32(4 * k, true);
  return { bytes, words };
}

/** A cursor over one line's UTF-8 bytes for EventTable.pushLine: JSON's grammar for what it reads, no more. */
class LineScan {
  constructor() {
    /** @type {Uint8Array} */
    this.bytes = new Uint8Array(0);
    this.view = new DataView(this.bytes.buffer);
    this.pos = 0;
    this.end = 0;
  }

  /** Read bytes[pos, end) next. @param {Uint8Array} bytes @param {number} pos @param {number} end */
  reset(bytes, pos, end) {
    if (bytes !== this.bytes) {
      this.bytes = bytes;
      this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    this.pos = pos;
    this.end = end;
    return this;
  }

  /** Whether the line continues with `s` (not stepped over). @param {Literal} s */
  at(s) {
    const { bytes: text, words } = s, pos = this.pos, n = text.length;
    if (pos + n > this.end) return false;
    const view = this.view;
    for (let k = 0; k < words.length; k++) if (view.getUint32(pos + 4 * k, true) !== words[k]) return false;
    const bytes = this.bytes;
    for (let j = words.length << 2; j < n; j++) if (bytes[pos + j] !== text[j]) return false;
    return true;
  }

  /** Step over `s` if the line continues with it. @param {Literal} s */
  lit(s) {
    if (!this.at(s)) return false;
    this.pos += s.bytes.length;
    return true;
  }

  /** Step over the one byte `c` if it comes next. @param {number} c */
  byte(c) {
    if (this.pos >= this.end || this.bytes[this.pos] !== c) return false;
    this.pos += 1;
    return true;
  }

  /** A JSON number's value (as JSON.parse gives it), or NaN where there is none. */
  num() {
    const bytes = this.bytes, start = this.pos, end = this.end;
    let p = start;
    if (bytes[p] === MINUS) p += 1;
    const first = p;
    let m = 0;
    for (let c = bytes[p]; p < end && c >= D0 && c <= D9; c = bytes[++p]) m = m * 10 + (c - D0);
    if (p === first || (bytes[first] === D0 && p - first > 1)) return NaN; // no digits, or a leading 0
    let k = 0;
    if (p < end && bytes[p] === DOT) {
      const dot = ++p;
      for (let c = bytes[p]; p < end && c >= D0 && c <= D9; c = bytes[++p]) m = m * 10 + (c - D0);
      k = p - dot;
      if (k === 0) return NaN;
    }
    const c = bytes[p];
    if (p < end && (c === 101 || c === 69)) return NaN; // an exponent: left to JSON.parse
    this.pos = p;
    if (m > 2 ** 53 || k > 22) return Number(ascii(bytes, start, p)); // the slow, exact way
    const v = k ? m / POW10[k] : m;
    return bytes[start] === MINUS ? -v : v;
  }

  /** True when the string that comes next, up to its closing quote, is `s` (its text and the quote). @param {Literal} s */
  isString(s) {
    if (!this.at(s)) return false;
    this.pos += s.bytes.length - 1; // its closing quote is stepped over by the caller
    return true;
  }

  /** The characters up to the next quote when they are printable ASCII without escapes, else null. */
  plainString() {
    const bytes = this.bytes, start = this.pos;
    let p = start;
    for (let c = bytes[p]; p < this.end && c !== QUOTE; c = bytes[++p]) {
      if (c < 32 || c > 126 || c === BACKSLASH) return null;
    }
    if (p >= this.end) return null;
    this.pos = p;
    return ascii(bytes, start, p);
  }

  /**
   * The index in `names` of the one the line continues with, stepped over, or -1. Its byte at
   * `key` tells them apart first. @param {Literal[]} names @param {number} key
   */
  oneOf(names, key) {
    const c = this.bytes[this.pos + key];
    for (let k = 0; k < names.length; k++) {
      if (names[k].bytes[key] === c && this.lit(names[k])) return k;
    }
    return -1;
  }

  /** The code of the hot kind named next (its closing quote stepped over too), or OBJECT. */
  kindCode() {
    return this.oneOf(KIND_NAMES, 0) + 1;
  }

  /** Which of `keys` (`,"name":`) comes next, stepped over (-1 for none). @param {Literal[]} keys */
  key(keys) {
    return this.oneOf(keys, 2);
  }

  /** A list of int32s into `table`'s pool after its used part: their count, or -1. @param {EventTable} table */
  intList(table) {
    if (!this.byte(OPEN)) return -1;
    let count = 0;
    if (this.byte(CLOSE)) return 0;
    for (;;) {
      const v = this.num();
      if (!isInt(v)) return -1;
      table.ensurePool(count + 1);
      table.pool[table.poolN + count++] = v;
      const c = this.bytes[this.pos];
      if (this.pos >= this.end || (c !== COMMA && c !== CLOSE)) return -1;
      this.pos += 1;
      if (c === CLOSE) return count;
    }
  }
}

const LINE = new LineScan(); // one cursor for every line: a new one per line was a tenth of the parse in garbage

/** bytes[start, end) as a string, each byte one character (the caller knows them to be ASCII). @param {Uint8Array} bytes @param {number} start @param {number} end */
function ascii(bytes, start, end) {
  return String.fromCharCode.apply(null, /** @type {any} */ (bytes.subarray(start, end)));
}

/**
 * A column of values by row, as pushColumns() takes them: numbers, strings (ids into `dict`) or
 * booleans (0/1); `present[r]` is 0 where row r has no value.
 * @typedef {{name: string, present: Uint8Array, num: Float64Array|null, ids: Int32Array|null, dict: string[],
 *   bool: Uint8Array|null}} ValueColumn
 */

/**
 * A table's rows as structured-cloneable parts (toParts): its typed columns by name, its kept objects
 * as [row, event] pairs, the sample-index pool and the run and rank of its packed rows.
 * @typedef {{n: number, cols: Record<string, Uint8Array<ArrayBuffer> | Int32Array<ArrayBuffer> | Float64Array<ArrayBuffer>>,
 *   objects: Array<[number, LoaderEvent]>, pool: Int32Array<ArrayBuffer>, poolN: number, run: string|undefined,
 *   rank: number|undefined}} TableParts
 */

export class EventTable {
  constructor(capacity = 1024) {
    this.n = 0;
    this.alloc(capacity);
    /** @type {Map<number, LoaderEvent>} row -> kept object */
    this.objects = new Map();
    this.pool = new Int32Array(4096); // sample indices of dispatches, back to back
    this.poolN = 0;
    /** @type {string|undefined} */
    this.run = undefined; // run and rank shared by the packed rows
    /** @type {number|undefined} */
    this.rank = undefined;
    this.packed = 0;
    /** @type {(Literal & {run: string|undefined})|null} runText()'s, for this.run */
    this.runLiteral = null;
  }

  /** @param {number} cap */
  alloc(cap) {
    /**
     * @template {Uint8Array<ArrayBuffer> | Int32Array<ArrayBuffer> | Float64Array<ArrayBuffer>} A
     * @param {{new (n: number): A}} Type @param {A|undefined} old @returns {A}
     */
    const grow = (Type, old) => {
      const next = new Type(cap);
      if (old) next.set(old.subarray(0, this.n));
      return next;
    };
    this.kind = grow(Uint8Array, this.kind);
    this.flags = grow(Uint8Array, this.flags);
    this.seq = grow(Float64Array, this.seq);
    this.t = grow(Float64Array, this.t);
    this.idx = grow(Int32Array, this.idx);
    this.worker = grow(Int32Array, this.worker);
    this.epoch = grow(Int32Array, this.epoch);
    // a, b, c: the fields COLUMNS puts there; b and c also an `indices` list's offset and count
    this.a = grow(Float64Array, this.a);
    this.b = grow(Float64Array, this.b);
    this.c = grow(Float64Array, this.c);
  }

  get length() {
    return this.n;
  }

  /** Room for `capacity` rows without growing (a file's size tells roughly how many will come). @param {number} capacity */
  reserve(capacity) {
    if (capacity > this.kind.length) this.alloc(capacity);
  }

  /**
   * The table as structured-cloneable parts that share its buffers, so a Web Worker can hand them
   * over without copying (`postMessage(parts, EventTable.transfers(parts))`; the table is then
   * spent). The receiver can send them back the same way to be refilled: `EventTable.recycle`.
   * @returns {TableParts}
   */
  toParts() {
    /** @type {TableParts['cols']} */
    const cols = {};
    for (const key of COLUMNS) cols[key] = this[key];
    return { n: this.n, cols, objects: [...this.objects], pool: this.pool, poolN: this.poolN, run: this.run, rank: this.rank };
  }

  /** The buffers of `parts` that postMessage can transfer rather than copy. @param {TableParts} parts */
  static transfers(parts) {
    return [...Object.values(parts.cols).map((c) => c.buffer), parts.pool.buffer];
  }

  /** A table holding the rows `toParts()` gave (to read with get(); it can grow like any other). @param {TableParts} parts */
  static fromParts(parts) {
    const table = new EventTable(1);
    Object.assign(table, parts.cols);
    table.n = parts.n;
    table.objects = new Map(parts.objects);
    table.pool = parts.pool;
    table.poolN = parts.poolN;
    table.run = parts.run;
    table.rank = parts.rank;
    table.packed = parts.n - table.objects.size;
    return table;
  }

  /**
   * An empty table in the buffers of `parts` (handed back after use): a worker that refills the
   * same few buffers does not make the page's garbage collector chase hundreds of megabytes of new
   * ones.
   * @param {TableParts} parts
   */
  static recycle(parts) {
    return EventTable.fromParts({ ...parts, n: 0, objects: [], poolN: 0, run: undefined, rank: undefined });
  }

  /** Append one (valid) event. @param {LoaderEvent} e */
  push(e) {
    if (this.n === this.kind.length) this.alloc(Math.max(16, this.kind.length * 2));
    const i = this.n++;
    this.seq[i] = e.seq;
    this.t[i] = e.t;
    if (this.pack(i, e)) {
      this.packed += 1;
    } else {
      this.kind[i] = OBJECT;
      this.objects.set(i, e);
    }
  }

  /**
   * Append every row of `other` (a worker's batch) column by column, building no event: the page
   * applies ten million rows, and rebuilding, checking and packing each one again was a tenth of
   * its thread. False, and nothing appended, when both hold packed rows of different runs or ranks
   * (push() each event then: the other run's are kept whole).
   * @param {EventTable} other
   */
  append(other) {
    if (other.packed > 0) {
      if (this.packed === 0) { this.run = other.run; this.rank = other.rank; }
      else if (other.run !== this.run || other.rank !== this.rank) return false;
    }
    const n = this.n, k = other.n;
    if (n + k > this.kind.length) this.alloc(Math.max(n + k, this.kind.length * 2));
    for (const key of COLUMNS) this[key].set(other[key].subarray(0, k), n);
    const base = this.poolN;
    this.ensurePool(other.poolN);
    this.pool.set(other.pool.subarray(0, other.poolN), base);
    this.poolN += other.poolN;
    // a dispatch's indices offset points into `other`'s pool; an object row's flags are stale bytes
    if (base) for (let i = n; i < n + k; i++) if (this.kind[i] !== OBJECT && this.flags[i] & F.INDICES) this.b[i] += base;
    for (const [j, e] of other.objects) this.objects.set(n + j, e);
    this.n += k;
    this.packed += other.packed;
    return true;
  }

  /**
   * Append `e` if it is a hot event that fits the columns and is valid by the schema (checked here
   * rather than by invalidReason: parsing a big file, that check was a fifth of the time). False,
   * and nothing appended, otherwise: the caller validates it and push()es it whole.
   * @param {LoaderEvent} e
   */
  pushValid(e) {
    if (!CODE.has(e.kind) || !schemaValid(e)) return false;
    if (this.n === this.kind.length) this.alloc(Math.max(16, this.kind.length * 2));
    const i = this.n;
    if (!this.pack(i, e)) return false;
    this.seq[i] = e.seq;
    this.t[i] = e.t;
    this.n += 1;
    this.packed += 1;
    return true;
  }

  /** The packed rows' run as pushLine finds it in a line: its JSON text and closing quote. @returns {Literal} */
  runText() {
    let text = this.runLiteral;
    if (text === null || text.run !== this.run) this.runLiteral = text = { run: this.run, ...literal(`${JSON.stringify(this.run).slice(1, -1)}"`) };
    return text;
  }

  /**
   * Append the event whose line starts at bytes[start] (a trace's UTF-8, read no further than `end`)
   * straight into the columns, if it is written the way loaderscope writes the frequent kinds:
   * `{"seq":…,"t":…,"run":"…","rank":…,"kind":"…"` then the kind's fields (those with a column) in
   * any order, each once, no spaces, no string escapes, no exponents, and the line ends right after
   * its `}` (a newline, or the end of `bytes`). Returns where the line ends; -1, and nothing appended, for any
   * other line: the caller parses it with JSON.parse and pushValid()/push() as before. What it takes
   * is exactly what JSON.parse and pushValid() would take, with the same values (JSON.parse was half
   * of a worker's time; reading bytes, not decoded text, spares the decoding and a string per line;
   * and finding the line's end as it reads spares a search for it). Nothing it reads can span a
   * newline, so it never reads past its own line.
   * @param {Uint8Array} bytes @param {number} start @param {number} end
   */
  pushLine(bytes, start, end) {
    const line = LINE.reset(bytes, start, end);
    let seq = NaN, t = NaN, rank = NaN, code = OBJECT;
    /** @type {string|null} */
    let run = null;
    for (let h = 0; h < HEAD.length; h++) {
      const { field, text: head } = HEAD[h];
      if (!line.lit(head)) return -1;
      switch (field) {
        case SEQ: seq = line.num(); break;
        case T: t = line.num(); break;
        case RANK: rank = line.num(); break;
        case RUN:
          run = this.run === undefined ? line.plainString() : line.isString(this.runText()) ? this.run : null;
          if (!line.byte(QUOTE)) return -1;
          break;
        default:
          code = line.kindCode();
      }
    }
    if (!Number.isInteger(seq) || !within(seq) || !within(t) || run === null || !Number.isInteger(rank) || !within(rank)) return -1;
    if (code === OBJECT) return -1;
    if (this.run !== undefined && rank !== this.rank) return -1;
    const i = this.n;
    if (i === this.kind.length) this.alloc(Math.max(16, this.kind.length * 2));
    const keys = LINE_KEYS[code];
    let seen = 0;
    let flags = 0;
    while (flags >= 0 && line.pos < end && line.bytes[line.pos] === COMMA) {
      const k = line.key(keys.literals);
      if (k < 0 || seen & (1 << k)) return -1;
      seen |= 1 << k;
      flags = this.lineValue(line, keys.slots[k], i, flags);
    }
    if (flags < 0 || !line.byte(BRACE) || (bytes[line.pos] !== NEWLINE && line.pos !== bytes.length)) return -1;
    return this.commit(code, seq, t, run, rank, seen, flags) ? line.pos : -1;
  }

  /**
   * Append `n` rows given column by column (a Parquet trace's part: parquet-trace.js): a frequent
   * kind's row straight into the columns, taking exactly what pushValid() takes of the event it
   * makes (and no null, which pushValid() leaves to push()), with the same values; any other row by
   * `other(r)`, which must append that one row (push() or pushValid() its event). Each column is
   * checked in one pass over its rows: a row at a time was twice the cost.
   * @param {number} n @param {{seq?: ValueColumn, t?: ValueColumn, run?: ValueColumn, rank?: ValueColumn, kind?: ValueColumn}} common
   * @param {ValueColumn[]} fields the other columns that hold values
   * @param {Uint8Array|null} hasExtra which rows have fields without a column, `extraOf(r)` gives them
   * @param {(r: number) => Record<string, unknown>|null} extraOf
   * @param {(r: number) => void} other
   */
  pushColumns(n, common, fields, hasExtra, extraOf, other) {
    const n0 = this.n;
    if (n0 + n > this.kind.length) this.alloc(Math.max(n0 + n, this.kind.length * 2));
    const code = new Uint8Array(n); // 0: the row goes to other()
    const kind = common.kind;
    if (kind?.ids) {
      const codes = kind.dict.map(kindCode);
      for (let r = 0; r < n; r++) if (kind.present[r]) code[r] = codes[kind.ids[r]];
    }
    const { seq, t, rank, run } = common;
    if (!seq?.num || !t?.num || !rank?.num || !run?.ids) { // no common columns to read: every row as an event
      for (let r = 0; r < n; r++) other(r);
      return;
    }
    for (let r = 0; r < n; r++) {
      if (!code[r]) continue;
      const s = seq.num[r], time = t.num[r], k = rank.num[r];
      if (!seq.present[r] || !t.present[r] || !rank.present[r] || !run.present[r] || !Number.isInteger(s) || !within(s)
        || !within(time) || !Number.isInteger(k) || !within(k)) code[r] = OBJECT;
      this.seq[n0 + r] = s;
      this.t[n0 + r] = time;
      this.flags[n0 + r] = 0;
    }
    const seen = new Int32Array(n);
    for (const col of fields) this.columnValues(col, n, n0, code, seen);
    for (let r = 0; r < n; r++) {
      const c = code[r];
      if (c && this.restOfRow(c, n0 + r, run.dict[run.ids[r]], rank.num[r], seen[r], hasExtra?.[r] ? extraOf(r) : null)) continue;
      other(r);
    }
  }

  /**
   * One column's values into rows n0 + r of the columns, for the rows of a frequent kind (code[r]);
   * a row whose kind has no such field, or whose value does not fit, gets code 0.
   * @param {ValueColumn} col @param {number} n @param {number} n0 @param {Uint8Array} code @param {Int32Array} seen
   */
  columnValues(col, n, n0, code, seen) {
    const bits = Int8Array.from(LINE_KEYS, (keys) => keys.bits.get(col.name) ?? -1);
    const { present, num, ids, bool, dict } = col;
    const slot = SLOT_BY_NAME.get(col.name) ?? V.A; // a field goes to the same place whatever its kind (V.A: none, bits are -1)
    if (!num || slot === V.BOOL || slot === V.INDICES) { // strings, booleans: as putValue() puts them
      for (let r = 0; r < n; r++) {
        const c = code[r];
        if (!c || !present[r]) continue;
        const k = bits[c];
        const flags = k < 0 ? -1 : this.putValue(slot, num ? num[r] : ids ? dict[ids[r]] : bool?.[r] === 1, n0 + r, this.flags[n0 + r]);
        if (flags < 0) { code[r] = OBJECT; continue; }
        seen[r] |= 1 << k;
        this.flags[n0 + r] = flags;
      }
      return;
    }
    // numbers: the checks and the column of putValue(), without a call per row
    const [name, bit, integer] = NUMBER_SLOTS[slot];
    const dest = this[name];
    const flags = this.flags;
    for (let r = 0; r < n; r++) {
      const c = code[r];
      if (!c || !present[r]) continue;
      const k = bits[c];
      const v = num[r];
      if (k < 0 || !(integer ? isInt(v) : within(v))) { code[r] = OBJECT; continue; }
      seen[r] |= 1 << k;
      dest[n0 + r] = v;
      flags[n0 + r] |= bit;
    }
  }

  /**
   * Row i (its columns' values in place) checked against the table's run and rank, given its
   * `extra` fields, and counted: false, and nothing counted, when it does not fit.
   * @param {number} code @param {number} i @param {string} run @param {number} rank @param {number} seen
   * @param {Record<string, unknown>|null} extra
   */
  restOfRow(code, i, run, rank, seen, extra) {
    if (this.run !== undefined && (run !== this.run || rank !== this.rank)) return false;
    let flags = this.flags[i];
    if (extra) {
      const keys = LINE_KEYS[code];
      for (const name in extra) {
        const k = keys.bits.get(name);
        if (k === undefined || seen & (1 << k)) return false;
        seen |= 1 << k;
        flags = this.putValue(keys.slots[k], extra[name], i, flags);
        if (flags < 0) return false;
      }
    }
    return this.commit(code, this.seq[i], this.t[i], run, rank, seen, flags);
  }

  /**
   * End row n (its fields in the columns): if it carries its kind's required fields, count it and
   * return true; else false, and the row is not counted.
   * @param {number} code @param {number} seq @param {number} t @param {string} run @param {number} rank
   * @param {number} seen the kind's fields present (bits of LINE_KEYS[code]) @param {number} flags
   */
  commit(code, seq, t, run, rank, seen, flags) {
    const required = REQUIRED[code];
    if ((seen & required) !== required || !(flags & F.WORKER || WORKER_OPTIONAL[code])) return false;
    if (this.run === undefined) { this.run = run; this.rank = rank; }
    const i = this.n;
    this.kind[i] = code;
    this.flags[i] = flags;
    this.seq[i] = seq;
    this.t[i] = t;
    if (!(flags & F.WORKER)) this.worker[i] = 0;
    if (flags & F.INDICES) this.poolN += this.c[i];
    this.n += 1;
    this.packed += 1;
    return true;
  }

  /**
   * The value of a field of a pushLine line into row i's columns, as pack() puts it: the flags with
   * its bit added, or -1 when the value does not fit.
   * @param {LineScan} line @param {number} slot where the field goes (V) @param {number} i @param {number} flags
   */
  lineValue(line, slot, i, flags) {
    switch (slot) {
      case V.INDICES: {
        const count = line.intList(this);
        if (count < 0) return -1;
        this.b[i] = this.poolN;
        this.c[i] = count;
        return flags | F.INDICES;
      }
      case V.BOOL:
        if (line.lit(TRUE)) return flags | F.TRUE;
        return line.lit(FALSE) ? flags | F.FALSE : -1;
      default: return this.putValue(slot, line.num(), i, flags);
    }
  }

  /**
   * A field's value into row i's columns, as pack() puts it: the flags with its bit added, or -1
   * when the value does not fit.
   * @param {number} slot where the field goes (V) @param {unknown} v @param {number} i @param {number} flags
   */
  putValue(slot, v, i, flags) {
    switch (slot) {
      case V.INDICES: {
        if (!Array.isArray(v) || !v.every(isInt)) return -1;
        this.ensurePool(v.length);
        this.pool.set(v, this.poolN); // counted by commit()
        this.b[i] = this.poolN;
        this.c[i] = v.length;
        return flags | F.INDICES;
      }
      case V.BOOL: return v === true ? flags | F.TRUE : v === false ? flags | F.FALSE : -1;
      case V.IDX: if (!isInt(v)) return -1; this.idx[i] = v; return flags;
      case V.WORKER: if (!isInt(v)) return -1; this.worker[i] = v; return flags | F.WORKER;
      case V.EPOCH: if (!isInt(v)) return -1; this.epoch[i] = v; return flags | F.EPOCH;
      case V.A: if (!within(v)) return -1; this.a[i] = v; return flags | F.A;
      case V.B: if (!within(v)) return -1; this.b[i] = v; return flags | F.B;
      case V.C: if (!within(v)) return -1; this.c[i] = v; return flags | F.C;
      case V.INT_A: if (!isInt(v)) return -1; this.a[i] = v; return flags | F.A;
      case V.INT_B: if (!isInt(v)) return -1; this.b[i] = v; return flags | F.B;
      default: if (!isInt(v)) return -1; this.c[i] = v; return flags | F.C;
    }
  }

  /**
   * Put a hot event into the columns, each field where the column map says; false when it does not
   * fit (a field without a column, a value its column cannot hold, a required field missing, another
   * run's): it is then kept whole. @param {number} i @param {LoaderEvent} e
   */
  pack(i, e) {
    const code = CODE.get(e.kind);
    if (code === undefined || typeof e.t !== 'number') return false;
    if (this.run === undefined) { this.run = e.run; this.rank = e.rank; }
    if (e.run !== this.run || e.rank !== this.rank) return false;
    const { keys, slots } = LINE_KEYS[code];
    const fields = /** @type {Record<string, unknown>} */ (e);
    let flags = 0, seen = 0;
    for (const name in fields) {
      const k = keys.get(name);
      if (k === undefined) return false;
      const v = fields[name];
      if (k < 0 || v === undefined) continue;
      flags = this.putValue(slots[k], v, i, flags);
      if (flags < 0) return false;
      seen |= 1 << k;
    }
    const required = REQUIRED[code];
    if ((seen & required) !== required || !(flags & F.WORKER || WORKER_OPTIONAL[code])) return false;
    this.kind[i] = code;
    this.flags[i] = flags;
    if (!(flags & F.WORKER)) this.worker[i] = 0;
    if (flags & F.INDICES) this.poolN += this.c[i];
    return true;
  }

  /** @param {number} k */
  ensurePool(k) {
    if (this.poolN + k <= this.pool.length) return;
    let cap = this.pool.length * 2;
    while (cap < this.poolN + k) cap *= 2;
    const next = new Int32Array(cap);
    next.set(this.pool); // all of it: pushLine writes a list past poolN before it counts it
    this.pool = next;
  }

  /** The kind of row i, without building the event. @param {number} i @returns {string} */
  kindOf(i) {
    const code = this.kind[i];
    return code === OBJECT ? this.kept(i).kind : HOT[code - 1];
  }

  /** The event kept whole in row i (every OBJECT row has one). @param {number} i @returns {LoaderEvent} */
  kept(i) {
    const e = this.objects.get(i);
    if (e === undefined) throw new Error(`EventTable: row ${i} holds no kept event`);
    return e;
  }

  /** Event i as an object. @param {number} i @returns {LoaderEvent} */
  get(i) {
    const code = this.kind[i];
    if (code === OBJECT) return this.kept(i);
    const flags = this.flags[i];
    /** @type {LoaderEvent} */
    const e = { seq: this.seq[i], t: this.t[i], run: this.run, rank: this.rank, kind: HOT[code - 1], idx: this.idx[i] };
    const fields = /** @type {Record<string, unknown>} */ (e);
    const { names, columns, bits } = READS[code];
    for (let k = 0; k < names.length; k++) {
      const bit = bits[k];
      if (!(flags & bit)) continue;
      const column = columns[k];
      fields[names[k]] = column === BOOL_READ ? (flags & F.TRUE) !== 0 : column === INDICES_READ ? this.indicesOf(i) : this[column][i];
    }
    return e;
  }

  /**
   * A reader of field `name` of the packed rows of kind `kind`: `(table, i) => value`, the value
   * get(i) would give the field (undefined where get's event lacks it; a dispatch's indices are
   * null then). The batch path reads the columns through these and builds no event.
   * @param {string} kind @param {string} name @returns {(table: EventTable, i: number) => any}
   */
  static field(kind, name) {
    /** @param {number} bit @param {'a'|'b'|'c'} col @returns {(table: EventTable, i: number) => number|undefined} */
    const optional = (bit, col) => (tb, i) => (tb.flags[i] & bit ? tb[col][i] : undefined);
    /** @param {EventTable} tb @param {number} i */
    const bool = (tb, i) => (tb.flags[i] & F.TRUE ? true : tb.flags[i] & F.FALSE ? false : undefined);
    if (!MAP[kind]) throw new Error(`EventTable.field: ${kind} is not a packed kind`);
    switch (name) {
      case 'seq': return (tb, i) => tb.seq[i];
      case 't': return (tb, i) => tb.t[i];
      case 'run': return (tb) => tb.run;
      case 'rank': return (tb) => tb.rank;
      case 'kind': return () => kind;
      case 'idx': return (tb, i) => tb.idx[i];
      case 'worker': return (tb, i) => (tb.flags[i] & F.WORKER ? tb.worker[i] : undefined);
      case 'epoch': return (tb, i) => (tb.flags[i] & F.EPOCH ? tb.epoch[i] : undefined);
      default: break;
    }
    if (!(name in MAP[kind])) return () => undefined;
    const slot = slotOf(kind, name);
    if (slot === V.INDICES) return (tb, i) => tb.indicesOf(i);
    if (slot === V.BOOL) return bool;
    const [column, bit] = NUMBER_SLOTS[slot];
    // a required field is in every packed row: no flag to test
    return OWN[kind][name].required ? (tb, i) => tb[column][i] : optional(bit, /** @type {'a'|'b'|'c'} */ (column));
  }

  /** True when row i is kept whole (an object), false when it is packed in the columns. @param {number} i */
  isObject(i) {
    return this.kind[i] === OBJECT;
  }

  /** Sample indices of a dispatch row (null when it had none). @param {number} i @returns {import('./types.js').Indices|null} */
  indicesOf(i) {
    if (this.kind[i] === OBJECT) return this.kept(i).indices ?? null;
    if (!(this.flags[i] & F.INDICES)) return null;
    const off = this.b[i], n = this.c[i], pool = this.pool;
    const out = new Array(n); // a loop, not Array.from(subarray): no view nor iterator per dispatch
    for (let k = 0; k < n; k++) out[k] = pool[off + k];
    return out;
  }

  /** First row with t > time (binary search; t is close to sorted in seq order). @param {number} time */
  rowAfterTime(time) {
    let lo = 0, hi = this.n;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.t[mid] <= time) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  /** Approximate bytes held, for the perf readout. */
  bytes() {
    return this.kind.length * (1 + 1 + 8 * 5 + 4 * 3) + this.pool.length * 4;
  }
}
