// Hand-written because the LibTorch C++ API lacks torch.utils.checkpoint: a custom autograd
// Function whose forward runs without a graph and whose backward recomputes with one.
#include "models/activation_checkpoint.h"

#include <utility>

#if WAM_WITH_CUDA
#include <ATen/autocast_mode.h>
#endif

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#if WAM_WITH_CUDA
// CUDA autocast as the forward saw it. Backward runs on autograd's device thread, where the
// forward's (thread-local) autocast is not set; the recomputation re-applies it so that it sees the
// dtypes of the first pass, as torch.utils.checkpoint does.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
  bool cache = true;

  static AutocastState current() {
    return {at::autocast::is_autocast_enabled(at::kCUDA),
            at::autocast::get_autocast_dtype(at::kCUDA), at::autocast::is_autocast_cache_enabled()};
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCUDA, enabled);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_cache_enabled(cache);
  }
};

// Sets `state` for the scope, then restores the thread's own. Cached weight casts are dropped on
// the way out (like torch.autocast's exit): the optimizer updates the weights in place, so a cast
// kept on this thread would be stale at the next step.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state)
      : previous_(AutocastState::current()), nested_(state.enabled) {
    state.apply();
    if (nested_) at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }

 private:
  AutocastState previous_;
  bool nested_;
};
#endif

// Carries the recompute function (and the forward's autocast) from forward to backward through
// ctx->saved_data.
struct RecomputedFnHolder : torch::CustomClassHolder {
  explicit RecomputedFnHolder(RecomputedFn f) : fn(std::move(f)) {}
  RecomputedFn fn;
#if WAM_WITH_CUDA
  AutocastState autocast = AutocastState::current();
#endif
};

class ActivationCheckpointFunction
    : public torch::autograd::Function<ActivationCheckpointFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, RecomputedFn fn) {
    ctx->save_for_backward(inputs.vec());
    auto holder = c10::make_intrusive<RecomputedFnHolder>(std::move(fn));
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    // Function::apply already disables grad here; the guard states the point of the exercise.
    torch::NoGradGuard no_grad;
    return holder->fn(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto holder =
        c10::static_intrusive_pointer_cast<RecomputedFnHolder>(ctx->saved_data["fn"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    variable_list detached;
    detached.reserve(saved.size());
    for (const at::Tensor& input : saved) {
      detached.push_back(input.detach().requires_grad_(input.requires_grad()));
    }
    variable_list outputs;
    {
      torch::AutoGradMode grad_on(true);
#if WAM_WITH_CUDA
      AutocastScope autocast(holder->autocast);
#endif
      outputs = holder->fn(detached);
    }
    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grad_outputs[i]);
      }
    }
    // A nested backward: the detached inputs are leaves, so their .grad is the input gradient;
    // parameters used by fn accumulate their .grad as in any backward.
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list input_grads;
    input_grads.reserve(detached.size() + 1);
    for (const at::Tensor& input : detached) {
      input_grads.push_back(input.requires_grad() ? input.grad() : at::Tensor());
    }
    input_grads.push_back(at::Tensor());  // fn
    return input_grads;
  }
};

}  // namespace

variable_list activation_checkpoint(const RecomputedFn& fn, const variable_list& inputs) {
  // As a TensorList: Function::apply counts only Tensor, optional<Tensor> and TensorList arguments
  // as autograd inputs; a std::vector<Tensor> would be taken for a constant, leaving the outputs
  // without a grad_fn and every parameter before or inside the group without a gradient.
  return ActivationCheckpointFunction::apply(at::TensorList(inputs), fn);
}

}  // namespace wam::models
