// Parquet's value and level encodings: the RLE/bit-packed hybrid (levels and dictionary indices)
// and PLAIN. Decoders check every read against the bytes given and throw FormatError.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/parquet/thrift_compact.h"

namespace wam::parquet {

static_assert(std::endian::native == std::endian::little, "Parquet values are little-endian");

// Bits needed for values 0..max_value.
int bit_width(uint64_t max_value);

// Decodes `count` values of the RLE/bit-packed hybrid into `out`; each must be <= max_value.
// Throws FormatError when the data ends first or a value is too large.
template <class T>
void decode_hybrid(const uint8_t* data, size_t size, int bit_width, size_t count,
                   uint32_t max_value, T* out);

// Appends the hybrid encoding of `values` (RLE runs for repeats of 8 or more, bit-packed groups
// of 8 otherwise) to `out`.
void encode_hybrid(const std::vector<uint32_t>& values, int bit_width, std::string& out);

// A little-endian fixed-size value (inline: it is the inner loop of PLAIN decoding).
template <class T>
inline T load_le(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace wam::parquet
