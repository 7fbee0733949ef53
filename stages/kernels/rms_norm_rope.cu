// Hand-written because no library linked here fuses RMSNorm with RoPE (ATen runs them as separate
// elementwise and reduction kernels; Inductor, which fuses them for the reference, is Python-only).
#include "kernels/rms_norm_rope.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 256;  // a block of the backward kernel, and of the forward's wide rows
constexpr int kMaxPairsPerThread = 8;
// The forward kernel's block for rows of up to 2048: at the video stream's 1536 (6 pairs a thread)
// it took the forward from 40.2 to 36.4 us a call on an H100, where the backward at 128 threads
// went from 54.3 to 79.6 us, so the backward keeps 256 (scripts/kernel-bytes.cu, docs/KERNELS.md
// version 30).
constexpr int kNarrowBlock = 128;
constexpr int kMinBackwardRowsPerBlock = 16;  // rows per block sharing one grad_weight partial

// The (cos, sin) of pair p (counted over the row) of token `token`; (1, 0) without RoPE.
__device__ __forceinline__ float2 rotation_of(const float* rotation, int64_t token, int p,
                                              int half_head) {
  if (rotation == nullptr) return make_float2(1.f, 0.f);
  const float2* rows = reinterpret_cast<const float2*>(rotation);
  return rows[token * half_head + p % half_head];
}

// Where the row of token `token` of sample `sample` of out and grad_out starts
// (RmsNormRopeShape::out_row_stride).
__device__ __forceinline__ int64_t out_offset(int64_t sample, int64_t token,
                                              const RmsNormRopeShape& shape) {
  return sample * shape.out_sample_stride + token * shape.out_row_stride;
}

// One row per block. Every load (x, weight, rotation) is issued before the block reduction, so
// that their latencies overlap one another and the reduction (docs/KERNELS.md, version 5).
template <class T, int kBlock, int kPairs>
__global__ void __launch_bounds__(kBlock)
    forward_kernel(const T* x, const float* weight, const float* rotation, T* out, float* rstd,
                   RmsNormRopeShape shape, float eps) {
  __shared__ float scratch[kBlock / 32];
  const int64_t row = blockIdx.x, sample = row / shape.tokens, token = row % shape.tokens;
  const int pairs = static_cast<int>(shape.width / 2),
            half_head = static_cast<int>(shape.head_dim / 2);
  const T* in = x + row * shape.x_row_stride;
  float2 h[kPairs], w[kPairs], cs[kPairs];
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int p = threadIdx.x + k * kBlock;
    h[k] = w[k] = cs[k] = make_float2(0.f, 0.f);
    if (p >= pairs) continue;
    h[k] = load2(in + 2 * p);
    w[k] = load2(weight + 2 * p);
    cs[k] = rotation_of(rotation, token, p, half_head);
    squares += h[k].x * h[k].x + h[k].y * h[k].y;
  }
  const float r =
      rsqrtf(block_sum<kBlock>(squares, scratch) / static_cast<float>(shape.width) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  T* o = out + out_offset(sample, token, shape);
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int p = threadIdx.x + k * kBlock;
    if (p >= pairs) continue;
    const float z0 = h[k].x * r * w[k].x, z1 = h[k].y * r * w[k].y;
    store2(o + 2 * p, make_float2(z0 * cs[k].x - z1 * cs[k].y, z0 * cs[k].y + z1 * cs[k].x));
  }
}

// Per row: dz = rotate back(grad_out), g = dz * weight, xhat = x * rstd,
// grad_x = rstd * (g - xhat * mean(g * xhat)), partial grad_weight += dz * xhat. kPairs: pairs per
// thread (the row in registers, no more: occupancy). Everything the next row reads (x, grad_out,
// its rstd and rotation) is loaded before this row's block reduction so that its latency overlaps
// it (docs/KERNELS.md, versions 2 and 5); the row's (sample, token) advance by one per row instead
// of being divided out of the row index.
template <class T, int kPairs>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* grad_out, const T* x, const float* weight, const float* rotation,
                    const float* rstd, T* grad_x, float* grad_weight_partials,
                    RmsNormRopeShape shape, int64_t rows_per_block) {
  __shared__ float scratch[kThreads / 32];
  const int pairs = static_cast<int>(shape.width / 2),
            half_head = static_cast<int>(shape.head_dim / 2);
  float2 dw[kPairs], w[kPairs], x_next[kPairs], grad_next[kPairs], cs_next[kPairs];
  float rstd_next = 0.f;
  const auto load_row = [&](int64_t row, int64_t sample, int64_t token) {
    rstd_next = rstd[row];
    const T* g = grad_out + out_offset(sample, token, shape);
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int p = threadIdx.x + k * kThreads;
      x_next[k] = grad_next[k] = cs_next[k] = make_float2(0.f, 0.f);
      if (p >= pairs) continue;
      x_next[k] = load2(x + row * shape.x_row_stride + 2 * p);
      grad_next[k] = load2(g + 2 * p);
      cs_next[k] = rotation_of(rotation, token, p, half_head);
    }
  };
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int p = threadIdx.x + k * kThreads;
    dw[k] = w[k] = make_float2(0.f, 0.f);
    if (p < pairs) w[k] = load2(weight + 2 * p);
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t last = first + rows_per_block < shape.rows ? first + rows_per_block : shape.rows;
  int64_t sample = first / shape.tokens, token = first % shape.tokens;
  load_row(first, sample, token);
  for (int64_t row = first; row < last; ++row) {
    float2 h[kPairs], g[kPairs], cs[kPairs];
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      h[k] = x_next[k];
      g[k] = grad_next[k];
      cs[k] = cs_next[k];
    }
    const float r = rstd_next;
    if (++token == shape.tokens) {
      token = 0;
      ++sample;
    }
    if (row + 1 < last) load_row(row + 1, sample, token);
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int p = threadIdx.x + k * kThreads;
      if (p >= pairs) continue;
      const float dz0 = g[k].x * cs[k].x + g[k].y * cs[k].y,
                  dz1 = g[k].y * cs[k].x - g[k].x * cs[k].y;
      h[k] = make_float2(h[k].x * r, h[k].y * r);
      g[k] = make_float2(dz0 * w[k].x, dz1 * w[k].y);
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

// Calls f with std::integral_constant<int, N>, N >= the pairs per thread a row needs with blocks
// of `block` threads.
template <class F>
void with_pairs(int64_t width, int block, F&& f) {
  switch ((width / 2 + block - 1) / block) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 3: f(std::integral_constant<int, 3>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 5:
    case 6: f(std::integral_constant<int, 6>()); break;
    default: f(std::integral_constant<int, kMaxPairsPerThread>()); break;
  }
}

// Rows per backward block: at least kMinBackwardRowsPerBlock, and no more blocks than the device
// holds at once. Each block walks its rows one after another, so a second, partial wave of blocks
// would leave most SMs idle while it runs (version 5 in docs/KERNELS.md: 576 blocks of 16 rows on
// 528 resident slots took two waves).
int64_t backward_rows_per_block(const RmsNormRopeShape& shape) {
  int device = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  with_pairs(shape.width, kThreads, [&](auto pairs) {
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, backward_kernel<__nv_bfloat16, decltype(pairs)::value>, kThreads, 0);
  });
  const int64_t resident = std::max<int64_t>(1, static_cast<int64_t>(sms) * per_sm);
  const int64_t blocks =
      std::min(resident, (shape.rows + kMinBackwardRowsPerBlock - 1) / kMinBackwardRowsPerBlock);
  return (shape.rows + blocks - 1) / std::max<int64_t>(1, blocks);
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
  if (shape.rows == 0) return 0;
  const int64_t rows_per_block = backward_rows_per_block(shape);
  return (shape.rows + rows_per_block - 1) / rows_per_block;
}

void rms_norm_rope_forward(const void* x, const float* weight, const float* rotation, void* out,
                           float* rstd, const RmsNormRopeShape& shape, float eps,
                           Precision precision, CUstream_st* stream) {
  if (shape.rows == 0) return;
  const auto launch = [&](auto block_size) {
    constexpr int kBlock = decltype(block_size)::value;
    const dim3 grid(static_cast<unsigned>(shape.rows)), block(kBlock);
    with_pairs(shape.width, kBlock, [&](auto pairs) {
      constexpr int kPairs = decltype(pairs)::value;
      if (precision == Precision::kBFloat16) {
        forward_kernel<__nv_bfloat16, kBlock, kPairs>
            <<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), weight, rotation,
                                         static_cast<__nv_bfloat16*>(out), rstd, shape, eps);
      } else {
        forward_kernel<float, kBlock, kPairs>
            <<<grid, block, 0, stream>>>(static_cast<const float*>(x), weight, rotation,
                                         static_cast<float*>(out), rstd, shape, eps);
      }
    });
  };
  if (shape.width / 2 <= int64_t{kMaxPairsPerThread} * kNarrowBlock) {
    launch(std::integral_constant<int, kNarrowBlock>());
  } else {
    launch(std::integral_constant<int, kThreads>());
  }
  check_launch("rms_norm_rope_forward");
}

void rms_norm_rope_backward(const void* grad_out, const void* x, const float* weight,
                            const float* rotation, const float* rstd, void* grad_x,
                            float* grad_weight_partials, const RmsNormRopeShape& shape,
                            Precision precision, CUstream_st* stream) {
  if (shape.rows == 0) return;
  const int64_t rows_per_block = backward_rows_per_block(shape);
  const dim3 grid(static_cast<unsigned>((shape.rows + rows_per_block - 1) / rows_per_block)),
      block(kThreads);
  with_pairs(shape.width, kThreads, [&](auto pairs) {
    constexpr int kPairs = decltype(pairs)::value;
    if (precision == Precision::kBFloat16) {
      backward_kernel<__nv_bfloat16, kPairs><<<grid, block, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(grad_out), static_cast<const __nv_bfloat16*>(x), weight,
          rotation, rstd, static_cast<__nv_bfloat16*>(grad_x), grad_weight_partials, shape,
          rows_per_block);
    } else {
      backward_kernel<float, kPairs><<<grid, block, 0, stream>>>(
          static_cast<const float*>(grad_out), static_cast<const float*>(x), weight, rotation, rstd,
          static_cast<float*>(grad_x), grad_weight_partials, shape, rows_per_block);
    }
  });
  check_launch("rms_norm_rope_backward");
}

}  // namespace wam::kernels
