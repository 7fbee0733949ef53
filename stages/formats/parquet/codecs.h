// Page compression through Debian's libraries: snappy, zlib (gzip framing), zstd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/parquet/parquet_format.h"

namespace wam::parquet {

// Whether this reader can decompress `codec` (a format::CompressionCodec value).
bool codec_supported(int32_t codec);

// Decompresses exactly `uncompressed_size` bytes into `out` (which it resizes). Throws
// FormatError when the data is corrupt or decompresses to another size. The caller bounds
// `uncompressed_size` first (see max_uncompressed_size).
void decompress(int32_t codec, const uint8_t* data, size_t size, size_t uncompressed_size,
                std::string& out);

// The most a page of `compressed_size` bytes can expand to under `codec`; a page header that
// claims more is damaged, and nothing is allocated for it.
uint64_t max_uncompressed_size(int32_t codec, uint64_t compressed_size);

std::string compress(int32_t codec, const std::string& data);

}  // namespace wam::parquet
