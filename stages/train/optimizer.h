// The optimizer of the training step and its learning-rate schedule: a capturable AdamW, gradient
// clipping, and linear warmup then cosine annealing.
//
// Everything the compiled step must change between replays lives in device tensors (the step
// count, the learning rate), so one captured graph replays a correct update every time.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace wam::train {

// Linear warmup over ceil(warmup_ratio * total_steps) steps to the peak learning rate, then cosine
// annealing to min_lr_ratio * peak at total_steps (the reference's LinearLR + CosineAnnealingLR).
struct LrSchedule {
  double peak = 1e-4;
  double warmup_ratio = 0.05;
  double min_lr_ratio = 0.01;
  int64_t total_steps = 1;

  int64_t warmup_steps() const;
  // The learning rate of optimizer step `step` (1-based: the first step is 1).
  double at(int64_t step) const;
};

// AdamW written with tensor ops on a device-side step count and learning rate, so that a captured
// CUDA graph advances the bias correction and follows the schedule on every replay (the same idea
// as ATen's fused AdamW with a tensor step). Matches torch::optim::AdamW (decoupled weight decay).
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, AdamWOptions options);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Which float32 parameters get a bfloat16 copy, written by each update and read by the compiled
  // step's products through models::weight_in instead of a cast on every forward.
  enum class Bf16Copies {
    kNone,
    kVectors,  // biases and norm scales: 0.1% of the bytes, half of the casts' launches
    kAll,
  };
  // The compiled step's update: our multi-tensor kernel (kernels/adamw.h) instead of ATen's
  // fused AdamW, keeping the `copies` asked for. Only where the build has the fused kernels;
  // elsewhere nothing (the eager step keeps ATen's update, as the reference's).
  void use_own_kernel(Bf16Copies copies);

  // Writes the learning rate of the next step into the device tensor (outside any capture).
  void set_lr(double lr);
  // One update from the parameters' .grad(); capturable (no host synchronisation).
  void step();
  // clip_grad_norm(params(), max_norm) then step(), with the same result; returns the norm before
  // clipping. On CUDA the clipping is the fused update's gradient scale, not a pass of its own over
  // every gradient (it reads and writes 8 bytes a parameter: 8.4 GB at 1.05B parameters).
  at::Tensor clip_and_step(double max_norm);

  int64_t step_count() const;  // reads the device step (synchronises)
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  const at::Tensor& step_tensor() const { return step_; }

 private:
  // One multi-tensor AdamW over every parameter with a gradient, grads divided by grad_scale (a
  // float32 device scalar) when it is defined: ours where the build has the fused kernels and
  // every tensor is float32 and contiguous (it also writes the bfloat16 copies, and does not write
  // the gradients back), else ATen's.
  void fused_step(const at::Tensor& grad_scale);

  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_;
  bool own_kernel_ = false;
  std::vector<at::Tensor> bf16_copies_;  // by parameter; undefined where none is kept
  AdamWOptions options_;
  at::Tensor step_;  // float32 scalar on the parameters' device
  at::Tensor lr_;    // float32 scalar on the parameters' device
};

// The global L2 norm of the parameters' gradients, a float32 device scalar (no host sync).
at::Tensor grad_norm(const std::vector<at::Tensor>& params);

// Scales the gradients in place so that their global L2 norm is at most max_norm; returns the norm
// before clipping as a device scalar. Same result as torch::nn::utils::clip_grad_norm_, without its
// host synchronisation, so it can be captured.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

}  // namespace wam::train
