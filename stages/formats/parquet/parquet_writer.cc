// ParquetWriter: holds the columns until write(), then lays the file out as Arrow does: row group
// by row group, each column chunk contiguous (dictionary page first), the footer last.
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

#include "formats/parquet/codecs.h"
#include "formats/parquet/encodings.h"
#include "formats/parquet/parquet.h"
#include "formats/parquet/parquet_format.h"
#include "wam/atomic_file.h"

namespace wam::parquet {
namespace {

namespace fmt = format;

int32_t format_type(PhysicalType type) {
  switch (type) {
    case PhysicalType::kBoolean: return fmt::kBoolean;
    case PhysicalType::kInt32: return fmt::kInt32;
    case PhysicalType::kInt64: return fmt::kInt64;
    case PhysicalType::kFloat: return fmt::kFloat;
    case PhysicalType::kDouble: return fmt::kDouble;
    case PhysicalType::kByteArray: return fmt::kByteArray;
  }
  return fmt::kByteArray;
}

int32_t format_codec(Codec codec) {
  switch (codec) {
    case Codec::kUncompressed: return fmt::kUncompressed;
    case Codec::kSnappy: return fmt::kSnappy;
    case Codec::kGzip: return fmt::kGzip;
    case Codec::kZstd: return fmt::kZstd;
  }
  return fmt::kUncompressed;
}

template <class T>
void put_le(T value, std::string& out) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.append(raw, sizeof(T));
}

// PLAIN encoding of `n` values stored as S (double, int64_t or std::string) as physical `type`.
template <class S>
void encode_plain(int32_t type, const S* v, size_t n, std::string& out) {
  if constexpr (std::is_same_v<S, std::string>) {
    for (size_t i = 0; i < n; ++i) {
      put_le(static_cast<uint32_t>(v[i].size()), out);
      out.append(v[i]);
    }
  } else {
    switch (type) {
      case fmt::kBoolean: {
        const size_t start = out.size();
        out.resize(start + (n + 7) / 8, '\0');
        for (size_t i = 0; i < n; ++i) {
          if (v[i] != 0) out[start + i / 8] = static_cast<char>(out[start + i / 8] | 1 << (i % 8));
        }
        return;
      }
      case fmt::kInt32:
        for (size_t i = 0; i < n; ++i) put_le(static_cast<int32_t>(v[i]), out);
        return;
      case fmt::kInt64:
        for (size_t i = 0; i < n; ++i) put_le(static_cast<int64_t>(v[i]), out);
        return;
      case fmt::kFloat:
        for (size_t i = 0; i < n; ++i) put_le(static_cast<float>(v[i]), out);
        return;
      case fmt::kDouble:
        for (size_t i = 0; i < n; ++i) put_le(static_cast<double>(v[i]), out);
        return;
    }
  }
}

// The dictionary key of a value: its bits as written (so -0.0 and NaNs keep their identity).
template <class S>
auto dictionary_key(int32_t type, const S& v) {
  if constexpr (std::is_same_v<S, std::string>) {
    return v;
  } else if constexpr (std::is_same_v<S, double>) {
    if (type == fmt::kFloat) {
      uint32_t bits;
      const float f = static_cast<float>(v);
      std::memcpy(&bits, &f, 4);
      return uint64_t{bits};
    }
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    return bits;
  } else {
    return static_cast<uint64_t>(v);
  }
}

size_t plain_size(int32_t type, const std::string& v) { return 4 + v.size(); }
template <class S>
size_t plain_size(int32_t type, const S&) {
  return type == fmt::kInt32 || type == fmt::kFloat ? 4 : type == fmt::kBoolean ? 1 : 8;
}

// A page's size as the header's int32, or an error naming the column when over Parquet's limit.
int32_t checked_page_size(const std::string& path, const std::string& column, size_t size) {
  if (size > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error(path + ": column \"" + column + "\": a page of " + std::to_string(size) +
                " bytes is over Parquet's 2 GiB limit; write fewer page_rows");
  }
  return static_cast<int32_t>(size);
}

// The dictionary of one column chunk, grown page by page as values are encoded against it.
template <class S>
class DictionaryEncoder {
 public:
  explicit DictionaryEncoder(int32_t type) : type_(type) {}

  // Appends the RLE_DICTIONARY body of `n` values (bit width, then the indices), adding the values
  // not seen yet to the dictionary.
  void encode(const S* v, size_t n, std::string& body) {
    std::vector<uint32_t> indices(n);
    for (size_t i = 0; i < n; ++i) {
      const auto [it, added] =
          index_.emplace(dictionary_key(type_, v[i]), static_cast<uint32_t>(values_.size()));
      if (added) {
        values_.push_back(v[i]);
        bytes_ += plain_size(type_, v[i]);
      }
      indices[i] = it->second;
    }
    const int width = bit_width(values_.size() - 1);
    body.push_back(static_cast<char>(width));
    encode_hybrid(indices, width, body);
  }

  // The dictionary page's body: the values in PLAIN encoding, in index order.
  std::string plain() const {
    std::string out;
    encode_plain(type_, values_.data(), values_.size(), out);
    return out;
  }

  size_t size() const { return values_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  using Key = decltype(dictionary_key(int32_t{}, std::declval<const S&>()));
  int32_t type_;
  std::unordered_map<Key, uint32_t> index_;
  std::vector<S> values_;
  size_t bytes_ = 0;
};

// A data page as written: its header, then its bytes (levels and values, compressed as the page
// version says).
struct DataPage {
  fmt::PageHeader header;
  std::string bytes;
};

// Version 1 compresses the levels with the values, each level run prefixed by its length; version
// 2 keeps the levels uncompressed in front and records their lengths in the header.
DataPage data_page(int version, int32_t codec, bool list, size_t values, int64_t rows,
                   int32_t encoding, const std::string& rep, const std::string& def,
                   const std::string& body, const std::string& path, const std::string& column) {
  DataPage page;
  fmt::PageHeader& h = page.header;
  if (version == 1) {
    std::string raw;
    if (list) {
      put_le(static_cast<uint32_t>(rep.size()), raw);
      raw += rep;
    }
    put_le(static_cast<uint32_t>(def.size()), raw);
    raw += def;
    raw += body;
    page.bytes = compress(codec, raw);
    h.type = fmt::kDataPage;
    h.uncompressed_page_size = checked_page_size(path, column, raw.size());
    h.compressed_page_size = checked_page_size(path, column, page.bytes.size());
    h.data_page_header =
        fmt::DataPageHeader{static_cast<int32_t>(values), encoding, fmt::kRle, fmt::kRle};
    return page;
  }
  const std::string compressed = compress(codec, body);
  h.type = fmt::kDataPageV2;
  h.uncompressed_page_size = checked_page_size(path, column, rep.size() + def.size() + body.size());
  h.compressed_page_size =
      checked_page_size(path, column, rep.size() + def.size() + compressed.size());
  fmt::DataPageHeaderV2 d;
  d.num_values = static_cast<int32_t>(values);
  d.num_rows = static_cast<int32_t>(rows);
  d.encoding = encoding;
  d.definition_levels_byte_length = static_cast<int32_t>(def.size());
  d.repetition_levels_byte_length = static_cast<int32_t>(rep.size());
  d.is_compressed = codec != fmt::kUncompressed;
  h.data_page_header_v2 = d;
  page.bytes = rep + def + compressed;
  return page;
}

// The output file and the offset of its end, which the footer records for each chunk.
class Sink {
 public:
  explicit Sink(std::string path) : file_(std::move(path)) {}

  int64_t offset() const { return offset_; }

  void write(const std::string& data) {
    file_.write(data);
    offset_ += static_cast<int64_t>(data.size());
  }

  void publish() { file_.publish(); }

 private:
  AtomicFile file_;
  int64_t offset_ = 0;
};

}  // namespace

struct ParquetWriter::Impl {
  struct Column {
    std::string name;
    int32_t type = fmt::kDouble;
    int64_t width = 0;                // 0: flat; else a LIST of `width` elements per row
    std::vector<int64_t> row_starts;  // a LIST of rows of any length: row r's first element
    int64_t rows = 0;

    bool is_list() const { return width > 0 || !row_starts.empty(); }
    // The index of row r's first element (r == rows: one past the last element).
    int64_t row_start(int64_t r) const {
      if (!row_starts.empty()) return row_starts[static_cast<size_t>(r)];
      return r * (width > 0 ? width : 1);
    }
    std::vector<double> reals;
    std::vector<int64_t> ints;
    std::vector<std::string> strings;
  };

  std::string path;
  WriteOptions options;
  std::vector<Column> columns;

  Column& add(const std::string& name, PhysicalType type, size_t values, int64_t width);
  void check_options() const;
  fmt::ColumnChunk write_chunk(const Column& c, int64_t first, int64_t rows, Sink& sink) const;
  template <class S>
  fmt::ColumnChunk write_chunk(const Column& c, const std::vector<S>& values, int64_t first,
                               int64_t rows, Sink& sink) const;
};

ParquetWriter::ParquetWriter(std::string path, WriteOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->options = options;
}

ParquetWriter::~ParquetWriter() = default;

ParquetWriter::Impl::Column& ParquetWriter::Impl::add(const std::string& name, PhysicalType type,
                                                      size_t values, int64_t width) {
  const std::string where = path + ": column \"" + name + "\": ";
  if (name.empty()) throw Error(path + ": a column needs a name");
  for (const Column& c : columns) {
    if (c.name == name) throw Error(where + "added twice");
  }
  if (width < 0) throw Error(where + "negative list width " + std::to_string(width));
  if (width > 0 && values % static_cast<size_t>(width) != 0) {
    throw Error(where + std::to_string(values) + " values do not make rows of " +
                std::to_string(width));
  }
  Column c;
  c.name = name;
  c.type = format_type(type);
  c.width = width;
  c.rows = static_cast<int64_t>(width > 0 ? values / static_cast<size_t>(width) : values);
  columns.push_back(std::move(c));
  return columns.back();
}

void ParquetWriter::add_floats(const std::string& name, const std::vector<float>& values,
                               int64_t width, PhysicalType type) {
  if (type != PhysicalType::kFloat && type != PhysicalType::kDouble) {
    throw Error(impl_->path + ": column \"" + name + "\": add_floats writes FLOAT or DOUBLE, not " +
                name_of(type));
  }
  impl_->add(name, type, values.size(), width).reals.assign(values.begin(), values.end());
}

void ParquetWriter::add_doubles(const std::string& name, const std::vector<double>& values,
                                int64_t width) {
  impl_->add(name, PhysicalType::kDouble, values.size(), width).reals = values;
}

void ParquetWriter::add_ints(const std::string& name, const std::vector<int64_t>& values,
                             int64_t width, PhysicalType type) {
  const std::string where = impl_->path + ": column \"" + name + "\": ";
  if (type != PhysicalType::kBoolean && type != PhysicalType::kInt32 &&
      type != PhysicalType::kInt64) {
    throw Error(where + "add_ints writes BOOLEAN, INT32 or INT64, not " + name_of(type));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    const bool fits = type == PhysicalType::kBoolean ? (v == 0 || v == 1)
                      : type == PhysicalType::kInt32 ? (v >= std::numeric_limits<int32_t>::min() &&
                                                        v <= std::numeric_limits<int32_t>::max())
                                                     : true;
    if (!fits) {
      throw Error(where + "value " + std::to_string(v) + " at " + std::to_string(i) +
                  " does not fit " + name_of(type));
    }
  }
  impl_->add(name, type, values.size(), width).ints = values;
}

void ParquetWriter::add_strings(const std::string& name, const std::vector<std::string>& values) {
  impl_->add(name, PhysicalType::kByteArray, values.size(), 0).strings = values;
}

void ParquetWriter::add_string_lists(const std::string& name,
                                     const std::vector<std::vector<std::string>>& rows) {
  std::vector<int64_t> row_starts = {0};
  std::vector<std::string> strings;
  for (size_t r = 0; r < rows.size(); ++r) {
    // An empty list needs levels without a value; nothing written here has one.
    if (rows[r].empty()) {
      throw Error(impl_->path + ": column \"" + name + "\": row " + std::to_string(r) +
                  " is an empty list; add_string_lists writes lists of at least one string");
    }
    strings.insert(strings.end(), rows[r].begin(), rows[r].end());
    row_starts.push_back(static_cast<int64_t>(strings.size()));
  }
  Impl::Column& c = impl_->add(name, PhysicalType::kByteArray, rows.size(), 0);
  c.strings = std::move(strings);
  c.row_starts = std::move(row_starts);
}

void ParquetWriter::Impl::check_options() const {
  if (options.row_group_rows < 1) throw Error(path + ": row_group_rows must be at least 1");
  if (options.page_rows < 1) throw Error(path + ": page_rows must be at least 1");
  if (options.data_page_version != 1 && options.data_page_version != 2) {
    throw Error(path + ": data_page_version must be 1 or 2, not " +
                std::to_string(options.data_page_version));
  }
  if (options.dictionary_page_limit < 0) {
    throw Error(path + ": dictionary_page_limit must not be negative");
  }
}

fmt::ColumnChunk ParquetWriter::Impl::write_chunk(const Column& c, int64_t first, int64_t rows,
                                                  Sink& sink) const {
  if (c.type == fmt::kByteArray) return write_chunk(c, c.strings, first, rows, sink);
  if (c.type == fmt::kFloat || c.type == fmt::kDouble) {
    return write_chunk(c, c.reals, first, rows, sink);
  }
  return write_chunk(c, c.ints, first, rows, sink);
}

template <class S>
fmt::ColumnChunk ParquetWriter::Impl::write_chunk(const Column& c, const std::vector<S>& values,
                                                  int64_t first, int64_t rows, Sink& sink) const {
  const int32_t codec = format_codec(options.codec);
  const bool list = c.is_list();
  const int max_def = list ? 3 : 1;  // OPTIONAL list, REPEATED group, OPTIONAL element
  const S* data = values.data() + c.row_start(first);

  DictionaryEncoder<S> dictionary(c.type);
  // Booleans stay PLAIN, as Arrow writes them: a dictionary cannot beat one bit per value.
  bool fallback = !options.dictionary || c.type == fmt::kBoolean;

  fmt::ColumnMetaData m;
  m.type = c.type;
  m.path_in_schema =
      list ? std::vector<std::string>{c.name, "list", "element"} : std::vector<std::string>{c.name};
  m.codec = codec;
  m.num_values = c.row_start(first + rows) - c.row_start(first);

  std::string pages;  // data pages, kept until the dictionary (written first) is complete
  auto append_page = [&](const fmt::PageHeader& h, const std::string& body) {
    const std::string header = fmt::encode(h);
    pages += header;
    pages += body;
    m.total_uncompressed_size += static_cast<int64_t>(header.size()) + h.uncompressed_page_size;
    m.total_compressed_size += static_cast<int64_t>(header.size()) + h.compressed_page_size;
  };

  bool used_dictionary = false;
  for (int64_t p0 = 0; p0 < rows; p0 += options.page_rows) {
    const int64_t page_rows = std::min(options.page_rows, rows - p0);
    const int64_t page_start = c.row_start(first + p0);
    const size_t n = static_cast<size_t>(c.row_start(first + p0 + page_rows) - page_start);
    const S* v = data + (page_start - c.row_start(first));

    std::string rep, def;
    if (list) {
      std::vector<uint32_t> levels(n, 1);
      for (int64_t r = 0; r < page_rows; ++r) {
        levels[static_cast<size_t>(c.row_start(first + p0 + r) - page_start)] = 0;
      }
      encode_hybrid(levels, 1, rep);
    }
    encode_hybrid(std::vector<uint32_t>(n, static_cast<uint32_t>(max_def)), bit_width(max_def),
                  def);

    std::string body;
    int32_t encoding = fmt::kPlain;
    if (!fallback) {
      dictionary.encode(v, n, body);
      encoding = fmt::kRleDictionary;
      used_dictionary = true;
      // Like Arrow: a dictionary past its limit ends here; later pages are PLAIN.
      fallback = static_cast<int64_t>(dictionary.bytes()) > options.dictionary_page_limit;
    } else {
      encode_plain(c.type, v, n, body);
    }
    const DataPage page = data_page(options.data_page_version, codec, list, n, page_rows, encoding,
                                    rep, def, body, path, c.name);
    append_page(page.header, page.bytes);
  }

  fmt::ColumnChunk chunk;
  chunk.file_offset = sink.offset();
  if (used_dictionary) {
    const std::string plain = dictionary.plain();
    const std::string compressed = compress(codec, plain);
    fmt::PageHeader h;
    h.type = fmt::kDictionaryPage;
    h.uncompressed_page_size = checked_page_size(path, c.name, plain.size());
    h.compressed_page_size = checked_page_size(path, c.name, compressed.size());
    h.dictionary_page_header =
        fmt::DictionaryPageHeader{static_cast<int32_t>(dictionary.size()), fmt::kPlain};
    const std::string header = fmt::encode(h);
    m.dictionary_page_offset = sink.offset();
    sink.write(header);
    sink.write(compressed);
    m.total_uncompressed_size += static_cast<int64_t>(header.size()) + h.uncompressed_page_size;
    m.total_compressed_size += static_cast<int64_t>(header.size()) + h.compressed_page_size;
  }
  m.data_page_offset = sink.offset();
  sink.write(pages);
  m.encodings = {fmt::kPlain, fmt::kRle};
  if (used_dictionary) m.encodings.push_back(fmt::kRleDictionary);
  chunk.meta_data = m;
  return chunk;
}

void ParquetWriter::write() {
  Impl& impl = *impl_;
  impl.check_options();
  if (impl.columns.empty()) throw Error(impl.path + ": no columns to write");
  const int64_t rows = impl.columns[0].rows;
  for (const Impl::Column& c : impl.columns) {
    if (c.rows != rows) {
      throw Error(impl.path + ": column \"" + c.name + "\" has " + std::to_string(c.rows) +
                  " rows, column \"" + impl.columns[0].name + "\" has " + std::to_string(rows));
    }
  }

  fmt::FileMetaData meta;
  meta.version = 2;
  meta.num_rows = rows;
  meta.created_by = "wam-pipeline";
  fmt::SchemaElement root;
  root.name = "schema";
  root.repetition = fmt::kRequired;
  root.num_children = static_cast<int32_t>(impl.columns.size());
  meta.schema.push_back(root);
  for (const Impl::Column& c : impl.columns) {
    fmt::SchemaElement leaf;
    leaf.type = c.type;
    leaf.repetition = fmt::kOptional;
    leaf.name = c.is_list() ? "element" : c.name;
    if (c.type == fmt::kByteArray) {
      leaf.converted_type = fmt::kUtf8;
      leaf.logical_type = "STRING";
    }
    if (c.is_list()) {
      fmt::SchemaElement list;
      list.repetition = fmt::kOptional;
      list.name = c.name;
      list.num_children = 1;
      list.converted_type = fmt::kList;
      list.logical_type = "LIST";
      list.logical_list = true;
      fmt::SchemaElement repeated;
      repeated.repetition = fmt::kRepeated;
      repeated.name = "list";
      repeated.num_children = 1;
      meta.schema.push_back(list);
      meta.schema.push_back(repeated);
    }
    meta.schema.push_back(leaf);
  }

  Sink sink(impl.path);
  sink.write("PAR1");
  for (int64_t first = 0; first < rows; first += impl.options.row_group_rows) {
    const int64_t n = std::min(impl.options.row_group_rows, rows - first);
    fmt::RowGroup rg;
    rg.num_rows = n;
    rg.file_offset = sink.offset();
    rg.total_compressed_size = 0;
    for (const Impl::Column& c : impl.columns) {
      rg.columns.push_back(impl.write_chunk(c, first, n, sink));
      rg.total_byte_size += rg.columns.back().meta_data->total_uncompressed_size;
      *rg.total_compressed_size += rg.columns.back().meta_data->total_compressed_size;
    }
    meta.row_groups.push_back(std::move(rg));
  }
  const std::string footer = fmt::encode(meta);
  std::string tail;
  put_le(static_cast<uint32_t>(footer.size()), tail);
  tail += "PAR1";
  sink.write(footer);
  sink.write(tail);
  sink.publish();
}

}  // namespace wam::parquet
