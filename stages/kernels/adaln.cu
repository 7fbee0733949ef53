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

constexpr int kThreads = 256;
constexpr int kMaxChunks = 4;  // 4-element chunks per thread: rows of up to 4096
constexpr int64_t kMaxWidth = int64_t{kThreads} * kMaxChunks * 4;
// Rows per block in the backward kernels: the block's partial sums of the modulation gradients
// are flushed with one atomic add per column for this many rows.
constexpr int kBackwardRows = 16;

__device__ __forceinline__ int64_t modulation_row(int64_t row, const ModulationLayout& layout) {
  return (row / layout.tokens) * layout.sample_stride + (row % layout.tokens) / layout.run;
}

__device__ __forceinline__ void atomic_add4(float* p, float4 v) {
  atomicAdd(p, v.x);
  atomicAdd(p + 1, v.y);
  atomicAdd(p + 2, v.z);
  atomicAdd(p + 3, v.w);
}

// One row per block: the row is held in registers between the mean, the variance and the store.
template <class TX, class TO>
__global__ void __launch_bounds__(kThreads)
    layer_norm_modulate_forward_kernel(const TX* x, const float* scale, const float* shift, TO* out,
                                       float* mean_out, float* rstd_out, ModulationLayout layout,
                                       float eps) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int chunks = static_cast<int>(layout.width / 4);
  const float width = static_cast<float>(layout.width);
  const TX* in = x + row * layout.width;
  float4 v[kMaxChunks];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    const int c = threadIdx.x + k * kThreads;
    v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < chunks) {
      v[k] = load4(in + 4 * c);
      sum += sum4(v[k]);
    }
  }
  const float mean = block_sum<kThreads>(sum, scratch) / width;
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c < chunks) {
      const float4 d = make_float4(v[k].x - mean, v[k].y - mean, v[k].z - mean, v[k].w - mean);
      squares += sum4(d * d);
    }
  }
  const float rstd = rsqrtf(block_sum<kThreads>(squares, scratch) / width + eps);
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  const int64_t m = modulation_row(row, layout) * layout.width;
  TO* o = out + row * layout.width;
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c >= chunks) continue;
    const float4 h = make_float4((v[k].x - mean) * rstd, (v[k].y - mean) * rstd,
                                 (v[k].z - mean) * rstd, (v[k].w - mean) * rstd);
    store4(o + 4 * c, fma4(h, load4(scale + m + 4 * c), load4(shift + m + 4 * c)));
  }
}

// Per row: xhat = (x - mean) * rstd, g = grad_out * scale, grad_x = rstd * (g - mean(g) - xhat *
// mean(g * xhat)); grad_shift[m] += grad_out, grad_scale[m] += grad_out * xhat, summed over the
// block's rows in registers and flushed when the modulation row changes.
template <class TX, class TO>
__global__ void __launch_bounds__(kThreads)
    layer_norm_modulate_backward_kernel(const TO* grad_out, const TX* x, const float* scale,
                                        const float* mean, const float* rstd, TX* grad_x,
                                        float* grad_scale, float* grad_shift,
                                        ModulationLayout layout) {
  __shared__ float2 scratch[kThreads / 32];
  const int chunks = static_cast<int>(layout.width / 4);
  const float width = static_cast<float>(layout.width);
  float4 scale_sum[kMaxChunks], shift_sum[kMaxChunks];
  const auto reset = [&] {
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      scale_sum[k] = shift_sum[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  const auto flush = [&](int64_t m) {
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const int c = threadIdx.x + k * kThreads;
      if (c >= chunks) continue;
      atomic_add4(grad_scale + m * layout.width + 4 * c, scale_sum[k]);
      atomic_add4(grad_shift + m * layout.width + 4 * c, shift_sum[k]);
    }
  };
  reset();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBackwardRows;
  const int64_t last = first + kBackwardRows < layout.rows ? first + kBackwardRows : layout.rows;
  int64_t current = modulation_row(first, layout);
  for (int64_t row = first; row < last; ++row) {
    const int64_t m = modulation_row(row, layout);  // the same for every thread of the block
    if (m != current) {
      flush(current);
      reset();
      current = m;
    }
    const float mu = mean[row], r = rstd[row];
    float4 h[kMaxChunks], g[kMaxChunks];
    float2 sums = make_float2(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const int c = threadIdx.x + k * kThreads;
      h[k] = g[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (c >= chunks) continue;
      const float4 xv = load4(x + row * layout.width + 4 * c);
      h[k] = make_float4((xv.x - mu) * r, (xv.y - mu) * r, (xv.z - mu) * r, (xv.w - mu) * r);
      const float4 go = load4(grad_out + row * layout.width + 4 * c);
      g[k] = go * load4(scale + m * layout.width + 4 * c);
      shift_sum[k] = shift_sum[k] + go;
      scale_sum[k] = fma4(go, h[k], scale_sum[k]);
      sums.x += sum4(g[k]);
      sums.y += sum4(g[k] * h[k]);
    }
    const float2 totals = block_sum<kThreads>(sums, scratch);
    const float mean_g = totals.x / width, mean_gh = totals.y / width;
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const int c = threadIdx.x + k * kThreads;
      if (c >= chunks) continue;
      const float4 d = make_float4(
          r * (g[k].x - mean_g - h[k].x * mean_gh), r * (g[k].y - mean_g - h[k].y * mean_gh),
          r * (g[k].z - mean_g - h[k].z * mean_gh), r * (g[k].w - mean_g - h[k].w * mean_gh));
      store4(grad_x + row * layout.width + 4 * c, d);
    }
  }
  flush(current);
}

// One row per block (rows never cross modulation rows inside a block).
template <class TR, class TU>
__global__ void __launch_bounds__(kThreads)
    gated_residual_forward_kernel(const TR* residual, const TU* update, const float* gate, TR* out,
                                  ModulationLayout layout) {
  const int64_t row = blockIdx.x;
  const int chunks = static_cast<int>(layout.width / 4);
  const int64_t m = modulation_row(row, layout) * layout.width;
  const int64_t base = row * layout.width;
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    const int c = threadIdx.x + k * kThreads;
    if (c >= chunks) continue;
    store4(out + base + 4 * c, fma4(load4(update + base + 4 * c), load4(gate + m + 4 * c),
                                    load4(residual + base + 4 * c)));
  }
}

template <class TR, class TU>
__global__ void __launch_bounds__(kThreads)
    gated_residual_backward_kernel(const TR* grad_out, const TU* update, const float* gate,
                                   TU* grad_update, float* grad_gate, ModulationLayout layout) {
  const int chunks = static_cast<int>(layout.width / 4);
  float4 gate_sum[kMaxChunks];
  const auto reset = [&] {
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) gate_sum[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  };
  const auto flush = [&](int64_t m) {
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const int c = threadIdx.x + k * kThreads;
      if (c < chunks) atomic_add4(grad_gate + m * layout.width + 4 * c, gate_sum[k]);
    }
  };
  reset();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBackwardRows;
  const int64_t last = first + kBackwardRows < layout.rows ? first + kBackwardRows : layout.rows;
  int64_t current = modulation_row(first, layout);
  for (int64_t row = first; row < last; ++row) {
    const int64_t m = modulation_row(row, layout);
    if (m != current) {
      flush(current);
      reset();
      current = m;
    }
    const int64_t base = row * layout.width;
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const int c = threadIdx.x + k * kThreads;
      if (c >= chunks) continue;
      const float4 go = load4(grad_out + base + 4 * c);
      const float4 u = load4(update + base + 4 * c);
      store4(grad_update + base + 4 * c, go * load4(gate + m * layout.width + 4 * c));
      gate_sum[k] = fma4(go, u, gate_sum[k]);
    }
  }
  flush(current);
}

unsigned backward_blocks(const ModulationLayout& layout) {
  return static_cast<unsigned>((layout.rows + kBackwardRows - 1) / kBackwardRows);
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
         layout.rows % layout.tokens == 0 && layout.sample_stride >= 0 &&
         (layout.sample_stride == 0 || layout.sample_stride >= layout.tokens / layout.run);
}

void layer_norm_modulate_forward(const void* x, Precision x_precision, const float* scale,
                                 const float* shift, void* out, Precision out_precision,
                                 float* mean, float* rstd, const ModulationLayout& layout,
                                 float eps, CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(x_precision, out_precision, [&](auto* tx, auto* to) {
    using TX = std::remove_pointer_t<decltype(tx)>;
    using TO = std::remove_pointer_t<decltype(to)>;
    layer_norm_modulate_forward_kernel<<<static_cast<unsigned>(layout.rows), kThreads, 0, stream>>>(
        static_cast<const TX*>(x), scale, shift, static_cast<TO*>(out), mean, rstd, layout, eps);
  });
  check_launch("layer_norm_modulate_forward");
}

void layer_norm_modulate_backward(const void* grad_out, Precision out_precision, const void* x,
                                  Precision x_precision, const float* scale, const float* mean,
                                  const float* rstd, void* grad_x, float* grad_scale,
                                  float* grad_shift, const ModulationLayout& layout,
                                  CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(x_precision, out_precision, [&](auto* tx, auto* to) {
    using TX = std::remove_pointer_t<decltype(tx)>;
    using TO = std::remove_pointer_t<decltype(to)>;
    layer_norm_modulate_backward_kernel<<<backward_blocks(layout), kThreads, 0, stream>>>(
        static_cast<const TO*>(grad_out), static_cast<const TX*>(x), scale, mean, rstd,
        static_cast<TX*>(grad_x), grad_scale, grad_shift, layout);
  });
  check_launch("layer_norm_modulate_backward");
}

void gated_residual_forward(const void* residual, Precision residual_precision, const void* update,
                            Precision update_precision, const float* gate, void* out,
                            const ModulationLayout& layout, CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(residual_precision, update_precision, [&](auto* tr, auto* tu) {
    using TR = std::remove_pointer_t<decltype(tr)>;
    using TU = std::remove_pointer_t<decltype(tu)>;
    gated_residual_forward_kernel<<<static_cast<unsigned>(layout.rows), kThreads, 0, stream>>>(
        static_cast<const TR*>(residual), static_cast<const TU*>(update), gate,
        static_cast<TR*>(out), layout);
  });
  check_launch("gated_residual_forward");
}

void gated_residual_backward(const void* grad_out, Precision residual_precision, const void* update,
                             Precision update_precision, const float* gate, void* grad_update,
                             float* grad_gate, const ModulationLayout& layout,
                             CUstream_st* stream) {
  if (layout.rows == 0) return;
  dispatch(residual_precision, update_precision, [&](auto* tr, auto* tu) {
    using TR = std::remove_pointer_t<decltype(tr)>;
    using TU = std::remove_pointer_t<decltype(tu)>;
    gated_residual_backward_kernel<<<backward_blocks(layout), kThreads, 0, stream>>>(
        static_cast<const TR*>(grad_out), static_cast<const TU*>(update), gate,
        static_cast<TU*>(grad_update), grad_gate, layout);
  });
  check_launch("gated_residual_backward");
}

}  // namespace wam::kernels
