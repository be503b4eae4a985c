/** zstd in WebAssembly (the reference C decoder): `await init()` once, then `decode` synchronously. */
export declare class ZSTDDecoder {
  init(): Promise<void>;
  /** A whole zstd frame's bytes, decompressed (a copy out of the module's memory). */
  decode(array: Uint8Array, uncompressedSize?: number): Uint8Array;
}
