// The parts of Parquet's Thrift metadata (parquet.thrift) that this reader and writer use, with
// decode (unknown fields skipped) and encode. Numbers are the format's own; names follow it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/parquet/thrift_compact.h"

namespace wam::parquet::format {

enum Type : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};
enum Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum ConvertedType : int32_t { kUtf8 = 0, kMap = 1, kMapKeyValue = 2, kList = 3 };
enum Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};
enum CompressionCodec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4 = 5,
  kZstd = 6,
  kLz4Raw = 7,
};
enum PageType : int32_t { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };

const char* type_name(int32_t type);          // "DOUBLE", or "type 42"-like "UNKNOWN"
std::string encoding_name(int32_t encoding);  // "DELTA_BINARY_PACKED", or "encoding 42"
std::string codec_name(int32_t codec);        // "LZ4", or "codec 42"

// The logical type union (field 10 of SchemaElement), kept as the text ColumnInfo shows:
// "STRING", "LIST", "MAP", "INT(8,true)", "TIMESTAMP", "DECIMAL(10,2)", ... or empty.
struct SchemaElement {
  std::optional<int32_t> type;
  std::optional<int32_t> repetition;
  std::string name;
  int32_t num_children = 0;
  std::optional<int32_t> converted_type;
  std::string logical_type;
  bool logical_list = false;  // logicalType LIST (written with the converted type by Arrow)
  bool logical_map = false;
};

struct ColumnMetaData {
  int32_t type = 0;
  std::vector<int32_t> encodings;
  std::vector<std::string> path_in_schema;
  int32_t codec = 0;
  int64_t num_values = 0;
  int64_t total_uncompressed_size = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> dictionary_page_offset;
};

struct ColumnChunk {
  std::string file_path;  // set when the chunk lives in another file
  int64_t file_offset = 0;
  std::optional<ColumnMetaData> meta_data;
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t total_byte_size = 0;
  int64_t num_rows = 0;
  std::optional<int64_t> file_offset;
  std::optional<int64_t> total_compressed_size;
};

struct FileMetaData {
  int32_t version = 1;
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  std::string created_by;
};

struct DataPageHeader {
  int32_t num_values = 0;
  int32_t encoding = kPlain;
  int32_t definition_level_encoding = kRle;
  int32_t repetition_level_encoding = kRle;
};

struct DictionaryPageHeader {
  int32_t num_values = 0;
  int32_t encoding = kPlain;
};

struct DataPageHeaderV2 {
  int32_t num_values = 0;
  int32_t num_nulls = 0;
  int32_t num_rows = 0;
  int32_t encoding = kPlain;
  int32_t definition_levels_byte_length = 0;
  int32_t repetition_levels_byte_length = 0;
  bool is_compressed = true;
};

struct PageHeader {
  int32_t type = kDataPage;
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  std::optional<DataPageHeader> data_page_header;
  std::optional<DictionaryPageHeader> dictionary_page_header;
  std::optional<DataPageHeaderV2> data_page_header_v2;
};

// Decoding throws FormatError; required fields that are absent are errors.
FileMetaData decode_file_metadata(const uint8_t* data, size_t size);
// Decodes a page header at the start of `data`; `header_size` receives its length in bytes.
PageHeader decode_page_header(const uint8_t* data, size_t size, size_t& header_size);

std::string encode(const FileMetaData& metadata);
std::string encode(const PageHeader& header);

}  // namespace wam::parquet::format
