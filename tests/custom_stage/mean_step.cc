// A training step of one's own, as `wam-pipeline bench` and `compile` see it: found by the
// TrainingStep interface (train/training_step.h) and its state turned off through it, never by
// its type name or param keys. Built into wam-custom-example beside the README's Brightness stage;
// tests/cli/cli_test.sh benchmarks it.
#include <fstream>
#include <string>

#include <train/training_step.h>
#include <wam/registry.h>
#include <wam/tensor.h>

namespace my {

struct MeanStepParams {
  std::string state_file;
  template <class V>
  void visit(V& v) {
    v("state_file", state_file, "File each step appends its loss to, as its state (\"\": none).");
  }
};

// The mean of the video latents as the loss of a step.
class MeanStep final : public wam::Stage, public wam::stages::TrainingStep {
 public:
  static constexpr std::string_view kType = "MeanStep";
  static constexpr std::string_view kSummary = "Test step: the mean of the video latents as loss.";
  using Params = MeanStepParams;
  explicit MeanStep(Params p) : p_(std::move(p)) {}

  bool compiled() const override { return false; }
  void disable_training_state() override { p_.state_file.clear(); }

  void declare(wam::Contract& c) const override {
    c.reads("video_latents", wam::FieldType::kTensor);
    c.writes("loss", wam::FieldType::kDouble);
  }
  void open(wam::Context& context) override { context_ = &context; }
  void process(wam::Sample s, wam::Emitter& out) override {
    const double loss = s.tensor("video_latents").to(at::kFloat).mean().item<double>();
    if (!p_.state_file.empty()) std::ofstream(p_.state_file, std::ios::app) << loss << "\n";
    s.set("loss", loss);
    context_->report_scalar("loss", loss);
    out.emit(std::move(s));
  }

 private:
  Params p_;
  wam::Context* context_ = nullptr;
};
WAM_REGISTER_STAGE(MeanStep);

}  // namespace my
