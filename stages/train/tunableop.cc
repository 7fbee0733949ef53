#include "train/tunableop.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <torch/version.h>

#include "wam/config.h"

namespace wam::train {
namespace fs = std::filesystem;

std::string config_hash(const models::MoTConfig& config) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : config.to_json().dump()) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string tunableop_results_path(const std::string& gpu_name, const models::MoTConfig& config) {
  std::string gpu;
  for (char c : gpu_name) gpu += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  const std::string root = environment_value("WAM_COMPILE_CACHE").value_or("wam_compile_cache");
  return (fs::path(root) / "tunableop" /
          (gpu + "_torch" + TORCH_VERSION + "_" + config_hash(config) + ".csv"))
      .string();
}

}  // namespace wam::train
