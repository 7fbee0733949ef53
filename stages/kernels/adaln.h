// Fused AdaLN CUDA kernels for the compiled training step: LayerNorm + per-group modulation, and
// the gated residual add, each forward and backward in one pass over the token stream. ATen runs
// them as a LayerNorm, a mixed-dtype addcmul (its non-vectorised casting loop) and, backward,
// four to six passes over float32 temporaries (docs/BENCHMARKS.md, "Fused AdaLN kernels").
// Raw pointers and a stream only: this header is shared by nvcc and the host compiler.
#pragma once

#include <cstdint>

#include "kernels/rms_norm_rope.h"

struct CUstream_st;

namespace wam::kernels {

// Which modulation row each token row reads: rows are B samples of `tokens` rows, each sample's
// tokens in runs of `run` rows sharing one modulation row. Row r reads modulation row
// (r / tokens) * sample_stride + (r % tokens) / run; sample_stride is tokens / run (every sample
// its own rows) or 0 (the rows shared across the batch: a LayerNorm's own weight and bias).
struct ModulationLayout {
  int64_t rows = 0;    // B * tokens
  int64_t width = 0;   // D, the normalised dimension
  int64_t tokens = 0;  // rows per sample
  int64_t run = 0;     // rows per modulation row; divides tokens
  int64_t sample_stride = 0;
  int64_t modulation_rows() const;  // rows of scale / shift / gate
};

// Layouts the kernels take: width a multiple of 4 up to 4096, run dividing tokens, sample_stride
// tokens / run or 0.
bool adaln_supports(const ModulationLayout& layout);

// The backward kernels sum the modulation gradients over blocks of this many rows, which share one
// modulation row (the largest divisor of run up to 16), into per-block partial sums [blocks, D]:
// the caller adds those up in a fixed order, so that a gradient has the same bits on every run
// (atomic adds would not: data-parallel training must equal the plain step bit for bit).
int64_t adaln_backward_rows_per_block(const ModulationLayout& layout);
int64_t adaln_backward_blocks(const ModulationLayout& layout);  // rows / rows per block

// out[r] = (x[r] - mean) * rstd * scale[m(r)] + shift[m(r)], rstd = 1 / sqrt(var + eps), the
// variance biased (as LayerNorm). scale and shift: float [modulation_rows, D]; mean, rstd: float
// [rows], saved for backward.
void layer_norm_modulate_forward(const void* x, Precision x_precision, const float* scale,
                                 const float* shift, void* out, Precision out_precision,
                                 float* mean, float* rstd, const ModulationLayout& layout,
                                 float eps, CUstream_st* stream);

// grad_x (x's precision) from grad_out (out's precision), plus grad_residual (x's precision, [rows,
// D]) where it is not null: the gradient of x's other use (the residual path), added here instead
// of in a pass of its own. Where grad_x_bf16 is not null, grad_x also written there in bfloat16
// ([rows, D]), for the product that made x (docs/KERNELS.md, version 44). Per block of rows the
// sums of grad_out * xhat (scale_partials) and grad_out (shift_partials), float
// [adaln_backward_blocks, D].
void layer_norm_modulate_backward(const void* grad_out, Precision out_precision, const void* x,
                                  Precision x_precision, const float* scale, const float* mean,
                                  const float* rstd, const void* grad_residual, void* grad_x,
                                  void* grad_x_bf16, float* scale_partials, float* shift_partials,
                                  const ModulationLayout& layout, CUstream_st* stream);

// out[r] = residual[r] + (update[r] + bias) * gate[m(r)]; out in the residual's precision. gate:
// float [modulation_rows, D]; bias: float [D], or null for none (the update's producer added its
// own).
void gated_residual_forward(const void* residual, Precision residual_precision, const void* update,
                            Precision update_precision, const float* bias, const float* gate,
                            void* out, const ModulationLayout& layout, CUstream_st* stream);

// grad_update[r] = grad_out[r] * gate[m(r)] (update's precision), and per block of rows the sums
// of grad_out * (update + bias) (gate_partials, float [adaln_backward_blocks, D]). Where bias is
// not null, also the block's sums of grad_out * gate in float (bias_partials, the same shape): the
// bias gradient, with no second pass over grad_update. The residual's gradient is grad_out itself.
void gated_residual_backward(const void* grad_out, Precision residual_precision, const void* update,
                             Precision update_precision, const float* bias, const float* gate,
                             void* grad_update, float* gate_partials, float* bias_partials,
                             const ModulationLayout& layout, CUstream_st* stream);

}  // namespace wam::kernels
