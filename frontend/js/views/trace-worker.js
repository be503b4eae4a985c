// A Web Worker that parses segments of a trace file off the page's main thread: it parses and
// checks every line (TraceReader; the frequent kinds read from their bytes straight into the
// columns by table-lines.js's pushLine, the rest decoded and read by JSON.parse) and packs the events
// into EventTable columns, which it hands to the page in batches without copying (transferred
// buffers). The page only copies each batch's columns into its own table and applies each event,
// so parsing and applying run side by side.
// In: {blob, segment, source, header, part?} per segment (done in the order sent; `part`: the
// segment is that part file of a Parquet trace, parquet-trace.js), and {type:'ack', parts}
// for each batch the page applied, its buffers handed back to be refilled.
// Out: {type:'header'} (the first segment), {type:'rows'} batches, then per segment
// {type:'done', lines} or {type:'error', message, at} (a damaged line) or {type:'failed'}.

import { TraceReader, TraceError } from './trace-file.js';
import { EventTable } from '../model/event-table.js';
import { pushLine } from '../model/table-lines.js';
import { partIntoTable, zstdReady } from './parquet-trace.js';

const BATCH = 1 << 16; // rows per message: ~3.5 MB of columns, tens of ms to apply
const AHEAD = 6; // batches sent and not yet applied before the worker waits: bounds what queues up

let credit = AHEAD;
/** @type {(() => void) | null} */
let wake = null;
let work = Promise.resolve();
// A part file's bytes are read while earlier parts decode, one file after another, at most
// READ_AHEAD parts ahead of the one decoding: waiting for each read before decoding it was an
// eighth of a 10M-event open.
const READ_AHEAD = 4;
/** @type {Promise<unknown>} */
let reading = Promise.resolve();
/** @type {Array<Promise<void>>} by job number: its decoding has begun */
const begun = [];
/** @type {import('../model/event-table.js').TableParts[]} batches' buffers the page handed back, to be filled again */
const spare = [];

self.onmessage = (
  /** @type {MessageEvent<import('./trace-file.js').SegmentJob | import('./trace-file.js').BatchAck>} */ { data },
) => {
  if (data.type === 'ack') {
    spare.push(data.parts);
    credit += 1;
    wake?.();
    wake = null;
  } else {
    const job = begun.length;
    /** @type {() => void} */
    let begin = () => {};
    begun.push(
      new Promise((resolve) => {
        begin = resolve;
      }),
    );
    const bytes =
      data.part === undefined
        ? null
        : (reading = Promise.all([reading, begun[job - READ_AHEAD]]).then(() => data.blob.arrayBuffer()));
    work = work.then(() => {
      begin();
      return read(data, /** @type {Promise<ArrayBuffer>|null} */ (bytes));
    });
  }
};

const emptyBatch = () => {
  const parts = spare.pop();
  return parts ? EventTable.recycle(parts) : new EventTable(BATCH);
};

/**
 * @param {import('./trace-file.js').SegmentJob} job
 * @param {Promise<ArrayBuffer>|null} partBytes a part file's bytes, being read (null for a JSON-lines segment)
 */
async function read({ blob, segment, source, header, part }, partBytes) {
  let rows = emptyBatch();
  let bytes = 0;
  const send = async () => {
    if (!rows.length) return;
    while (credit === 0)
      await new Promise((r) => {
        wake = () => r(undefined);
      });
    credit -= 1;
    const parts = rows.toParts();
    self.postMessage({ type: 'rows', segment, parts, bytes }, EventTable.transfers(parts));
    rows = emptyBatch();
  };
  const reader = new TraceReader({
    source,
    header,
    onHeader: (h) => self.postMessage({ type: 'header', header: h }),
    onEvent: (e) => rows.push(e),
    acceptLine: (bytes, start, end) => pushLine(rows, bytes, start, end),
    accept: (e) => rows.pushValid(e),
  });
  try {
    if (part !== undefined && partBytes !== null) {
      // both or neither: the job is a part file
      await readParquetPart(await partBytes, source, part, header, rows);
      bytes = blob.size;
      await send();
      self.postMessage({ type: 'done', segment, lines: rows.length });
      return;
    }
    const stream = blob.stream().getReader();
    let next = stream.read();
    for (;;) {
      const { value, done } = await next;
      if (done) break;
      next = stream.read(); // the browser reads the next piece while this one is parsed (a fifth of the time was waits)
      reader.push(value);
      bytes += value.length;
      if (rows.length >= BATCH) await send();
    }
    reader.end();
    await send();
    self.postMessage({ type: 'done', segment, lines: reader.line });
  } catch (err) {
    await send(); // what came before the damage is shown
    const trace = err instanceof TraceError;
    self.postMessage({
      type: trace ? 'error' : 'failed',
      segment,
      message: trace ? err.message : String(err instanceof Error ? (err.stack ?? err) : err),
      at: trace ? err.at : null,
    });
  }
}

/**
 * One part file of a Parquet trace into `rows` (a part holds at most a batch of rows).
 * @param {ArrayBuffer} bytes the part's file @param {string} source the trace's name @param {string} part the part's
 * @param {boolean} header whether to hand the page the header (the first part) @param {EventTable} rows
 */
async function readParquetPart(bytes, source, part, header, rows) {
  await zstdReady();
  const decoded = partIntoTable(bytes, `${source}/${part}`, rows);
  if (header) self.postMessage({ type: 'header', header: decoded.header });
}
