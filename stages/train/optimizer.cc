#include "train/optimizer.h"

#include <cmath>

#include <torch/version.h>

#include "models/bf16_weights.h"

#if WAM_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/adamw.h"
#endif

namespace wam::train {
namespace {

// Added to the norm before dividing by it, as torch::nn::utils::clip_grad_norm_ does.
constexpr double kClipEpsilon = 1e-6;

}  // namespace

int64_t LrSchedule::warmup_steps() const {
  // The epsilon keeps 0.05 * 100 at 5 despite binary rounding.
  return static_cast<int64_t>(std::ceil(warmup_ratio * static_cast<double>(total_steps) - 1e-9));
}

double LrSchedule::at(int64_t step) const {
  const int64_t warmup = warmup_steps();
  if (step <= warmup) return peak * static_cast<double>(step) / static_cast<double>(warmup);
  const double min_lr = peak * min_lr_ratio;
  const int64_t decay_steps = total_steps - warmup;
  if (decay_steps <= 0) return min_lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay_steps));
  return min_lr + (peak - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  const at::Device device = params_.empty() ? at::Device(at::kCPU) : params_.front().device();
  for (const at::Tensor& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
  const auto scalar = at::TensorOptions().dtype(at::kFloat).device(device);
  step_ = torch::zeros({}, scalar);
  lr_ = torch::zeros({}, scalar);
}

AdamW::~AdamW() {
  for (size_t i = 0; i < bf16_copies_.size(); ++i) {
    if (bf16_copies_[i].defined()) models::drop_bf16_copy(params_[i]);
  }
}

void AdamW::use_own_kernel(Bf16Copies copies) {
#if WAM_FUSED_KERNELS
  own_kernel_ = true;
  if (copies == Bf16Copies::kNone) return;
  // One buffer holds every copy, the matrices first and then the vectors, each in parameter order
  // with no gap where the sizes allow (a multiple of 4 elements keeps the kernel's 8-byte stores
  // aligned): the weights of layers registered one after another (q, k, v) are then one matrix and
  // their biases one vector, which their joint product reads in place
  // (models::concatenated_bf16_weights).
  bf16_copies_.assign(params_.size(), at::Tensor());
  std::vector<int64_t> offsets(params_.size(), -1);
  int64_t total = 0;
  at::TensorOptions options;
  for (const bool matrices : {true, false}) {
    if (matrices && copies == Bf16Copies::kVectors) continue;
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& p = params_[i];
      if (!p.is_cuda() || p.scalar_type() != at::kFloat || p.dim() == 0) continue;
      if ((p.dim() >= 2) != matrices) continue;
      offsets[i] = total;
      total += (p.numel() + 3) / 4 * 4;
      options = p.options().dtype(at::kBFloat16);
    }
  }
  if (total == 0) return;
  const at::Tensor buffer = at::empty({total}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (offsets[i] < 0) continue;
    const at::Tensor& p = params_[i];
    bf16_copies_[i] = buffer.narrow(0, offsets[i], p.numel()).view(p.sizes());
    models::keep_bf16_copy(p, bf16_copies_[i]);
  }
#else
  (void)copies;
#endif
}

void AdamW::set_lr(double lr) { lr_.fill_(lr); }

// ATen's fused AdamW (LibTorch >= 2.0, CUDA): one multi-tensor kernel reads each parameter,
// gradient and moment once, where the per-tensor ops below make about eleven passes; it reads the
// learning rate and step from device tensors, so it stays correct under graph replay.
#if WAM_WITH_CUDA && TORCH_VERSION_MAJOR >= 2
#define WAM_FUSED_ADAMW 1
#endif

#ifdef WAM_FUSED_ADAMW
void AdamW::fused_step(const at::Tensor& grad_scale) {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    params.push_back(params_[i]);
    grads.push_back(params_[i].grad());
    exp_avgs.push_back(exp_avg_[i]);
    exp_avg_sqs.push_back(exp_avg_sq_[i]);
  }
#if WAM_FUSED_KERNELS
  std::vector<kernels::AdamWTensor> tensors;
  auto fits = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat && t.is_contiguous() && t.is_cuda();
  };
  for (size_t i = 0; own_kernel_ && i < params_.size(); ++i) {
    const at::Tensor &p = params_[i], &g = p.grad();
    if (!g.defined()) continue;
    if (!fits(p) || !fits(g) || !fits(exp_avg_[i]) || !fits(exp_avg_sq_[i])) {
      tensors.clear();
      break;
    }
    const bool copied = i < bf16_copies_.size() && bf16_copies_[i].defined();
    tensors.push_back({p.data_ptr<float>(), g.data_ptr<float>(), exp_avg_[i].data_ptr<float>(),
                       exp_avg_sq_[i].data_ptr<float>(),
                       copied ? static_cast<uint16_t*>(bf16_copies_[i].data_ptr()) : nullptr,
                       p.numel()});
  }
  if (!tensors.empty() && tensors.size() == params.size()) {
    const c10::cuda::CUDAGuard guard(step_.device());
    kernels::adamw_step(tensors.data(), static_cast<int64_t>(tensors.size()),
                        {options_.beta1, options_.beta2, options_.eps, options_.weight_decay},
                        lr_.data_ptr<float>(), step_.data_ptr<float>(),
                        grad_scale.defined() ? grad_scale.data_ptr<float>() : nullptr,
                        at::cuda::getCurrentCUDAStream());
    return;
  }
#endif
  // Every parameter shares the one step count.
  const std::vector<at::Tensor> steps(params.size(), step_);
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr_,
                    options_.beta1, options_.beta2, options_.weight_decay, options_.eps,
                    /*amsgrad=*/false, /*maximize=*/false,
                    grad_scale.defined() ? c10::optional<at::Tensor>(grad_scale) : c10::nullopt,
                    /*found_inf=*/c10::nullopt);
  // Inside a captured step too: a replay's forward reads the copies, not the weights.
  for (size_t i = 0; i < bf16_copies_.size(); ++i) {
    if (bf16_copies_[i].defined()) bf16_copies_[i].copy_(params_[i]);
  }
}
#endif

void AdamW::step() {
  torch::NoGradGuard no_grad;
  step_.add_(1);
#ifdef WAM_FUSED_ADAMW
  if (step_.is_cuda()) {
    fused_step(at::Tensor());
    return;
  }
#endif
  const at::Tensor bias_correction1 = 1 - torch::pow(options_.beta1, step_);
  const at::Tensor bias_correction2_sqrt = torch::sqrt(1 - torch::pow(options_.beta2, step_));
  const at::Tensor step_size = lr_ / bias_correction1;
  const at::Tensor decay = 1 - lr_ * options_.weight_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    p.mul_(decay);
    exp_avg_[i].mul_(options_.beta1).add_(grad, 1 - options_.beta1);
    exp_avg_sq_[i].mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
    const at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(options_.eps);
    p.sub_(exp_avg_[i] / denom * step_size);
  }
}

at::Tensor AdamW::clip_and_step(double max_norm) {
#ifdef WAM_FUSED_ADAMW
  if (step_.is_cuda()) {
    torch::NoGradGuard no_grad;
    step_.add_(1);
    const at::Tensor total = grad_norm(params_);
    // Dividing by max(1, norm / max_norm) is clip_grad_norm's multiplication by its coefficient.
    fused_step(torch::clamp_min((total + kClipEpsilon) / max_norm, 1.0).to(at::kFloat));
    return total;
  }
#endif
  const at::Tensor total = clip_grad_norm(params_, max_norm);
  step();
  return total;
}

int64_t AdamW::step_count() const { return static_cast<int64_t>(step_.item<float>()); }

namespace {

std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

// Multi-tensor kernels: a few launches for all gradients instead of one per gradient.
at::Tensor norm_of(const std::vector<at::Tensor>& grads) {
  return torch::stack(at::_foreach_norm(grads, 2)).to(at::kFloat).norm(2);
}

}  // namespace

at::Tensor grad_norm(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> grads = grads_of(params);
  return grads.empty() ? torch::zeros({}) : norm_of(grads);
}

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads = grads_of(params);
  if (grads.empty()) return torch::zeros({});
  const at::Tensor total = norm_of(grads);
  const at::Tensor coefficient = torch::clamp_max(max_norm / (total + kClipEpsilon), 1.0);
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_mul_(grads, coefficient.to(grads.front().scalar_type()));
#else
  for (at::Tensor& grad : grads) grad.mul_(coefficient.to(grad.scalar_type()));
#endif
  return total;
}

}  // namespace wam::train
