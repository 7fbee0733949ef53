// `wam-pipeline bench PIPELINE`: its options, and the report of train/bench.h printed to stdout
// and, with --json, written as JSON.
#include "cli/command.h"

#include <iostream>
#include <string>

#include "cli/validators.h"
#include "train/bench.h"
#include "wam/metrics.h"

namespace wam::cli {

class BenchCommand final : public Command {
 public:
  static constexpr std::string_view kName = "bench";
  explicit BenchCommand(CLI::App& app);
  bool selected() const override;
  int run() override;

 private:
  CLI::App* bench_ = nullptr;
  BenchOptions options_;
  std::string json_out_;
};

BenchCommand::BenchCommand(CLI::App& app) {
  bench_ = app.add_subcommand(
      "bench",
      "Pipeline efficiency: samples/s of the whole training graph divided by samples/s of its "
      "device part (the nodes after HostToDevice) fed one device-resident batch");
  bench_->add_option("pipeline", options_.pipeline_file, "Training pipeline JSON file")->required();
  bench_->add_option("--set", options_.overrides, "Override a value (path.to.key=VALUE)");
  bench_->add_option("--steps", options_.steps, "Timed steps in each phase")
      ->capture_default_str()
      ->check(at_least(1));
  bench_->add_option("--warmup", options_.warmup,
                     "Untimed steps first (graph capture, GEMM tuning, pipeline fill)")
      ->capture_default_str()
      ->check(at_least(1));
  bench_->add_option("--threads", options_.threads, "Worker threads (overrides settings.threads)")
      ->check(at_least(0));
  bench_->add_option("--json", json_out_, "Also write the figures and the graph's stats as JSON")
      ->check(in_existing_directory());
  bench_->add_flag("--profile", options_.profile,
                   "Also profile 3 steps of the device part and list its longest kernels");
  bench_->add_option("--trace", options_.trace_path,
                     "With --profile: write the Chrome trace of those steps (ui.perfetto.dev)")
      ->needs("--profile")
      ->check(in_existing_directory());
  bench_->add_flag("--device-only", options_.device_only,
                   "Measure only the device part (step speed and peak memory, e.g. for sweeps)");
}

bool BenchCommand::selected() const { return bench_->parsed(); }

int BenchCommand::run() {
  options_.on_progress = [](const std::string& line) { std::cerr << line << "\n"; };
  BenchReport report;
  try {
    report = run_bench(options_);
  } catch (const NoDevicePartError& e) {
    std::cerr << e.what() << "\n";
    return kExitInvalid;
  }
  print_bench(report, std::cout);
  if (!json_out_.empty()) write_file_atomically(json_out_, bench_json(report).dump(2) + "\n");
  return 0;
}

WAM_REGISTER_COMMAND(BenchCommand);

}  // namespace wam::cli
