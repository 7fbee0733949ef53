// AdamW over the float32 parameters of the compiled step in one pass per element, writing each
// updated parameter's bfloat16 copy beside it: the products of the next step read that copy
// instead of casting every weight again (docs/KERNELS.md, version 9). ATen's fused AdamW cannot
// write the copy, and it writes the unscaled gradients back, which nothing reads. Raw pointers
// and a stream only: this header is shared by nvcc and the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

// One parameter's float32 tensors, numel elements each, contiguous; bf16_copy may be null.
struct AdamWTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  uint16_t* bf16_copy = nullptr;  // bfloat16 bits, round to nearest even
  int64_t numel = 0;
};

struct AdamWHyper {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// One AdamW step (decoupled weight decay, as torch.optim.AdamW and ATen's fused kernel) over
// `count` tensors: the learning rate and the step count (already incremented) are read from
// device floats, so the launches replay correctly in a CUDA graph; with grad_scale given, each
// gradient is divided by *grad_scale first (gradient-norm clipping). The gradients are only read.
void adamw_step(const AdamWTensor* tensors, int64_t count, const AdamWHyper& hyper, const float* lr,
                const float* step, const float* grad_scale, CUstream_st* stream);

}  // namespace wam::kernels
