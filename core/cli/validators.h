// Option validators shared by the commands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
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

}  // namespace wam::cli
