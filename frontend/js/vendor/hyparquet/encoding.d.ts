import type { DataReader } from './thrift.js';
/** Fill `output` from Parquet's RLE/bit-packed hybrid; `length` bytes of it, or a 4-byte length first when omitted. */
export function readRleBitPackedHybrid(reader: DataReader, width: number, output: Int32Array | Uint8Array | number[], length?: number): void;
