// The joint attention's output split back into each expert's tokens, as the compiled step wants
// it: each part its own contiguous tensor.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace wam::models {

// x [B, N, W] split along the tokens (dim 1) into parts of `sizes` (summing to N), each a
// contiguous copy. Narrowed views of x would make every product that reads a part copy its rows
// twice (forward, and for the weight gradient) and add the bias in a pass of its own, and would
// send their gradients back as zero-filled [B, N, W] tensors summed together (slice backward);
// here the parts' gradients come back as one concatenation (docs/KERNELS.md, version 12).
// Throws wam::Error when x is not 3-D or the sizes do not sum to N.
std::vector<at::Tensor> split_tokens(const at::Tensor& x, const std::vector<int64_t>& sizes);

}  // namespace wam::models
