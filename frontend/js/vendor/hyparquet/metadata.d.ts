export interface KeyValue { key: string; value?: string }
export interface SchemaElement { name: string; type?: string; repetition_type?: string; num_children?: number }
export interface ColumnMetaData {
  type: string;
  encodings: string[];
  path_in_schema: string[];
  codec: string;
  num_values: bigint;
  total_compressed_size: bigint;
  data_page_offset: bigint;
  dictionary_page_offset?: bigint;
}
export interface ColumnChunk { meta_data?: ColumnMetaData }
export interface RowGroup { columns: ColumnChunk[]; num_rows: bigint }
export interface FileMetaData {
  schema: SchemaElement[];
  num_rows: bigint;
  row_groups: RowGroup[];
  key_value_metadata?: KeyValue[];
}
/** The footer of a whole Parquet file held in memory. Throws on a file that is not Parquet. */
export function parquetMetadata(buffer: ArrayBuffer | Uint8Array, options?: { geoparquet?: boolean }): FileMetaData;
