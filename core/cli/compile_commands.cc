#include "cli/compile_commands.h"

#include <filesystem>
#include <iostream>

#include "cli/step_overrides.h"
#include "common/device.h"
#include "models/world_model.h"
#include "train/train_loop.h"
#include "wam/pipeline.h"
#include "wam/runner.h"

#if WAM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace wam::cli {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitInvalid = 2;
constexpr const char* kNeedsCuda =
    "compile: no CUDA device here; the TunableOp results are prepared on the GPU that will train "
    "(run this command there)\n";

}  // namespace

CompileCommand::CompileCommand(CLI::App& app) {
  compile_ = app.add_subcommand(
      "compile",
      "Prepare the compiled step's TunableOp GEMM results by running real steps of a compiled "
      "pipeline (checkpointing off)");
  compile_->add_option("pipeline", file_, "Pipeline JSON file")->required();
  compile_->add_option("--set", overrides_, "Override a value (path.to.key=VALUE)");
  compile_->add_option("--steps", steps_, "Training steps to run (at least 2)")
      ->capture_default_str();
}

bool CompileCommand::selected() const { return compile_->parsed(); }

int CompileCommand::run() const {
  LoadOptions options{overrides_};
  const ValidatedPipeline probe = load_pipeline(file_, options);
  const ValidatedNode* step = nullptr;
  for (const ValidatedNode& node : probe.nodes()) {
    if (node.type == "TrainStep") step = &node;
  }
  if (!step || step->params.value("mode", "") != "compiled") {
    std::cerr << "Select a compiled pipeline (TrainStep mode: compiled) to prepare compiler "
                 "artifacts.\n";
    return kExitInvalid;
  }
  if (steps_ < 2) {
    std::cerr << "--steps must be at least 2 for forward/backward replay.\n";
    return kExitInvalid;
  }
#if !WAM_WITH_CUDA
  std::cerr << kNeedsCuda;
  return kExitFailed;
#else
  const at::Device device = resolve_device("auto", probe.settings(), "compile");
  if (!device.is_cuda()) {
    std::cerr << kNeedsCuda;
    return kExitFailed;
  }
  const models::MoTConfig config = models::MoTConfig::from_json(step->params["model"]);
  const std::string results =
      train::tunableop_results_path(at::cuda::getDeviceProperties(device.index())->name, config);

  options.overrides.push_back("settings.steps=" + std::to_string(steps_));
  add_no_checkpoint_overrides(step->id, options.overrides);
  ValidatedPipeline pipeline = load_pipeline(file_, options);
  std::cerr << "compile: running " << steps_ << " steps of " << pipeline.name()
            << " (checkpointing off)\n";
  RunResult result = run_pipeline(pipeline);
  std::cout << result.stats.table();
  if (result.error) {
    std::cerr << "error: " << result.error->what() << "\n";
    return kExitFailed;
  }
  if (!std::filesystem::exists(results)) {
    std::cerr << "compile: the run ended without writing " << results << "\n";
    return kExitFailed;
  }
  std::cout << "wrote TunableOp GEMM results: " << results << "\n";
  return 0;
#endif
}

}  // namespace wam::cli
