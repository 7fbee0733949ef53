// `wam-pipeline compile PIPELINE`: prepares the compiled step's compiler artifacts (TunableOp GEMM
// results under $WAM_COMPILE_CACHE) by running real training steps of a compiled pipeline, as the
// reference's tools/compile.py prepares its Inductor/Triton caches. Under a launcher
// (common/distributed.h) rank 0 runs the steps alone and writes the results; the other ranks wait
// for it at a barrier.
#include "cli/command.h"

#include <filesystem>
#include <iostream>

#include "common/device.h"
#include "common/distributed.h"
#include "models/world_model.h"
#include "train/training_step.h"
#include "train/tunableop.h"
#include "wam/pipeline.h"
#include "wam/runner.h"

#if WAM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace wam::cli {
namespace {

constexpr const char* kNeedsCuda =
    "compile: no CUDA device here; the TunableOp results are prepared on the GPU that will train "
    "(run this command there)\n";

}  // namespace

class CompileCommand final : public Command {
 public:
  static constexpr std::string_view kName = "compile";
  explicit CompileCommand(CLI::App& app);
  bool selected() const override;
  int run() override;

 private:
  int prepare();
  CLI::App* compile_ = nullptr;
  std::string file_;
  std::vector<std::string> overrides_;
  int64_t steps_ = 2;
};

CompileCommand::CompileCommand(CLI::App& app) {
  compile_ = app.add_subcommand(
      "compile",
      "Prepare the compiled step's TunableOp GEMM results by running real steps of a compiled "
      "pipeline (no training state saved or resumed)");
  compile_->add_option("pipeline", file_, "Pipeline JSON file")->required();
  compile_->add_option("--set", overrides_, "Override a value (path.to.key=VALUE)");
  compile_->add_option("--steps", steps_, "Training steps to run (at least 2)")
      ->capture_default_str();
}

bool CompileCommand::selected() const { return compile_->parsed(); }

int CompileCommand::run() {
  dist::World& world = dist::World::get();
  if (world.rank() != 0) {
    std::cerr << "compile: " << world.describe() << " waits for rank 0 to prepare the results\n";
    world.barrier("barrier: waiting for rank 0 to run `compile`");
    return 0;
  }
  int status = kExitFailed;
  {
    dist::AloneScope alone;
    status = prepare();
  }
  world.barrier("barrier: rank 0 ran `compile`");
  return status;
}

int CompileCommand::prepare() {
  LoadOptions options{overrides_};
  const ValidatedPipeline probe = load_pipeline(file_, options);
  const ValidatedNode* step = nullptr;
  const stages::TrainingStep* training_step = nullptr;
  for (const ValidatedNode& node : probe.nodes()) {
    if (auto* found = dynamic_cast<const stages::TrainingStep*>(node.stage.get())) {
      step = &node;
      training_step = found;
    }
  }
  if (!training_step || !training_step->compiled()) {
    std::cerr << "Select a compiled pipeline (TrainStep mode: compiled) to prepare compiler "
                 "artifacts.\n";
    return kExitInvalid;
  }
  if (steps_ < 2) {
    std::cerr << "--steps must be at least 2 for forward/backward replay.\n";
    return kExitInvalid;
  }
#if !WAM_WITH_CUDA
  (void)step;  // the CUDA path reads its model params
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
  ValidatedPipeline pipeline = load_pipeline(file_, options);
  stages::disable_training_state(pipeline);
  std::cerr << "compile: running " << steps_ << " steps of " << pipeline.name()
            << " (no training state saved or resumed)\n";
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

WAM_REGISTER_COMMAND(CompileCommand);

}  // namespace wam::cli
