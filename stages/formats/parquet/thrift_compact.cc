#include "formats/parquet/thrift_compact.h"

namespace wam::parquet::thrift {

uint8_t Reader::byte() {
  if (p_ == end_) throw FormatError("Thrift data ends early");
  return *p_++;
}

uint64_t Reader::varint() {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t b = byte();
    value |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return value;
  }
  throw FormatError("Thrift varint longer than 10 bytes");
}

void Reader::skip_bytes(uint64_t n) {
  if (n > static_cast<uint64_t>(end_ - p_)) throw FormatError("Thrift data ends early");
  p_ += n;
}

void Reader::begin_struct() {
  if (depth_ >= kMaxDepth) throw FormatError("Thrift structs nested too deeply");
  ++depth_;
  last_id_.push_back(0);
}

bool Reader::next_field(int16_t& id, uint8_t& type) {
  const uint8_t header = byte();
  type = header & 0x0f;
  if (type == kStop) {
    if (last_id_.empty()) throw FormatError("Thrift stop field outside a struct");
    last_id_.pop_back();
    --depth_;
    return false;
  }
  if (type > kStruct) throw FormatError("unknown Thrift type " + std::to_string(type));
  const int delta = header >> 4;
  if (delta != 0) {
    id = static_cast<int16_t>(last_id_.back() + delta);
  } else {
    const int64_t wide = zigzag_varint();
    if (wide < INT16_MIN || wide > INT16_MAX) throw FormatError("Thrift field id out of range");
    id = static_cast<int16_t>(wide);
  }
  last_id_.back() = id;
  return true;
}

bool Reader::read_bool(uint8_t field_type) {
  if (field_type != kTrue && field_type != kFalse) throw FormatError("Thrift field is not a bool");
  return field_type == kTrue;
}

int64_t Reader::zigzag_varint() {
  const uint64_t raw = varint();
  return static_cast<int64_t>(raw >> 1) ^ -static_cast<int64_t>(raw & 1);
}

int64_t Reader::read_integer(uint8_t field_type) {
  switch (field_type) {
    case kByte: return static_cast<int8_t>(byte());
    case kI16:
    case kI32:
    case kI64: return zigzag_varint();
    default: throw FormatError("Thrift field is not an integer");
  }
}

int32_t Reader::read_integer32(uint8_t field_type) {
  const int64_t value = read_integer(field_type);
  if (value < INT32_MIN || value > INT32_MAX) throw FormatError("Thrift i32 out of range");
  return static_cast<int32_t>(value);
}

std::string Reader::read_string(uint8_t field_type) {
  if (field_type != kBinary) throw FormatError("Thrift field is not a string");
  const uint64_t size = varint();
  const uint8_t* start = p_;
  skip_bytes(size);
  return std::string(reinterpret_cast<const char*>(start), static_cast<size_t>(size));
}

void Reader::read_list_header(uint8_t& element_type, uint32_t& size) {
  const uint8_t header = byte();
  element_type = header & 0x0f;
  uint64_t n = header >> 4;
  if (n == 15) n = varint();
  if (n > static_cast<uint64_t>(end_ - p_)) {
    throw FormatError("Thrift list of " + std::to_string(n) + " elements in " +
                      std::to_string(end_ - p_) + " bytes");
  }
  size = static_cast<uint32_t>(n);
}

void Reader::skip(uint8_t type) { skip_value(type, depth_); }

void Reader::skip_value(uint8_t type, int depth) {
  if (depth >= kMaxDepth) throw FormatError("Thrift structs nested too deeply");
  switch (type) {
    case kTrue:
    case kFalse: return;  // field bools carry no byte
    case kByte: skip_bytes(1); return;
    case kI16:
    case kI32:
    case kI64: varint(); return;
    case kDouble: skip_bytes(8); return;
    case kBinary: skip_bytes(varint()); return;
    case kList:
    case kSet: {
      uint8_t element_type;
      uint32_t size;
      read_list_header(element_type, size);
      for (uint32_t i = 0; i < size; ++i) {
        // Bools inside a list take one byte each.
        if (element_type == kTrue || element_type == kFalse) {
          skip_bytes(1);
        } else {
          skip_value(element_type, depth + 1);
        }
      }
      return;
    }
    case kMap: {
      const uint64_t size = varint();
      if (size == 0) return;
      if (size > static_cast<uint64_t>(end_ - p_)) throw FormatError("Thrift map too large");
      const uint8_t types = byte();
      for (uint64_t i = 0; i < size; ++i) {
        for (uint8_t t : {static_cast<uint8_t>(types >> 4), static_cast<uint8_t>(types & 0x0f)}) {
          if (t == kTrue || t == kFalse) {
            skip_bytes(1);
          } else {
            skip_value(t, depth + 1);
          }
        }
      }
      return;
    }
    case kStruct: {
      for (;;) {
        const uint8_t header = byte();
        const uint8_t field_type = header & 0x0f;
        if (field_type == kStop) return;
        if (field_type > kStruct) throw FormatError("unknown Thrift type in a skipped struct");
        if ((header >> 4) == 0) varint();  // a field id in long form
        skip_value(field_type, depth + 1);
      }
    }
    default: throw FormatError("unknown Thrift type " + std::to_string(type));
  }
}

void Writer::varint(uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void Writer::begin_struct() { last_id_.push_back(0); }

void Writer::end_struct() {
  out_.push_back(static_cast<char>(kStop));
  last_id_.pop_back();
}

void Writer::field_header(int16_t id, uint8_t type) {
  const int delta = id - last_id_.back();
  if (delta > 0 && delta <= 15) {
    out_.push_back(static_cast<char>((delta << 4) | type));
  } else {
    out_.push_back(static_cast<char>(type));
    zigzag(id);
  }
  last_id_.back() = id;
}

void Writer::field_i32(int16_t id, int32_t value) {
  field_header(id, kI32);
  zigzag(value);
}

void Writer::field_i64(int16_t id, int64_t value) {
  field_header(id, kI64);
  zigzag(value);
}

void Writer::field_bool(int16_t id, bool value) { field_header(id, value ? kTrue : kFalse); }

void Writer::field_string(int16_t id, const std::string& value) {
  field_header(id, kBinary);
  element_string(value);
}

void Writer::field_struct(int16_t id) {
  field_header(id, kStruct);
  begin_struct();
}

void Writer::field_list(int16_t id, uint8_t element_type, uint32_t size) {
  field_header(id, kList);
  if (size < 15) {
    out_.push_back(static_cast<char>((size << 4) | element_type));
  } else {
    out_.push_back(static_cast<char>(0xf0 | element_type));
    varint(size);
  }
}

void Writer::element_i32(int32_t value) { zigzag(value); }

void Writer::element_string(const std::string& value) {
  varint(value.size());
  out_.append(value);
}

}  // namespace wam::parquet::thrift
