export interface DataReader { view: DataView; offset: number }
/** One Thrift compact-protocol struct, its fields named `field_N`; the reader is left after it. */
export function deserializeTCompactProtocol(reader: DataReader): Record<string, any>;
