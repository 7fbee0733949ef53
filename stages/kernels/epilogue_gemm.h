// cuBLASLt products with epilogues for the compiled training step's linear layers: the bias
// gradient taken in the weight-gradient product (BGRADB) and GELU(tanh) in the FFN's first
// product with its pre-activation kept (GELU_AUX_BIAS). ATen has no op for these; as separate
// kernels they cost one read of the gradient each (docs/KERNELS.md, version 6). NVIDIA's Apex
// fused_dense calls cuBLASLt the same way. Raw pointers and a stream only: this header is shared by
// nvcc and the host compiler.
//
// Tensors are row-major, bf16 unless a Precision says otherwise. A linear layer's shape: `rows`
// input rows (tokens), `in` features in, `out` features out; its weight is [out, in].
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/rms_norm_rope.h"

struct CUstream_st;

namespace wam::kernels {

struct LinearShape {
  int64_t rows = 0;
  int64_t in = 0;
  int64_t out = 0;
};

// Workspace bytes each product may use (cuBLAS's own default on Hopper).
constexpr size_t kEpilogueGemmWorkspaceBytes = size_t{32} << 20;

// Each function returns false, having written nothing, when cuBLASLt has no algorithm for the
// shape and precisions (e.g. a dimension that is not a multiple of 8): the caller then runs
// ATen's ops. The algorithm is the fastest of cuBLASLt's first few heuristic choices, timed at
// the first call outside a CUDA graph capture and kept per shape, epilogue, precision and device.

// grad_weight [out, in] = grad_out [rows, out]^T x [rows, in], and grad_bias [out] = the column
// sums of grad_out: in the product's BGRADB epilogue or by column_sums after it, whichever was
// faster for the shape at its first call outside a capture. grad_weight and grad_bias in
// `precision` (float32: the parameters' own, no cast pass). grad_bias null: the weight's gradient
// alone.
bool linear_weight_grad_with_bias_grad(const void* grad_out, const void* x,
                                       const LinearShape& shape, void* grad_weight, void* grad_bias,
                                       Precision precision, void* workspace, CUstream_st* stream);

// out [width] = the column sums of grad [rows, width] (bfloat16, 16-byte aligned), in `precision`,
// through float32 partial sums in `workspace` (kEpilogueGemmWorkspaceBytes), added in a fixed
// order: the same bits on every run. The weight-gradient product's alternative to BGRADB, taken
// where faster. False, having written nothing, where width is not a multiple of 8 or the
// partials do not fit the workspace.
bool column_sums(const void* grad, int64_t rows, int64_t width, void* out, Precision precision,
                 void* workspace, CUstream_st* stream);

// out [rows, out] = residual [rows, out] + x [rows, in] weight^T + bias [out], in one product: x
// and weight bfloat16; bias, residual and out float32 (the residual stream's dtype), the sum in
// the epilogue instead of a mixed-dtype add of its own. out must not alias residual.
bool linear_forward_with_residual(const void* x, const void* weight, const float* bias,
                                  const float* residual, const LinearShape& shape, float* out,
                                  void* workspace, CUstream_st* stream);

// Where a product's input or output rows lie: `groups` equal groups of consecutive rows, group g's
// first row g * group_stride elements from the start, rows row_stride elements apart.
struct RowGroups {
  int64_t groups = 1;
  int64_t group_stride = 0;
  int64_t row_stride = 0;
};

// How a product's weight is stored: [out, in] (a linear layer's, forward) or [in, out] (a layer's
// weight where its input gradient is the product: rows of the output's gradient times it).
enum class WeightLayout { kOutIn, kInOut };

// out [rows, out] = x [rows, in] weight (+ bias [out] where not null), all bfloat16, x's and out's
// rows laid out as `x_rows` and `out_rows` say (the same number of groups, dividing shape.rows):
// one strided batched product, one batch a group, the weight the same for every group and the
// bias in its epilogue. The compiled step's q/k/v products write each expert's rows of one buffer
// of both experts' tokens this way, and its attention output products read them in place
// (docs/KERNELS.md, versions 45 and 46).
bool linear_row_groups(const void* x, const RowGroups& x_rows, const void* weight,
                       WeightLayout layout, const void* bias, const LinearShape& shape, void* out,
                       const RowGroups& out_rows, void* workspace, CUstream_st* stream);

// pre_activation [rows, out] = x [rows, in] weight^T + bias [out], and
// activated = gelu_tanh(pre_activation), in one product.
bool linear_gelu_forward(const void* x, const void* weight, const void* bias,
                         const LinearShape& shape, void* activated, void* pre_activation,
                         void* workspace, CUstream_st* stream);

}  // namespace wam::kernels
