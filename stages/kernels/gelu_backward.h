// The FFN's GELU(tanh) derivative with the first product's bias gradient in the same pass, for the
// compiled training step. ATen's gelu_backward writes the gradient, then cuBLASLt's BGRADB reads
// all of it again in a kernel of its own (globalKernelBgradAB: 113 MB a layer at the base preset),
// and its DGELU_BGRAD epilogue ran slower still (docs/KERNELS.md, versions 6 and 16). Raw pointers
// and a stream only: this header is shared by nvcc and the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

// Shapes the kernel takes: width a multiple of 8 (one 16-byte load of bfloat16 a thread and row),
// at least one row.
bool gelu_backward_supports(int64_t rows, int64_t width);

// The kernel sums each column over blocks of this many rows into partial sums [blocks, width]
// (float32); the caller adds those up in a fixed order, so that the bias gradient has the same
// bits on every run.
int64_t gelu_backward_blocks(int64_t rows);

// grad_pre [rows, width] = grad_activated * gelu_tanh'(pre_activation), bfloat16, computed in
// float32 as ATen's gelu_backward(approximate="tanh") computes it; partials [blocks, width] the
// column sums of grad_pre (its bfloat16 values) over each block's rows. All pointers 16-byte
// aligned, rows contiguous.
void gelu_backward_with_column_sums(const void* grad_activated, const void* pre_activation,
                                    int64_t rows, int64_t width, void* grad_pre, float* partials,
                                    CUstream_st* stream);

}  // namespace wam::kernels
