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

// dst.copy_(src) for views [B, R, W] of the same sizes and dtype that do not overlap (slices of
// token or feature columns, as the joint attention's v). On CUDA, with each row's W elements
// contiguous and every pitch a multiple of 16 bytes, one vectorised copy kernel at the memory's
// bandwidth, where ATen's strided copy and cudaMemcpy3DAsync run at half of it (docs/KERNELS.md,
// version 31); elsewhere, or for any other layout, dst.copy_(src). Throws wam::Error when the
// sizes or dtypes differ.
void copy_token_rows(const at::Tensor& dst, const at::Tensor& src);

}  // namespace wam::models
