// A Linear layer over a context whose leading rows carry no gradient (the action expert's
// cross-attention K/V over the cached VLM rows plus the proprio row), as one product each way.
#pragma once

#include <torch/torch.h>

namespace wam::models {

// linear(rows, weight, bias), where `rows` [B, S + L, in] is constant (no gradient) and its last L
// rows hold the values of `x` [B, L, in], through which the gradient flows. One product forward
// over all rows (no concatenation of two products' outputs); backward, one weight-gradient product
// over all rows (no copy of the gradient's slices) and an input gradient for x's L rows only. The
// casts are explicit: weight and bias are used in rows' dtype, their gradients returned in theirs.
// Throws wam::Error when the shapes do not fit together.
at::Tensor constant_rows_linear(const at::Tensor& x, const at::Tensor& rows,
                                const at::Tensor& weight, const at::Tensor& bias);

}  // namespace wam::models
