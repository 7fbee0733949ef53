// What the file-based fuzz targets share: a scratch directory, inputs split into files at NUL
// bytes (which JSON text never holds), and writing (or removing) each file before a run.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace wam::fuzz {

// A fresh directory under the temporary directory, removed at exit.
inline std::filesystem::path make_scratch_dir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  const std::filesystem::path dir = mkdtemp(pattern.data());
  static std::vector<std::filesystem::path> made;  // removed together at exit
  if (made.empty()) {
    std::atexit([] {
      for (const auto& path : made) {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    });
  }
  made.push_back(dir);
  return dir;
}

// The input cut at its first `max_parts - 1` NUL bytes.
inline std::vector<std::string_view> split_at_nul(std::string_view input, size_t max_parts) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t end = input.find('\0', start);
    parts.push_back(input.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos || parts.size() == max_parts) break;
    start = end + 1;
  }
  return parts;
}

// Writes `text` to `path`, or removes the file when there is no text.
inline void write_or_remove(const std::filesystem::path& path, const std::string_view* text) {
  std::error_code ec;
  if (!text) {
    std::filesystem::remove(path, ec);
    return;
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(text->data(), text->size());
}

}  // namespace wam::fuzz
