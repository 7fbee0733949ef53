// Thrift's compact protocol, the encoding of Parquet's footer and page headers: a bounded reader
// and a writer of the few types Parquet uses. Hand-written because only a few hundred bytes per
// file are Thrift, and because the reader must survive hostile input: every length is checked
// against the bytes left, nesting is bounded, and every problem is a FormatError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wam/error.h"

namespace wam::parquet {

// A damaged file: the message says what is wrong, the caller adds the file (and column).
class FormatError : public Error {
 public:
  using Error::Error;
};

namespace thrift {

// Compact protocol type ids.
enum Type : uint8_t {
  kStop = 0,
  kTrue = 1,  // a bool field's value lives in its type id
  kFalse = 2,
  kByte = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), begin_(data), end_(data + size) {}

  size_t position() const { return static_cast<size_t>(p_ - begin_); }

  // Struct fields: call begin_struct(), then next_field() until it returns false; end_struct()
  // is implied by the stop field. Nesting deeper than kMaxDepth is an error.
  void begin_struct();
  bool next_field(int16_t& id, uint8_t& type);

  bool read_bool(uint8_t field_type);  // a bool field: the value is its type id
  // An integer field of any width (byte, i16, i32, i64); read_integer32 refuses values outside
  // int32.
  int64_t read_integer(uint8_t field_type);
  int32_t read_integer32(uint8_t field_type);
  std::string read_string(uint8_t field_type = kBinary);
  // A list or set header; `size` is checked against the bytes left (every element takes >= 1).
  void read_list_header(uint8_t& element_type, uint32_t& size);
  void skip(uint8_t type);

 private:
  static constexpr int kMaxDepth = 32;

  uint8_t byte();
  uint64_t varint();
  int64_t zigzag_varint();  // how i16, i32 and i64 values are written
  void skip_bytes(uint64_t n);
  void skip_value(uint8_t type, int depth);

  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  int depth_ = 0;
  std::vector<int16_t> last_id_;  // the previous field id of each open struct
};

class Writer {
 public:
  void begin_struct();
  void end_struct();  // writes the stop field
  void field_i32(int16_t id, int32_t value);
  void field_i64(int16_t id, int64_t value);
  void field_bool(int16_t id, bool value);
  void field_string(int16_t id, const std::string& value);
  void field_struct(int16_t id);  // then the struct's fields, then end_struct()
  void field_list(int16_t id, uint8_t element_type, uint32_t size);  // then the elements
  void element_i32(int32_t value);
  void element_string(const std::string& value);
  void element_struct() { begin_struct(); }

  const std::string& bytes() const { return out_; }

 private:
  void field_header(int16_t id, uint8_t type);
  void varint(uint64_t value);
  void zigzag(int64_t value) { varint((static_cast<uint64_t>(value) << 1) ^ (value >> 63)); }

  std::string out_;
  std::vector<int16_t> last_id_;
};

}  // namespace thrift
}  // namespace wam::parquet
