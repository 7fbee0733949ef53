// The bfloat16 copies of float32 weights that the optimizer writes with each update
// (kernels/adamw.h): the compiled step's products read a weight's copy instead of casting the
// weight on every forward (docs/KERNELS.md, version 9).
#pragma once

#include <torch/torch.h>

namespace wam::models {

// From now on weight_in(weight, bfloat16) answers with `copy` (bfloat16, weight's shape and
// device), which is filled from the weight here; its keeper writes both afterwards.
void keep_bf16_copy(const at::Tensor& weight, const at::Tensor& copy);
// Forgets the weight's copy (its keeper goes).
void drop_bf16_copy(const at::Tensor& weight);

// `weight` in `dtype`: the kept copy for bfloat16 where there is one, refreshed first when the
// weight changed since through ATen (a checkpoint loaded, a broadcast: its version counter moved;
// the optimizer's kernel writes both and moves neither); otherwise weight.to(dtype).
at::Tensor weight_in(const at::Tensor& weight, at::ScalarType dtype);

// Parameters of one shape but the first dimension (linear weights [out_i, in], biases [out_i]) as
// one bfloat16 tensor, the values of at::cat(tensors).to(bfloat16): a view of their kept copies
// where these lie one after another in one buffer (the optimizer keeps them so), else the
// concatenation of each one's weight_in.
at::Tensor concatenated_bf16_weights(at::TensorList tensors);

}  // namespace wam::models
