// Decoding a Parquet part's column chunks: pages (v1, v2, dictionary), their codecs (zstd in
// WebAssembly, Snappy, none) and encodings (PLAIN, dictionary, RLE / bit-packed hybrid,
// DELTA_BINARY_PACKED, BYTE_STREAM_SPLIT) into one slot per row. parquet-trace.js reads a part with it.

import { deserializeTCompactProtocol } from '../vendor/hyparquet/thrift.js';
import { snappyUncompress } from '../vendor/hyparquet/snappy.js';
import { ZSTDDecoder } from '../vendor/zstddec/zstddec.js';
import { TraceError } from './trace-file.js';

/** @typedef {import('./parquet-trace.js').Column} Column */
/** @typedef {import('../vendor/hyparquet/metadata.js').ColumnMetaData} ColumnMetaData */
/** @typedef {import('../vendor/hyparquet/thrift.js').DataReader} DataReader */

const PAGE = { DATA: 0, INDEX: 1, DICTIONARY: 2, DATA_V2: 3 };
const ENC = { PLAIN: 0, PLAIN_DICTIONARY: 2, RLE: 3, DELTA_BINARY_PACKED: 5, RLE_DICTIONARY: 8, BYTE_STREAM_SPLIT: 9 };
const WIDTH = /** @type {Record<string, number>} */ ({ INT32: 4, INT64: 8, FLOAT: 4, DOUBLE: 8 });
const utf8 = new TextDecoder('utf-8', { fatal: true });
const latin1 = new TextDecoder('latin1'); // one byte, one character (exact below 0x80, where it is used)
const zstd = new ZSTDDecoder();
/** @type {Promise<void>|null} */
let zstdLoading = null;

/** Load the zstd decoder (WebAssembly, instantiated once per thread) before the first readPart. */
export function zstdReady() {
  return (zstdLoading ??= zstd.init());
}

// Most columns of a part are all null (the fields of rare kinds): they share this and allocate nothing.
const NO_ROWS = new Uint8Array(0);

/** @param {string} name @param {string} type the physical type @param {number} rows */
export function emptyColumn(name, type, rows) {
  return { name, type, rows, present: NO_ROWS, nonNull: 0, dict: [], num: null, ids: null, bool: null };
}

/**
 * An array reused page after page, grown as a page needs: a worker reads one part at a time, and
 * scatter() copies a page's values into the part's columns at once. A fresh array per column per
 * page was some 2 GB of garbage over a 10M-event trace.
 * @template {Uint8Array|Int32Array|Float64Array} A
 */
class Scratch {
  /** @param {{new (n: number): A}} Type */
  constructor(Type) {
    this.Type = Type;
    this.array = new Type(0);
  }

  /** The first n slots (their old values: every user overwrites all n). @param {number} n @returns {A} */
  take(n) {
    if (this.array.length < n) this.array = new this.Type(n);
    return /** @type {A} */ (this.array.subarray(0, n));
  }
}

// a page's definition levels, dictionary ids, numbers and booleans
const scratch = {
  levels: new Scratch(Uint8Array),
  ids: new Scratch(Int32Array),
  nums: new Scratch(Float64Array),
  bits: new Scratch(Uint8Array),
};

/** Give `col` its arrays (at its first value). @param {Column} col */
function allocate(col) {
  if (col.present !== NO_ROWS) return;
  col.present = new Uint8Array(col.rows);
  if (WIDTH[col.type]) col.num = new Float64Array(col.rows);
  else if (col.type === 'BYTE_ARRAY') col.ids = new Int32Array(col.rows);
  else if (col.type === 'BOOLEAN') col.bool = new Uint8Array(col.rows);
  else throw new TraceError(`column '${col.name}': Parquet type ${col.type}, which no trace column has`);
}

/** @param {string} source @param {string} what */
export function unsupported(source, what) {
  return new TraceError(
    `${source} uses ${what}, which the page does not read: open the trace with \`loaderscope serve --open\` (it ` +
      `reads any Parquet), or write it again with \`loaderscope export -o X.trace.parquet\``,
  );
}

/**
 * Decode the pages of one column chunk into rows [row0, row0 + n) of `col`.
 * @param {DataView} view @param {ColumnMetaData} meta @param {Column} col @param {number} row0
 * @param {number} n @param {boolean} optional @param {string} source
 */
export function readChunk(view, meta, col, row0, n, optional, source) {
  let offset = Number(meta.dictionary_page_offset ?? meta.data_page_offset);
  const end = offset + Number(meta.total_compressed_size);
  /** @type {Dictionary} */
  const dict = { values: null, start: 0 };
  let row = row0;
  while (offset < end && row < row0 + n) {
    /** @type {DataReader} */
    const reader = { view, offset };
    const h = deserializeTCompactProtocol(reader);
    const size = /** @type {number} */ (h.field_3);
    const body = new Uint8Array(view.buffer, view.byteOffset + reader.offset, size);
    offset = reader.offset + size;
    const type = h.field_1;
    if (type === PAGE.DICTIONARY) {
      const page = inflate(body, h.field_2, meta.codec, source);
      dict.start = col.dict.length;
      dict.values = plain(page, 0, meta.type, h.field_7.field_1, col, true);
    } else if (type === PAGE.DATA || type === PAGE.DATA_V2) {
      row = dataPage(h, body, meta, col, row, optional, dict, source);
    } else if (type !== PAGE.INDEX) {
      throw unsupported(source, `a page of type ${type}`);
    }
  }
}

/**
 * A chunk's dictionary: its values by id (numbers, booleans), or (strings) where its strings begin
 * in the column's `dict`.
 * @typedef {{values: Float64Array|Uint8Array|null, start: number}} Dictionary
 */

/** @param {Uint8Array} body @param {number} size uncompressed @param {string} codec @param {string} source */
function inflate(body, size, codec, source) {
  if (codec === 'UNCOMPRESSED') return body;
  if (codec === 'ZSTD') return zstd.decode(body, size);
  if (codec === 'SNAPPY') {
    const out = new Uint8Array(size);
    snappyUncompress(body, out);
    return out;
  }
  throw unsupported(source, `the ${codec} codec`);
}

/**
 * One data page (v1 or v2) into `col` from row `row` on; returns the row after it. Its values are
 * decoded side by side (`dense`), then put at their rows: all of them in a row, or where the
 * definition levels say a value is.
 * @param {Record<string, any>} h the page header @param {Uint8Array} body @param {ColumnMetaData} meta
 * @param {Column} col @param {number} row @param {boolean} optional @param {Dictionary} dict @param {string} source
 */
function dataPage(h, body, meta, col, row, optional, dict, source) {
  const v2 = h.field_1 === PAGE.DATA_V2;
  const ph = v2 ? h.field_8 : h.field_5;
  const count = /** @type {number} */ (ph.field_1);
  const encoding = v2 ? ph.field_4 : ph.field_2;
  /** @type {Uint8Array|null} */
  let defined = null;
  let nonNull = count;
  let page, pos;
  if (v2) {
    const levels = ph.field_5 + ph.field_6; // definition then repetition levels, never compressed
    if (ph.field_6) throw unsupported(source, 'repeated columns');
    if (optional && ph.field_2) rleHybrid(body, 0, ph.field_5, 1, (defined = scratch.levels.take(count)));
    nonNull = count - ph.field_2;
    const values = body.subarray(levels);
    page = ph.field_7 === false ? values : inflate(values, h.field_2 - levels, meta.codec, source);
    pos = 0;
  } else {
    page = inflate(body, h.field_2, meta.codec, source);
    pos = 0;
    if (optional) {
      const length = u32(page, 0);
      nonNull = rleHybrid(page, 4, 4 + length, 1, (defined = scratch.levels.take(count))); // levels are 0 or 1
      pos = 4 + length;
    }
  }
  if (!nonNull) return row + count;
  allocate(col);
  const values = pageValues(page, pos, encoding, meta.type, nonNull, col, dict, source);
  scatter(values, col, row, count, nonNull === count ? null : defined);
  col.nonNull += nonNull;
  return row + count;
}

/**
 * A page's `n` values side by side: numbers (or booleans) as they are, strings as their ids in
 * `col.dict` (PLAIN strings are appended to it).
 * @param {Uint8Array} page @param {number} pos @param {number} encoding @param {string} type
 * @param {number} n @param {Column} col @param {Dictionary} dict @param {string} source
 * @returns {Float64Array|Int32Array|Uint8Array}
 */
function pageValues(page, pos, encoding, type, n, col, dict, source) {
  if (encoding === ENC.RLE_DICTIONARY || encoding === ENC.PLAIN_DICTIONARY) {
    const id = scratch.ids.take(n);
    rleHybrid(page, pos + 1, page.length, page[pos], id);
    if (col.ids) {
      if (dict.start) for (let k = 0; k < n; k++) id[k] += dict.start;
      return id;
    }
    const from = dict.values;
    if (!from) throw new TraceError(`column '${col.name}': a dictionary-encoded page without its dictionary`);
    const out = col.bool ? scratch.bits.take(n) : scratch.nums.take(n);
    for (let k = 0; k < n; k++) out[k] = from[id[k]];
    return out;
  }
  if (encoding === ENC.PLAIN) {
    const values = plain(page, pos, type, n, col, false);
    if (values) return values;
    const id = scratch.ids.take(n); // the strings just appended
    for (let k = 0; k < n; k++) id[k] = col.dict.length - n + k;
    return id;
  }
  if (encoding === ENC.RLE && col.bool) {
    const out = scratch.bits.take(n);
    rleHybrid(page, pos + 4, pos + 4 + u32(page, pos), 1, out);
    return out;
  }
  if (encoding === ENC.BYTE_STREAM_SPLIT && col.num) return byteStreamSplit(page, pos, type, n);
  if (encoding === ENC.DELTA_BINARY_PACKED && col.num && (type === 'INT32' || type === 'INT64'))
    return deltaBinaryPacked(page, pos, n);
  throw unsupported(source, `encoding ${encoding} in column '${col.name}'`);
}

/**
 * Put a page's values at their rows of `col`: at row, row + 1, ... when `defined` is null (no
 * null in the page), else at the rows whose definition level is 1.
 * @param {Float64Array|Int32Array|Uint8Array} values @param {Column} col @param {number} row @param {number} count
 * @param {Uint8Array|null} defined
 */
function scatter(values, col, row, count, defined) {
  const out = /** @type {Float64Array|Int32Array|Uint8Array} */ (col.num ?? col.ids ?? col.bool);
  if (!defined) {
    out.set(values, row);
    col.present.fill(1, row, row + count);
    return;
  }
  for (let r = 0, k = 0; r < count; r++) {
    if (!defined[r]) continue;
    col.present[row + r] = 1;
    out[row + r] = values[k++];
  }
}

/** @param {Uint8Array} bytes @param {number} p */
function u32(bytes, p) {
  return (bytes[p] | (bytes[p + 1] << 8) | (bytes[p + 2] << 16) | (bytes[p + 3] << 24)) >>> 0;
}

/**
 * Parquet's RLE/bit-packed hybrid (levels, dictionary ids, RLE booleans) from bytes[pos, end)
 * into all of `out`: runs as fills, bit-packed groups of 8 values. Returns their sum (of definition
 * levels: how many rows hold a value).
 * @param {Uint8Array} bytes
 * @param {number} pos
 * @param {number} end
 * @param {number} width
 * @param {Uint8Array|Int32Array} out
 */
function rleHybrid(bytes, pos, end, width, out) {
  const n = out.length;
  let sum = 0;
  const valueBytes = (width + 7) >> 3;
  const mask = width >= 32 ? 0xffffffff : (1 << width) - 1;
  let k = 0;
  while (k < n && pos < end) {
    let header = 0;
    for (let shift = 0; ; shift += 7) {
      // a ULEB128 varint
      const b = bytes[pos++];
      header |= (b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    if (header & 1) {
      // (header >> 1) groups of 8 bit-packed values, LSB first
      const values = (header >>> 1) * 8;
      const last = Math.min(n, k + values);
      if (width === 1) {
        // definition levels: a byte holds 8
        for (let q = pos; k < last; q++) {
          const b = bytes[q];
          for (let j = 0; j < 8 && k < last; j++) {
            const v = (b >> j) & 1;
            out[k++] = v;
            sum += v;
          }
        }
      } else {
        for (let bit = pos * 8; k < last; bit += width) {
          const p = bit >>> 3;
          const word = (bytes[p] | (bytes[p + 1] << 8) | (bytes[p + 2] << 16) | (bytes[p + 3] << 24)) >>> (bit & 7);
          const v = width + (bit & 7) > 32 ? (word | (bytes[p + 4] << (32 - (bit & 7)))) & mask : word & mask;
          out[k++] = v;
          sum += v;
        }
      }
      pos += (values * width) >>> 3;
    } else {
      // a run: (header >> 1) times one value of valueBytes bytes
      let value = 0;
      for (let b = 0; b < valueBytes; b++) value |= bytes[pos++] << (8 * b);
      const run = Math.min(header >>> 1, n - k);
      out.fill(value, k, k + run);
      k += run;
      sum += value * run;
    }
  }
  return sum;
}

/**
 * PLAIN values: numbers or booleans side by side (in the scratch arrays, or new ones `kept` for a
 * dictionary); strings appended to col.dict (null is returned).
 * @param {Uint8Array} page @param {number} pos @param {string} type @param {number} n @param {Column} col
 * @param {boolean} kept
 * @returns {Float64Array|Uint8Array|null}
 */
function plain(page, pos, type, n, col, kept) {
  const view = new DataView(page.buffer, page.byteOffset, page.byteLength);
  let p = pos;
  if (type === 'BYTE_ARRAY') {
    // The page is decoded once, byte for character, and an ASCII value is a slice of it: a decode
    // per value (a dispatch's `extra`, one row in seven) cost a call into the browser each.
    const bytewise = latin1.decode(page.subarray(pos));
    for (let k = 0; k < n; k++) {
      const len = view.getUint32(p, true);
      const start = p + 4,
        end = start + len;
      let high = 0;
      for (let q = start; q < end; q++) high |= page[q];
      col.dict.push(high < 0x80 ? bytewise.slice(start - pos, end - pos) : utf8.decode(page.subarray(start, end)));
      p = end;
    }
    return null;
  }
  if (type === 'BOOLEAN') {
    const out = kept ? new Uint8Array(n) : scratch.bits.take(n);
    for (let k = 0; k < n; k++) out[k] = (page[p + (k >> 3)] >> (k & 7)) & 1;
    return out;
  }
  const out = kept ? new Float64Array(n) : scratch.nums.take(n);
  for (let k = 0; k < n; k++) {
    switch (type) {
      case 'INT32':
        out[k] = view.getInt32(p, true);
        p += 4;
        break;
      case 'INT64':
        out[k] = int64(view, p);
        p += 8;
        break;
      case 'FLOAT':
        out[k] = view.getFloat32(p, true);
        p += 4;
        break;
      case 'DOUBLE':
        out[k] = view.getFloat64(p, true);
        p += 8;
        break;
      default:
        throw new TraceError(`column '${col.name}': Parquet type ${type}, which no trace column has`);
    }
  }
  return out;
}

/**
 * A little-endian int64 as a Number: exact within ±2**53 (the contract's range); beyond it a value
 * the schema refuses anyway.
 * @param {DataView} view @param {number} p
 */
function int64(view, p) {
  const hi = view.getInt32(p + 4, true);
  if (hi > 0x1fffff || hi < -0x200000) return hi > 0 ? Infinity : -Infinity;
  return hi * 4294967296 + view.getUint32(p, true);
}

/**
 * BYTE_STREAM_SPLIT: byte b of value k lies at b * n + k.
 * @param {Uint8Array} page @param {number} pos @param {string} type @param {number} n
 */
function byteStreamSplit(page, pos, type, n) {
  const width = WIDTH[type];
  const value = new Uint8Array(8);
  const v = new DataView(value.buffer);
  const out = scratch.nums.take(n);
  for (let k = 0; k < n; k++) {
    for (let b = 0; b < width; b++) value[b] = page[pos + b * n + k];
    out[k] =
      type === 'DOUBLE'
        ? v.getFloat64(0, true)
        : type === 'FLOAT'
          ? v.getFloat32(0, true)
          : type === 'INT32'
            ? v.getInt32(0, true)
            : int64(v, 0);
  }
  return out;
}

/**
 * DELTA_BINARY_PACKED (the Parquet spec's encodings): a header (values per block, miniblocks per
 * block, the count, the first value), then blocks of a minimum delta, each miniblock's bit width and
 * its bit-packed deltas above the minimum. Read as Numbers: exact while a value and a delta's bits
 * stay within 2**53 (the contract's range); a wider miniblock is refused.
 * @param {Uint8Array} bytes @param {number} p @param {number} n
 */
function deltaBinaryPacked(bytes, p, n) {
  const out = scratch.nums.take(n);
  const pos = { p };
  const blockSize = uleb(bytes, pos);
  const miniblocks = uleb(bytes, pos);
  uleb(bytes, pos); // the count: n, from the page's levels
  let value = zigzag(uleb(bytes, pos));
  const perMini = blockSize / miniblocks;
  let k = 0;
  if (n > 0) out[k++] = value;
  while (k < n) {
    const minDelta = zigzag(uleb(bytes, pos));
    const widths = bytes.subarray(pos.p, pos.p + miniblocks);
    pos.p += miniblocks;
    for (let m = 0; m < miniblocks && k < n; m++) {
      const width = widths[m];
      const last = Math.min(n, k + perMini);
      if (width === 0) {
        // every delta the minimum (seq: 1, a constant column: 0)
        for (; k < last; k++) out[k] = value += minDelta;
      } else if (width <= 24) {
        const mask = (1 << width) - 1;
        for (let bit = pos.p * 8; k < last; k++, bit += width) {
          const q = bit >>> 3;
          const word = (bytes[q] | (bytes[q + 1] << 8) | (bytes[q + 2] << 16) | (bytes[q + 3] << 24)) >>> (bit & 7);
          out[k] = value += minDelta + (word & mask);
        }
      } else {
        if (width > 45)
          throw new TraceError(
            `a DELTA_BINARY_PACKED miniblock of ${width}-bit deltas, past the integers a trace holds (2**53)`,
          );
        for (let bit = pos.p * 8; k < last; k++) {
          let delta = 0;
          for (let got = 0; got < width; ) {
            const off = bit & 7,
              take = Math.min(8 - off, width - got);
            delta += ((bytes[bit >>> 3] >>> off) & ((1 << take) - 1)) * POW2[got];
            got += take;
            bit += take;
          }
          out[k] = value += minDelta + delta;
        }
      }
      pos.p += (perMini * width) >>> 3; // a miniblock's whole width, however many values it held
    }
  }
  return out;
}

const POW2 = Array.from({ length: 64 }, (_, k) => 2 ** k);

/** An unsigned LEB128 varint as a Number (exact to 2**53). @param {Uint8Array} bytes @param {{p: number}} pos */
function uleb(bytes, pos) {
  let v = 0;
  for (let shift = 0; ; shift += 7) {
    const b = bytes[pos.p++];
    v += (b & 0x7f) * POW2[shift];
    if (!(b & 0x80)) return v;
  }
}

/** @param {number} u a zigzag-encoded integer */
function zigzag(u) {
  return u % 2 ? -(u + 1) / 2 : u / 2;
}
