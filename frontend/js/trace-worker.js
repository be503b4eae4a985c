// A Web Worker that reads a trace file off the page's main thread: it decodes, parses and checks
// every line (TraceReader) and packs the events into EventTable columns, which it hands to the
// page in batches without copying (transferred buffers). The page then only rebuilds and applies
// each event, so on two cores parsing and applying run side by side. Messages, in order:
// {type:'header'}, {type:'rows'} (answered with 'ack'), then {type:'end'} or {type:'error'}.

import { TraceReader, TraceError } from './trace-file.js';
import { EventTable } from './event-table.js';

const BATCH = 1 << 16; // rows per message: ~3.5 MB of columns, tens of ms to apply
const AHEAD = 4; // batches sent and not yet applied before the worker waits: bounds what queues up

let credit = AHEAD;
/** @type {(() => void) | null} */
let wake = null;

self.onmessage = ({ data }) => {
  if (data === 'ack') {
    credit += 1;
    wake?.();
    wake = null;
  } else read(data.file, data.source);
};

/** @param {Blob} file @param {string} source */
async function read(file, source) {
  let rows = new EventTable(BATCH);
  let bytes = 0;
  const send = async () => {
    if (!rows.length) return;
    while (credit === 0) await new Promise((r) => { wake = () => r(undefined); });
    credit -= 1;
    const parts = rows.toParts();
    self.postMessage({ type: 'rows', parts, bytes }, EventTable.transfers(parts));
    rows = new EventTable(BATCH);
  };
  const reader = new TraceReader({
    source,
    onHeader: (header) => self.postMessage({ type: 'header', header }),
    onEvent: (e) => rows.push(e),
  });
  try {
    const stream = file.stream().getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await stream.read();
      if (done) break;
      reader.push(decoder.decode(value, { stream: true }));
      bytes += value.length;
      if (rows.length >= BATCH) await send();
    }
    reader.push(decoder.decode());
    reader.end();
    await send();
    self.postMessage({ type: 'end', events: reader.events });
  } catch (err) {
    await send(); // what came before the damage is shown
    const trace = err instanceof TraceError;
    self.postMessage({ type: trace ? 'error' : 'failed', message: trace ? err.message : String(err?.stack ?? err) });
  }
}
