// The MoT's q/k RMSNorm (and RoPE) as one fused CUDA kernel each way, with autograd. TrainStep's
// compiled mode uses it where it applies (the role of the reference's Inductor-compiled layers);
// eager mode keeps ATen's ops, as the reference's baseline does.
#pragma once

#include <torch/torch.h>

namespace wam::models {

// Whether this build has the kernels (a CUDA compiler was found when it was configured).
bool fused_kernels_built();

// Whether this build has the kernels (a CUDA compiler was found) and they take x [B, N, W]: CUDA,
// float32 or bfloat16, unit stride in W, rows evenly strided, W within the kernels' limit.
bool fused_rms_norm_rope_applies(const at::Tensor& x, int64_t head_dim);

// rope(rms_norm(x) * weight) over the last dim of x [B, N, W], with `rotation` [N, head_dim / 2]
// complex64 (undefined: RMSNorm alone). weight: float32 [W]. Returns a contiguous tensor of x's
// dtype; gradients flow to x and weight. Only where fused_rms_norm_rope_applies.
at::Tensor fused_rms_norm_rope(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& rotation, int64_t head_dim, double eps);

}  // namespace wam::models
