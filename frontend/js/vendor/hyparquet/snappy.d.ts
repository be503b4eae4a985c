/** Decompress a Snappy block into `output`, which must have its uncompressed size. */
export function snappyUncompress(input: Uint8Array, output: Uint8Array): void;
