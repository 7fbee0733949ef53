// Fuzz target: the Parquet reader (stages/parquet) on arbitrary file bytes. The input is written to
// a scratch file, opened, and every readable column read whole, flat and as lists of any length.
//
// The oracle: a file opens and reads, or fails with wam::Error naming the file. Anything else
// escaping (std::bad_alloc, std::length_error, ...) or any sanitizer report is a finding. Seeds:
// tests/fuzz/seeds/parquet_file (small files of every layout the writer makes).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/parquet/parquet.h"
#include "wam/error.h"

namespace {

namespace fs = std::filesystem;

const std::string& scratch_file() {
  static const std::string path = [] {
    std::string pattern = (fs::temp_directory_path() / "wam-fuzz-parquet-XXXXXX").string();
    const int fd = mkstemp(pattern.data());
    if (fd >= 0) close(fd);
    std::atexit([] { std::remove(scratch_file().c_str()); });
    return pattern;
  }();
  return path;
}

void read_everything(const wam::parquet::ParquetFile& file) {
  using wam::parquet::PhysicalType;
  for (const wam::parquet::ColumnInfo& column : file.columns()) {
    if (!column.unsupported.empty()) continue;
    try {
      if (column.type == PhysicalType::kByteArray) {
        column.is_list ? (void)file.read_string_lists(column.name)
                       : (void)file.read_strings(column.name);
      } else if (column.type == PhysicalType::kFloat || column.type == PhysicalType::kDouble) {
        (void)file.read_floats(column.name);
        (void)file.read_double_lists(column.name, {1, 2});
      } else {
        (void)file.read_ints(column.name);
        (void)file.read_int_lists(column.name, {0, 1});
      }
    } catch (const wam::Error&) {
      // Refused or damaged: the next column may still read.
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::ofstream(scratch_file(), std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    read_everything(wam::parquet::ParquetFile::open(scratch_file()));
  } catch (const wam::Error& e) {
    if (std::string(e.what()).rfind(scratch_file(), 0) != 0) {
      std::fprintf(stderr, "error does not name the file: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
