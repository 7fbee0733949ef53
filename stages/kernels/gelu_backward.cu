// Hand-written because neither ATen nor cuBLASLt has GELU's derivative with the column sums of
// its output in one pass (kernels/gelu_backward.h).
#include "kernels/gelu_backward.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVector = 8;          // bfloat16 elements per 16-byte load
constexpr int64_t kBlockRows = 64;  // rows per partial sum: 144 blocks of the base preset's 9,216

// ATen's GeluBackwardCUDAKernelImpl for approximate="tanh", in the same order of operations.
__device__ __forceinline__ float gelu_tanh_backward(float dy, float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float x_sq = x * x;
  const float x_cube = x_sq * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  const float tanh_inner = tanhf(inner);
  const float left = 0.5f * x;
  const float right = 1.f + tanh_inner;
  const float left_derivative = 0.5f * right;
  const float tanh_derivative = 1.f - tanh_inner * tanh_inner;
  const float inner_derivative = kBeta * (1.f + 3.f * kKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

// A word's two bfloat16 as floats, the low half (the lower address) first.
__device__ __forceinline__ float2 pair_of(uint32_t word) {
  return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
}

// Each thread owns 8 adjacent columns of one block of rows: 16-byte loads and stores along a
// row, the column sums in registers, one partial row written per block. The stores are by
// intrinsic: plain uint4 and float4 assignments here came out of nvcc as 4-byte stores
// (docs/KERNELS.md, version 34). grad_pre and partials are fresh tensors, never the inputs.
__global__ void __launch_bounds__(kThreads)
    gelu_backward_kernel(const __nv_bfloat16* __restrict__ grad_activated,
                         const __nv_bfloat16* __restrict__ pre_activation, int64_t rows,
                         int64_t width, __nv_bfloat16* __restrict__ grad_pre,
                         float* __restrict__ partials) {
  const int64_t column = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVector;
  if (column >= width) return;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t last = first + kBlockRows < rows ? first + kBlockRows : rows;
  float sums[kVector] = {};
#pragma unroll 4
  for (int64_t row = first; row < last; ++row) {
    const int64_t at = row * width + column;
    const uint4 dy_raw = *reinterpret_cast<const uint4*>(grad_activated + at);
    const uint4 x_raw = *reinterpret_cast<const uint4*>(pre_activation + at);
    const uint32_t dy_words[4] = {dy_raw.x, dy_raw.y, dy_raw.z, dy_raw.w};
    const uint32_t x_words[4] = {x_raw.x, x_raw.y, x_raw.z, x_raw.w};
    uint32_t out_words[4];
#pragma unroll
    for (int pair = 0; pair < kVector / 2; ++pair) {
      const float2 d = pair_of(dy_words[pair]), v = pair_of(x_words[pair]);
      const __nv_bfloat16 low = __float2bfloat16_rn(gelu_tanh_backward(d.x, v.x)),
                          high = __float2bfloat16_rn(gelu_tanh_backward(d.y, v.y));
      sums[2 * pair] += __bfloat162float(low);
      sums[2 * pair + 1] += __bfloat162float(high);
      out_words[pair] =
          __bfloat16_as_ushort(low) | static_cast<uint32_t>(__bfloat16_as_ushort(high)) << 16;
    }
    __stwb(reinterpret_cast<uint4*>(grad_pre + at),
           make_uint4(out_words[0], out_words[1], out_words[2], out_words[3]));
  }
  float* partial = partials + static_cast<int64_t>(blockIdx.y) * width + column;
  __stwb(reinterpret_cast<float4*>(partial), make_float4(sums[0], sums[1], sums[2], sums[3]));
  __stwb(reinterpret_cast<float4*>(partial + 4), make_float4(sums[4], sums[5], sums[6], sums[7]));
}

}  // namespace

bool gelu_backward_supports(int64_t rows, int64_t width) {
  return rows > 0 && width > 0 && width % kVector == 0;
}

int64_t gelu_backward_blocks(int64_t rows) { return (rows + kBlockRows - 1) / kBlockRows; }

void gelu_backward_with_column_sums(const void* grad_activated, const void* pre_activation,
                                    int64_t rows, int64_t width, void* grad_pre, float* partials,
                                    CUstream_st* stream) {
  if (!gelu_backward_supports(rows, width)) {
    throw std::invalid_argument("gelu_backward_with_column_sums: unsupported shape [" +
                                std::to_string(rows) + ", " + std::to_string(width) + "]");
  }
  const int64_t per_block = int64_t{kThreads} * kVector;
  const dim3 grid(static_cast<unsigned>((width + per_block - 1) / per_block),
                  static_cast<unsigned>(gelu_backward_blocks(rows)));
  gelu_backward_kernel<<<grid, kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(grad_activated),
      static_cast<const __nv_bfloat16*>(pre_activation), rows, width,
      static_cast<__nv_bfloat16*>(grad_pre), partials);
  check_launch("gelu_backward_with_column_sums");
}

}  // namespace wam::kernels
