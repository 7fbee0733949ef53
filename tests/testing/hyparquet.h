// Reading a Parquet file with hyparquet (npm), an independent JavaScript implementation, under
// node: the tests compare what our reader and writer do against it. scripts/setup.sh installs it
// under ${WAM_NODE_PREFIX:-${XDG_CACHE_HOME:-~/.cache}/wam-pipeline/node}.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "wam/error.h"

namespace wam::testing {

inline std::string node_prefix() {
  if (const char* prefix = std::getenv("WAM_NODE_PREFIX")) return prefix;
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = cache ? cache : std::string(home ? home : "") + "/.cache";
  return base + "/wam-pipeline/node";
}

// Why hyparquet cannot run here, or "" when it can.
inline std::string hyparquet_missing() {
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed";
  if (!std::filesystem::exists(node_prefix() + "/node_modules/hyparquet-compressors")) {
    return "hyparquet is not installed in " + node_prefix() + " (run scripts/setup.sh)";
  }
  return "";
}

// Every column of `path` as tests/stages/formats/parquet/read_with_hyparquet.mjs prints it:
// {"name": [value per row]}, lists as arrays, int64 values as strings, non-finite floats as
// "NaN"/"Infinity".
inline nlohmann::json read_with_hyparquet(const std::string& path) {
  const std::string command = "node " WAM_SOURCE_DIR
                              "/tests/stages/formats/parquet/read_with_hyparquet.mjs '" +
                              node_prefix() + "' '" + path + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw Error("cannot run node for " + path);
  std::string out;
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) throw Error("hyparquet failed on " + path + ": " + out);
  return nlohmann::json::parse(out);
}

}  // namespace wam::testing
