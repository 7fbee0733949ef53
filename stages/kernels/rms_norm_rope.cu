// Hand-written because no library linked here fuses RMSNorm with RoPE (ATen runs them as separate
// elementwise and reduction kernels; Inductor, which fuses them for the reference, is Python-only).
#include "kernels/rms_norm_rope.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPairsPerThread = 8;
constexpr int kBackwardRowsPerBlock = 16;  // rows per block sharing one grad_weight partial

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

// The (cos, sin) of pair p (counted over the row) of token `token`; (1, 0) without RoPE.
__device__ __forceinline__ float2 rotation_of(const float* rotation, int64_t token, int p,
                                              int half_head) {
  if (rotation == nullptr) return make_float2(1.f, 0.f);
  const float2* rows = reinterpret_cast<const float2*>(rotation);
  return rows[token * half_head + p % half_head];
}

// Where row `row` of out and grad_out starts (RmsNormRopeShape::out_row_stride).
__device__ __forceinline__ int64_t out_offset(int64_t row, const RmsNormRopeShape& shape) {
  return (row / shape.tokens) * shape.out_sample_stride +
         (row % shape.tokens) * shape.out_row_stride;
}

template <class T>
__global__ void forward_kernel(const T* x, const float* weight, const float* rotation, T* out,
                               float* rstd, RmsNormRopeShape shape, float eps) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int pairs = static_cast<int>(shape.width / 2),
            half_head = static_cast<int>(shape.head_dim / 2);
  const T* in = x + row * shape.x_row_stride;
  float x0[kMaxPairsPerThread], x1[kMaxPairsPerThread];
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxPairsPerThread; ++k) {
    const int p = threadIdx.x + k * kThreads;
    x0[k] = x1[k] = 0.f;
    if (p < pairs) {
      x0[k] = load(in + 2 * p);
      x1[k] = load(in + 2 * p + 1);
      squares += x0[k] * x0[k] + x1[k] * x1[k];
    }
  }
  const float r =
      rsqrtf(block_sum<kThreads>(squares, scratch) / static_cast<float>(shape.width) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  const int64_t token = row % shape.tokens;
  T* o = out + out_offset(row, shape);
#pragma unroll
  for (int k = 0; k < kMaxPairsPerThread; ++k) {
    const int p = threadIdx.x + k * kThreads;
    if (p >= pairs) continue;
    const float z0 = x0[k] * r * weight[2 * p], z1 = x1[k] * r * weight[2 * p + 1];
    const float2 cs = rotation_of(rotation, token, p, half_head);
    store(o + 2 * p, z0 * cs.x - z1 * cs.y);
    store(o + 2 * p + 1, z0 * cs.y + z1 * cs.x);
  }
}

// Per row: dz = rotate back(grad_out), g = dz * weight, xhat = x * rstd,
// grad_x = rstd * (g - xhat * mean(g * xhat)), partial grad_weight += dz * xhat. kPairs: pairs per
// thread (the row in registers, no more: occupancy). The next row's inputs are loaded before this
// row's block reduction so that their latency overlaps it (docs/KERNELS.md, version 2).
template <class T, int kPairs>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* grad_out, const T* x, const float* weight, const float* rotation,
                    const float* rstd, T* grad_x, float* grad_weight_partials,
                    RmsNormRopeShape shape) {
  __shared__ float scratch[kThreads / 32];
  const int pairs = static_cast<int>(shape.width / 2),
            half_head = static_cast<int>(shape.head_dim / 2);
  float2 dw[kPairs], x_next[kPairs], grad_next[kPairs];
  const auto load_row = [&](int64_t row) {
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int p = threadIdx.x + k * kThreads;
      x_next[k] = grad_next[k] = make_float2(0.f, 0.f);
      if (p >= pairs) continue;
      x_next[k] = load2(x + row * shape.x_row_stride + 2 * p);
      grad_next[k] = load2(grad_out + out_offset(row, shape) + 2 * p);
    }
  };
#pragma unroll
  for (int k = 0; k < kPairs; ++k) dw[k] = make_float2(0.f, 0.f);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBackwardRowsPerBlock;
  const int64_t last =
      first + kBackwardRowsPerBlock < shape.rows ? first + kBackwardRowsPerBlock : shape.rows;
  load_row(first);
  for (int64_t row = first; row < last; ++row) {
    float2 h[kPairs], g[kPairs];
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      h[k] = x_next[k];
      g[k] = grad_next[k];
    }
    const float r = rstd[row];
    if (row + 1 < last) load_row(row + 1);
    const int64_t token = row % shape.tokens;
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int p = threadIdx.x + k * kThreads;
      if (p >= pairs) continue;
      const float2 cs = rotation_of(rotation, token, p, half_head);
      const float dz0 = g[k].x * cs.x + g[k].y * cs.y, dz1 = g[k].y * cs.x - g[k].x * cs.y;
      h[k] = make_float2(h[k].x * r, h[k].y * r);
      const float2 w = load2(weight + 2 * p);
      g[k] = make_float2(dz0 * w.x, dz1 * w.y);
      dw[k].x += dz0 * h[k].x;
      dw[k].y += dz1 * h[k].y;
      dot += g[k].x * h[k].x + g[k].y * h[k].y;
    }
    const float mean_dot = block_sum<kThreads>(dot, scratch) / static_cast<float>(shape.width);
    T* gx = grad_x + row * shape.grad_x_row_stride;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int p = threadIdx.x + k * kThreads;
      if (p >= pairs) continue;
      store2(gx + 2 * p,
             make_float2(r * (g[k].x - h[k].x * mean_dot), r * (g[k].y - h[k].y * mean_dot)));
    }
  }
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int p = threadIdx.x + k * kThreads;
    if (p >= pairs) continue;
    store2(grad_weight_partials + static_cast<int64_t>(blockIdx.x) * shape.width + 2 * p, dw[k]);
  }
}

// Calls f with std::integral_constant<int, N>, N >= the pairs per thread a row needs.
template <class F>
void with_pairs(int64_t width, F&& f) {
  switch ((width / 2 + kThreads - 1) / kThreads) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 5:
    case 6: f(std::integral_constant<int, 6>()); break;
    default: f(std::integral_constant<int, kMaxPairsPerThread>()); break;
  }
}

}  // namespace

bool rms_norm_rope_supports(const RmsNormRopeShape& shape) {
  return shape.width % 2 == 0 && shape.head_dim % 2 == 0 && shape.head_dim > 0 &&
         shape.width % shape.head_dim == 0 && shape.width / 2 <= kMaxPairsPerThread * kThreads &&
         shape.tokens > 0 && shape.x_row_stride >= shape.width && shape.x_row_stride % 2 == 0 &&
         shape.out_row_stride >= shape.width && shape.out_row_stride % 2 == 0 &&
         shape.out_sample_stride >= shape.tokens * shape.out_row_stride &&
         shape.out_sample_stride % 2 == 0 && shape.grad_x_row_stride >= shape.width &&
         shape.grad_x_row_stride % 2 == 0;
}

int64_t rms_norm_rope_backward_blocks(const RmsNormRopeShape& shape) {
  return (shape.rows + kBackwardRowsPerBlock - 1) / kBackwardRowsPerBlock;
}

void rms_norm_rope_forward(const void* x, const float* weight, const float* rotation, void* out,
                           float* rstd, const RmsNormRopeShape& shape, float eps,
                           Precision precision, CUstream_st* stream) {
  if (shape.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(shape.rows)), block(kThreads);
  if (precision == Precision::kBFloat16) {
    forward_kernel<<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), weight,
                                               rotation, static_cast<__nv_bfloat16*>(out), rstd,
                                               shape, eps);
  } else {
    forward_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(x), weight, rotation,
                                               static_cast<float*>(out), rstd, shape, eps);
  }
  check_launch("rms_norm_rope_forward");
}

void rms_norm_rope_backward(const void* grad_out, const void* x, const float* weight,
                            const float* rotation, const float* rstd, void* grad_x,
                            float* grad_weight_partials, const RmsNormRopeShape& shape,
                            Precision precision, CUstream_st* stream) {
  if (shape.rows == 0) return;
  const dim3 grid(static_cast<unsigned>(rms_norm_rope_backward_blocks(shape))), block(kThreads);
  with_pairs(shape.width, [&](auto pairs) {
    constexpr int kPairs = decltype(pairs)::value;
    if (precision == Precision::kBFloat16) {
      backward_kernel<__nv_bfloat16, kPairs><<<grid, block, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(grad_out), static_cast<const __nv_bfloat16*>(x), weight,
          rotation, rstd, static_cast<__nv_bfloat16*>(grad_x), grad_weight_partials, shape);
    } else {
      backward_kernel<float, kPairs><<<grid, block, 0, stream>>>(
          static_cast<const float*>(grad_out), static_cast<const float*>(x), weight, rotation, rstd,
          static_cast<float*>(grad_x), grad_weight_partials, shape);
    }
  });
  check_launch("rms_norm_rope_backward");
}

}  // namespace wam::kernels
