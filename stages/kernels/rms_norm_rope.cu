// Hand-written because no library linked here fuses RMSNorm with RoPE (ATen runs them as separate
// elementwise and reduction kernels; Inductor, which fuses them for the reference, is Python-only).
#include "kernels/rms_norm_rope.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxPairsPerThread = 8;
constexpr int kBackwardRowsPerBlock = 16;  // rows per block sharing one grad_weight flush

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
  T* o = out + row * shape.width;
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
// grad_x = rstd * (g - xhat * mean(g * xhat)), grad_weight += dz * xhat.
template <class T>
__global__ void backward_kernel(const T* grad_out, const T* x, const float* weight,
                                const float* rotation, const float* rstd, T* grad_x,
                                float* grad_weight, RmsNormRopeShape shape) {
  __shared__ float scratch[kThreads / 32];
  const int pairs = static_cast<int>(shape.width / 2),
            half_head = static_cast<int>(shape.head_dim / 2);
  float dw0[kMaxPairsPerThread] = {}, dw1[kMaxPairsPerThread] = {};
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kBackwardRowsPerBlock;
  for (int64_t row = first; row < first + kBackwardRowsPerBlock && row < shape.rows; ++row) {
    const T* in = x + row * shape.x_row_stride;
    const T* go = grad_out + row * shape.width;
    const float r = rstd[row];
    const int64_t token = row % shape.tokens;
    float g0[kMaxPairsPerThread], g1[kMaxPairsPerThread], h0[kMaxPairsPerThread],
        h1[kMaxPairsPerThread];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxPairsPerThread; ++k) {
      const int p = threadIdx.x + k * kThreads;
      g0[k] = g1[k] = h0[k] = h1[k] = 0.f;
      if (p >= pairs) continue;
      const float d0 = load(go + 2 * p), d1 = load(go + 2 * p + 1);
      const float2 cs = rotation_of(rotation, token, p, half_head);
      const float dz0 = d0 * cs.x + d1 * cs.y, dz1 = d1 * cs.x - d0 * cs.y;
      h0[k] = load(in + 2 * p) * r;
      h1[k] = load(in + 2 * p + 1) * r;
      g0[k] = dz0 * weight[2 * p];
      g1[k] = dz1 * weight[2 * p + 1];
      dw0[k] += dz0 * h0[k];
      dw1[k] += dz1 * h1[k];
      dot += g0[k] * h0[k] + g1[k] * h1[k];
    }
    const float mean_dot = block_sum<kThreads>(dot, scratch) / static_cast<float>(shape.width);
    T* gx = grad_x + row * shape.width;
#pragma unroll
    for (int k = 0; k < kMaxPairsPerThread; ++k) {
      const int p = threadIdx.x + k * kThreads;
      if (p >= pairs) continue;
      store(gx + 2 * p, r * (g0[k] - h0[k] * mean_dot));
      store(gx + 2 * p + 1, r * (g1[k] - h1[k] * mean_dot));
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxPairsPerThread; ++k) {
    const int p = threadIdx.x + k * kThreads;
    if (p >= pairs) continue;
    atomicAdd(grad_weight + 2 * p, dw0[k]);
    atomicAdd(grad_weight + 2 * p + 1, dw1[k]);
  }
}

}  // namespace

bool rms_norm_rope_supports(const RmsNormRopeShape& shape) {
  return shape.width % 2 == 0 && shape.head_dim % 2 == 0 && shape.head_dim > 0 &&
         shape.width % shape.head_dim == 0 && shape.width / 2 <= kMaxPairsPerThread * kThreads &&
         shape.tokens > 0 && shape.x_row_stride >= shape.width;
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
                            float* grad_weight, const RmsNormRopeShape& shape,
                            Precision precision, CUstream_st* stream) {
  if (shape.rows == 0) return;
  const dim3 grid(static_cast<unsigned>((shape.rows + kBackwardRowsPerBlock - 1) /
                                        kBackwardRowsPerBlock)),
      block(kThreads);
  if (precision == Precision::kBFloat16) {
    backward_kernel<<<grid, block, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(grad_out), static_cast<const __nv_bfloat16*>(x), weight,
        rotation, rstd, static_cast<__nv_bfloat16*>(grad_x), grad_weight, shape);
  } else {
    backward_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(grad_out),
                                                static_cast<const float*>(x), weight, rotation,
                                                rstd, static_cast<float*>(grad_x), grad_weight,
                                                shape);
  }
  check_launch("rms_norm_rope_backward");
}

}  // namespace wam::kernels
