// Reading a ◆ Parquet trace (DESIGN §5, "Parquet traces in the page"; `record --format parquet` and
// `export -o X.trace.parquet` write it) in the browser: a directory of part files, each a whole
// Parquet file of one row group, with the trace's header in its key-value metadata. A parsing
// worker (trace-worker.js) decodes a part's columns into typed arrays, one slot per row, and hands
// them to table-columns.js's pushColumns: the frequent kinds' rows go straight into its columns; any other
// row is rebuilt as the event it was written from (its columns' values, a null being a field the
// event lacked, and the JSON of its `extra` column) and checked against the schema as a JSON line is.
//
// It reads what Parquet writers write for such a table: flat optional or required columns; PLAIN,
// dictionary (PLAIN_DICTIONARY, RLE_DICTIONARY), RLE booleans, DELTA_BINARY_PACKED integers and
// BYTE_STREAM_SPLIT; data pages v1 and v2; zstd (in WebAssembly: `await zstdReady()` first), Snappy
// or none. Anything else is refused with a message that names it and a way round it (`loaderscope
// serve --open`, which reads any Parquet through pyarrow).
// The pages of a column chunk are decoded by parquet-pages.js.

import { parquetMetadata } from '../vendor/hyparquet/metadata.js';
import { checkHeader, MAX_TRACE_EVENTS, readSegments, TraceError } from './trace-file.js';
import { invalidReason, renamed, renamedColumn, renamedKind } from '../model/schema.js';
import { pushColumns } from '../model/table-columns.js';
import { emptyColumn, readChunk, unsupported, zstdReady } from './parquet-pages.js';

export { zstdReady };

/** @typedef {import('../model/types.js').LoaderEvent} LoaderEvent */
/** @typedef {import('./trace-file.js').TraceHeader} TraceHeader */
/** @typedef {import('../model/event-table.js').EventTable} EventTable */

export const HEADER_KEY = 'loaderscope-trace'; // the key-value metadata holding the header (traces/parquet.py)
const FIRST = ['seq', 't', 'run', 'rank', 'kind']; // the fields a JSON line carries first, in its order
const NOT_FIELDS = new Set(['extra', 'int_fields']); // columns that are not fields of the event

/**
 * One column of a part, one slot per row (EventTable's ValueColumn: its `dict` PLAIN pages extend),
 * with its Parquet type, its row count and how many rows hold a value.
 * @typedef {import('../model/event-table.js').ValueColumn & {type: string, rows: number, nonNull: number}} Column
 * @typedef {{header: TraceHeader, rows: number, columns: Column[]}} Part
 */

/**
 * Decode one part file. Throws TraceError naming `source` for a file that is not a part of a
 * loaderscope trace, or that uses an encoding this reader does not know.
 * @param {ArrayBuffer} buffer the whole file @param {string} source its name, for messages
 * @returns {Part}
 */
export function readPart(buffer, source) {
  let meta;
  try {
    meta = parquetMetadata(buffer, { geoparquet: false });
  } catch (err) {
    throw new TraceError(
      `${source} is not a Parquet file (${err instanceof Error ? err.message : err}): a Parquet trace is a ` +
        `directory NAME.trace.parquet of part files`,
    );
  }
  const text = meta.key_value_metadata?.find((kv) => kv.key === HEADER_KEY)?.value;
  if (text === undefined)
    throw new TraceError(
      `${source} is a Parquet file without a loaderscope header ('${HEADER_KEY}' in its key-value metadata): not ` +
        `a loaderscope trace`,
    );
  const header = checkHeader(text, source);
  const leaves = meta.schema.filter((el) => el.type !== undefined);
  if (leaves.length !== meta.schema.length - 1) throw unsupported(source, 'nested columns');
  const rows = Number(meta.num_rows);
  const view = new DataView(buffer);
  /** @type {Column[]} */
  // an older trace's columns and kinds by their old names (contract RENAMED_FIELDS, RENAMED_KINDS) read as today's
  const columns = leaves.map((leaf) => emptyColumn(renamedColumn(leaf.name), leaf.type ?? '', rows));
  let row0 = 0;
  for (const group of meta.row_groups) {
    const n = Number(group.num_rows);
    group.columns.forEach((chunk, k) => {
      if (!chunk.meta_data) throw unsupported(source, 'column chunks in other files');
      readChunk(view, chunk.meta_data, columns[k], row0, n, leaves[k].repetition_type === 'OPTIONAL', source);
    });
    row0 += n;
  }
  const kinds = columns.find((c) => c.name === 'kind')?.dict ?? [];
  for (let k = 0; k < kinds.length; k++) if (typeof kinds[k] === 'string') kinds[k] = renamedKind(kinds[k]);
  return { header, rows, columns };
}

/**
 * How many events the part files hold, from their footers alone (a few KB each): the page sizes
 * its table once.
 * @param {Array<Blob & {name: string}>} parts @param {string} source
 */
export async function countRows(parts, source) {
  const counts = await Promise.all(parts.map((part) => partRows(part, source)));
  return counts.reduce((sum, n) => sum + n, 0);
}

/** @param {Blob & {name: string}} part @param {string} source */
async function partRows(part, source) {
  const tail = new DataView(await part.slice(Math.max(0, part.size - 8)).arrayBuffer());
  const length = tail.byteLength === 8 ? tail.getUint32(0, true) : -1;
  if (length < 0 || length > part.size - 12)
    throw new TraceError(
      `${source}/${part.name} is not a Parquet file: a Parquet trace is a directory NAME.trace.parquet of part files`,
    );
  const footer = await part.slice(part.size - 8 - length).arrayBuffer();
  try {
    return Number(parquetMetadata(footer, { geoparquet: false }).num_rows);
  } catch (err) {
    throw new TraceError(`${source}/${part.name} is not a Parquet file (${err instanceof Error ? err.message : err})`);
  }
}

/**
 * readTraceFileInWorkers (trace-file.js) for a Parquet trace: its part files, in order, each one
 * segment. A damaged row is named by its event number in the trace.
 * @param {Array<Blob & {name: string}>} parts @param {string} source the trace's name
 * @param {import('./trace-file.js').ReadOptions} o
 * @returns {Promise<{header: TraceHeader|null, events: number}>}
 */
export async function readParquetTraceInWorkers(parts, source, o) {
  // The footers' count sizes the page's table once. It is read beside the parts, not before them
  // (150 footers took 0.3 s); a damaged part is said by the worker that reads it.
  countRows(parts, source).then(
    (events) => o.onCount?.(Math.min(events, MAX_TRACE_EVENTS)),
    () => {},
  );
  let start = 0;
  const pieces = parts.map((blob) => ({ blob, start: (start += blob.size) - blob.size, part: blob.name }));
  return readSegments(pieces, start, source, 'event', o);
}

/**
 * Decode one part file into `table`, as a worker reads it (trace-worker.js): the rows of frequent
 * kinds straight into the columns, any other checked against the schema as a JSON line is, and
 * kept whole. Returns the part (its header, its rows). Throws TraceError at the first damaged row.
 * @param {ArrayBuffer} buffer @param {string} source @param {EventTable} table
 */
export function partIntoTable(buffer, source, table) {
  const part = readPart(buffer, source);
  intoTable(part, source, table, (raw, row) => {
    const e = renamed(raw); // old names in its `extra` column
    if (table.pushValid(e)) return;
    const bad = invalidReason(e);
    if (bad !== null) throw new TraceError(`${source}, row ${row + 1}: ${bad}`, { line: row + 1, detail: bad });
    table.push(e);
  });
  return part;
}

/**
 * The rows of `part` into `table`, in order: a frequent kind's row straight into its columns
 * (table-columns.js's pushColumns, no object), any other row as the event it was written from, to
 * `other(e, row)` (the caller checks it against the schema and keeps it, as a parsed JSON line).
 * Throws TraceError for a row whose `extra` is not a JSON object.
 * @param {Part} part @param {string} source @param {EventTable} table
 * @param {(e: LoaderEvent, row: number) => void} other
 */
export function intoTable(part, source, table, other) {
  const rows = new PartRows(part, source);
  const { seq, t, run, rank, kind } = rows;
  const extra = rows.extra?.ids ? rows.extra.present : null;
  pushColumns(
    table,
    part.rows,
    { seq, t, run, rank, kind },
    rows.fields,
    extra,
    (r) => rows.extraOf(r),
    (r) => other(rows.event(r), r),
  );
}

/**
 * A value of `col` at row r, or undefined where it is null (or there is no such column).
 * @param {Column|undefined} col
 * @param {number} r
 */
function valueOf(col, r) {
  if (!col || !col.present[r]) return undefined;
  return col.num ? col.num[r] : col.ids ? col.dict[col.ids[r]] : col.bool?.[r] === 1;
}

/** A part's rows, read as events: its columns by role, and each `extra` text parsed once. */
class PartRows {
  /** @param {Part} part @param {string} source */
  constructor(part, source) {
    const byName = new Map(part.columns.map((c) => [c.name, c]));
    this.source = source;
    const common = FIRST.map((name) => byName.get(name));
    /** @type {Array<Column|undefined>} the common fields' columns, in FIRST's order */
    this.common = common;
    this.seq = common[0];
    this.t = common[1];
    this.run = common[2];
    this.rank = common[3];
    this.kind = common[4];
    /** the other columns that hold a value in this part: the events' own fields */
    this.fields = part.columns.filter((c) => !FIRST.includes(c.name) && !NOT_FIELDS.has(c.name) && c.nonNull > 0);
    this.extra = byName.get('extra');
    /** @type {Array<Record<string, unknown>>} by the extra text's id (a dictionary repeats a text) */
    this.parsed = [];
  }

  /** The fields row r keeps in `extra`, or null. @param {number} r */
  extraOf(r) {
    const extra = this.extra;
    if (!extra?.ids || !extra.present[r]) return null;
    const id = extra.ids[r];
    return (this.parsed[id] ??= parseExtra(extra.dict[id], this.source, r));
  }

  /** Row r as the event it was written from: the common fields first, as a JSON line has them. @param {number} r */
  event(r) {
    /** @type {Record<string, unknown>} */
    const e = {};
    for (const c of [...this.common, ...this.fields]) {
      if (c?.present[r]) e[c.name] = valueOf(c, r);
    }
    return /** @type {LoaderEvent} */ (Object.assign(e, this.extraOf(r)));
  }
}

const INDICES = '{"indices":['; // a dispatch's `extra`: one row in seven of a trace

/**
 * `{"indices":[...]}` of small non-negative integers read as JSON.parse reads it, or null for any
 * other text (left to JSON.parse: its generic path was a tenth of a part's reading).
 * @param {string} text
 */
export function indicesOnly(text) {
  if (!text.startsWith(INDICES) || !text.endsWith(']}')) return null;
  /** @type {number[]} */
  const out = [];
  let v = 0,
    digits = 0;
  for (let i = INDICES.length, end = text.length - 2; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57 && digits < 9 && !(digits === 1 && v === 0)) {
      v = v * 10 + c - 48;
      digits += 1;
    } else if (c === 44 && digits) {
      out.push(v);
      v = 0;
      digits = 0;
    } else return null; // a sign, a leading zero, a space, a long number: JSON.parse decides
  }
  if (digits) out.push(v);
  else if (out.length) return null; // a trailing comma
  return { indices: out };
}

/** @param {string} text @param {string} source @param {number} row */
function parseExtra(text, source, row) {
  const indices = indicesOnly(text);
  if (indices) return indices;
  /** @type {unknown} */
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    value = null;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    const detail = "its 'extra' column is not a JSON object";
    throw new TraceError(`${source}, row ${row + 1}: ${detail}`, { line: row + 1, detail });
  }
  return /** @type {Record<string, unknown>} */ (value);
}
