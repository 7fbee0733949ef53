#include "formats/parquet/encodings.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace wam::parquet {

int bit_width(uint64_t max_value) { return max_value == 0 ? 0 : std::bit_width(max_value); }

namespace {

uint64_t read_uleb(const uint8_t*& p, const uint8_t* end) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) throw FormatError("RLE/bit-packed data ends early");
    const uint8_t b = *p++;
    value |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return value;
  }
  throw FormatError("RLE/bit-packed run header longer than 10 bytes");
}

}  // namespace

template <class T>
void decode_hybrid(const uint8_t* data, size_t size, int bit_width, size_t count,
                   uint32_t max_value, T* out) {
  if (bit_width < 0 || bit_width > 32) {
    throw FormatError("RLE/bit-packed bit width " + std::to_string(bit_width) + " above 32");
  }
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  const uint64_t mask = bit_width == 32 ? 0xffffffffu : (uint64_t{1} << bit_width) - 1;
  size_t done = 0;
  while (done < count) {
    const uint64_t header = read_uleb(p, end);
    const size_t left = count - done;
    if ((header & 1) == 0) {  // RLE run: a count, then one value in ceil(width / 8) bytes
      const uint64_t run = header >> 1;
      const size_t value_bytes = static_cast<size_t>((bit_width + 7) / 8);
      if (value_bytes > static_cast<size_t>(end - p)) throw FormatError("RLE run ends early");
      uint32_t value = 0;
      for (size_t i = 0; i < value_bytes; ++i) value |= static_cast<uint32_t>(p[i]) << (8 * i);
      p += value_bytes;
      if (value > max_value) {
        throw FormatError("RLE value " + std::to_string(value) + " above its maximum " +
                          std::to_string(max_value));
      }
      if (run == 0) throw FormatError("empty RLE run");
      const size_t n = static_cast<size_t>(std::min<uint64_t>(run, left));
      std::fill(out + done, out + done + n, static_cast<T>(value));
      done += n;
    } else {  // groups of 8 values, bit_width bytes per group, least significant bit first
      const uint64_t groups = header >> 1;
      if (groups == 0) throw FormatError("empty bit-packed run");
      const size_t available = static_cast<size_t>(end - p);
      if (groups > available / std::max(bit_width, 1) + 1) {
        throw FormatError("bit-packed run ends early");
      }
      const size_t run_values = static_cast<size_t>(groups * 8);
      const size_t n = std::min(run_values, left);
      const size_t needed_bytes = (n * static_cast<size_t>(bit_width) + 7) / 8;
      if (needed_bytes > available) throw FormatError("bit-packed run ends early");
      for (size_t g = 0; g * 8 < n; ++g) {
        uint8_t buffer[40] = {};  // one group (<= 32 bytes), zero-padded for 8-byte loads
        const uint8_t* group = p + g * static_cast<size_t>(bit_width);
        std::memcpy(buffer, group, std::min<size_t>(bit_width, end - group));
        const size_t in_group = std::min<size_t>(8, n - g * 8);
        for (size_t i = 0; i < in_group; ++i) {
          const size_t bit = i * static_cast<size_t>(bit_width);
          const uint64_t word = load_le<uint64_t>(buffer + bit / 8);
          const uint32_t value = static_cast<uint32_t>((word >> (bit % 8)) & mask);
          if (value > max_value) {
            throw FormatError("bit-packed value " + std::to_string(value) + " above its maximum " +
                              std::to_string(max_value));
          }
          out[done + g * 8 + i] = static_cast<T>(value);
        }
      }
      // A short final run may omit the padding bytes of its last group.
      p += std::min<size_t>(available, static_cast<size_t>(groups) * bit_width);
      done += n;
    }
  }
}
template void decode_hybrid<uint8_t>(const uint8_t*, size_t, int, size_t, uint32_t, uint8_t*);
template void decode_hybrid<uint32_t>(const uint8_t*, size_t, int, size_t, uint32_t, uint32_t*);

namespace {

void put_uleb(uint64_t value, std::string& out) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_bit_packed(const std::vector<uint32_t>& values, int bit_width, std::string& out) {
  put_uleb((values.size() / 8) << 1 | 1, out);
  uint64_t bits = 0;  // pending bits, least significant first
  int pending = 0;
  for (uint32_t v : values) {
    bits |= static_cast<uint64_t>(v) << pending;
    pending += bit_width;
    for (; pending >= 8; pending -= 8, bits >>= 8) out.push_back(static_cast<char>(bits & 0xff));
  }
}

}  // namespace

void encode_hybrid(const std::vector<uint32_t>& values, int bit_width, std::string& out) {
  std::vector<uint32_t> literals;  // pending bit-packed values; flushed in groups of 8
  size_t i = 0;
  while (i < values.size()) {
    size_t run = 1;
    while (i + run < values.size() && values[i + run] == values[i]) ++run;
    if (run < 8) {
      literals.insert(literals.end(), values.begin() + i, values.begin() + i + run);
      i += run;
    } else if (literals.size() % 8 != 0) {
      // Complete the literal group first: only the last group of the data may be padded.
      const size_t fill = 8 - literals.size() % 8;
      literals.insert(literals.end(), fill, values[i]);
      i += fill;
    } else {
      if (!literals.empty()) put_bit_packed(literals, bit_width, out);
      literals.clear();
      put_uleb(static_cast<uint64_t>(run) << 1, out);
      for (int b = 0; b < (bit_width + 7) / 8; ++b) {
        out.push_back(static_cast<char>(values[i] >> (8 * b)));
      }
      i += run;
    }
  }
  if (!literals.empty()) {
    literals.resize((literals.size() + 7) / 8 * 8, 0);
    put_bit_packed(literals, bit_width, out);
  }
}

}  // namespace wam::parquet
