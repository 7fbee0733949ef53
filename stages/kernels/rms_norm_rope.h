// Fused RMSNorm (+ RoPE) CUDA kernels for the compiled training step: the per-head q/k norms of the
// MoT read their input once and write bf16 once, where the ATen ops make about ten passes forward
// and twenty backward over fp32 copies (the fusion Inductor gives the reference's compile path).
// Raw pointers and a stream only: this header is shared by nvcc and the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

enum class Precision { kFloat32, kBFloat16 };  // of x, out, grad_out and grad_x

struct RmsNormRopeShape {
  int64_t rows = 0;          // B * N
  int64_t width = 0;         // H * head_dim, normalised as one vector (the MoT's q/k norm)
  int64_t head_dim = 0;      // RoPE pairs (2i, 2i+1) within each head
  int64_t tokens = 0;        // N: row r is token r % N, whose rotation row it reads
  int64_t x_row_stride = 0;  // elements between rows of x (a column slice of a fused QKV output)
  // Elements between samples of x: tokens * x_row_stride where x's rows are evenly strided, more
  // where each expert's QKV rows lie in one joint buffer of both experts' (docs/KERNELS.md,
  // version 45).
  int64_t x_sample_stride = 0;
  // Where out (and grad_out) rows lie: row r, token n = r % tokens of sample r / tokens, at
  // (r / tokens) * out_sample_stride + n * out_row_stride, so that the two experts' q (or k) are
  // written into one joint tensor without a concatenation (docs/KERNELS.md, version 5).
  int64_t out_row_stride = 0;
  int64_t out_sample_stride = 0;
  int64_t grad_x_row_stride = 0;  // elements between rows of grad_x (a column slice too)
};

// Rows the kernels can take: width and head_dim multiples of 4, width up to 4096, every stride a
// multiple of 4 elements. The kernels load 4 elements at once: x, out, grad_out and grad_x must be
// aligned to 4 elements, weight and rotation to 16 bytes.
bool rms_norm_rope_supports(const RmsNormRopeShape& shape);

// out[r] = rope(x[r] * rstd[r] * weight), rstd[r] = 1 / sqrt(mean(x[r]^2) + eps). `rotation`:
// [tokens, head_dim / 2] (cos, sin) float pairs, or null for a plain RMSNorm. out laid out as the
// shape's out strides say.
void rms_norm_rope_forward(const void* x, const float* weight, const float* rotation, void* out,
                           float* rstd, const RmsNormRopeShape& shape, float eps,
                           Precision precision, CUstream_st* stream);

// Blocks of the backward kernel: each writes the sum of dz * xhat over its rows as one partial row
// of grad_weight; the caller adds those up in a fixed order, so that the gradient has the same bits
// on every run (atomic adds would not).
int64_t rms_norm_rope_backward_blocks(const RmsNormRopeShape& shape);

// grad_x (rows grad_x_row_stride apart) from grad_out (laid out as out), with the rstd the forward
// saved, and the partial
// sums of grad_weight, float [rms_norm_rope_backward_blocks, width].
void rms_norm_rope_backward(const void* grad_out, const void* x, const float* weight,
                            const float* rotation, const float* rstd, void* grad_x,
                            float* grad_weight_partials, const RmsNormRopeShape& shape,
                            Precision precision, CUstream_st* stream);

}  // namespace wam::kernels
