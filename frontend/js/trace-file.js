// Reading a ◆ trace file (JSON Lines: a header, then one event per line) in the browser, as data:
// JSON.parse only, every event checked against the schema, a size limit, and messages that name
// the file and the line, like backend/loaderscope/trace.py. Feed it bytes as they are read.

import { invalidReason } from './schema.js';
import { EventTable } from './event-table.js';

export const FORMAT = 'loaderscope-trace';
export const VERSION = 1;
export const MAX_LINE_BYTES = 1 << 20;
export const MAX_TRACE_BYTES = 2 ** 31; // ~16M events, ~1.5 GB of page memory at ~95 bytes an event

export class TraceError extends Error {}

/** Check a trace's first line; returns the header. */
export function checkHeader(line, source) {
  let head;
  try {
    head = JSON.parse(line);
  } catch {
    throw new TraceError(`${source} is not a loaderscope trace: its first line is not JSON`);
  }
  if (head === null || typeof head !== 'object' || Array.isArray(head) || head.format !== FORMAT) {
    throw new TraceError(`${source} is not a loaderscope trace: the first line must be a header {"format": "${FORMAT}", "version": ${VERSION}, ...}`);
  }
  if (head.version !== VERSION) {
    throw new TraceError(`${source} is a version ${JSON.stringify(head.version)} trace; this loaderscope reads version ${VERSION}: open it with the loaderscope that wrote it (${head.loaderscope ?? 'unknown'})`);
  }
  return head;
}

/**
 * Incremental reader: push() decoded text chunks, get events through `onEvent`; the header comes
 * first through `onHeader`. Throws TraceError at the first damaged line (events before it have
 * been delivered: a truncated recording still shows what it holds).
 */
export class TraceReader {
  /** @param {{source:string, onHeader:(h:any)=>void, onEvent:(e:any)=>void}} o */
  constructor({ source, onHeader, onEvent }) {
    this.source = source;
    this.onHeader = onHeader;
    this.onEvent = onEvent;
    this.carry = '';
    this.line = 0;
    this.header = null;
    this.events = 0;
  }

  /** @param {string} text the next piece of the file, decoded */
  push(text) {
    let chunk = this.carry + text;
    if (this.line === 0) {
      const first = chunk.trimStart();
      if (first && first[0] !== '{' && first[0] !== '[') throw new TraceError(`${this.source} is not a loaderscope trace: its first line is not JSON`);
      if (chunk.length > MAX_LINE_BYTES && chunk.indexOf('\n') < 0) throw new TraceError(`${this.source} is not a loaderscope trace: its first line is not a header`);
    }
    let pos = 0;
    for (;;) {
      const end = chunk.indexOf('\n', pos);
      if (end < 0) break;
      this.take(chunk, pos, end);
      pos = end + 1;
    }
    this.carry = chunk.slice(pos);
    if (this.carry.length > MAX_LINE_BYTES) throw new TraceError(`${this.source}, line ${this.line + 1}: longer than ${MAX_LINE_BYTES} bytes`);
  }

  /** The file ended. */
  end() {
    if (this.carry.trim()) this.take(this.carry, 0, this.carry.length);
    this.carry = '';
    if (this.line === 0) throw new TraceError(`${this.source} is empty: a trace starts with a header line`);
  }

  take(text, start, end) {
    this.line += 1;
    if (end - start > MAX_LINE_BYTES) throw new TraceError(`${this.source}, line ${this.line}: longer than ${MAX_LINE_BYTES} bytes`);
    const line = text.slice(start, end);
    if (this.line === 1) {
      this.header = checkHeader(line, this.source);
      this.onHeader(this.header);
      return;
    }
    if (!line.trim()) return;
    let e;
    try {
      e = JSON.parse(line);
    } catch {
      throw new TraceError(`${this.source}, line ${this.line}: not valid JSON (a truncated or edited file?)`);
    }
    const bad = invalidReason(e);
    if (bad !== null) throw new TraceError(`${this.source}, line ${this.line}: ${bad}`);
    this.events += 1;
    this.onEvent(e);
  }
}

/**
 * Read a File (or Blob) through a TraceReader, yielding to the page between slices.
 * @param {Blob & {name?:string}} file
 * @param {{onHeader:(h:any)=>void, onEvent:(e:any)=>void, onProgress?:(done:number, total:number)=>void, sliceMs?:number}} o
 */
export async function readTraceFile(file, { onHeader, onEvent, onProgress, sliceMs = 60 }) {
  const source = checkSize(file);
  const reader = new TraceReader({ source, onHeader, onEvent });
  const decoder = new TextDecoder();
  const stream = file.stream().getReader();
  let done = 0;
  let sliceStart = performance.now();
  for (;;) {
    const { value, done: finished } = await stream.read();
    if (finished) break;
    // the header is checked on the very first bytes, before anything else is read
    reader.push(decoder.decode(value, { stream: true }));
    done += value.length;
    if (performance.now() - sliceStart > sliceMs) {
      onProgress?.(done, file.size);
      await new Promise((r) => setTimeout(r, 0));
      sliceStart = performance.now();
    }
  }
  reader.push(decoder.decode());
  reader.end();
  onProgress?.(file.size, file.size);
  return { header: reader.header, events: reader.events };
}

/** The file's name for messages; refuses a file larger than the page holds before reading it. */
function checkSize(file) {
  const source = file.name || 'the file';
  if (file.size > MAX_TRACE_BYTES) {
    const mib = (n) => (n / 2 ** 20).toFixed(0);
    throw new TraceError(`${source} is ${mib(file.size)} MiB, more than the ${mib(MAX_TRACE_BYTES)} MiB a page opens; open it with \`loaderscope serve --open FILE\` or split the run`);
  }
  return source;
}

/**
 * readTraceFile's contract, with the parsing in a Web Worker (trace-worker.js): the page's thread
 * only rebuilds each event from the worker's columns and hands it to `onEvent`, one batch per task,
 * so the page stays responsive and the two run in parallel.
 * @param {Blob & {name?:string}} file
 * @param {{onHeader:(h:any)=>void, onEvent:(e:any)=>void, onProgress?:(done:number, total:number)=>void}} o
 */
export async function readTraceFileInWorker(file, { onHeader, onEvent, onProgress }) {
  const source = checkSize(file);
  const worker = new Worker(new URL('./trace-worker.js', import.meta.url), { type: 'module' });
  try {
    return await new Promise((resolve, reject) => {
      let header = null;
      let events = 0;
      worker.onmessage = ({ data }) => {
        try {
          if (data.type === 'header') onHeader((header = data.header));
          else if (data.type === 'rows') {
            const rows = EventTable.fromParts(data.parts);
            for (let i = 0; i < rows.length; i++) onEvent(rows.get(i));
            events += rows.length;
            worker.postMessage('ack');
            onProgress?.(data.bytes, file.size);
          } else if (data.type === 'end') {
            onProgress?.(file.size, file.size);
            resolve({ header, events });
          } else reject(data.type === 'error' ? new TraceError(data.message) : new Error(data.message));
        } catch (err) {
          reject(err);
        }
      };
      worker.onerror = (ev) => reject(new Error(`the trace reader failed: ${ev.message}`));
      worker.postMessage({ file, source });
    });
  } finally {
    worker.terminate();
  }
}
