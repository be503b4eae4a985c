// Every event of a run, kept column-wise so a million of them cost tens of megabytes, not hundreds,
// and the garbage collector never walks them. The frequent kinds (dispatch, fetch, pin, arrive,
// buffer, yield, skip) go into typed arrays, each field into the column the contract's generated map
// gives it (COLUMNS in contract.gen.js, from backend/loaderscope/contract/columns.py); anything else —
// rare kinds, unknown kinds, a field the map has no column for, a value a column cannot hold — is kept
// as the object it came as. `get(i)` gives the event back as a plain object (the same object each time
// for the kept ones). A trace line of a frequent kind can go straight from its bytes to columns
// (pushLine), and a whole table into another (append), without an object per event. Pure.

// The column layout is event-columns.js, the line reader line-scan.js.

import {
  BOOL_READ,
  CODE,
  COLUMNS,
  F,
  HOT,
  INDICES_READ,
  LINE_KEYS,
  MAP,
  NUMBER_SLOTS,
  OBJECT,
  OWN,
  READS,
  REQUIRED,
  V,
  WORKER_OPTIONAL,
  isInt,
  schemaValid,
  slotOf,
  within,
} from './event-columns.js';

/** @typedef {import('./types.js').LoaderEvent} LoaderEvent */
/** @typedef {import('./event-columns.js').LineKeys} LineKeys */
/** @typedef {import('./event-columns.js').Literal} Literal */

/**
 * A column of values by row, as pushColumns() takes them: numbers, strings (ids into `dict`) or
 * booleans (0/1); `present[r]` is 0 where row r has no value.
 * @typedef {{name: string, present: Uint8Array, num: Float64Array|null, ids: Int32Array|null, dict: string[],
 *   bool: Uint8Array|null}} ValueColumn
 */

/**
 * A table's rows as structured-cloneable parts (toParts): its typed columns by name, its kept objects
 * as [row, event] pairs, the sample-index pool and the run and rank of its packed rows.
 * @typedef {{n: number,
 *   cols: Record<string, Uint8Array<ArrayBuffer> | Int32Array<ArrayBuffer> | Float64Array<ArrayBuffer>>,
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

  /**
   * Room for `capacity` rows without growing (a file's size tells roughly how many will come).
   * @param {number} capacity
   */
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
    return {
      n: this.n,
      cols,
      objects: [...this.objects],
      pool: this.pool,
      poolN: this.poolN,
      run: this.run,
      rank: this.rank,
    };
  }

  /** The buffers of `parts` that postMessage can transfer rather than copy. @param {TableParts} parts */
  static transfers(parts) {
    return [...Object.values(parts.cols).map((c) => c.buffer), parts.pool.buffer];
  }

  /**
   * A table holding the rows `toParts()` gave (to read with get(); it can grow like any other).
   * @param {TableParts} parts
   */
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
      if (this.packed === 0) {
        this.run = other.run;
        this.rank = other.rank;
      } else if (other.run !== this.run || other.rank !== this.rank) return false;
    }
    const n = this.n,
      k = other.n;
    if (n + k > this.kind.length) this.alloc(Math.max(n + k, this.kind.length * 2));
    for (const key of COLUMNS) this[key].set(other[key].subarray(0, k), n);
    const base = this.poolN;
    this.ensurePool(other.poolN);
    this.pool.set(other.pool.subarray(0, other.poolN), base);
    this.poolN += other.poolN;
    // a dispatch's indices offset points into `other`'s pool; an object row's flags are stale bytes
    if (base)
      for (let i = n; i < n + k; i++) if (this.kind[i] !== OBJECT && this.flags[i] & F.INDICES) this.b[i] += base;
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

  /**
   * End row n (its fields in the columns): if it carries its kind's required fields, count it and
   * return true; else false, and the row is not counted.
   * @param {number} code @param {number} seq @param {number} t @param {string} run @param {number} rank
   * @param {number} seen the kind's fields present (bits of LINE_KEYS[code]) @param {number} flags
   */
  commit(code, seq, t, run, rank, seen, flags) {
    const required = REQUIRED[code];
    if ((seen & required) !== required || !(flags & F.WORKER || WORKER_OPTIONAL[code])) return false;
    if (this.run === undefined) {
      this.run = run;
      this.rank = rank;
    }
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
      case V.BOOL:
        return v === true ? flags | F.TRUE : v === false ? flags | F.FALSE : -1;
      case V.IDX:
        if (!isInt(v)) return -1;
        this.idx[i] = v;
        return flags;
      case V.WORKER:
        if (!isInt(v)) return -1;
        this.worker[i] = v;
        return flags | F.WORKER;
      case V.EPOCH:
        if (!isInt(v)) return -1;
        this.epoch[i] = v;
        return flags | F.EPOCH;
      case V.A:
        if (!within(v)) return -1;
        this.a[i] = v;
        return flags | F.A;
      case V.B:
        if (!within(v)) return -1;
        this.b[i] = v;
        return flags | F.B;
      case V.C:
        if (!within(v)) return -1;
        this.c[i] = v;
        return flags | F.C;
      case V.INT_A:
        if (!isInt(v)) return -1;
        this.a[i] = v;
        return flags | F.A;
      case V.INT_B:
        if (!isInt(v)) return -1;
        this.b[i] = v;
        return flags | F.B;
      default:
        if (!isInt(v)) return -1;
        this.c[i] = v;
        return flags | F.C;
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
    if (this.run === undefined) {
      this.run = e.run;
      this.rank = e.rank;
    }
    if (e.run !== this.run || e.rank !== this.rank) return false;
    const { keys, slots } = LINE_KEYS[code];
    const fields = /** @type {Record<string, unknown>} */ (e);
    let flags = 0,
      seen = 0;
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
      fields[names[k]] =
        column === BOOL_READ ? (flags & F.TRUE) !== 0 : column === INDICES_READ ? this.indicesOf(i) : this[column][i];
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
      case 'seq':
        return (tb, i) => tb.seq[i];
      case 't':
        return (tb, i) => tb.t[i];
      case 'run':
        return (tb) => tb.run;
      case 'rank':
        return (tb) => tb.rank;
      case 'kind':
        return () => kind;
      case 'idx':
        return (tb, i) => tb.idx[i];
      case 'worker':
        return (tb, i) => (tb.flags[i] & F.WORKER ? tb.worker[i] : undefined);
      case 'epoch':
        return (tb, i) => (tb.flags[i] & F.EPOCH ? tb.epoch[i] : undefined);
      default:
        break;
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

  /**
   * Sample indices of a dispatch row (null when it had none).
   * @param {number} i
   * @returns {import('./types.js').Indices|null}
   */
  indicesOf(i) {
    if (this.kind[i] === OBJECT) return this.kept(i).indices ?? null;
    if (!(this.flags[i] & F.INDICES)) return null;
    const off = this.b[i],
      n = this.c[i],
      pool = this.pool;
    const out = new Array(n); // a loop, not Array.from(subarray): no view nor iterator per dispatch
    for (let k = 0; k < n; k++) out[k] = pool[off + k];
    return out;
  }

  /** First row with t > time (binary search; t is close to sorted in seq order). @param {number} time */
  rowAfterTime(time) {
    let lo = 0,
      hi = this.n;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.t[mid] <= time) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Approximate bytes held, for the perf readout. */
  bytes() {
    return this.kind.length * (1 + 1 + 8 * 5 + 4 * 3) + this.pool.length * 4;
  }
}
