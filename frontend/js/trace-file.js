// Reading a ◆ trace file (JSON Lines: a header, then one event per line) in the browser, as data:
// JSON.parse only, every event checked against the schema, a size limit, and messages that name
// the file and the line, like backend/loaderscope/trace.py. Feed it bytes as they are read.

import { invalidReason } from './schema.js';

export const FORMAT = 'loaderscope-trace';
export const VERSION = 1;
export const MAX_LINE_BYTES = 1 << 20;
export const MAX_TRACE_BYTES = 1 << 30; // a browser tab holds about this much comfortably

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
  const source = file.name || 'the file';
  if (file.size > MAX_TRACE_BYTES) {
    throw new TraceError(`${source} is ${(file.size / 2 ** 20).toFixed(0)} MiB, more than the ${MAX_TRACE_BYTES >> 20} MiB a page opens; open it with \`loaderscope serve --open FILE\` or split the run`);
  }
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
