// Reading a ◆ trace file (JSON Lines: a header, then one event per line) in the browser, as data:
// JSON.parse only, every event checked against the schema, a size limit, and messages that name
// the file and the line, like backend/loaderscope/traces/jsonl.py. Feed it bytes as they are read.

import { invalidReason, renamed } from '../model/schema.js';
import { EventTable } from '../model/event-table.js';

export const FORMAT = 'loaderscope-trace';
export const VERSION = 1;
export const MAX_LINE_BYTES = 1 << 20;
export const MAX_TRACE_BYTES = 2 ** 31; // ~16M events, ~1.5 GB of page memory at ~95 bytes an event
// what a page holds of any trace; a Parquet trace (2-20 bytes an event on disk) is bound by this, not its size
export const MAX_TRACE_EVENTS = 16_000_000;
/** A part file of a Parquet trace's directory, as traces/parquet.py names them (in event order). */
export const PART_NAME = /^part-\d+\.parquet$/;

/** @typedef {import('../model/types.js').LoaderEvent} LoaderEvent */
/** @typedef {Record<string, unknown>} TraceHeader a trace's first line: {format, version, ...} */
/** @typedef {import('../model/event-table.js').TableParts} TableParts */
/**
 * What the page and a parsing worker (trace-worker.js) say to each other. To the worker: a segment
 * to read, or a batch's buffers handed back (`ack`). From it: the header (first segment), batches
 * of rows, then the segment's end: `done`, `error` (a damaged line), or `failed` (anything else).
 * A segment is a piece of a JSON-lines file cut at a line start, or (`part`: its name) a whole part
 * file of a Parquet trace.
 * @typedef {{type?: undefined, blob: Blob, segment: number, source: string, header: boolean, part?: string}} SegmentJob
 * @typedef {{type: 'ack', parts: TableParts}} BatchAck
 * @typedef {{type: 'done', segment: number, lines: number}
 *   | {type: 'error' | 'failed', segment: number, message: string, at: {line: number, detail: string}|null}} SegmentEnd
 * @typedef {{type: 'header', header: TraceHeader} | {type: 'rows', segment: number, parts: TableParts, bytes: number}
 *   | SegmentEnd} WorkerReply
 */

export class TraceError extends Error {
  /**
   * @param {string} message
   * @param {{line:number, detail:string}|null} [at] the damaged line (counted from the piece's start) and what is wrong
   *   with it
   */
  constructor(message, at = null) {
    super(message);
    this.at = at;
  }
}

/**
 * Check a trace's first line; returns the header.
 * @param {string} line
 * @param {string} source
 * @returns {TraceHeader}
 */
export function checkHeader(line, source) {
  /** @type {unknown} */
  let head;
  try {
    head = JSON.parse(line);
  } catch {
    throw new TraceError(`${source} is not a loaderscope trace: its first line is not JSON`);
  }
  const h =
    head !== null && typeof head === 'object' && !Array.isArray(head) ? /** @type {TraceHeader} */ (head) : null;
  if (h === null || h.format !== FORMAT) {
    throw new TraceError(
      `${source} is not a loaderscope trace: the first line must be a header ` +
        `{"format": "${FORMAT}", "version": ${VERSION}, ...}`,
    );
  }
  if (h.version !== VERSION) {
    throw new TraceError(
      `${source} is a version ${JSON.stringify(h.version)} trace; this loaderscope ` +
        `reads version ${VERSION}: open it with the loaderscope that wrote it (${h.loaderscope ?? 'unknown'})`,
    );
  }
  return h;
}

const NEWLINE = 10;

/**
 * Incremental reader: push() the file's bytes in pieces of any size, get events through `onEvent`;
 * the header comes first through `onHeader`. Throws TraceError at the first damaged line (events
 * before it have been delivered: a truncated recording still shows what it holds).
 */
export class TraceReader {
  /**
   * @param {{source:string, onHeader:(h:TraceHeader)=>void, onEvent:(e:LoaderEvent)=>void, header?:boolean,
   *   accept?:(e:LoaderEvent)=>boolean, acceptLine?:(bytes:Uint8Array, start:number, end:number)=>number}} o
   * `header: false` reads a later piece of a file (from a line start on): every line is an event.
   * `accept` may take an event it has checked itself as strictly as the schema does (returning
   * true), so that it is not checked twice; what it refuses is checked and goes to `onEvent`.
   * `acceptLine(bytes, start, end)` may likewise take the event line starting at `start` from its
   * UTF-8 bytes before they are decoded and parsed, when it reads them exactly as JSON.parse and the
   * schema would (table-lines.js's pushLine): it returns where the line ends (a newline, or the end of `bytes`), or -1.
   */
  constructor({ source, onHeader, onEvent, header = true, accept = () => false, acceptLine = () => -1 }) {
    this.source = source;
    this.accept = accept;
    this.acceptLine = acceptLine;
    this.withHeader = header;
    this.onHeader = onHeader;
    this.onEvent = onEvent;
    this.decoder = new TextDecoder(); // a line no acceptLine took, as text (a bad byte becomes U+FFFD)
    /** @type {Uint8Array} the start of a line the last piece ended inside */
    this.carry = new Uint8Array(0);
    this.line = 0;
    /** @type {TraceHeader|null} */
    this.header = null;
    this.events = 0;
  }

  /** @param {Uint8Array} bytes the next piece of the file */
  push(bytes) {
    if (this.line === 0 && this.withHeader) this.checkStart(bytes);
    let pos = 0;
    if (this.carry.length) {
      // finish the line the last piece ended inside on its own; the rest is read where it lies
      const nl = bytes.indexOf(NEWLINE);
      if (nl < 0) {
        this.carry = concat(this.carry, bytes);
        if (this.carry.length > MAX_LINE_BYTES)
          throw this.damaged(this.line + 1, `longer than ${MAX_LINE_BYTES} bytes`);
        return;
      }
      const line = concat(this.carry, bytes.subarray(0, nl));
      this.take(line, 0, line.length);
      pos = nl + 1;
    }
    const last = bytes.lastIndexOf(NEWLINE); // the lines before it are whole
    while (pos <= last) {
      // acceptLine finds the end of a line it takes; only another line is searched for its end
      const taken =
        this.line > 0 || !this.withHeader ? this.acceptLine(bytes, pos, Math.min(last, pos + MAX_LINE_BYTES)) : -1;
      if (taken >= 0) {
        this.line += 1;
        this.events += 1;
        pos = taken + 1;
        continue;
      }
      const end = bytes.indexOf(NEWLINE, pos);
      this.take(bytes, pos, end, false);
      pos = end + 1;
    }
    this.carry = bytes.slice(pos);
    if (this.carry.length > MAX_LINE_BYTES) throw this.damaged(this.line + 1, `longer than ${MAX_LINE_BYTES} bytes`);
  }

  /** Refuse at once a file whose first bytes cannot begin a header. @param {Uint8Array} bytes */
  checkStart(bytes) {
    const first = this.decoder.decode(concat(this.carry.subarray(0, 64), bytes.subarray(0, 64))).trimStart();
    if (first && first[0] !== '{' && first[0] !== '[')
      throw new TraceError(`${this.source} is not a loaderscope trace: its first line is not JSON`);
    if (this.carry.length + bytes.length > MAX_LINE_BYTES && bytes.indexOf(NEWLINE) < 0) {
      throw new TraceError(`${this.source} is not a loaderscope trace: its first line is not a header`);
    }
  }

  /** The file ended. */
  end() {
    // a blank last line is no line
    if (this.decoder.decode(this.carry).trim()) this.take(this.carry, 0, this.carry.length);
    this.carry = new Uint8Array(0);
    if (this.line === 0 && this.withHeader)
      throw new TraceError(`${this.source} is empty: a trace starts with a header line`);
  }

  /**
   * One line, bytes[start, end). @param {Uint8Array} bytes @param {number} start @param {number} end
   * @param {boolean} [fast] whether acceptLine may take it (false: it has refused it already)
   */
  take(bytes, start, end, fast = true) {
    this.line += 1;
    if (end - start > MAX_LINE_BYTES) throw this.damaged(this.line, `longer than ${MAX_LINE_BYTES} bytes`);
    if (this.line === 1 && this.withHeader) {
      this.header = checkHeader(this.decoder.decode(bytes.subarray(start, end)), this.source);
      this.onHeader(this.header);
      return;
    }
    if (fast && this.acceptLine(bytes, start, end) === end) {
      this.events += 1;
      return;
    }
    const line = this.decoder.decode(bytes.subarray(start, end));
    if (!line.trim()) return;
    /** @type {unknown} */
    let e;
    try {
      e = renamed(JSON.parse(line)); // a line of an older trace: its old names (contract RENAMED_KINDS)
    } catch {
      throw this.damaged(this.line, 'not valid JSON (a truncated or edited file?)');
    }
    // accept() checks as strictly as the schema what it takes (an object that is no event it refuses)
    if (e === null || typeof e !== 'object' || !this.accept(/** @type {LoaderEvent} */ (e))) {
      const bad = invalidReason(e);
      if (bad !== null) throw this.damaged(this.line, bad);
      this.onEvent(/** @type {LoaderEvent} */ (e)); // invalidReason found nothing wrong
    }
    this.events += 1;
  }

  /** @param {number} line @param {string} detail */
  damaged(line, detail) {
    return new TraceError(`${this.source}, line ${line}: ${detail}`, { line, detail });
  }
}

/** a then b, in one new array. @param {Uint8Array} a @param {Uint8Array} b */
function concat(a, b) {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/**
 * Read a File (or Blob) through a TraceReader, yielding to the page between slices.
 * @param {Blob & {name?:string}} file
 * @param {{onHeader:(h:TraceHeader)=>void, onEvent:(e:LoaderEvent)=>void, onProgress?:(done:number,
 *   total:number)=>void, sliceMs?:number}} o
 */
export async function readTraceFile(file, { onHeader, onEvent, onProgress, sliceMs = 60 }) {
  const source = checkSize(file);
  const reader = new TraceReader({ source, onHeader, onEvent });
  const stream = file.stream().getReader();
  let done = 0;
  let sliceStart = performance.now();
  for (;;) {
    const { value, done: finished } = await stream.read();
    if (finished) break;
    // the header is checked on the very first bytes, before anything else is read
    reader.push(value);
    done += value.length;
    if (performance.now() - sliceStart > sliceMs) {
      onProgress?.(done, file.size);
      await new Promise((r) => setTimeout(r, 0));
      sliceStart = performance.now();
    }
  }
  reader.end();
  onProgress?.(file.size, file.size);
  return { header: reader.header, events: reader.events };
}

/**
 * The file's name for messages; refuses a file larger than the page holds before reading it.
 * @param {{name?: string, size: number}} file
 */
function checkSize(file) {
  const source = file.name || 'the file';
  if (file.size > MAX_TRACE_BYTES) {
    const mib = (/** @type {number} */ n) => (n / 2 ** 20).toFixed(0);
    throw new TraceError(
      `${source} is ${mib(file.size)} MiB, more than the ${mib(MAX_TRACE_BYTES)} MiB a page opens; open it with ` +
        `\`loaderscope serve --open FILE\` or split the run`,
    );
  }
  return source;
}

// A long file is cut at line starts into segments of about this many bytes, parsed by a small
// pool of workers (segment k by worker k mod N) and applied in file order.
const SEGMENT_BYTES = 16 << 20;
const APPLY_SLICE_MS = 50; // the page's thread applies batches for at most this long per task

/**
 * Offsets that cut `file` into segments of about `step` bytes, each starting at a line start (a
 * cut is skipped where no line ends within 64 KiB of it). First 0, last file.size.
 * @param {Blob} file
 */
export async function lineStarts(file, step = SEGMENT_BYTES) {
  const cuts = [0];
  for (let pos = step; pos < file.size; pos += step) {
    const near = new Uint8Array(await file.slice(pos, Math.min(file.size, pos + 65536)).arrayBuffer());
    const cut = pos + near.indexOf(10) + 1; // a newline byte never occurs inside a UTF-8 character
    if (cut > pos && cut < file.size) cuts.push(cut);
  }
  cuts.push(file.size);
  return cuts;
}

/**
 * readTraceFile's contract, with the parsing in Web Workers (trace-worker.js): they decode, parse
 * and check segments of the file side by side and hand over EventTable columns; the page's thread
 * gets them in file order, a slice at a time, so the page stays responsive: each batch whole through
 * `onRows` (its table is valid only during the call: its buffers go back to the worker), or, without
 * `onRows`, each event rebuilt through `onEvent`. A damaged line stops the read there, as in
 * readTraceFile.
 * @param {Blob & {name?:string}} file
 * @param {ReadOptions & {segmentBytes?:number}} o
 * @returns {Promise<{header: TraceHeader|null, events: number}>}
 */
export async function readTraceFileInWorkers(file, { segmentBytes = SEGMENT_BYTES, ...o }) {
  const source = checkSize(file);
  const cuts = await lineStarts(file, segmentBytes);
  const pieces = cuts.slice(0, -1).map((start, k) => ({ blob: file.slice(start, cuts[k + 1]), start }));
  return readSegments(pieces, file.size, source, 'line', o);
}

/**
 * What the page does with a trace read in workers.
 * `onCount`: how many events it holds, before any is read, where that is known (a Parquet trace).
 * @typedef {{onHeader:(h:TraceHeader)=>void, onEvent?:(e:LoaderEvent)=>void, onRows?:(rows:EventTable)=>void,
 *   onProgress?:(done:number, total:number)=>void, onCount?:(events:number)=>void, workers?:number}} ReadOptions
 */

/**
 * Read `pieces` of a trace (each a segment: trace-worker.js) in a pool of workers, applying their
 * batches in order (readTraceFileInWorkers, parquet-trace.js's readParquetTraceInWorkers).
 * @param {Array<{blob: Blob, start: number, part?: string}>} pieces @param {number} total their bytes
 * @param {string} source @param {string} noun what a damaged segment's number counts ('line', 'event')
 * @param {ReadOptions} o
 * @returns {Promise<{header: TraceHeader|null, events: number}>}
 */
export async function readSegments(
  pieces,
  total,
  source,
  noun,
  { onHeader, onEvent, onRows, onProgress, workers = 2 },
) {
  const take =
    onRows ??
    ((/** @type {EventTable} */ rows) => {
      for (let i = 0; i < rows.length; i++) onEvent?.(rows.get(i));
    });
  /**
   * A segment of the trace: where it starts, the batches its worker sent and the page has not
   * applied yet, and how the worker ended it (null: still reading).
   * @typedef {{start: number, queue: Array<{parts: TableParts, bytes: number, worker: Worker}>,
   *   last: SegmentEnd|null}} Segment
   */
  /** @type {Segment[]} */
  const segments = pieces.map(({ start }) => ({ start, queue: [], last: null }));
  const pool = Array.from(
    { length: Math.min(workers, segments.length) },
    () => new Worker(new URL('./trace-worker.js', import.meta.url), { type: 'module' }),
  );
  try {
    return await new Promise((resolve, reject) => {
      let current = 0; // the segment being applied
      let lines = 0; // lines of the segments before it
      let events = 0;
      /** @type {TraceHeader|null} */
      let header = null;
      let scheduled = false;
      // Apply what has come, in file order, for at most APPLY_SLICE_MS; then let the page breathe.
      const apply = () => {
        scheduled = false;
        const t0 = performance.now();
        while (current < segments.length) {
          const seg = segments[current];
          const batch = seg.queue.shift();
          if (batch) {
            const { parts, bytes, worker } = batch;
            const rows = EventTable.fromParts(parts);
            if (events + rows.length > MAX_TRACE_EVENTS) {
              reject(
                new TraceError(
                  `${source} holds more than the ${MAX_TRACE_EVENTS.toLocaleString('en')} events a page opens: ` +
                    `its first ${events.toLocaleString('en')} are shown; open it whole with ` +
                    `\`loaderscope serve --open\``,
                ),
              );
              return;
            }
            take(rows);
            events += rows.length;
            worker.postMessage({ type: 'ack', parts }, EventTable.transfers(parts)); // its buffers, to refill
            onProgress?.(seg.start + bytes, total);
            if (performance.now() - t0 > APPLY_SLICE_MS) {
              later();
              return;
            }
            continue;
          }
          if (seg.last === null) return; // wait for its worker
          if (seg.last.type !== 'done') {
            reject(failure(seg.last, lines, source, noun));
            return;
          }
          lines += seg.last.lines;
          current += 1;
        }
        onProgress?.(total, total);
        resolve({ header, events });
      };
      const step = () => {
        try {
          apply();
        } catch (err) {
          reject(err);
        }
      };
      const later = () => {
        if (!scheduled) {
          scheduled = true;
          setTimeout(step, 0);
        }
      };
      pool.forEach((worker) => {
        worker.onmessage = (/** @type {MessageEvent<WorkerReply>} */ { data }) => {
          if (data.type === 'header') onHeader((header = data.header));
          else if (data.type === 'rows') segments[data.segment].queue.push({ ...data, worker });
          else segments[data.segment].last = data;
          step();
        };
        worker.onerror = (ev) => reject(new Error(`the trace reader failed: ${ev.message}`));
      });
      pieces.forEach(({ blob, part }, k) =>
        pool[k % pool.length].postMessage({ blob, segment: k, source, header: k === 0, part }),
      );
    });
  } finally {
    for (const worker of pool) worker.terminate();
  }
}

/**
 * The error a worker reported for a segment, its line (or event) counted from the trace's start.
 * @param {Exclude<SegmentEnd, {type: 'done'}>} last
 * @param {number} linesBefore
 * @param {string} source
 * @param {string} noun
 */
function failure(last, linesBefore, source, noun) {
  if (last.type === 'failed') return new Error(last.message);
  if (!last.at) return new TraceError(last.message);
  const line = linesBefore + last.at.line;
  return new TraceError(`${source}, ${noun} ${line}: ${last.at.detail}`, { line, detail: last.at.detail });
}
