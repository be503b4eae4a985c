// A trace line's bytes straight into an EventTable's columns (pushLine), with no object built: the
// frequent kinds' lines as the trace writer writes them; any other line is left to JSON.parse. Pure.

import { F, FALSE, HEAD, LINE_KEYS, OBJECT, RANK, RUN, SEQ, T, TRUE, V, literal, within } from './event-columns.js';
import { BRACE, COMMA, LINE, LineScan, NEWLINE, QUOTE } from './line-scan.js';

/** @typedef {import('./event-table.js').EventTable} EventTable */
/** @typedef {import('./event-columns.js').Literal} Literal */

/**
 * The packed rows' run as pushLine finds it in a line: its JSON text and closing quote.
 * @returns {Literal}
 * @param {EventTable} table
 */
export function runText(table) {
  let text = table.runLiteral;
  if (text === null || text.run !== table.run)
    table.runLiteral = text = { run: table.run, ...literal(`${JSON.stringify(table.run).slice(1, -1)}"`) };
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
 * @param {EventTable} table
 * @param {Uint8Array} bytes @param {number} start @param {number} end
 */
export function pushLine(table, bytes, start, end) {
  const line = LINE.reset(bytes, start, end);
  let seq = NaN,
    t = NaN,
    rank = NaN,
    code = OBJECT;
  /** @type {string|null} */
  let run = null;
  for (let h = 0; h < HEAD.length; h++) {
    const { field, text: head } = HEAD[h];
    if (!line.lit(head)) return -1;
    switch (field) {
      case SEQ:
        seq = line.num();
        break;
      case T:
        t = line.num();
        break;
      case RANK:
        rank = line.num();
        break;
      case RUN:
        run = table.run === undefined ? line.plainString() : line.isString(runText(table)) ? table.run : null;
        if (!line.byte(QUOTE)) return -1;
        break;
      default:
        code = line.kindCode();
    }
  }
  if (!Number.isInteger(seq) || !within(seq) || !within(t) || run === null || !Number.isInteger(rank) || !within(rank))
    return -1;
  if (code === OBJECT) return -1;
  if (table.run !== undefined && rank !== table.rank) return -1;
  const i = table.n;
  if (i === table.kind.length) table.alloc(Math.max(16, table.kind.length * 2));
  const keys = LINE_KEYS[code];
  let seen = 0;
  let flags = 0;
  while (flags >= 0 && line.pos < end && line.bytes[line.pos] === COMMA) {
    const at = line.key(keys.literals);
    if (at < 0) return -1;
    const k = keys.field[at]; // a field's old name counts as the field
    if (seen & (1 << k)) return -1;
    seen |= 1 << k;
    flags = lineValue(table, line, keys.slots[at], i, flags);
  }
  if (flags < 0 || !line.byte(BRACE) || (bytes[line.pos] !== NEWLINE && line.pos !== bytes.length)) return -1;
  return table.commit(code, seq, t, run, rank, seen, flags) ? line.pos : -1;
}

/**
 * The value of a field of a pushLine line into row i's columns, as pack() puts it: the flags with
 * its bit added, or -1 when the value does not fit.
 * @param {EventTable} table
 * @param {LineScan} line @param {number} slot where the field goes (V) @param {number} i @param {number} flags
 */
export function lineValue(table, line, slot, i, flags) {
  switch (slot) {
    case V.INDICES: {
      const count = line.intList(table);
      if (count < 0) return -1;
      table.b[i] = table.poolN;
      table.c[i] = count;
      return flags | F.INDICES;
    }
    case V.BOOL:
      if (line.lit(TRUE)) return flags | F.TRUE;
      return line.lit(FALSE) ? flags | F.FALSE : -1;
    default:
      return table.putValue(slot, line.num(), i, flags);
  }
}
