#include "formats/parquet/parquet_format.h"

namespace wam::parquet::format {
namespace {

using thrift::Reader;
using thrift::Writer;

void expect_list(uint8_t type) {
  if (type != thrift::kList && type != thrift::kSet)
    throw FormatError("Thrift field is not a list");
}

// Reads one struct, handing each field to `on_field(id, type)`, which returns false to skip it.
template <class F>
void read_struct(Reader& r, F&& on_field) {
  r.begin_struct();
  int16_t id;
  uint8_t type;
  while (r.next_field(id, type)) {
    if (!on_field(id, type)) r.skip(type);
  }
}

std::string time_unit(Reader& r) {
  std::string unit;
  read_struct(r, [&](int16_t id, uint8_t type) {
    if (id == 1) unit = "MILLIS";
    if (id == 2) unit = "MICROS";
    if (id == 3) unit = "NANOS";
    return false;
  });
  return unit;
}

void decode_logical_type(Reader& r, SchemaElement& e) {
  read_struct(r, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: e.logical_type = "STRING"; return false;
      case 2: e.logical_type = "MAP", e.logical_map = true; return false;
      case 3: e.logical_type = "LIST", e.logical_list = true; return false;
      case 4: e.logical_type = "ENUM"; return false;
      case 5: {
        int32_t scale = 0, precision = 0;
        read_struct(r, [&](int16_t f, uint8_t t) {
          if (f == 1) scale = r.read_integer32(t);
          if (f == 2) precision = r.read_integer32(t);
          return f == 1 || f == 2;
        });
        e.logical_type = "DECIMAL(" + std::to_string(precision) + "," + std::to_string(scale) + ")";
        return true;
      }
      case 6: e.logical_type = "DATE"; return false;
      case 7:
      case 8: {
        std::string unit;
        read_struct(r, [&](int16_t f, uint8_t t) {
          if (f == 2) unit = time_unit(r);
          return f == 2;
        });
        e.logical_type = std::string(id == 7 ? "TIME" : "TIMESTAMP") + "(" + unit + ")";
        return true;
      }
      case 10: {
        int64_t bits = 0;
        bool is_signed = true;
        read_struct(r, [&](int16_t f, uint8_t t) {
          if (f == 1) bits = r.read_integer(t);
          if (f == 2) is_signed = r.read_bool(t);
          return f == 1 || f == 2;
        });
        e.logical_type = "INT(" + std::to_string(bits) + (is_signed ? ",true)" : ",false)");
        return true;
      }
      case 11: e.logical_type = "NULL"; return false;
      case 12: e.logical_type = "JSON"; return false;
      case 13: e.logical_type = "BSON"; return false;
      case 14: e.logical_type = "UUID"; return false;
      case 15: e.logical_type = "FLOAT16"; return false;
      default: e.logical_type = "logical type " + std::to_string(id); return false;
    }
  });
}

// The text of an old-style converted type, for files without a logical type.
std::string converted_type_text(int32_t converted) {
  static const char* const kNames[] = {
      "STRING",      "MAP",          "MAP_KEY_VALUE", "LIST",          "ENUM",
      "DECIMAL",     "DATE",         "TIME",          "TIME",          "TIMESTAMP",
      "TIMESTAMP",   "INT(8,false)", "INT(16,false)", "INT(32,false)", "INT(64,false)",
      "INT(8,true)", "INT(16,true)", "INT(32,true)",  "INT(64,true)",  "JSON",
      "BSON",        "INTERVAL"};
  if (converted < 0 || converted >= static_cast<int32_t>(std::size(kNames))) return "";
  return kNames[converted];
}

SchemaElement decode_schema_element(Reader& r) {
  SchemaElement e;
  bool has_name = false;
  read_struct(r, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: e.type = r.read_integer32(type); return true;
      case 3: e.repetition = r.read_integer32(type); return true;
      case 4: e.name = r.read_string(type), has_name = true; return true;
      case 5: e.num_children = r.read_integer32(type); return true;
      case 6: e.converted_type = r.read_integer32(type); return true;
      case 10: decode_logical_type(r, e); return true;
      default: return false;
    }
  });
  if (!has_name) throw FormatError("schema element without a name");
  if (e.logical_type.empty() && e.converted_type) {
    e.logical_type = converted_type_text(*e.converted_type);
  }
  return e;
}

template <class T, class F>
std::vector<T> read_list(Reader& r, uint8_t type, F&& element) {
  expect_list(type);
  uint8_t element_type;
  uint32_t size;
  r.read_list_header(element_type, size);
  std::vector<T> out;
  out.reserve(size);
  for (uint32_t i = 0; i < size; ++i) out.push_back(element(element_type));
  return out;
}

ColumnMetaData decode_column_metadata(Reader& r) {
  ColumnMetaData m;
  unsigned seen = 0;
  read_struct(r, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: m.type = r.read_integer32(type); break;
      case 2:
        m.encodings = read_list<int32_t>(r, type, [&](uint8_t t) { return r.read_integer32(t); });
        break;
      case 3:
        m.path_in_schema =
            read_list<std::string>(r, type, [&](uint8_t t) { return r.read_string(t); });
        break;
      case 4: m.codec = r.read_integer32(type); break;
      case 5: m.num_values = r.read_integer(type); break;
      case 6: m.total_uncompressed_size = r.read_integer(type); break;
      case 7: m.total_compressed_size = r.read_integer(type); break;
      case 9: m.data_page_offset = r.read_integer(type); break;
      case 11: m.dictionary_page_offset = r.read_integer(type); break;
      default: return false;
    }
    seen |= 1u << id;
    return true;
  });
  // type, path_in_schema, codec, num_values, sizes and data_page_offset are required.
  constexpr unsigned kRequired =
      (1u << 1) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 9);
  if ((seen & kRequired) != kRequired) throw FormatError("column metadata lacks required fields");
  return m;
}

ColumnChunk decode_column_chunk(Reader& r) {
  ColumnChunk c;
  read_struct(r, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: c.file_path = r.read_string(type); return true;
      case 2: c.file_offset = r.read_integer(type); return true;
      case 3: c.meta_data = decode_column_metadata(r); return true;
      default: return false;
    }
  });
  return c;
}

RowGroup decode_row_group(Reader& r) {
  RowGroup g;
  bool has_rows = false;
  read_struct(r, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1:
        g.columns = read_list<ColumnChunk>(r, type, [&](uint8_t t) {
          if (t != thrift::kStruct) throw FormatError("column chunk is not a struct");
          return decode_column_chunk(r);
        });
        return true;
      case 2: g.total_byte_size = r.read_integer(type); return true;
      case 3: g.num_rows = r.read_integer(type), has_rows = true; return true;
      case 5: g.file_offset = r.read_integer(type); return true;
      case 6: g.total_compressed_size = r.read_integer(type); return true;
      default: return false;
    }
  });
  if (!has_rows) throw FormatError("row group without num_rows");
  return g;
}

}  // namespace

const char* type_name(int32_t type) {
  switch (type) {
    case kBoolean: return "BOOLEAN";
    case kInt32: return "INT32";
    case kInt64: return "INT64";
    case kInt96: return "INT96";
    case kFloat: return "FLOAT";
    case kDouble: return "DOUBLE";
    case kByteArray: return "BYTE_ARRAY";
    case kFixedLenByteArray: return "FIXED_LEN_BYTE_ARRAY";
    default: return "an unknown type";
  }
}

std::string encoding_name(int32_t encoding) {
  switch (encoding) {
    case kPlain: return "PLAIN";
    case kPlainDictionary: return "PLAIN_DICTIONARY";
    case kRle: return "RLE";
    case kBitPacked: return "BIT_PACKED";
    case kDeltaBinaryPacked: return "DELTA_BINARY_PACKED";
    case kDeltaLengthByteArray: return "DELTA_LENGTH_BYTE_ARRAY";
    case kDeltaByteArray: return "DELTA_BYTE_ARRAY";
    case kRleDictionary: return "RLE_DICTIONARY";
    case kByteStreamSplit: return "BYTE_STREAM_SPLIT";
    default: return "encoding " + std::to_string(encoding);
  }
}

std::string codec_name(int32_t codec) {
  switch (codec) {
    case kUncompressed: return "UNCOMPRESSED";
    case kSnappy: return "SNAPPY";
    case kGzip: return "GZIP";
    case kLzo: return "LZO";
    case kBrotli: return "BROTLI";
    case kLz4: return "LZ4";
    case kZstd: return "ZSTD";
    case kLz4Raw: return "LZ4_RAW";
    default: return "codec " + std::to_string(codec);
  }
}

FileMetaData decode_file_metadata(const uint8_t* data, size_t size) {
  Reader r(data, size);
  FileMetaData m;
  unsigned seen = 0;
  read_struct(r, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: m.version = r.read_integer32(type); break;
      case 2:
        m.schema = read_list<SchemaElement>(r, type, [&](uint8_t t) {
          if (t != thrift::kStruct) throw FormatError("schema element is not a struct");
          return decode_schema_element(r);
        });
        break;
      case 3: m.num_rows = r.read_integer(type); break;
      case 4:
        m.row_groups = read_list<RowGroup>(r, type, [&](uint8_t t) {
          if (t != thrift::kStruct) throw FormatError("row group is not a struct");
          return decode_row_group(r);
        });
        break;
      case 6: m.created_by = r.read_string(type); break;
      default: return false;
    }
    seen |= 1u << id;
    return true;
  });
  constexpr unsigned kRequired = (1u << 2) | (1u << 3) | (1u << 4);
  if ((seen & kRequired) != kRequired) {
    throw FormatError("file metadata lacks the schema, num_rows or row_groups");
  }
  return m;
}

PageHeader decode_page_header(const uint8_t* data, size_t size, size_t& header_size) {
  Reader r(data, size);
  PageHeader h;
  unsigned seen = 0;
  read_struct(r, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: h.type = r.read_integer32(type); break;
      case 2: h.uncompressed_page_size = r.read_integer32(type); break;
      case 3: h.compressed_page_size = r.read_integer32(type); break;
      case 5: {
        DataPageHeader d;
        read_struct(r, [&](int16_t f, uint8_t t) {
          switch (f) {
            case 1: d.num_values = r.read_integer32(t); return true;
            case 2: d.encoding = r.read_integer32(t); return true;
            case 3: d.definition_level_encoding = r.read_integer32(t); return true;
            case 4: d.repetition_level_encoding = r.read_integer32(t); return true;
            default: return false;
          }
        });
        h.data_page_header = d;
        break;
      }
      case 7: {
        DictionaryPageHeader d;
        read_struct(r, [&](int16_t f, uint8_t t) {
          switch (f) {
            case 1: d.num_values = r.read_integer32(t); return true;
            case 2: d.encoding = r.read_integer32(t); return true;
            default: return false;
          }
        });
        h.dictionary_page_header = d;
        break;
      }
      case 8: {
        DataPageHeaderV2 d;
        read_struct(r, [&](int16_t f, uint8_t t) {
          switch (f) {
            case 1: d.num_values = r.read_integer32(t); return true;
            case 2: d.num_nulls = r.read_integer32(t); return true;
            case 3: d.num_rows = r.read_integer32(t); return true;
            case 4: d.encoding = r.read_integer32(t); return true;
            case 5: d.definition_levels_byte_length = r.read_integer32(t); return true;
            case 6: d.repetition_levels_byte_length = r.read_integer32(t); return true;
            case 7: d.is_compressed = r.read_bool(t); return true;
            default: return false;
          }
        });
        h.data_page_header_v2 = d;
        break;
      }
      default: return false;
    }
    seen |= 1u << id;
    return true;
  });
  constexpr unsigned kRequired = (1u << 1) | (1u << 2) | (1u << 3);
  if ((seen & kRequired) != kRequired) throw FormatError("page header lacks required fields");
  header_size = r.position();
  return h;
}

namespace {

void encode_schema_element(Writer& w, const SchemaElement& e) {
  w.element_struct();
  if (e.type) w.field_i32(1, *e.type);
  if (e.repetition) w.field_i32(3, *e.repetition);
  w.field_string(4, e.name);
  if (e.num_children > 0) w.field_i32(5, e.num_children);
  if (e.converted_type) w.field_i32(6, *e.converted_type);
  // The writer annotates only strings and lists (what Arrow writes for LeRobot columns).
  if (e.logical_type == "STRING" || e.logical_list) {
    w.field_struct(10);
    w.field_struct(e.logical_list ? 3 : 1);
    w.end_struct();
    w.end_struct();
  }
  w.end_struct();
}

void encode_column_chunk(Writer& w, const ColumnChunk& c) {
  const ColumnMetaData& m = *c.meta_data;
  w.element_struct();
  w.field_i64(2, c.file_offset);
  w.field_struct(3);
  w.field_i32(1, m.type);
  w.field_list(2, thrift::kI32, static_cast<uint32_t>(m.encodings.size()));
  for (int32_t e : m.encodings) w.element_i32(e);
  w.field_list(3, thrift::kBinary, static_cast<uint32_t>(m.path_in_schema.size()));
  for (const std::string& p : m.path_in_schema) w.element_string(p);
  w.field_i32(4, m.codec);
  w.field_i64(5, m.num_values);
  w.field_i64(6, m.total_uncompressed_size);
  w.field_i64(7, m.total_compressed_size);
  w.field_i64(9, m.data_page_offset);
  if (m.dictionary_page_offset) w.field_i64(11, *m.dictionary_page_offset);
  w.end_struct();
  w.end_struct();
}

}  // namespace

std::string encode(const FileMetaData& m) {
  Writer w;
  w.begin_struct();
  w.field_i32(1, m.version);
  w.field_list(2, thrift::kStruct, static_cast<uint32_t>(m.schema.size()));
  for (const SchemaElement& e : m.schema) encode_schema_element(w, e);
  w.field_i64(3, m.num_rows);
  w.field_list(4, thrift::kStruct, static_cast<uint32_t>(m.row_groups.size()));
  for (const RowGroup& g : m.row_groups) {
    w.element_struct();
    w.field_list(1, thrift::kStruct, static_cast<uint32_t>(g.columns.size()));
    for (const ColumnChunk& c : g.columns) encode_column_chunk(w, c);
    w.field_i64(2, g.total_byte_size);
    w.field_i64(3, g.num_rows);
    if (g.file_offset) w.field_i64(5, *g.file_offset);
    if (g.total_compressed_size) w.field_i64(6, *g.total_compressed_size);
    w.end_struct();
  }
  if (!m.created_by.empty()) w.field_string(6, m.created_by);
  w.end_struct();
  return w.bytes();
}

std::string encode(const PageHeader& h) {
  Writer w;
  w.begin_struct();
  w.field_i32(1, h.type);
  w.field_i32(2, h.uncompressed_page_size);
  w.field_i32(3, h.compressed_page_size);
  if (h.data_page_header) {
    const DataPageHeader& d = *h.data_page_header;
    w.field_struct(5);
    w.field_i32(1, d.num_values);
    w.field_i32(2, d.encoding);
    w.field_i32(3, d.definition_level_encoding);
    w.field_i32(4, d.repetition_level_encoding);
    w.end_struct();
  }
  if (h.dictionary_page_header) {
    w.field_struct(7);
    w.field_i32(1, h.dictionary_page_header->num_values);
    w.field_i32(2, h.dictionary_page_header->encoding);
    w.end_struct();
  }
  if (h.data_page_header_v2) {
    const DataPageHeaderV2& d = *h.data_page_header_v2;
    w.field_struct(8);
    w.field_i32(1, d.num_values);
    w.field_i32(2, d.num_nulls);
    w.field_i32(3, d.num_rows);
    w.field_i32(4, d.encoding);
    w.field_i32(5, d.definition_levels_byte_length);
    w.field_i32(6, d.repetition_levels_byte_length);
    w.field_bool(7, d.is_compressed);
    w.end_struct();
  }
  w.end_struct();
  return w.bytes();
}

}  // namespace wam::parquet::format
