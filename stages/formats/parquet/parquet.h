// A small Parquet reader and writer for the per-frame columns of LeRobot datasets.
//
// Why it exists: every published LeRobot dataset (v2.0, v2.1, v3.0) keeps its columns in Parquet,
// and neither Debian 12 nor the other registries reachable here package a C++ Parquet library
// (Arrow C++ is absent). This covers what Arrow's C++ writer (through HF `datasets`) and other
// common writers produce for those datasets, and refuses everything else by name:
// - footer: Thrift compact protocol, decoded by hand; unknown fields are skipped;
// - physical types BOOLEAN, INT32, INT64, FLOAT, DOUBLE, BYTE_ARRAY (UTF-8 strings);
// - flat REQUIRED/OPTIONAL columns without nulls, and the standard 3-level LIST of a primitive with
//   the same length in every row (vectors such as `observation.state`), or of any length through
//   read_*_lists (metadata such as an episode's `tasks`);
// - encodings PLAIN, PLAIN_DICTIONARY/RLE_DICTIONARY, RLE/bit-packed levels; data pages v1 and v2,
//   several pages per column chunk, several row groups;
// - codecs UNCOMPRESSED, SNAPPY, GZIP, ZSTD.
// Refused with a message naming the file, the column and the feature: DELTA_* and BYTE_STREAM_SPLIT
// encodings, other codecs, nested lists, maps and structs, nulls, lists of uneven length (by the
// fixed-width read_* functions). A refused column does not stop the others being read.
//
// Every error is a wam::Error whose message starts with the file's path; a damaged file (bad magic,
// truncated footer, a page past the end, a corrupt compressed block) is an error, never a crash.
// Sizes read from the file are checked against the file's size before anything is allocated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wam::parquet {

enum class PhysicalType { kBoolean, kInt32, kInt64, kFloat, kDouble, kByteArray };
enum class Codec { kUncompressed, kSnappy, kGzip, kZstd };

const char* name_of(PhysicalType type);  // "BOOLEAN", "INT32", ...
const char* name_of(Codec codec);        // "UNCOMPRESSED", "SNAPPY", ...

// One top-level field of the file's schema.
struct ColumnInfo {
  std::string name;  // the field's name as written, dots and all ("observation.state")
  PhysicalType type = PhysicalType::kInt64;  // of a refused group: its first leaf's
  bool is_list = false;      // a LIST of `type` (3-level; also the legacy 2- and 1-level forms)
  std::string logical_type;  // "STRING", "INT(8,true)", "TIMESTAMP(MICROS)", ... or empty
  // Empty when the column can be read; else why not (e.g. "a list of lists is not supported
  // (...); rewrite the file with ..."), the message read_* gives after the file and column.
  // Such columns (nested statistics in v3.0 metadata files) do not stop the others being read.
  std::string unsupported;
};

// Rows [first, first + count) of a file; count < 0 means "to the end".
struct RowRange {
  int64_t first = 0;
  int64_t count = -1;
};

// The values of one column over a row range. Flat columns: `values.size() == rows`, `width` 1.
// Lists: `width` elements per row (the same in every row), row-major.
template <class T>
struct ColumnValues {
  int64_t rows = 0;
  int64_t width = 1;
  std::vector<T> values;
};

// Lists whose length may differ between rows (v3.0 metadata, such as each episode's `tasks`):
// row r holds values[offsets[r], offsets[r + 1]). A flat column reads as lists of one.
template <class T>
struct ListValues {
  int64_t rows = 0;
  std::vector<int64_t> offsets;  // rows + 1 entries, the first 0
  std::vector<T> values;
};

class ParquetFile {
 public:
  // Reads and checks the footer (magic, metadata, schema, row-group sizes against the file size).
  static ParquetFile open(const std::string& path);
  ParquetFile(ParquetFile&&) noexcept;
  ParquetFile& operator=(ParquetFile&&) noexcept;
  ~ParquetFile();

  const std::string& path() const;
  int64_t num_rows() const;
  int64_t num_row_groups() const;
  const std::vector<ColumnInfo>& columns() const;
  const ColumnInfo* column(const std::string& name) const;  // nullptr when absent
  const std::string& created_by() const;  // the writer named in the footer, or empty

  // Reads a column, decoding only the row groups that overlap `range`. Conversions: read_floats
  // takes FLOAT and DOUBLE (narrowed to float32) and integers; read_doubles the same without
  // narrowing; read_ints takes BOOLEAN (0/1), INT32 and INT64; read_strings BYTE_ARRAY. Any other
  // type, an absent column or a range outside the file is an error naming file and column.
  ColumnValues<float> read_floats(const std::string& name, RowRange range = {}) const;
  ColumnValues<double> read_doubles(const std::string& name, RowRange range = {}) const;
  ColumnValues<int64_t> read_ints(const std::string& name, RowRange range = {}) const;
  ColumnValues<std::string> read_strings(const std::string& name, RowRange range = {}) const;
  // The same with lists of any length (read_double_lists converts as read_doubles does).
  ListValues<double> read_double_lists(const std::string& name, RowRange range = {}) const;
  ListValues<int64_t> read_int_lists(const std::string& name, RowRange range = {}) const;
  ListValues<std::string> read_string_lists(const std::string& name, RowRange range = {}) const;

 private:
  struct Impl;
  explicit ParquetFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct WriteOptions {
  Codec codec = Codec::kSnappy;
  int64_t row_group_rows = 1000;  // HF `datasets` writes a row group every 1,000 rows
  int64_t page_rows = 1 << 20;    // rows per data page (several pages per chunk when smaller)
  bool dictionary = false;        // dictionary page + RLE_DICTIONARY data pages
  int data_page_version = 1;      // 1 or 2
  // With `dictionary`: once a column chunk's dictionary passes this many bytes, its later pages
  // are PLAIN (Arrow's dictionary_pagesize_limit, 1 MiB by default).
  int64_t dictionary_page_limit = 1 << 20;
};

// Builds a file column by column, as Arrow lays it out: flat OPTIONAL columns and 3-level LISTs
// with OPTIONAL elements. write() checks that every column has the same number of rows and
// publishes atomically (wam::AtomicFile).
class ParquetWriter {
 public:
  explicit ParquetWriter(std::string path, WriteOptions options = {});
  ~ParquetWriter();

  // `width` 0: a flat column of values.size() rows; width > 0: a LIST column of
  // values.size() / width rows. `type` must fit the values: kFloat or kDouble for floats,
  // kBoolean, kInt32 or kInt64 for ints.
  void add_floats(const std::string& name, const std::vector<float>& values, int64_t width = 0,
                  PhysicalType type = PhysicalType::kFloat);
  void add_doubles(const std::string& name, const std::vector<double>& values, int64_t width = 0);
  void add_ints(const std::string& name, const std::vector<int64_t>& values, int64_t width = 0,
                PhysicalType type = PhysicalType::kInt64);
  void add_strings(const std::string& name, const std::vector<std::string>& values);
  // A LIST of strings whose rows may differ in length (v3.0's `tasks` metadata column).
  void add_string_lists(const std::string& name, const std::vector<std::vector<std::string>>& rows);
  void write();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wam::parquet
