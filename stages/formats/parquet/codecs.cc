#include "formats/parquet/codecs.h"

#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <climits>
#include <memory>

namespace wam::parquet {

bool codec_supported(int32_t codec) {
  return codec == format::kUncompressed || codec == format::kSnappy || codec == format::kGzip ||
         codec == format::kZstd;
}

uint64_t max_uncompressed_size(int32_t codec, uint64_t compressed_size) {
  // Worst-case expansion of each format, with room for headers: snappy emits at most 64 bytes
  // per 2-byte copy op, deflate at most 258 bytes per 2 bits (1032:1), zstd at most a 128 KiB
  // RLE block per 4 bytes.
  switch (codec) {
    case format::kUncompressed: return compressed_size;
    case format::kSnappy: return compressed_size * 32 + 64;
    case format::kGzip: return compressed_size * 1032 + 1024;
    case format::kZstd: return compressed_size * 32768 + 131072;
    default: return 0;
  }
}

namespace {

// Inflates into `out` sized one byte past the expected size, so that a longer stream is caught.
void inflate_gzip(const uint8_t* data, size_t size, size_t expected, std::string& out) {
  out.resize(expected + 1);
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw FormatError("zlib could not start");  // gzip or zlib
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  for (;;) {
    const int rc = inflate(&z, Z_FINISH);
    if (rc == Z_STREAM_END) {
      // Several gzip members may follow each other.
      if (z.avail_in > 0 && z.avail_out > 0) {
        if (inflateReset(&z) != Z_OK) throw FormatError("zlib could not restart");
        continue;
      }
      break;
    }
    if (z.avail_out == 0) {
      throw FormatError("GZIP data decompresses to more than the page header's " +
                        std::to_string(expected) + " bytes");
    }
    throw FormatError(std::string("corrupt GZIP data (zlib: ") + (z.msg ? z.msg : "error") + ")");
  }
  if (z.total_out != expected) {
    throw FormatError("GZIP data decompresses to " + std::string(z.avail_out ? "" : "over ") +
                      std::to_string(z.total_out) + " bytes, the page header says " +
                      std::to_string(expected));
  }
  out.resize(expected);
}

}  // namespace

void decompress(int32_t codec, const uint8_t* data, size_t size, size_t uncompressed_size,
                std::string& out) {
  const char* in = reinterpret_cast<const char*>(data);
  switch (codec) {
    case format::kUncompressed:
      if (size != uncompressed_size) {
        throw FormatError("uncompressed page of " + std::to_string(size) +
                          " bytes, the page header says " + std::to_string(uncompressed_size));
      }
      out.assign(in, size);
      return;
    case format::kSnappy: {
      size_t length = 0;
      if (!snappy::GetUncompressedLength(in, size, &length)) {
        throw FormatError("corrupt SNAPPY block (no valid length)");
      }
      if (length != uncompressed_size) {
        throw FormatError("SNAPPY block of " + std::to_string(length) +
                          " bytes, the page header says " + std::to_string(uncompressed_size));
      }
      out.resize(length);
      if (!snappy::RawUncompress(in, size, out.data())) throw FormatError("corrupt SNAPPY block");
      return;
    }
    case format::kGzip:
      if (size > UINT_MAX || uncompressed_size >= UINT_MAX) {
        throw FormatError("GZIP page larger than 4 GiB");
      }
      inflate_gzip(data, size, uncompressed_size, out);
      return;
    case format::kZstd: {
      const unsigned long long length = ZSTD_getFrameContentSize(data, size);
      if (length == ZSTD_CONTENTSIZE_ERROR) throw FormatError("corrupt ZSTD frame");
      if (length != ZSTD_CONTENTSIZE_UNKNOWN && length != uncompressed_size) {
        throw FormatError("ZSTD frame of " + std::to_string(length) +
                          " bytes, the page header says " + std::to_string(uncompressed_size));
      }
      out.resize(uncompressed_size);
      const size_t rc = ZSTD_decompress(out.data(), out.size(), data, size);
      if (ZSTD_isError(rc)) {
        throw FormatError(std::string("corrupt ZSTD data (zstd: ") + ZSTD_getErrorName(rc) + ")");
      }
      if (rc != uncompressed_size) {
        throw FormatError("ZSTD data decompresses to " + std::to_string(rc) +
                          " bytes, the page header says " + std::to_string(uncompressed_size));
      }
      return;
    }
    default: throw FormatError("codec " + format::codec_name(codec) + " is not supported");
  }
}

std::string compress(int32_t codec, const std::string& data) {
  std::string out;
  switch (codec) {
    case format::kUncompressed: return data;
    case format::kSnappy: {
      out.resize(snappy::MaxCompressedLength(data.size()));
      size_t length = 0;
      snappy::RawCompress(data.data(), data.size(), out.data(), &length);
      out.resize(length);
      return out;
    }
    case format::kGzip: {
      z_stream z{};
      // 15 + 16: a gzip header, as the format asks of GZIP pages.
      if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
          Z_OK) {
        throw Error("zlib could not start a GZIP stream");
      }
      std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, deflateEnd);
      out.resize(deflateBound(&z, data.size()));
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
      z.avail_in = static_cast<uInt>(data.size());
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      if (deflate(&z, Z_FINISH) != Z_STREAM_END) throw Error("zlib could not finish a GZIP stream");
      out.resize(z.total_out);
      return out;
    }
    case format::kZstd: {
      out.resize(ZSTD_compressBound(data.size()));
      const size_t rc = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 1);
      if (ZSTD_isError(rc)) throw Error(std::string("zstd: ") + ZSTD_getErrorName(rc));
      out.resize(rc);
      return out;
    }
    default: throw Error("cannot write codec " + format::codec_name(codec));
  }
}

}  // namespace wam::parquet
