// `wam-pipeline bench PIPELINE...`: its options, and the report of train/bench.h printed to stdout
// and, with --json, written as JSON; with several pipelines, each measured in turn, then one table
// side by side (train/bench_table.h).
#include "cli/command.h"

#include <algorithm>
#include <iostream>
#include <string>

#include "cli/validators.h"
#include "commands/bench.h"
#include "commands/bench_table.h"
#include "wam/atomic_file.h"

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
  std::vector<std::string> pipelines_;
  std::string json_out_;
};

BenchCommand::BenchCommand(CLI::App& app) {
  bench_ = app.add_subcommand(
      "bench",
      "Pipeline efficiency: samples/s of the whole training graph divided by samples/s of its "
      "device part (the nodes after HostToDevice) fed one device-resident batch");
  bench_
      ->add_option("pipelines", pipelines_,
                   "Training pipeline JSON files; with several, a table compares them (samples/s, "
                   "the ratio to the first, pipeline efficiency, peak memory)")
      ->required();
  bench_->add_option("--set", options_.overrides, "Override a value (path.to.key=VALUE)");
  bench_->add_option("--steps", options_.steps, "Timed steps in each phase")
      ->capture_default_str()
      ->check(at_least(1));
  bench_
      ->add_option("--warmup", options_.warmup,
                   "Untimed steps first (graph capture, GEMM tuning, pipeline fill)")
      ->capture_default_str()
      ->check(at_least(1));
  bench_->add_option("--threads", options_.threads, "Worker threads (overrides settings.threads)")
      ->check(at_least(0));
  bench_->add_option("--json", json_out_, "Also write the figures and the graph's stats as JSON")
      ->check(in_existing_directory());
  bench_->add_flag("--profile", options_.profile,
                   "Also profile 3 steps of the device part and list its longest kernels");
  bench_
      ->add_option("--trace", options_.trace_path,
                   "With --profile: write the Chrome trace of those steps (ui.perfetto.dev)")
      ->needs("--profile")
      ->check(in_existing_directory());
  bench_
      ->add_flag("--profile-first", options_.profile_first,
                 "With --profile: profile the first step instead; for a compiled step that is its "
                 "eager warm-up and capture, whose trace names the operator behind each kernel")
      ->needs("--profile");
  auto* device_only = bench_->add_flag(
      "--device-only", options_.device_only,
      "Measure only the device part (step speed and peak memory, e.g. for sweeps)");
  bench_
      ->add_flag("--profile-graph", options_.profile_graph,
                 "Also profile 6 steps of the whole graph after its timed ones (CUDA) and list its "
                 "longest kernels, the data path's beside the step's; with --profile also the "
                 "kernels by the time the whole graph adds over the device part alone")
      ->excludes(device_only);
}

bool BenchCommand::selected() const { return bench_->parsed(); }

int BenchCommand::run() {
  options_.on_progress = [](const std::string& line) { std::cerr << line << "\n"; };
  std::vector<BenchReport> reports;
  for (const auto& pipeline : pipelines_) {
    options_.pipeline_file = pipeline;
    try {
      reports.push_back(run_bench(options_));
    } catch (const NoDevicePartError& e) {
      std::cerr << e.what() << "\n";
      return kExitInvalid;
    }
    if (reports.size() > 1) std::cout << "\n";
    print_bench(reports.back(), std::cout);
  }
  if (reports.size() == 1) {
    if (!json_out_.empty()) {
      write_file_atomically(json_out_, bench_json(reports[0]).dump(2) + "\n");
    }
    return 0;
  }
  std::vector<BenchRow> rows;
  for (size_t i = 0; i < reports.size(); ++i) {
    const BenchReport& r = reports[i];
    BenchRow row{r.pipeline, r.device_part.samples_per_s, std::nullopt, r.device_part.peak_bytes};
    if (r.graph) {
      row.samples_per_s = r.graph->samples_per_s;
      row.efficiency = r.graph->pipeline_efficiency;
    }
    // The same pipeline twice (with --set, say) is told apart by its file and position.
    if (std::count(pipelines_.begin(), pipelines_.end(), pipelines_[i]) > 1) {
      row.pipeline += " #" + std::to_string(i + 1);
    }
    rows.push_back(std::move(row));
  }
  std::cout << "\n" << bench_table(rows);
  if (!json_out_.empty()) {
    nlohmann::json json = {{"table", bench_table_json(rows)},
                           {"pipelines", nlohmann::json::array()}};
    for (const auto& r : reports) json["pipelines"].push_back(bench_json(r));
    write_file_atomically(json_out_, json.dump(2) + "\n");
  }
  return 0;
}

WAM_REGISTER_COMMAND(BenchCommand);

}  // namespace wam::cli
