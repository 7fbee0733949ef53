// The MoT's fused CUDA kernels with autograd: q/k RMSNorm (and RoPE), LayerNorm with AdaLN
// modulation, and the gated residual add, one kernel each way. TrainStep's compiled mode uses them
// where they apply (the role of the reference's Inductor-compiled layers); eager mode keeps ATen's
// ops, as the reference's baseline does.
#pragma once

#include <torch/torch.h>

#include "models/modulation.h"

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

// The two experts' q/k norm weights (float32 [W] each).
struct QkNormWeights {
  at::Tensor q, k;
};

// The joint attention's inputs, each [B, Nv + Na, W]: video tokens first.
struct JointQkv {
  at::Tensor q, k, v;
};

// Whether fused_joint_qkv takes these fused QKV products [B, Nv, 3W] and [B, Na, 3W]: CUDA,
// rows contiguous (samples may lie further apart), 16-byte aligned, the same dtype (float32 or
// bfloat16), batch and width, and W as fused_rms_norm_rope_applies requires.
bool fused_joint_qkv_applies(const at::Tensor& video_qkv, const at::Tensor& action_qkv,
                             int64_t head_dim);

// The joint attention's q, k, v from the two experts' fused QKV products: q = cat(rope(rms_norm(
// video q) * video.q), rope(rms_norm(action q) * action.q)) along tokens, k the same, v the
// concatenation of the v columns (read in place where the action product's rows follow the
// video's in one buffer, as epilogue_joint_linear_into writes them), as one op whose backward
// writes each expert's q/k/v gradients straight into one gradient of its QKV product (no
// concatenations, docs/KERNELS.md version 5). Rotations as fused_rms_norm_rope's. Only where
// fused_joint_qkv_applies.
JointQkv fused_joint_qkv(const at::Tensor& video_qkv, const at::Tensor& action_qkv,
                         const QkNormWeights& video, const QkNormWeights& action,
                         const at::Tensor& video_rotation, const at::Tensor& action_rotation,
                         int64_t head_dim, double eps);

// Whether fused_norm_modulate takes x [B, N, D] with `layout` and output dtype: CUDA, contiguous,
// 16-byte aligned, float32 or bfloat16 in and out (not bfloat16 in, float32 out), D a multiple of
// 4 up to 4096, N a multiple of layout.groups, and the kernels built. TokenGroups{} for
// fused_layer_norm.
bool fused_norm_modulate_applies(const at::Tensor& x, const TokenGroups& layout,
                                 at::ScalarType dtype);

// modulate_as(layer_norm(x), shift, scale, layout, dtype) in one kernel forward and one backward:
// LayerNorm without affine, then each segment row's (1 + scale) and shift. Where
// fused_norm_modulate_applies.
at::Tensor fused_norm_modulate(const at::Tensor& x, const at::Tensor& shift,
                               const at::Tensor& scale, const TokenGroups& layout,
                               at::ScalarType dtype, double eps);

// A norm's output, and x to read as the residual after it: x itself, through the norm as a second
// output, so that the gradients of x's two uses meet in the norm's backward kernel instead of in a
// pass of autograd's over the residual stream (docs/KERNELS.md, version 14).
struct NormedAndResidual {
  at::Tensor normed, residual;
};

// fused_norm_modulate, with x as the residual (NormedAndResidual). grad_channel: where x is
// epilogue_linear_residual's output, its LinearResidual::grad_channel, to which the backward
// kernel gives x's gradient in bfloat16 as it writes the float32 one (x float32, the channel
// bfloat16 of x's shape; otherwise, or undefined, it is not taken).
NormedAndResidual fused_norm_modulate_and_residual(const at::Tensor& x, const at::Tensor& shift,
                                                   const at::Tensor& scale,
                                                   const TokenGroups& layout, at::ScalarType dtype,
                                                   double eps,
                                                   const at::Tensor& grad_channel = at::Tensor());

// layer_norm(x, weight, bias) (weight, bias float32 [D]) written in dtype, one kernel each way.
// Where fused_norm_modulate_applies(x, {}, dtype).
at::Tensor fused_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            at::ScalarType dtype, double eps);

// fused_layer_norm, with x as the residual (NormedAndResidual).
NormedAndResidual fused_layer_norm_and_residual(const at::Tensor& x, const at::Tensor& weight,
                                                const at::Tensor& bias, at::ScalarType dtype,
                                                double eps);

// Whether fused_add_gated takes these: both as fused_norm_modulate_applies requires of x, the same
// shape, the update not wider than the residual.
bool fused_add_gated_applies(const at::Tensor& residual, const at::Tensor& update,
                             const TokenGroups& layout);

// add_gated(residual, update, gate, layout) in one kernel each way, the result in the residual's
// dtype. Where fused_add_gated_applies.
at::Tensor fused_add_gated(const at::Tensor& residual, const at::Tensor& update,
                           const at::Tensor& gate, const TokenGroups& layout);

// Whether fused_add_biased_gated takes these: as fused_add_gated_applies, and bias float [D].
bool fused_add_biased_gated_applies(const at::Tensor& residual, const at::Tensor& update,
                                    const at::Tensor& bias, const TokenGroups& layout);

// residual + (update + bias) * gate per group in one kernel each way: the update's producer (a
// linear layer without its bias) leaves the bias to this kernel, whose backward sums the bias
// gradient as it writes the update's, instead of the weight-gradient product reading that
// gradient again (docs/KERNELS.md, version 24). Where fused_add_biased_gated_applies.
at::Tensor fused_add_biased_gated(const at::Tensor& residual, const at::Tensor& update,
                                  const at::Tensor& bias, const at::Tensor& gate,
                                  const TokenGroups& layout);

}  // namespace wam::models
