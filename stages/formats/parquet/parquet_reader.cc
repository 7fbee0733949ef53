// ParquetFile: the footer is read and checked once at open(); each read_* opens the file again,
// reads the byte ranges of the column chunks of the row groups it needs with pread, and decodes
// them page by page. Errors deep inside decoding are FormatError (damage) or Unsupported (a
// refusal) without context; the public functions prefix the file, column and row group.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include "formats/parquet/codecs.h"
#include "formats/parquet/encodings.h"
#include "formats/parquet/parquet.h"
#include "formats/parquet/parquet_format.h"
#include "wam/limits.h"

namespace wam::parquet {
namespace {

namespace fmt = format;

// A feature this reader refuses; the message says what to do instead.
class Unsupported : public Error {
 public:
  using Error::Error;
};

constexpr char kMagic[] = "PAR1";
// Sanity limits far above what writers produce (Arrow pages hold about 1 MiB and 20,000 rows);
// a header claiming more is damaged, and nothing is allocated for it.
constexpr int64_t kMaxPageBytes = int64_t{1} << 30;
constexpr int64_t kMaxPageValues = int64_t{1} << 27;
constexpr int kMaxSchemaDepth = 16;

const char* const kOnlyFlat = "only flat columns and lists of numbers or strings are";

std::string refusal(const std::string& feature, const std::string& detail, const std::string& fix,
                    bool plural = false) {
  return feature + (plural ? " are" : " is") + " not supported (" + detail +
         "); rewrite the file " + fix;
}

// A file descriptor opened for one read_* call or open(); closed on every path out. Only regular
// files: O_NONBLOCK keeps the open of a FIFO from waiting for a writer, and fstat refuses it.
class File {
 public:
  explicit File(const std::string& path)
      : fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
    if (fd_ < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd_);
      throw Error(path + ": cannot stat: " + why);
    }
    if (const std::string reason = not_regular_file_reason(st.st_mode); !reason.empty()) {
      ::close(fd_);
      throw Error(path + ": " + reason);
    }
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint64_t size(const std::string& path) const {
    struct stat st;
    if (::fstat(fd_, &st) != 0) throw Error(path + ": cannot stat: " + std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
  }

  // Reads exactly `size` bytes at `offset` (the caller has checked them against the file size).
  void read(uint64_t offset, size_t size, std::string& out) const {
    out.resize(size);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd_, out.data() + done, size - done, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw FormatError(std::string("read error: ") + std::strerror(errno));
      if (n == 0) {
        throw FormatError("the file ends at byte " + std::to_string(offset + done) +
                          ", inside a range its footer names (was it truncated while open?)");
      }
      done += static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
};

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

PhysicalType physical_type(int32_t type) {
  switch (type) {
    case fmt::kBoolean: return PhysicalType::kBoolean;
    case fmt::kInt32: return PhysicalType::kInt32;
    case fmt::kInt64: return PhysicalType::kInt64;
    case fmt::kFloat: return PhysicalType::kFloat;
    case fmt::kDouble: return PhysicalType::kDouble;
    default: return PhysicalType::kByteArray;
  }
}

bool supported_type(int32_t type) {
  return type == fmt::kBoolean || type == fmt::kInt32 || type == fmt::kInt64 ||
         type == fmt::kFloat || type == fmt::kDouble || type == fmt::kByteArray;
}

// Where a column chunk's pages start: at its dictionary page when it has one (Arrow sets
// dictionary_page_offset), else at its first data page.
int64_t chunk_start(const fmt::ColumnMetaData& m) {
  const int64_t dict = m.dictionary_page_offset.value_or(0);
  return dict > 0 && dict < m.data_page_offset ? dict : m.data_page_offset;
}

// The schema as a tree (the footer stores it flattened, depth first).
struct Node {
  const fmt::SchemaElement* element = nullptr;
  std::vector<Node> children;
  int first_leaf = 0;

  bool is_leaf() const { return element->num_children == 0; }
  bool repetition(int32_t r) const { return element->repetition.value_or(fmt::kRequired) == r; }
  bool is_list() const { return element->logical_list || element->converted_type == fmt::kList; }
  bool is_map() const {
    return element->logical_map || element->converted_type == fmt::kMap ||
           element->converted_type == fmt::kMapKeyValue;
  }
};

Node build_tree(const std::vector<fmt::SchemaElement>& schema, size_t& next, int& leaves,
                int depth) {
  if (depth > kMaxSchemaDepth) throw FormatError("schema nested too deeply");
  if (next >= schema.size()) throw FormatError("schema has fewer elements than it names");
  Node node;
  node.element = &schema[next++];
  node.first_leaf = leaves;
  const int32_t children = node.element->num_children;
  if (children < 0 || static_cast<size_t>(children) > schema.size() - next) {
    throw FormatError("schema element \"" + node.element->name + "\" names " +
                      std::to_string(children) + " children");
  }
  if (children == 0) {
    if (!node.element->type) {
      throw FormatError("schema element \"" + node.element->name + "\" has no type");
    }
    ++leaves;
  }
  for (int32_t i = 0; i < children; ++i) {
    node.children.push_back(build_tree(schema, next, leaves, depth + 1));
  }
  return node;
}

}  // namespace

// How to read one top-level field: its leaf column chunk and the meaning of its levels.
struct FieldPlan {
  int leaf = 0;      // index of its column chunk in each row group
  int32_t type = 0;  // format::Type of the leaf
  int max_def = 0;
  int max_rep = 0;    // 0 flat, 1 list
  int empty_def = 0;  // lists: the definition level of an empty list
};

struct ParquetFile::Impl {
  std::string path;
  uint64_t data_end = 0;  // where the footer starts
  fmt::FileMetaData meta;
  std::vector<ColumnInfo> columns;
  std::vector<FieldPlan> plans;
  std::vector<int64_t> first_row;  // of each row group
  // Of each leaf column chunk: physical type, repetition depth, top-level field.
  std::vector<int32_t> leaf_types;
  std::vector<int> leaf_max_rep;
  std::vector<std::string> leaf_fields;

  void plan_field(const Node& field);
  void check_row_groups();
  size_t index_of(const std::string& name) const;
  // With `lengths`, rows may differ in length and each row's is appended there.
  template <class Out>
  ColumnValues<Out> read(const std::string& name, RowRange range, const char* reader,
                         std::vector<int64_t>* lengths = nullptr) const;
  template <class Out>
  ListValues<Out> read_lists(const std::string& name, RowRange range, const char* reader) const;
};

namespace {

// Levels contributed by a node: OPTIONAL adds a definition level, REPEATED both kinds.
void add_levels(const Node& n, int& def, int& rep) {
  if (n.repetition(fmt::kOptional)) ++def;
  if (n.repetition(fmt::kRepeated)) ++def, ++rep;
}

// Walks every leaf under `n` recording its physical type, repetition depth and field (the footer
// is checked against them, readable or not).
void collect_leaves(const Node& n, int rep, const std::string& field, std::vector<int32_t>& types,
                    std::vector<int>& reps, std::vector<std::string>& fields) {
  if (n.repetition(fmt::kRepeated)) ++rep;
  if (n.is_leaf()) {
    types.push_back(*n.element->type);
    reps.push_back(rep);
    fields.push_back(field);
  }
  for (const Node& c : n.children) collect_leaves(c, rep, field, types, reps, fields);
}

}  // namespace

void ParquetFile::Impl::plan_field(const Node& field) {
  ColumnInfo info;
  info.name = field.element->name;
  FieldPlan plan;
  plan.leaf = field.first_leaf;
  const std::string flatten = "with each field of it as a column of its own";
  const Node* leaf = nullptr;
  if (field.is_leaf()) {
    // A flat column, or a repeated primitive (the oldest list form: one level).
    leaf = &field;
    info.is_list = field.repetition(fmt::kRepeated);
    add_levels(field, plan.max_def, plan.max_rep);
  } else if (field.is_list() && !field.repetition(fmt::kRepeated)) {
    const Node& repeated = field.children[0];
    add_levels(field, plan.max_def, plan.max_rep);
    plan.empty_def = plan.max_def;
    info.is_list = true;
    if (field.children.size() != 1 || !repeated.repetition(fmt::kRepeated)) {
      info.unsupported = refusal("a LIST without one repeated child", kOnlyFlat,
                                 "with the standard 3-level LIST layout (Arrow's)");
    } else if (repeated.is_leaf()) {
      leaf = &repeated;  // 2-level: the repeated field is the element
      add_levels(repeated, plan.max_def, plan.max_rep);
    } else if (repeated.children.size() == 1 && repeated.children[0].is_leaf() &&
               !repeated.children[0].repetition(fmt::kRepeated)) {
      // 3-level (`list`/`element`), or a legacy name (`array`, `item`) with one primitive.
      leaf = &repeated.children[0];
      add_levels(repeated, plan.max_def, plan.max_rep);
      add_levels(*leaf, plan.max_def, plan.max_rep);
    } else {
      const Node& element = repeated.children[0];
      const bool nested = repeated.children.size() == 1 &&
                          (element.is_list() || element.repetition(fmt::kRepeated));
      if (nested) {
        info.unsupported = refusal("a list of lists", kOnlyFlat,
                                   "with each inner list as a list column of its own");
      } else if (repeated.children.size() == 1 && element.is_map()) {
        info.unsupported = refusal("a list of maps", kOnlyFlat,
                                   "with the keys and the values as list columns of their own");
      } else {
        info.unsupported = refusal("a list of structs", kOnlyFlat,
                                   "with each field of the struct as a list column of its own");
      }
    }
  } else if (field.is_list()) {
    info.unsupported = refusal("a repeated list", kOnlyFlat, "with one list column per list");
  } else if (field.is_map()) {
    info.unsupported =
        refusal("a map", kOnlyFlat, "with the keys and the values as list columns of their own");
  } else if (field.repetition(fmt::kRepeated)) {
    info.unsupported = refusal("a repeated group", kOnlyFlat, flatten);
  } else {
    info.unsupported = refusal("a struct", kOnlyFlat, flatten);
  }

  if (leaf) {
    plan.type = *leaf->element->type;
    info.logical_type = leaf->element->logical_type;
    if (!supported_type(plan.type)) {
      info.unsupported = refusal(std::string("physical type ") + fmt::type_name(plan.type),
                                 "only BOOLEAN, INT32, INT64, FLOAT, DOUBLE and BYTE_ARRAY are",
                                 "with the column cast to one of those");
    }
  } else {
    info.logical_type = field.element->logical_type;
    plan.type = leaf_types.at(field.first_leaf);
  }
  info.type = physical_type(plan.type);
  columns.push_back(std::move(info));
  plans.push_back(plan);
}

void ParquetFile::Impl::check_row_groups() {
  int64_t total = 0;
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const fmt::RowGroup& rg = meta.row_groups[g];
    const std::string where = "row group " + std::to_string(g) + ": ";
    if (rg.num_rows < 0 || rg.num_rows > std::numeric_limits<int64_t>::max() - total) {
      throw FormatError(where + "num_rows " + std::to_string(rg.num_rows) + " out of range");
    }
    first_row.push_back(total);
    total += rg.num_rows;
    if (rg.columns.size() != leaf_types.size()) {
      throw FormatError(where + std::to_string(rg.columns.size()) +
                        " column chunks, the schema has " + std::to_string(leaf_types.size()));
    }
    for (size_t c = 0; c < rg.columns.size(); ++c) {
      const fmt::ColumnChunk& chunk = rg.columns[c];
      const std::string column =
          "column \"" + leaf_fields[c] + "\", row group " + std::to_string(g) + ": ";
      if (!chunk.file_path.empty()) {
        throw Unsupported(refusal("a column chunk in another file (\"" + chunk.file_path + "\")",
                                  "every column must be in the file itself",
                                  "as one self-contained file"));
      }
      if (!chunk.meta_data) throw FormatError(column + "no column metadata");
      const fmt::ColumnMetaData& m = *chunk.meta_data;
      if (m.type != leaf_types[c]) {
        throw FormatError(column + "type " + fmt::type_name(m.type) + ", the schema says " +
                          fmt::type_name(leaf_types[c]));
      }
      if (m.num_values < 0 || (leaf_max_rep[c] == 0 && m.num_values != rg.num_rows)) {
        throw FormatError(column + std::to_string(m.num_values) + " values in " +
                          std::to_string(rg.num_rows) + " rows");
      }
      const int64_t start = chunk_start(m);
      const int64_t size = m.total_compressed_size;
      if (start < 4 || size < 0 || static_cast<uint64_t>(start) > data_end ||
          static_cast<uint64_t>(size) > data_end - static_cast<uint64_t>(start)) {
        throw FormatError(column + "byte range " + std::to_string(start) + "+" +
                          std::to_string(size) + " lies outside the file's data (" +
                          std::to_string(data_end) + " bytes before the footer)");
      }
    }
  }
  if (total != meta.num_rows) {
    throw FormatError("the row groups hold " + std::to_string(total) + " rows, the footer says " +
                      std::to_string(meta.num_rows));
  }
}

ParquetFile ParquetFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  File file(path);
  const uint64_t size = file.size(path);
  if (size < 12) {
    throw Error(path + ": not a Parquet file (" + std::to_string(size) +
                " bytes; a Parquet file has at least 12)");
  }
  std::string tail, head, footer;
  try {
    file.read(size - 8, 8, tail);
    file.read(0, 4, head);
  } catch (const FormatError& e) {
    throw Error(path + ": " + e.what());
  }
  if (tail.compare(4, 4, "PARE") == 0) {
    throw Error(
        path + ": " +
        refusal("an encrypted Parquet file", "its footer is encrypted", "without encryption"));
  }
  if (tail.compare(4, 4, kMagic) != 0) {
    throw Error(path +
                ": not a Parquet file (no PAR1 magic at its end: truncated, or another "
                "format)");
  }
  if (head != kMagic) throw Error(path + ": not a Parquet file (no PAR1 magic at its start)");
  const uint32_t footer_size = load_le<uint32_t>(bytes(tail));
  if (footer_size > size - 12) {
    throw Error(path + ": damaged Parquet file: footer length " + std::to_string(footer_size) +
                " exceeds the file's " + std::to_string(size) + " bytes");
  }
  impl->data_end = size - 8 - footer_size;
  try {
    file.read(impl->data_end, footer_size, footer);
    impl->meta = fmt::decode_file_metadata(bytes(footer), footer.size());
  } catch (const FormatError& e) {
    throw Error(path + ": damaged Parquet footer: " + e.what());
  }
  try {
    const auto& schema = impl->meta.schema;
    if (schema.empty()) throw FormatError("empty schema");
    size_t next = 0;
    int leaves = 0;
    const Node root = build_tree(schema, next, leaves, 0);
    if (next != schema.size()) throw FormatError("schema has elements outside its root");
    if (root.is_leaf()) throw FormatError("schema root is not a group");
    for (const Node& field : root.children) {
      collect_leaves(field, 0, field.element->name, impl->leaf_types, impl->leaf_max_rep,
                     impl->leaf_fields);
    }
    for (const Node& field : root.children) impl->plan_field(field);
    impl->check_row_groups();
  } catch (const FormatError& e) {
    throw Error(path + ": damaged Parquet file: " + e.what());
  } catch (const Unsupported& e) {
    throw Error(path + ": " + e.what());
  }
  return ParquetFile(std::move(impl));
}

ParquetFile::ParquetFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ParquetFile::ParquetFile(ParquetFile&&) noexcept = default;
ParquetFile& ParquetFile::operator=(ParquetFile&&) noexcept = default;
ParquetFile::~ParquetFile() = default;

const std::string& ParquetFile::path() const { return impl_->path; }
int64_t ParquetFile::num_rows() const { return impl_->meta.num_rows; }
int64_t ParquetFile::num_row_groups() const {
  return static_cast<int64_t>(impl_->meta.row_groups.size());
}
const std::vector<ColumnInfo>& ParquetFile::columns() const { return impl_->columns; }
const std::string& ParquetFile::created_by() const { return impl_->meta.created_by; }

const ColumnInfo* ParquetFile::column(const std::string& name) const {
  for (const ColumnInfo& c : impl_->columns) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

size_t ParquetFile::Impl::index_of(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == name) return i;
  }
  std::vector<std::string> names;
  for (const ColumnInfo& c : columns) names.push_back(c.name);
  throw Error(path + ": " + unknown_with_suggestion("column", name, names));
}

namespace {

// Decodes `count` PLAIN values of physical `type` into `out`, converting to Out.
template <class Out>
void decode_plain(int32_t type, const uint8_t* data, size_t size, size_t count, Out* out) {
  if constexpr (std::is_same_v<Out, std::string>) {
    if (type != fmt::kByteArray) throw FormatError("string values in a non-BYTE_ARRAY column");
    const uint8_t* p = data;
    const uint8_t* end = data + size;
    for (size_t i = 0; i < count; ++i) {
      if (end - p < 4) throw FormatError("PLAIN strings end early");
      const uint32_t length = load_le<uint32_t>(p);
      p += 4;
      if (length > static_cast<size_t>(end - p)) throw FormatError("PLAIN string ends early");
      out[i].assign(reinterpret_cast<const char*>(p), length);
      p += length;
    }
  } else {
    auto fixed = [&](auto tag) {
      using T = decltype(tag);
      if (count > size / sizeof(T)) {
        throw FormatError("PLAIN page of " + std::to_string(size) + " bytes holds fewer than " +
                          std::to_string(count) + " values");
      }
      for (size_t i = 0; i < count; ++i) {
        out[i] = static_cast<Out>(load_le<T>(data + i * sizeof(T)));
      }
    };
    switch (type) {
      case fmt::kBoolean:
        if (count > size * 8) throw FormatError("PLAIN booleans end early");
        for (size_t i = 0; i < count; ++i) out[i] = static_cast<Out>((data[i / 8] >> (i % 8)) & 1);
        return;
      case fmt::kInt32: fixed(int32_t{}); return;
      case fmt::kInt64: fixed(int64_t{}); return;
      case fmt::kFloat: fixed(float{}); return;
      case fmt::kDouble: fixed(double{}); return;
      default: throw FormatError("numeric values in a BYTE_ARRAY column");
    }
  }
}

// The row lengths of a read, shared by the chunks it decodes: either one width that every row
// must have, or (`lengths` set) each row's own length.
struct RowShape {
  int64_t width = -1;     // -1 until the first row
  int64_t width_row = 0;  // the row that set it, for the uneven-length message
  std::vector<int64_t>* lengths = nullptr;
};

// Decodes the pages of one column chunk, appending its values to `out`.
template <class Out>
class ChunkDecoder {
 public:
  ChunkDecoder(const FieldPlan& plan, const fmt::ColumnMetaData& meta, int64_t first_row,
               RowShape& shape, std::vector<Out>& out)
      : plan_(plan), meta_(meta), first_row_(first_row), shape_(shape), out_(out) {}

  // Returns the number of rows decoded.
  int64_t decode(const std::string& chunk) {
    if (!codec_supported(meta_.codec)) {
      throw Unsupported(refusal("codec " + fmt::codec_name(meta_.codec),
                                "only UNCOMPRESSED, SNAPPY, GZIP and ZSTD are",
                                "with one of those (pyarrow: compression=\"snappy\")"));
    }
    size_t pos = 0;
    while (pos < chunk.size() && values_seen_ < meta_.num_values) {
      size_t header_size = 0;
      const fmt::PageHeader h =
          fmt::decode_page_header(bytes(chunk) + pos, chunk.size() - pos, header_size);
      pos += header_size;
      if (h.compressed_page_size < 0 ||
          static_cast<size_t>(h.compressed_page_size) > chunk.size() - pos) {
        throw FormatError("a page of " + std::to_string(h.compressed_page_size) +
                          " bytes runs past the end of the column chunk");
      }
      const int64_t compressed = h.compressed_page_size;
      if (h.uncompressed_page_size < 0 || h.uncompressed_page_size > kMaxPageBytes ||
          static_cast<uint64_t>(h.uncompressed_page_size) >
              max_uncompressed_size(meta_.codec, compressed)) {
        throw FormatError("a page claims " + std::to_string(h.uncompressed_page_size) +
                          " bytes uncompressed from " + std::to_string(compressed));
      }
      page(h, bytes(chunk) + pos, static_cast<size_t>(compressed));
      pos += static_cast<size_t>(compressed);
    }
    if (row_open_) finish_row();
    if (values_seen_ != meta_.num_values) {
      throw FormatError("the pages hold " + std::to_string(values_seen_) +
                        " values, the column metadata says " + std::to_string(meta_.num_values));
    }
    return rows_;
  }

 private:
  void page(const fmt::PageHeader& h, const uint8_t* data, size_t size) {
    const size_t uncompressed = static_cast<size_t>(h.uncompressed_page_size);
    if (h.type == fmt::kDictionaryPage) {
      if (!h.dictionary_page_header) throw FormatError("dictionary page without its header");
      if (have_dictionary_ || values_seen_ > 0) {
        throw FormatError("a dictionary page after the first page of the column chunk");
      }
      const fmt::DictionaryPageHeader& d = *h.dictionary_page_header;
      if (d.encoding != fmt::kPlain && d.encoding != fmt::kPlainDictionary) {
        throw Unsupported(encoding_refusal(d.encoding));
      }
      decompress(meta_.codec, data, size, uncompressed, buffer_);
      if (d.num_values < 0 || static_cast<uint64_t>(d.num_values) > buffer_.size() * 8) {
        throw FormatError("a dictionary page of " + std::to_string(buffer_.size()) +
                          " bytes claims " + std::to_string(d.num_values) + " values");
      }
      dictionary_.resize(static_cast<size_t>(d.num_values));
      decode_plain(plan_.type, bytes(buffer_), buffer_.size(), dictionary_.size(),
                   dictionary_.data());
      have_dictionary_ = true;
    } else if (h.type == fmt::kDataPage) {
      if (!h.data_page_header) throw FormatError("data page without its header");
      const fmt::DataPageHeader& d = *h.data_page_header;
      check_count(d.num_values);
      decompress(meta_.codec, data, size, uncompressed, buffer_);
      const uint8_t* p = bytes(buffer_);
      const uint8_t* end = p + buffer_.size();
      auto levels = [&](int max_level, int32_t encoding, std::vector<uint8_t>& out) {
        if (max_level == 0) return;
        if (encoding != fmt::kRle) {
          throw Unsupported(refusal(fmt::encoding_name(encoding) + " levels", "only RLE levels are",
                                    "with a current Parquet writer", true));
        }
        if (end - p < 4) throw FormatError("levels end early");
        const uint32_t length = load_le<uint32_t>(p);
        p += 4;
        if (length > static_cast<size_t>(end - p)) throw FormatError("levels end early");
        decode_levels(p, length, max_level, d.num_values, out);
        p += length;
      };
      levels(plan_.max_rep, d.repetition_level_encoding, rep_);
      levels(plan_.max_def, d.definition_level_encoding, def_);
      values(d.num_values, d.encoding, p, static_cast<size_t>(end - p));
    } else if (h.type == fmt::kDataPageV2) {
      if (!h.data_page_header_v2) throw FormatError("data page v2 without its header");
      const fmt::DataPageHeaderV2& d = *h.data_page_header_v2;
      check_count(d.num_values);
      const int64_t rep_size = d.repetition_levels_byte_length;
      const int64_t def_size = d.definition_levels_byte_length;
      if (rep_size < 0 || def_size < 0 || rep_size + def_size > static_cast<int64_t>(size) ||
          rep_size + def_size > static_cast<int64_t>(uncompressed)) {
        throw FormatError("data page v2 level lengths exceed the page");
      }
      const size_t levels = static_cast<size_t>(rep_size + def_size);
      if (plan_.max_rep > 0) decode_levels(data, rep_size, plan_.max_rep, d.num_values, rep_);
      if (plan_.max_def > 0) {
        decode_levels(data + rep_size, def_size, plan_.max_def, d.num_values, def_);
      }
      const bool compressed = d.is_compressed && meta_.codec != fmt::kUncompressed;
      decompress(compressed ? meta_.codec : static_cast<int32_t>(fmt::kUncompressed), data + levels,
                 size - levels, uncompressed - levels, buffer_);
      values(d.num_values, d.encoding, bytes(buffer_), buffer_.size());
    }
    // Index pages and page types added later carry no values: skipped.
  }

  void check_count(int32_t num_values) {
    if (num_values < 0 || num_values > kMaxPageValues ||
        num_values > meta_.num_values - values_seen_) {
      throw FormatError("a page claims " + std::to_string(num_values) + " values, " +
                        std::to_string(meta_.num_values - values_seen_) + " remain in the chunk");
    }
  }

  void decode_levels(const uint8_t* data, size_t size, int max_level, int32_t count,
                     std::vector<uint8_t>& out) {
    out.resize(static_cast<size_t>(count));
    decode_hybrid(data, size, bit_width(static_cast<uint64_t>(max_level)), out.size(),
                  static_cast<uint32_t>(max_level), out.data());
  }

  std::string encoding_refusal(int32_t encoding) const {
    return refusal("encoding " + fmt::encoding_name(encoding),
                   "only PLAIN and dictionary encodings are",
                   "with PLAIN or dictionary encoding (Arrow's default)");
  }

  [[noreturn]] void null_refusal(int64_t row, bool element) const {
    throw Unsupported(refusal(std::string(element ? "a null list element" : "a null") + " in row " +
                                  std::to_string(first_row_ + row),
                              "every row must have a value", "with the nulls filled or dropped"));
  }

  void finish_row() {
    if (shape_.lengths) {
      shape_.lengths->push_back(current_);
    } else if (shape_.width < 0) {
      shape_.width = current_;
      shape_.width_row = first_row_ + rows_;
    } else if (current_ != shape_.width) {
      throw Unsupported(refusal("lists of uneven length",
                                "row " + std::to_string(shape_.width_row) + " has " +
                                    std::to_string(shape_.width) + " elements, row " +
                                    std::to_string(first_row_ + rows_) + " has " +
                                    std::to_string(current_),
                                "with lists of one length in each column", true));
    }
    ++rows_;
    current_ = 0;
  }

  // Walks the levels of one page: counts rows and present values, refuses nulls.
  size_t walk_levels(size_t count) {
    if (plan_.max_rep == 0) {
      if (plan_.max_def > 0) {
        const auto it = std::find_if(def_.begin(), def_.begin() + count,
                                     [&](uint8_t d) { return d != plan_.max_def; });
        if (it != def_.begin() + count) null_refusal(rows_ + (it - def_.begin()), false);
      }
      rows_ += static_cast<int64_t>(count);
      return count;
    }
    size_t present = 0;
    for (size_t i = 0; i < count; ++i) {
      if (rep_[i] == 0) {
        if (row_open_) finish_row();
        row_open_ = true;
      } else if (!row_open_) {
        throw FormatError("the column chunk starts inside a list");
      }
      const int d = def_[i];  // lists always have definition levels
      if (d == plan_.max_def) {
        ++current_;
        ++present;
      } else if (d == plan_.empty_def && rep_[i] == 0) {
        // An empty list: the row has no elements.
      } else {
        null_refusal(rows_, d > plan_.empty_def);
      }
    }
    return present;
  }

  void values(int32_t num_values, int32_t encoding, const uint8_t* data, size_t size) {
    const size_t present = walk_levels(static_cast<size_t>(num_values));
    values_seen_ += num_values;
    const size_t base = out_.size();
    if (encoding == fmt::kPlain) {
      out_.resize(base + present);
      decode_plain(plan_.type, data, size, present, out_.data() + base);
    } else if (encoding == fmt::kRleDictionary || encoding == fmt::kPlainDictionary) {
      if (!have_dictionary_) throw FormatError("a dictionary-encoded page without a dictionary");
      if (present == 0) return;
      if (size < 1) throw FormatError("dictionary indices end early");
      if (dictionary_.empty()) throw FormatError("dictionary indices into an empty dictionary");
      indices_.resize(present);
      decode_hybrid(data + 1, size - 1, data[0], present,
                    static_cast<uint32_t>(dictionary_.size() - 1), indices_.data());
      out_.resize(base + present);
      Out* dst = out_.data() + base;
      for (size_t i = 0; i < present; ++i) dst[i] = dictionary_[indices_[i]];
    } else {
      throw Unsupported(encoding_refusal(encoding));
    }
  }

  const FieldPlan& plan_;
  const fmt::ColumnMetaData& meta_;
  const int64_t first_row_;
  RowShape& shape_;
  std::vector<Out>& out_;

  int64_t values_seen_ = 0;
  int64_t rows_ = 0;
  int64_t current_ = 0;  // elements of the open row
  bool row_open_ = false;
  bool have_dictionary_ = false;
  std::vector<Out> dictionary_;
  std::string buffer_;
  std::vector<uint8_t> rep_, def_;
  std::vector<uint32_t> indices_;
};

bool accepts(const char* reader, int32_t type) {
  const std::string r = reader;
  if (r == "read_strings" || r == "read_string_lists") return type == fmt::kByteArray;
  if (r == "read_ints" || r == "read_int_lists") {
    return type == fmt::kBoolean || type == fmt::kInt32 || type == fmt::kInt64;
  }
  return type == fmt::kFloat || type == fmt::kDouble || type == fmt::kInt32 || type == fmt::kInt64;
}

}  // namespace

template <class Out>
ColumnValues<Out> ParquetFile::Impl::read(const std::string& name, RowRange range,
                                          const char* reader, std::vector<int64_t>* lengths) const {
  const size_t index = index_of(name);
  const ColumnInfo& info = columns[index];
  const FieldPlan& plan = plans[index];
  const std::string where = path + ": column \"" + name + "\": ";
  if (!info.unsupported.empty()) throw Error(where + info.unsupported);
  if (!accepts(reader, plan.type)) {
    throw Error(where + reader + " cannot read " + fmt::type_name(plan.type) + " values");
  }
  const int64_t rows = meta.num_rows;
  const int64_t first = range.first;
  const int64_t count =
      range.count < 0 ? rows - std::min(std::max<int64_t>(first, 0), rows) : range.count;
  if (first < 0 || first > rows || count > rows - first) {
    throw Error(where + "rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                ") are outside the file's " + std::to_string(rows) + " rows");
  }
  ColumnValues<Out> result;
  result.rows = count;
  RowShape shape;
  shape.width = plan.max_rep == 0 ? 1 : -1;
  if (rows == 0) {
    result.width = std::max<int64_t>(shape.width, 0);
    return result;
  }
  std::vector<int64_t> group_lengths;  // of the rows of one row group, for `lengths`
  if (lengths && plan.max_rep > 0) shape.lengths = &group_lengths;
  // An empty range still decodes the row group at `first`, for the width of its lists.
  const int64_t probe = count == 0 ? std::min(first, rows - 1) : -1;
  const File file(path);
  std::string chunk;
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const fmt::RowGroup& rg = meta.row_groups[g];
    const int64_t lo = std::max<int64_t>(first - first_row[g], 0);
    const int64_t hi = std::min<int64_t>(first + count - first_row[g], rg.num_rows);
    const bool probing = probe >= first_row[g] && probe < first_row[g] + rg.num_rows;
    if (lo >= hi && !probing) continue;
    const fmt::ColumnMetaData& m = *rg.columns[plan.leaf].meta_data;
    const size_t base = result.values.size();
    try {
      file.read(static_cast<uint64_t>(chunk_start(m)), static_cast<size_t>(m.total_compressed_size),
                chunk);
      group_lengths.clear();
      ChunkDecoder<Out> decoder(plan, m, first_row[g], shape, result.values);
      const int64_t decoded = decoder.decode(chunk);
      if (decoded != rg.num_rows) {
        throw FormatError(std::to_string(decoded) + " rows, the row group has " +
                          std::to_string(rg.num_rows));
      }
    } catch (const Unsupported& e) {
      throw Error(where + e.what());
    } catch (const FormatError& e) {
      throw Error(path + ": damaged Parquet file: column \"" + name + "\", row group " +
                  std::to_string(g) + ": " + e.what());
    }
    // Keep rows [lo, hi) of this row group (none for an empty range).
    const int64_t end = count == 0 ? lo : hi;
    if (lengths) {
      if (plan.max_rep == 0) group_lengths.assign(static_cast<size_t>(rg.num_rows), 1);
      lengths->insert(lengths->end(), group_lengths.begin() + lo, group_lengths.begin() + end);
    }
    int64_t skip = lo, keep = end - lo;  // in values
    if (shape.lengths) {
      skip = std::accumulate(group_lengths.begin(), group_lengths.begin() + lo, int64_t{0});
      keep = std::accumulate(group_lengths.begin() + lo, group_lengths.begin() + end, int64_t{0});
    } else {
      skip *= std::max<int64_t>(shape.width, 0);
      keep *= std::max<int64_t>(shape.width, 0);
    }
    result.values.erase(result.values.begin() + base + skip + keep, result.values.end());
    result.values.erase(result.values.begin() + base, result.values.begin() + base + skip);
  }
  result.width = std::max<int64_t>(shape.width, 0);
  return result;
}

template <class Out>
ListValues<Out> ParquetFile::Impl::read_lists(const std::string& name, RowRange range,
                                              const char* reader) const {
  ListValues<Out> result;
  std::vector<int64_t> lengths;
  ColumnValues<Out> flat = read<Out>(name, range, reader, &lengths);
  result.rows = flat.rows;
  result.values = std::move(flat.values);
  result.offsets.reserve(lengths.size() + 1);
  result.offsets.push_back(0);
  for (int64_t n : lengths) result.offsets.push_back(result.offsets.back() + n);
  return result;
}

ColumnValues<float> ParquetFile::read_floats(const std::string& name, RowRange range) const {
  return impl_->read<float>(name, range, "read_floats");
}
ColumnValues<double> ParquetFile::read_doubles(const std::string& name, RowRange range) const {
  return impl_->read<double>(name, range, "read_doubles");
}
ColumnValues<int64_t> ParquetFile::read_ints(const std::string& name, RowRange range) const {
  return impl_->read<int64_t>(name, range, "read_ints");
}
ColumnValues<std::string> ParquetFile::read_strings(const std::string& name, RowRange range) const {
  return impl_->read<std::string>(name, range, "read_strings");
}
ListValues<double> ParquetFile::read_double_lists(const std::string& name, RowRange range) const {
  return impl_->read_lists<double>(name, range, "read_double_lists");
}
ListValues<int64_t> ParquetFile::read_int_lists(const std::string& name, RowRange range) const {
  return impl_->read_lists<int64_t>(name, range, "read_int_lists");
}
ListValues<std::string> ParquetFile::read_string_lists(const std::string& name,
                                                       RowRange range) const {
  return impl_->read_lists<std::string>(name, range, "read_string_lists");
}

const char* name_of(PhysicalType type) {
  switch (type) {
    case PhysicalType::kBoolean: return "BOOLEAN";
    case PhysicalType::kInt32: return "INT32";
    case PhysicalType::kInt64: return "INT64";
    case PhysicalType::kFloat: return "FLOAT";
    case PhysicalType::kDouble: return "DOUBLE";
    case PhysicalType::kByteArray: return "BYTE_ARRAY";
  }
  return "?";
}

const char* name_of(Codec codec) {
  switch (codec) {
    case Codec::kUncompressed: return "UNCOMPRESSED";
    case Codec::kSnappy: return "SNAPPY";
    case Codec::kGzip: return "GZIP";
    case Codec::kZstd: return "ZSTD";
  }
  return "?";
}

}  // namespace wam::parquet
