// The MoT's linear layers with FP8 products (TrainStep's `precision: "fp8"`, compiled step):
// inputs and weights cast to E4M3, output gradients to E5M2, each with per-tensor delayed scaling
// (kernels/fp8.h), and all three products of a layer in FP8 (forward, input gradient, weight
// gradient; the bias gradient from the output gradient's cast). The parameters and the optimizer
// stay float32. docs/KERNELS.md, versions 7 and 8, have the recipe and its cost.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include <torch/torch.h>

namespace wam::kernels {
struct Fp8Scaling;
}

namespace wam::models {

// Whether this build has the FP8 products: the fused kernels, built where CUDA is.
bool fp8_linears_built();

// The delayed-scaling state of one linear layer's three FP8 tensors: an amax history each on the
// device, and whether each has been cast yet (its first cast records its own amax first).
class Fp8LinearState {
 public:
  enum Role { kInput = 0, kWeight = 1, kOutputGradient = 2 };

  // steps_done: the optimizer's step count, a float32 device scalar (tags the history).
  explicit Fp8LinearState(at::Tensor steps_done);

  // A matrix's FP8 copy, as it is and transposed (the products take either dimension as K), the
  // scale its products multiply by, and, when asked for, its column sums (float32).
  struct Cast {
    at::Tensor data, transposed, scale_inverse, column_sums;
  };
  // A [rows, cols] matrix (bfloat16 or float32) cast for `role`: E5M2 for the output gradient,
  // E4M3 otherwise.
  Cast cast(Role role, const at::Tensor& matrix, bool column_sums = false);

  // The history of `role`, [kFp8HistoryLength] int64 tagged amaxes (tests read it).
  at::Tensor history(Role role) const { return history_[role]; }

 private:
  // The kernels' view of `role`'s history, made on first use; a first cast records the source's
  // own amax first.
  kernels::Fp8Scaling scaling_for(Role role, const at::Tensor& source,
                                  const at::Tensor& scale_inverse);

  at::Tensor steps_done_;
  at::Tensor history_[3];
  bool cast_before_[3] = {false, false, false};
};

// The model's FP8 linear layers: one state per layer, made at the layer's first product and kept
// for the run (the captured step reads their histories on every replay).
class Fp8Linears {
 public:
  explicit Fp8Linears(at::Tensor steps_done) : steps_done_(std::move(steps_done)) {}

  // The state of the layer whose weight (a parameter: its address is stable) is `weight`.
  Fp8LinearState& state_for(const at::Tensor& weight);

 private:
  at::Tensor steps_done_;
  std::mutex mutex_;  // the forward's thread and autograd's (recomputation) may both ask
  std::map<const void*, std::unique_ptr<Fp8LinearState>> states_;
};

// Whether the FP8 products apply: built, x bfloat16 on CUDA (the compiled step's autocast), and
// x's rows, in and out multiples of 16 (each is K of one of the three FP8 products, which cuBLASLt
// needs in multiples of 16).
bool fp8_linear_applies(const at::Tensor& x, const at::Tensor& weight);

// epilogue_linear (models/epilogue_linear.h) with FP8 products where fp8_linear_applies, the bf16
// epilogue path otherwise.
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      Fp8LinearState& state);

// epilogue_gelu_mlp with FP8 products (GELU in the first product's epilogue where cuBLASLt has
// one for FP8) where both layers apply, the bf16 epilogue path otherwise.
at::Tensor fp8_gelu_mlp(const at::Tensor& x, const at::Tensor& in_weight, const at::Tensor& in_bias,
                        const at::Tensor& out_weight, const at::Tensor& out_bias,
                        Fp8LinearState& in_state, Fp8LinearState& out_state);

}  // namespace wam::models
