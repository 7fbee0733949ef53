// A Linear layer over a context whose leading rows carry no gradient (the action expert's
// cross-attention K/V over the cached VLM rows plus the proprio row), as one product each way.
#pragma once

#include <torch/torch.h>

namespace wam::models {

// linear(rows, at::cat(weights), at::cat(biases)): the layers (the K and V projections) as one
// product, where `rows` [B, S + L, in] is constant (no gradient) and its last L rows hold the
// values of `x` [B, L, in], through which the gradient flows. One product forward over all rows (no
// concatenation of two products' outputs); backward, one weight-gradient product over all rows (no
// copy of the gradient's slices), each layer's gradients rows of it, and an input gradient for x's
// L rows only. The casts are explicit: weights and biases are used in rows' dtype, in bfloat16 the
// kept copies read in place where they are one matrix (concatenated_bf16_weights, not a float32
// concatenation cast on every step), and their gradients returned in their own dtypes. Throws
// wam::Error when the shapes do not fit together.
at::Tensor constant_rows_linear(const at::Tensor& x, const at::Tensor& rows, at::TensorList weights,
                                at::TensorList biases);

}  // namespace wam::models
