// The README's custom-stage example, built as its own binary (wam-custom-example) so the example
// is known to compile and register. Keep the two in sync.
#include <wam/registry.h>
#include <wam/tensor.h>

namespace my {

struct BrightnessParams {
  double gain = 1.1;
  std::string field = "video";
  template <class V>
  void visit(V& v) {
    v("gain", gain, "Multiplier applied to the video.", wam::Min{0.0}, wam::Max{4.0});
    v("field", field, "Tensor field to scale.", wam::NonEmpty{});
  }
};

class BrightnessStage final : public wam::Stage {
 public:
  static constexpr std::string_view kType = "Brightness";
  static constexpr std::string_view kSummary = "Scales a video tensor by a constant gain.";
  using Params = BrightnessParams;
  explicit BrightnessStage(Params p) : p_(std::move(p)) {}

  void declare(wam::Contract& c) const override {
    c.reads(p_.field, wam::FieldType::kTensor);
    c.writes(p_.field, wam::FieldType::kTensor);
    c.concurrency(wam::Concurrency::unlimited());  // pure: safe to run in parallel
  }
  void process(wam::Sample s, wam::Emitter& out) override {
    s.set_tensor(p_.field, (s.tensor(p_.field) * p_.gain).clamp(-1, 1));  // a new tensor
    out.emit(std::move(s));
  }

 private:
  Params p_;
};
WAM_REGISTER_STAGE(BrightnessStage);

}  // namespace my
