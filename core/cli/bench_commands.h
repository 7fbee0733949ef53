// `wam-pipeline bench PIPELINE`: is the data path keeping the training device busy?
//
// Runs a training pipeline twice: first its device part alone (every node after HostToDevice, which
// must be a chain ending in TrainStep) fed one device-resident batch over and over, then the whole
// graph. Both are timed over the same steps after a warm-up (capture, GEMM tuning, pipeline fill),
// and their ratio is the pipeline efficiency: 1.0 means the host side never made the step wait.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace wam::cli {

class BenchCommand {
 public:
  explicit BenchCommand(CLI::App& app);
  bool selected() const;
  int run() const;

 private:
  CLI::App* bench_ = nullptr;
  std::string file_;
  std::vector<std::string> overrides_;
  int64_t steps_ = 20;
  int64_t warmup_ = 5;
  int64_t threads_ = -1;
  std::string json_out_;
  bool profile_ = false;
  std::string trace_out_;
  bool device_only_ = false;
};

}  // namespace wam::cli
