// A Linear layer over a context whose leading rows carry no gradient (the action expert's
// cross-attention K/V over the cached VLM rows plus the proprio row), as one product each way.
#pragma once

#include <torch/torch.h>

namespace wam::models {

// linear(rows, weights[i], biases[i]) for each layer (the K and V projections), as one product,
// where `rows` [B, S + L, in] is constant (no gradient) and its last L rows hold the values of `x`
// [B, L, in], through which the gradient flows. Forward: one product over all rows and the
// layers' concatenated weights, each layer's output a view of it (no concatenation of two
// products' outputs). Backward: each layer's weight-gradient product over all rows from its own
// output's gradient (no concatenation of the layers' gradients, nor copy of their slices), and an
// input gradient for x's L rows only. The casts are explicit: weights and biases are used in
// rows' dtype, in bfloat16 the kept copies read in place where they are one matrix
// (joint_params_in), and their gradients returned in their own dtypes. Throws wam::Error when the
// shapes do not fit together.
std::vector<at::Tensor> constant_rows_linear(const at::Tensor& x, const at::Tensor& rows,
                                             at::TensorList weights, at::TensorList biases);

}  // namespace wam::models
