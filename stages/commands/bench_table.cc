#include "commands/bench_table.h"

#include <cstdio>

namespace wam::cli {
namespace {

double ratio(const std::vector<BenchRow>& rows, size_t i) {
  return rows[0].samples_per_s > 0 ? rows[i].samples_per_s / rows[0].samples_per_s : 0.0;
}

}  // namespace

std::string bench_table(const std::vector<BenchRow>& rows) {
  size_t width = 8;
  for (const auto& row : rows) width = std::max(width, row.pipeline.size());
  char line[512];
  std::snprintf(line, sizeof(line), "%-*s %10s %9s %11s %12s\n", int(width), "pipeline",
                "samples/s", "vs first", "efficiency", "peak memory");
  std::string out = line;
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& row = rows[i];
    char efficiency[32] = "-", peak[32] = "-";
    if (row.efficiency) std::snprintf(efficiency, sizeof(efficiency), "%.3f", *row.efficiency);
    if (row.peak_bytes >= 0) {
      std::snprintf(peak, sizeof(peak), "%.2f GiB", double(row.peak_bytes) / double(1 << 30));
    }
    std::snprintf(line, sizeof(line), "%-*s %10.2f %8.2fx %11s %12s\n", int(width),
                  row.pipeline.c_str(), row.samples_per_s, ratio(rows, i), efficiency, peak);
    out += line;
  }
  return out;
}

nlohmann::json bench_table_json(const std::vector<BenchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    out.push_back({{"pipeline", rows[i].pipeline},
                   {"samples_per_s", rows[i].samples_per_s},
                   {"vs_first", ratio(rows, i)},
                   {"pipeline_efficiency",
                    rows[i].efficiency ? nlohmann::json(*rows[i].efficiency) : nlohmann::json()},
                   {"peak_bytes", rows[i].peak_bytes}});
  }
  return out;
}

}  // namespace wam::cli
