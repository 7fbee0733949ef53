// FP8 for the compiled step's linear layers (`precision: "fp8"`, docs/KERNELS.md, version 7):
// casts to E4M3 (activations and weights) and E5M2 (gradients) with per-tensor delayed scaling,
// and the FP8 products through cuBLASLt (Hopper's FP8 tensor cores, twice the bf16 rate). ATen's
// casts would take four passes per tensor (amax, scale, clamp, cast) and have no amax history;
// these take one. Raw pointers and a stream only: this header is shared by nvcc and the host
// compiler.
#pragma once

#include <cstdint>

#include "kernels/rms_norm_rope.h"

struct CUstream_st;

namespace wam::kernels {

enum class Fp8Format {
  kE4M3,  // 4 exponent, 3 mantissa bits, largest 448: activations and weights
  kE5M2,  // 5 exponent, 2 mantissa bits, largest 57344: gradients
};

// Steps of amax kept per tensor: a cast scales by the largest amax of the previous
// kFp8HistoryLength - 1 steps (Transformer Engine's delayed scaling; its default length is 1024,
// shorter here so that a scale follows a shrinking tensor within a few warm-up steps).
constexpr int kFp8HistoryLength = 16;

// Delayed scaling of one tensor, all on the device (captured in the step's CUDA graph, no host
// synchronisation). history[kFp8HistoryLength] holds each step's amax tagged with its step,
// `(tag << 32) | amax's float bits`, in slot tag % kFp8HistoryLength, so that one atomic max
// both records an amax and retires the slot's entry from kFp8HistoryLength steps before. A cast
// during step s (steps_done = s, the optimizer's count) has tag s + 1 and scales by the entries
// tagged s + 2 - kFp8HistoryLength .. s; with none, or only zeros, by 1.
struct Fp8Scaling {
  unsigned long long* history = nullptr;
  const float* steps_done = nullptr;
  float* scale_inverse = nullptr;  // written by the cast: 1 / scale, the product's dequantisation
};

// A row-major [rows, cols] matrix x (in `precision`) cast: out = x * scale rounded to `format`,
// saturated at its largest finite value (NaN stays NaN), scale = the format's largest over the
// largest amax of the previous steps in the history, 1 when none; x's amax recorded under this
// step's tag. Written as it is into out and transposed into out_transposed [cols, rows]: the
// operands of the products that take the other dimension as K (a weight's for the input gradient,
// an input's and an output gradient's for the weight gradient).
// With column_partials given, also the sums of x's columns (before scaling) over each block of
// kFp8TileRows rows, float [fp8_column_partial_rows(rows), cols]: a bias gradient, added up by
// the caller in a fixed order. Returns false, having written nothing, unless rows and cols are
// multiples of 4, x is 16-byte aligned and the outputs 4-byte aligned.
constexpr int64_t kFp8TileRows = 64;
inline int64_t fp8_column_partial_rows(int64_t rows) {
  return (rows + kFp8TileRows - 1) / kFp8TileRows;
}
bool fp8_cast_transposed(const void* x, Precision precision, int64_t rows, int64_t cols,
                         Fp8Format format, const Fp8Scaling& scaling, void* out,
                         void* out_transposed, float* column_partials, CUstream_st* stream);

// Records x's amax under the previous step's tag: a tensor's first cast (a fresh model, or one
// resumed from a checkpoint, which keeps no history) then scales by its own amax instead of 1.
void fp8_record_previous_amax(const void* x, Precision precision, int64_t n,
                              const Fp8Scaling& scaling, CUstream_st* stream);

// One FP8 operand of a product: row-major [rows, k] bytes, with the scale_inverse of its cast.
struct Fp8Operand {
  const void* data = nullptr;
  Fp8Format format = Fp8Format::kE4M3;
  const float* scale_inverse = nullptr;
};

// out [rows, n] (in out_precision) = left [rows, k] right [n, k]^T, each operand multiplied by
// its scale_inverse, + bias [n] (bf16, with a bf16 out) when given. With pre_activation given, out
// is gelu_tanh(pre_activation) and pre_activation the product (cuBLASLt's GELU_AUX_BIAS). At most
// one operand may be E5M2. `fast_accumulation`: Hopper's faster, less exact FP8 accumulation (the
// forward product's, as Transformer Engine uses it). Returns false, having written nothing, when
// cuBLASLt has no algorithm for the shape (k and n must be multiples of 16).
bool fp8_product(const Fp8Operand& left, const Fp8Operand& right, int64_t rows, int64_t k,
                 int64_t n, const void* bias, void* out, Precision out_precision,
                 void* pre_activation, bool fast_accumulation, void* workspace,
                 CUstream_st* stream);

}  // namespace wam::kernels
