// Option validators shared by the commands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <string>

#include "wam/error.h"
#include "wam/limits.h"

namespace wam::cli {

// Accepts numbers >= minimum. CLI11's NonNegativeNumber/PositiveNumber print their bound as a
// 300-digit double; this says it plainly: "--steps: must be >= 1, got 0".
inline CLI::Validator at_least(int64_t minimum) {
  return CLI::Validator(
      [minimum](std::string& value) -> std::string {
        if (auto number = parse_number(value); number && *number >= static_cast<double>(minimum)) {
          return {};
        }
        return "must be >= " + std::to_string(minimum) + ", got " + shorten(value);
      },
      ">=" + std::to_string(minimum));
}

// Accepts a thread count from 0 to wam::max_threads(): "--threads: must be between 0 and 8 (4 x the
// 2 hardware threads), got 100000". Checked on the text, so 2147483648 and 1e99 are named too.
inline CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        auto threads = parse_integer<int64_t>(value);
        if (!threads) {
          return "must be an integer between 0 and " + std::to_string(max_threads()) + ", got " +
                 shorten(value);
        }
        return check_thread_count(*threads);
      },
      "0.." + std::to_string(max_threads()));
}

// Accepts an output file path whose directory exists, so that a long run does not end unable to
// write its result: "--json: directory runs/x does not exist".
inline CLI::Validator in_existing_directory() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const std::filesystem::path directory = std::filesystem::path(value).parent_path();
        if (directory.empty() || std::filesystem::is_directory(directory)) return {};
        return "directory " + directory.string() + " does not exist";
      },
      "FILE");
}

}  // namespace wam::cli
