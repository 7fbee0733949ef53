// The MoT's linear layers with their bias gradients and GELU carried by the matrix products'
// cuBLASLt epilogues (kernels/epilogue_gemm.h) in the compiled step, instead of a
// reduction or a pointwise pass of their own over the product's output (docs/KERNELS.md,
// version 6). Each op computes the same with ATen's ops where the epilogues do not apply (no
// kernels built, not CUDA, not bfloat16, or no cuBLASLt algorithm for the shape).
#pragma once

#include <torch/torch.h>

namespace wam::models {

// Whether the epilogue products can run for input x: the kernels built, x on CUDA in bfloat16 (as
// the compiled step's autocast makes the MoT's activations).
bool epilogue_linears_apply(const at::Tensor& x);

// x [..., in] as contiguous rows [rows, in]: what a product reads.
at::Tensor linear_rows(const at::Tensor& x);
// sizes with the last replaced: a product's output shape from its input's.
std::vector<int64_t> with_last_size(at::IntArrayRef sizes, int64_t last);

// A linear layer's parameter gradients from its output gradient `grad` [rows, out] and input `x`
// [rows, in] (the same dtype): the weight's [out, in] in `weight_dtype`, the bias's [out] in
// `bias_dtype`; one product with the bias gradient in its epilogue where it applies.
struct LinearGrads {
  at::Tensor weight, bias;
};
LinearGrads linear_param_grads(const at::Tensor& grad, const at::Tensor& x,
                               at::ScalarType weight_dtype, at::ScalarType bias_dtype);

// Layers applied to one input as one product (q/k/v, the cross K/V). Forward: their weights and
// biases as the product's, in `dtype`; in bfloat16 the kept copies read in place where they are
// one matrix (concatenated_bf16_weights, models/bf16_weights.h), else at::cat(...).to(dtype).
// remember_layers stores in an autograd context what backward needs to give each layer its
// gradients: the layers' widths (outputs) and the parameters' dtypes, which remembered_layers
// reads back.
struct JointParams {
  at::Tensor weight, bias;
};
JointParams joint_params_in(at::TensorList weights, at::TensorList biases, at::ScalarType dtype);
struct LayerLayout {
  std::vector<int64_t> widths;
  at::ScalarType weight_dtype = at::kFloat, bias_dtype = at::kFloat;
};
void remember_layers(torch::autograd::AutogradContext* ctx, at::TensorList weights,
                     at::TensorList biases);
LayerLayout remembered_layers(torch::autograd::AutogradContext* ctx);

// at::linear(x, weight, bias) with weight and bias used in x's dtype (the casts autocast makes),
// x [..., in]. Backward: the input gradient, and both parameter gradients from
// linear_param_grads in the parameters' dtypes.
at::Tensor epilogue_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// at::linear(x, weight) with the bias left to the op the output goes to (fused_add_biased_gated,
// models/fused_norm.h), which also sums its gradient: backward gives x's and the weight's
// gradients, none for `bias` (passed so that one layer's parameters stay together).
at::Tensor epilogue_linear_without_bias(const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& bias);

// epilogue_linear_residual's output and, where its dtype is not x's, a gradient channel: a tensor
// of out's shape in x's dtype with no memory behind it (every stride 0). An op that is out's only
// reader, so that the gradient it gives out is the whole of out's, and that can write it in x's
// dtype as well (fused_norm_modulate_and_residual, from its backward kernel, the residual path
// passing through it) takes the channel and gives it that copy as its gradient; the backward then
// skips its own cast of out's gradient (docs/KERNELS.md, version 44). Undefined: no channel.
struct LinearResidual {
  at::Tensor out, grad_channel;
};

// residual + at::linear(x, weight, bias), weight and bias used in x's dtype, the sum in the
// residual's dtype (the compiled step's float32 stream after its cross-attention). Where the
// epilogue product applies (x bfloat16 on CUDA, residual and bias float32, contiguous) one product
// adds the float32 bias and the residual in its epilogue, so the layer's output is never rounded
// to bfloat16 on its own, nor added in a mixed-dtype pass (docs/KERNELS.md, version 17); elsewhere
// ATen's ops. Backward: the residual's gradient is the output's; x's and the parameters' as
// epilogue_linear's, from the output's gradient in x's dtype: the channel's gradient where an op
// gave it one, else out's cast.
LinearResidual epilogue_linear_residual(const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& bias, const at::Tensor& residual);

// Linear layers applied to one input as one product (q, k, v): at::linear(x, at::cat(weights),
// at::cat(biases)) with the parameters used in x's dtype. In bfloat16 the weights come from
// concatenated_bf16_weights (models/bf16_weights.h): their kept copies read in place where they
// are one matrix, instead of a float32 concatenation cast on every forward. Backward: the input
// gradient, and each layer's weight and bias gradients as rows of one linear_param_grads.
at::Tensor epilogue_joint_linear(const at::Tensor& x, at::TensorList weights,
                                 at::TensorList biases);

// Rows of a buffer [B, N, width] that holds several experts' tokens: one expert's, from `first`.
struct TokenRows {
  at::Tensor joint;
  int64_t first = 0;
};

// epilogue_joint_linear with its output [B, N_x, width] written into `rows` (x [B, N_x, in]) where
// the joint buffer is bfloat16 and contiguous and the epilogue product applies: one strided
// batched product, returned as a tensor of its own over the buffer's rows (no autograd view of
// the buffer), so that the buffer holds every expert's rows without a concatenation
// (docs/KERNELS.md, version 45). Elsewhere the output is a tensor of its own and the buffer
// untouched.
at::Tensor epilogue_joint_linear_into(const at::Tensor& x, at::TensorList weights,
                                      at::TensorList biases, const TokenRows& rows);

// x [B, N, W] split along its tokens into parts of `tokens` (summing to N), part e times
// weights[e] [out_e, W] used in x's dtype, with the bias left to the op each output goes to (as
// epilogue_linear_without_bias): the experts' attention output products reading the joint
// attention's output where it is, instead of split_tokens copying each part out and
// concatenating their gradients back (docs/KERNELS.md, version 46). On bfloat16 CUDA each part is
// one strided batched product forward, and one writing its rows of x's gradient backward; the
// weights' gradients (in their dtypes) from a copy of each part's rows. Elsewhere ATen's ops.
// Throws wam::Error where x is not 3-D, the counts do not sum to N, or there is not one weight
// a part.
std::vector<at::Tensor> token_parts_linear_without_bias(const at::Tensor& x,
                                                        const std::vector<int64_t>& tokens,
                                                        at::TensorList weights);

// The FFN: linear(gelu_tanh(linear(x, in_weight, in_bias)), out_weight, out_bias), parameters used
// in x's dtype. Forward, GELU in the first product's epilogue, which keeps the pre-activation for
// backward (what ATen's GELU saves). Backward, GELU's derivative with the first layer's bias
// gradient in one pass (kernels/gelu_backward.h) where it applies, else ATen's derivative; the
// other parameter gradients from linear_param_grads.
at::Tensor epilogue_gelu_mlp(const at::Tensor& x, const at::Tensor& in_weight,
                             const at::Tensor& in_bias, const at::Tensor& out_weight,
                             const at::Tensor& out_bias);

// epilogue_gelu_mlp with the second layer's bias left to the op the output goes to, as
// epilogue_linear_without_bias: no gradient for out_bias here.
at::Tensor epilogue_gelu_mlp_without_out_bias(const at::Tensor& x, const at::Tensor& in_weight,
                                              const at::Tensor& in_bias,
                                              const at::Tensor& out_weight,
                                              const at::Tensor& out_bias);

}  // namespace wam::models
