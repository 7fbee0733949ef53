// Option validators shared by the commands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <string>

namespace wam::cli {

// Accepts numbers >= minimum. CLI11's NonNegativeNumber/PositiveNumber print their bound as a
// 300-digit double; this says it plainly: "--steps: must be >= 1, got 0".
inline CLI::Validator at_least(int64_t minimum) {
  return CLI::Validator(
      [minimum](std::string& value) -> std::string {
        try {
          size_t used = 0;
          if (std::stod(value, &used) >= static_cast<double>(minimum) && used == value.size()) {
            return {};
          }
        } catch (const std::exception&) {
        }
        return "must be >= " + std::to_string(minimum) + ", got " + value;
      },
      ">=" + std::to_string(minimum));
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
