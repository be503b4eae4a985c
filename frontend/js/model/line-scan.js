// The byte-level cursor table-lines.js's pushLine reads a trace line with: JSON's grammar for what a
// frequent kind's line holds (numbers, plain strings, literals, index lists), no more. Pure.

import { CODE, HOT, OLD_KIND_CODES, isInt, literal, OBJECT } from './event-columns.js';

/** @typedef {import('./event-columns.js').Literal} Literal */
/** @typedef {import('./event-table.js').EventTable} EventTable */

// 10**k for k <= 22: exact doubles, so an integer below 2**53 divided by one is rounded once, the
// way JSON.parse rounds the decimal it came from (Clinger's fast path).
const POW10 = Array.from({ length: 23 }, (_, k) => Number(`1e${k}`));
export const D0 = 48,
  D9 = 57,
  MINUS = 45,
  DOT = 46,
  QUOTE = 34,
  BACKSLASH = 92,
  COMMA = 44,
  OPEN = 91,
  CLOSE = 93,
  NEWLINE = 10;
export const BRACE = 125;
// each hot kind's name closed by its quote, as pushLine finds it after `"kind":"`, then the names
// some had before a rename (an older trace's), and the code each stands for
const KIND_NAMES = [...HOT, ...OLD_KIND_CODES.map(([old]) => old)].map((kind) => literal(`${kind}"`));
const KIND_CODES = Int32Array.from([
  ...HOT.map((kind) => /** @type {number} */ (CODE.get(kind))),
  ...OLD_KIND_CODES.map(([, code]) => code),
]);

/** A cursor over one line's UTF-8 bytes for table-lines.js's pushLine: JSON's grammar for what it reads, no more. */
export class LineScan {
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
    const { bytes: text, words } = s,
      pos = this.pos,
      n = text.length;
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
    const bytes = this.bytes,
      start = this.pos,
      end = this.end;
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

  /**
   * True when the string that comes next, up to its closing quote, is `s` (its text and the quote).
   * @param {Literal} s
   */
  isString(s) {
    if (!this.at(s)) return false;
    this.pos += s.bytes.length - 1; // its closing quote is stepped over by the caller
    return true;
  }

  /** The characters up to the next quote when they are printable ASCII without escapes, else null. */
  plainString() {
    const bytes = this.bytes,
      start = this.pos;
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
    const k = this.oneOf(KIND_NAMES, 0);
    return k < 0 ? OBJECT : KIND_CODES[k];
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

export const LINE = new LineScan(); // one cursor for every line: a new one per line was a tenth of the parse in garbage

/**
 * bytes[start, end) as a string, each byte one character (the caller knows them to be ASCII).
 * @param {Uint8Array} bytes
 * @param {number} start
 * @param {number} end
 */
function ascii(bytes, start, end) {
  return String.fromCharCode.apply(null, /** @type {any} */ (bytes.subarray(start, end)));
}
