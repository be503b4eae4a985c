// The host APIs the pure model uses that every JavaScript host has (browsers, workers, node), declared
// as far as the model uses them, for tsconfig.model.json (which has no DOM library). The page's and
// the worker's checks (tsconfig.json, tsconfig.worker.json) take the real ones from their libraries.

/** event-columns.js: a literal's UTF-8 bytes. */
declare class TextEncoder {
  encode(input?: string): Uint8Array<ArrayBuffer>;
}

/** ranks.js: a shard digest's base64. */
declare function atob(data: string): string;

/** ranks.js: a shard digest inflated (Blob → DecompressionStream → its reader). */
interface ByteReader {
  read(): Promise<{ done: true; value?: undefined } | { done: false; value: Uint8Array }>;
  cancel(): Promise<void>;
}
interface ByteStream {
  pipeThrough(transform: DecompressionStream): ByteStream;
  getReader(): ByteReader;
}
declare class Blob {
  constructor(parts: Uint8Array[]);
  stream(): ByteStream;
}
declare class DecompressionStream {
  constructor(format: 'deflate' | 'deflate-raw' | 'gzip');
}

/** url-state.js: the view's query parameters. */
declare class URLSearchParams {
  constructor(init?: string);
  get(name: string): string | null;
  set(name: string, value: string): void;
  delete(name: string): void;
  toString(): string;
}
declare class URL {
  readonly searchParams: URLSearchParams;
}
