// `wam-pipeline bench` of several pipelines: one table side by side (samples/s, the ratio to the
// first pipeline, pipeline efficiency, peak device memory). No LibTorch: formatting only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wam::cli {

struct BenchRow {
  std::string pipeline;
  double samples_per_s = 0;          // the whole graph's, or the device part's with --device-only
  std::optional<double> efficiency;  // absent with --device-only
  int64_t peak_bytes = -1;           // the device part's peak device memory; -1 without CUDA
};

// The table, a header line and a line per row; the first row is the reference of "vs first".
std::string bench_table(const std::vector<BenchRow>& rows);
// The same figures as JSON rows (with "vs_first").
nlohmann::json bench_table_json(const std::vector<BenchRow>& rows);

}  // namespace wam::cli
