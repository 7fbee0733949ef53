// Hand-written because no library linked here fuses LayerNorm with a per-group modulation and a
// narrowing store, or a gated residual add with its reduction (ATen runs each as several kernels;
// Inductor, which fuses them for the reference, is Python-only).
#include "kernels/adaln.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <type_traits>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads =
    256;  // a block of the gated residual's kernels, and of the norms' wide rows
constexpr int kMaxChunks = 4;  // 4-element chunks per thread: rows of up to 4096
constexpr int64_t kMaxWidth = int64_t{kThreads} * kMaxChunks * 4;
// The norm kernels' block for rows of up to 2048: 128 threads, 3 chunks each at the video
// stream's 1536, took the backward from 104 to 86 us and the forward from 40 to 37 us a call on
// an H100; 256 threads leave half the block idle for a row's second chunk, and 384 or 192 were
// slower (scripts/kernel-bytes.cu, docs/KERNELS.md version 27). The gated residual's kernels,
// which have no row reduction, were slower with 128.
constexpr int kNarrowBlock = 128;
// Rows per block in the backward kernels at most (adaln_backward_rows_per_block): each block
// writes one partial sum per column for them.
constexpr int64_t kBackwardRows = 16;

__device__ __forceinline__ int64_t modulation_row(int64_t row, const ModulationLayout& layout) {
  return (row / layout.tokens) * layout.sample_stride + (row % layout.tokens) / layout.run;
}

// One row per block: the row is held in registers between the mean, the variance and the store.
template <class TX, class TO, int kBlock, int kChunks>
__global__ void __launch_bounds__(kBlock)
    layer_norm_modulate_forward_kernel(const TX* x, const float* scale, const float* shift, TO* out,
                                       float* mean_out, float* rstd_out, ModulationLayout layout,
                                       float eps) {
  __shared__ float scratch[kBlock / 32];
  const int64_t row = blockIdx.x;
  const int chunks = static_cast<int>(layout.width / 4);
  const float width = static_cast<float>(layout.width);
  const TX* in = x + row * layout.width;
  float4 v[kChunks];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < chunks) {
      v[k] = load4(in + 4 * c);
      sum += sum4(v[k]);
    }
  }
  const float mean = block_sum<kBlock>(sum, scratch) / width;
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    if (c < chunks) {
      const float4 d = make_float4(v[k].x - mean, v[k].y - mean, v[k].z - mean, v[k].w - mean);
      squares += sum4(d * d);
    }
  }
  const float rstd = rsqrtf(block_sum<kBlock>(squares, scratch) / width + eps);
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  const int64_t m = modulation_row(row, layout) * layout.width;
  TO* o = out + row * layout.width;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    if (c >= chunks) continue;
    const float4 h = make_float4((v[k].x - mean) * rstd, (v[k].y - mean) * rstd,
                                 (v[k].z - mean) * rstd, (v[k].w - mean) * rstd);
    store4(o + 4 * c, fma4(h, load4(scale + m + 4 * c), load4(shift + m + 4 * c)));
  }
}

// Per row: xhat = (x - mean) * rstd, g = grad_out * scale, grad_x = rstd * (g - mean(g) - xhat *
// mean(g * xhat)); the block's sums of grad_out * xhat and grad_out over its rows (which share
// one modulation row) are written as its partials. kChunks: 4-element chunks per thread (the row
// width in registers, no more: occupancy). The next row's inputs are loaded before this row's
// block reduction, so that their latency overlaps it (one row after another with nothing in
// flight ran at a third of the memory bandwidth, docs/KERNELS.md).
template <class TX, class TO, int kBlock, int kChunks>
__global__ void __launch_bounds__(kBlock)
    layer_norm_modulate_backward_kernel(const TO* grad_out, const TX* x, const float* scale,
                                        const float* mean, const float* rstd,
                                        const TX* grad_residual, TX* grad_x,
                                        __nv_bfloat16* grad_x_bf16, float* scale_partials,
                                        float* shift_partials, ModulationLayout layout,
                                        int64_t rows_per_block) {
  __shared__ float2 scratch[kBlock / 32];
  const int chunks = static_cast<int>(layout.width / 4);
  const float width = static_cast<float>(layout.width);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 scale_sum[kChunks], shift_sum[kChunks], x_next[kChunks], grad_next[kChunks];
  const auto load_row = [&](int64_t row) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = threadIdx.x + k * kBlock;
      x_next[k] = grad_next[k] = zero;
      if (c >= chunks) continue;
      x_next[k] = load4(x + row * layout.width + 4 * c);
      grad_next[k] = load4(grad_out + row * layout.width + 4 * c);
    }
  };
#pragma unroll
  for (int k = 0; k < kChunks; ++k) scale_sum[k] = shift_sum[k] = zero;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t last = first + rows_per_block;
  const float* scale_row = scale + modulation_row(first, layout) * layout.width;
  load_row(first);
  for (int64_t row = first; row < last; ++row) {
    float4 h[kChunks], g[kChunks];
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      h[k] = x_next[k];
      g[k] = grad_next[k];
    }
    const float mu = mean[row], r = rstd[row];
    if (row + 1 < last) load_row(row + 1);
    float2 sums = make_float2(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = threadIdx.x + k * kBlock;
      if (c >= chunks) continue;
      const float4 go = g[k];
      h[k] =
          make_float4((h[k].x - mu) * r, (h[k].y - mu) * r, (h[k].z - mu) * r, (h[k].w - mu) * r);
      g[k] = go * load4(scale_row + 4 * c);
      shift_sum[k] = shift_sum[k] + go;
      scale_sum[k] = fma4(go, h[k], scale_sum[k]);
      sums.x += sum4(g[k]);
      sums.y += sum4(g[k] * h[k]);
    }
    const float2 totals = block_sum<kBlock>(sums, scratch);
    const float mean_g = totals.x / width, mean_gh = totals.y / width;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = threadIdx.x + k * kBlock;
      if (c >= chunks) continue;
      float4 d = make_float4(
          r * (g[k].x - mean_g - h[k].x * mean_gh), r * (g[k].y - mean_g - h[k].y * mean_gh),
          r * (g[k].z - mean_g - h[k].z * mean_gh), r * (g[k].w - mean_g - h[k].w * mean_gh));
      if (grad_residual != nullptr) d = d + load4(grad_residual + row * layout.width + 4 * c);
      store4(grad_x + row * layout.width + 4 * c, d);
      if (grad_x_bf16 != nullptr) store4(grad_x_bf16 + row * layout.width + 4 * c, d);
    }
  }
  const int64_t partial = static_cast<int64_t>(blockIdx.x) * layout.width;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    if (c >= chunks) continue;
    store4(scale_partials + partial + 4 * c, scale_sum[k]);
    store4(shift_partials + partial + 4 * c, shift_sum[k]);
  }
}

__device__ __forceinline__ float4 bias_at(const float* bias, int c) {
  return bias != nullptr ? load4(bias + 4 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
}

// One row per block (rows never cross modulation rows inside a block).
template <class TR, class TU>
__global__ void __launch_bounds__(kThreads)
    gated_residual_forward_kernel(const TR* residual, const TU* update, const float* bias,
                                  const float* gate, TR* out, ModulationLayout layout) {
  const int64_t row = blockIdx.x;
  const int chunks = static_cast<int>(layout.width / 4);
  const int64_t m = modulation_row(row, layout) * layout.width;
  const int64_t base = row * layout.width;
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c >= chunks) continue;
    store4(out + base + 4 * c, fma4(load4(update + base + 4 * c) + bias_at(bias, c),
                                    load4(gate + m + 4 * c), load4(residual + base + 4 * c)));
  }
}

// grad_update = grad_out * gate per row; the block's sums of grad_out * (update + bias), and
// where there is a bias of grad_out * gate, over its rows (which share one modulation row) are
// written as its partials. kChunks: 4-element chunks per thread, so that the sums take no more
// registers than the row needs: with them for 4 chunks at any width, the bias's sums took the
// kernel to 72 registers, 3 blocks an SM, and the video stream's 576 blocks to a second wave on
// an H100's 132 SMs (docs/KERNELS.md, version 26). The gate row and the bias are read again for
// each row, from L1.
template <class TR, class TU, int kChunks>
__global__ void __launch_bounds__(kThreads)
    gated_residual_backward_kernel(const TR* grad_out, const TU* update, const float* bias,
                                   const float* gate, TU* grad_update, float* gate_partials,
                                   float* bias_partials, ModulationLayout layout,
                                   int64_t rows_per_block) {
  const int chunks = static_cast<int>(layout.width / 4);
  float4 gate_sum[kChunks], bias_sum[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) gate_sum[k] = bias_sum[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const float* gate_row = gate + modulation_row(first, layout) * layout.width;
  for (int64_t row = first; row < first + rows_per_block; ++row) {
    const int64_t base = row * layout.width;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = threadIdx.x + k * kThreads;
      if (c >= chunks) continue;
      const float4 go = load4(grad_out + base + 4 * c);
      const float4 u = load4(update + base + 4 * c) + bias_at(bias, c);
      const float4 gu = go * load4(gate_row + 4 * c);
      store4(grad_update + base + 4 * c, gu);
      gate_sum[k] = fma4(go, u, gate_sum[k]);
      bias_sum[k] = bias_sum[k] + gu;
    }
  }
  const int64_t partial = static_cast<int64_t>(blockIdx.x) * layout.width;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c >= chunks) continue;
    store4(gate_partials + partial + 4 * c, gate_sum[k]);
    if (bias_partials != nullptr) store4(bias_partials + partial + 4 * c, bias_sum[k]);
  }
}

// Calls f with std::integral_constant<int, B> and std::integral_constant<int, N>: the norm
// kernels' block size for a row of `width` and the 4-element chunks per thread it then needs.
template <class F>
void with_norm_block(int64_t width, F&& f) {
  using Narrow = std::integral_constant<int, kNarrowBlock>;
  using Wide = std::integral_constant<int, kThreads>;
  switch ((width / 4 + kNarrowBlock - 1) / kNarrowBlock) {
    case 1: f(Narrow(), std::integral_constant<int, 1>()); break;
    case 2: f(Narrow(), std::integral_constant<int, 2>()); break;
    case 3: f(Narrow(), std::integral_constant<int, 3>()); break;
    case 4: f(Narrow(), std::integral_constant<int, 4>()); break;
    default:
      if ((width / 4 + kThreads - 1) / kThreads <= 3) {
        f(Wide(), std::integral_constant<int, 3>());
      } else {
        f(Wide(), std::integral_constant<int, kMaxChunks>());
      }
      break;
  }
}

// Calls f with std::integral_constant<int, N>, N the 4-element chunks per thread of kThreads a
// row needs.
template <class F>
void with_chunks(int64_t width, F&& f) {
  switch ((width / 4 + kThreads - 1) / kThreads) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    default: f(std::integral_constant<int, kMaxChunks>()); break;
  }
}

unsigned backward_blocks(const ModulationLayout& layout) {
  return static_cast<unsigned>(adaln_backward_blocks(layout));
}

// Calls f with a null pointer of the element type of each precision: f(TX*, TY*).
template <class F>
void dispatch(Precision a, Precision b, F&& f) {
  if (a == Precision::kFloat32 && b == Precision::kFloat32) {
    f(static_cast<float*>(nullptr), static_cast<float*>(nullptr));
  } else if (a == Precision::kFloat32 && b == Precision::kBFloat16) {
    f(static_cast<float*>(nullptr), static_cast<__nv_bfloat16*>(nullptr));
  } else if (a == Precision::kBFloat16 && b == Precision::kBFloat16) {
    f(static_cast<__nv_bfloat16*>(nullptr), static_cast<__nv_bfloat16*>(nullptr));
  } else {
    throw std::runtime_error("adaln kernels: a bfloat16 input with a float32 output or update");
  }
}

}  // namespace

int64_t ModulationLayout::modulation_rows() const {
  const int64_t per_sample = tokens / run;
  return sample_stride == 0 ? per_sample : (rows / tokens) * sample_stride;
}

bool adaln_supports(const ModulationLayout& layout) {
  return layout.width > 0 && layout.width % 4 == 0 && layout.width <= kMaxWidth &&
         layout.tokens > 0 && layout.run > 0 && layout.tokens % layout.run == 0 &&
         layout.rows % layout.tokens == 0 &&
         (layout.sample_stride == 0 || layout.sample_stride == layout.tokens / layout.run);
}

int64_t adaln_backward_rows_per_block(const ModulationLayout& layout) {
  int64_t rows = kBackwardRows;
  while (layout.run % rows != 0) --rows;
  return rows;
}

int64_t adaln_backward_blocks(const ModulationLayout& layout) {
  return layout.rows / adaln_backward_rows_per_block(layout);
}

void layer_norm_modulate_forward(const void* x, Precision x_precision, const float* scale,
                                 const float* shift, void* out, Precision out_precision,
                                 float* mean, float* rstd, const ModulationLayout& layout,
                                 float eps, CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(x_precision, out_precision, [&](auto* tx, auto* to) {
    using TX = std::remove_pointer_t<decltype(tx)>;
    using TO = std::remove_pointer_t<decltype(to)>;
    with_norm_block(layout.width, [&](auto block, auto chunks) {
      layer_norm_modulate_forward_kernel<TX, TO, decltype(block)::value, decltype(chunks)::value>
          <<<static_cast<unsigned>(layout.rows), decltype(block)::value, 0, stream>>>(
              static_cast<const TX*>(x), scale, shift, static_cast<TO*>(out), mean, rstd, layout,
              eps);
    });
  });
  check_launch("layer_norm_modulate_forward");
}

void layer_norm_modulate_backward(const void* grad_out, Precision out_precision, const void* x,
                                  Precision x_precision, const float* scale, const float* mean,
                                  const float* rstd, const void* grad_residual, void* grad_x,
                                  void* grad_x_bf16, float* scale_partials, float* shift_partials,
                                  const ModulationLayout& layout, CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(x_precision, out_precision, [&](auto* tx, auto* to) {
    using TX = std::remove_pointer_t<decltype(tx)>;
    using TO = std::remove_pointer_t<decltype(to)>;
    with_norm_block(layout.width, [&](auto block, auto chunks) {
      layer_norm_modulate_backward_kernel<TX, TO, decltype(block)::value, decltype(chunks)::value>
          <<<backward_blocks(layout), decltype(block)::value, 0, stream>>>(
              static_cast<const TO*>(grad_out), static_cast<const TX*>(x), scale, mean, rstd,
              static_cast<const TX*>(grad_residual), static_cast<TX*>(grad_x),
              static_cast<__nv_bfloat16*>(grad_x_bf16), scale_partials, shift_partials, layout,
              adaln_backward_rows_per_block(layout));
    });
  });
  check_launch("layer_norm_modulate_backward");
}

void gated_residual_forward(const void* residual, Precision residual_precision, const void* update,
                            Precision update_precision, const float* bias, const float* gate,
                            void* out, const ModulationLayout& layout, CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(residual_precision, update_precision, [&](auto* tr, auto* tu) {
    using TR = std::remove_pointer_t<decltype(tr)>;
    using TU = std::remove_pointer_t<decltype(tu)>;
    gated_residual_forward_kernel<<<static_cast<unsigned>(layout.rows), kThreads, 0, stream>>>(
        static_cast<const TR*>(residual), static_cast<const TU*>(update), bias, gate,
        static_cast<TR*>(out), layout);
  });
  check_launch("gated_residual_forward");
}

void gated_residual_backward(const void* grad_out, Precision residual_precision, const void* update,
                             Precision update_precision, const float* bias, const float* gate,
                             void* grad_update, float* gate_partials, float* bias_partials,
                             const ModulationLayout& layout, CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(residual_precision, update_precision, [&](auto* tr, auto* tu) {
    using TR = std::remove_pointer_t<decltype(tr)>;
    using TU = std::remove_pointer_t<decltype(tu)>;
    with_chunks(layout.width, [&](auto chunks) {
      gated_residual_backward_kernel<TR, TU, decltype(chunks)::value>
          <<<backward_blocks(layout), kThreads, 0, stream>>>(
              static_cast<const TR*>(grad_out), static_cast<const TU*>(update), bias, gate,
              static_cast<TU*>(grad_update), gate_partials, bias_partials, layout,
              adaln_backward_rows_per_block(layout));
    });
  });
  check_launch("gated_residual_backward");
}

}  // namespace wam::kernels
