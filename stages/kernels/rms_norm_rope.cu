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

// A thread handles chunks of 4 elements, two RoPE pairs (8-byte bfloat16 or 16-byte float loads);
// with one pair a load, the kernels ran at 1.4-1.6 TB/s on an H100 (docs/KERNELS.md, version 32).
constexpr int kMaxChunksPerThread = 4;
constexpr int kThreads = 256;  // the widest block: rows of up to 4 * 4 * 256 = 4096
// The block for rows of up to 2048, forward and backward: 3 chunks a thread at the video stream's
// 1536, where 256 threads leave half the block idle for a row's second chunk (as the norm
// kernels of adaln.cu, docs/KERNELS.md versions 27 and 30).
constexpr int kNarrowBlock = 128;
// Rows per block sharing one grad_weight partial, at least. At 16 the video stream's 9216 rows made
// 576 blocks, 0.9 of the 660 an H100 holds at once; at 8 they make one whole wave of 14 rows each
// (docs/KERNELS.md, version 40).
constexpr int kMinBackwardRowsPerBlock = 8;

// Where the (cos, sin) of pairs 2c and 2c + 1 (counted over the row) sit in a token's rotation
// row: both in one head, as half_head is even.
__device__ __forceinline__ int rotation_offset(int c, int half_head) {
  return 2 * ((2 * c) % half_head);
}

// The (cos, sin) pairs at `offset` (rotation_offset) of the rotation row `token_rotation`, as
// (cos_a, sin_a, cos_b, sin_b); (1, 0, 1, 0) without RoPE.
__device__ __forceinline__ float4 rotation_at(const float* token_rotation, int offset) {
  if (token_rotation == nullptr) return make_float4(1.f, 0.f, 1.f, 0.f);
  return *reinterpret_cast<const float4*>(token_rotation + offset);
}

// Token `token`'s rotation row, or null without RoPE.
__device__ __forceinline__ const float* token_rotation(const float* rotation, int64_t token,
                                                       int half_head) {
  return rotation == nullptr ? nullptr : rotation + 2 * token * half_head;
}

// The two pairs of z rotated by cs.
__device__ __forceinline__ float4 rotate(float4 z, float4 cs) {
  return make_float4(z.x * cs.x - z.y * cs.y, z.x * cs.y + z.y * cs.x, z.z * cs.z - z.w * cs.w,
                     z.z * cs.w + z.w * cs.z);
}

// The two pairs of g rotated back (the transpose of rotate).
__device__ __forceinline__ float4 rotate_back(float4 g, float4 cs) {
  return make_float4(g.x * cs.x + g.y * cs.y, g.y * cs.x - g.x * cs.y, g.z * cs.z + g.w * cs.w,
                     g.w * cs.z - g.z * cs.w);
}

__device__ __forceinline__ float4 scaled(float4 v, float s) {
  return make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
}

// a + b * s
__device__ __forceinline__ float4 plus_scaled(float4 a, float4 b, float s) {
  return make_float4(fmaf(b.x, s, a.x), fmaf(b.y, s, a.y), fmaf(b.z, s, a.z), fmaf(b.w, s, a.w));
}

// Where the row of token `token` of sample `sample` of out and grad_out starts
// (RmsNormRopeShape::out_row_stride).
__device__ __forceinline__ int64_t out_offset(int64_t sample, int64_t token,
                                              const RmsNormRopeShape& shape) {
  return sample * shape.out_sample_stride + token * shape.out_row_stride;
}

// One row per block. Every load (x, weight, rotation) is issued before the block reduction, so
// that their latencies overlap one another and the reduction (docs/KERNELS.md, version 5).
template <class T, int kBlock, int kChunks>
__global__ void __launch_bounds__(kBlock)
    forward_kernel(const T* x, const float* weight, const float* rotation, T* out, float* rstd,
                   RmsNormRopeShape shape, float eps) {
  __shared__ float scratch[kBlock / 32];
  const int64_t row = blockIdx.x, sample = row / shape.tokens, token = row % shape.tokens;
  const int chunks = static_cast<int>(shape.width / 4),
            half_head = static_cast<int>(shape.head_dim / 2);
  const T* in = x + sample * shape.x_sample_stride + token * shape.x_row_stride;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 h[kChunks], w[kChunks], cs[kChunks];
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    h[k] = w[k] = cs[k] = zero;
    if (c >= chunks) continue;
    h[k] = load4(in + 4 * c);
    w[k] = load4(weight + 4 * c);
    cs[k] = rotation_at(token_rotation(rotation, token, half_head), rotation_offset(c, half_head));
    squares += sum4(h[k] * h[k]);
  }
  const float r =
      rsqrtf(block_sum<kBlock>(squares, scratch) / static_cast<float>(shape.width) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  T* o = out + out_offset(sample, token, shape);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    if (c < chunks) store4(o + 4 * c, rotate(scaled(h[k], r) * w[k], cs[k]));
  }
}

// Per row: dz = rotate back(grad_out), g = dz * weight, xhat = x * rstd,
// grad_x = rstd * (g - xhat * mean(g * xhat)), partial grad_weight += dz * xhat. kChunks: chunks
// per thread (the row in registers, no more: occupancy). The next row's x, grad_out and rstd are
// loaded before this row's block reduction so that their latency overlaps it (docs/KERNELS.md,
// versions 2 and 5). The rotation (one token's 384 bytes, in L1) is read where it is used, not
// held beside the next row: 92 registers instead of 122, 5 blocks an SM instead of 4, which is
// what this latency-bound kernel needed (version 33). The row's (sample, token) advance by one per
// row instead of being divided out of the row index.
template <class T, int kBlock, int kChunks>
__global__ void __launch_bounds__(kBlock)
    backward_kernel(const T* grad_out, const T* x, const float* weight, const float* rotation,
                    const float* rstd, T* grad_x, float* grad_weight_partials,
                    RmsNormRopeShape shape, int64_t rows_per_block) {
  __shared__ float scratch[kBlock / 32];
  const int chunks = static_cast<int>(shape.width / 4),
            half_head = static_cast<int>(shape.head_dim / 2);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 dw[kChunks], w[kChunks], x_next[kChunks], grad_next[kChunks];
  // Each chunk's place in a rotation row, the same for every row: computed once, not a division
  // a chunk a row (docs/KERNELS.md, version 43).
  int offsets[kChunks];
  float rstd_next = 0.f;
  const auto load_row = [&](int64_t row, int64_t sample, int64_t token) {
    rstd_next = rstd[row];
    const T* g = grad_out + out_offset(sample, token, shape);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = threadIdx.x + k * kBlock;
      x_next[k] = grad_next[k] = zero;
      if (c >= chunks) continue;
      x_next[k] = load4(x + sample * shape.x_sample_stride + token * shape.x_row_stride + 4 * c);
      grad_next[k] = load4(g + 4 * c);
    }
  };
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    dw[k] = w[k] = zero;
    offsets[k] = rotation_offset(c, half_head);
    if (c < chunks) w[k] = load4(weight + 4 * c);
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t last = first + rows_per_block < shape.rows ? first + rows_per_block : shape.rows;
  int64_t sample = first / shape.tokens, token = first % shape.tokens;
  load_row(first, sample, token);
  for (int64_t row = first; row < last; ++row) {
    float4 h[kChunks], g[kChunks];
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      h[k] = x_next[k];
      g[k] = grad_next[k];
    }
    const float r = rstd_next;
    const float* row_rotation = token_rotation(rotation, token, half_head);
    if (++token == shape.tokens) {
      token = 0;
      ++sample;
    }
    if (row + 1 < last) load_row(row + 1, sample, token);
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = threadIdx.x + k * kBlock;
      if (c >= chunks) continue;
      const float4 dz = rotate_back(g[k], rotation_at(row_rotation, offsets[k]));
      h[k] = scaled(h[k], r);
      g[k] = dz * w[k];
      dw[k] = fma4(dz, h[k], dw[k]);
      dot += sum4(g[k] * h[k]);
    }
    const float mean_dot = block_sum<kBlock>(dot, scratch) / static_cast<float>(shape.width);
    T* gx = grad_x + row * shape.grad_x_row_stride;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int c = threadIdx.x + k * kBlock;
      if (c < chunks) store4(gx + 4 * c, scaled(plus_scaled(g[k], h[k], -mean_dot), r));
    }
  }
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int c = threadIdx.x + k * kBlock;
    if (c < chunks) {
      store4(grad_weight_partials + static_cast<int64_t>(blockIdx.x) * shape.width + 4 * c, dw[k]);
    }
  }
}

// Calls f with std::integral_constant<int, B> for the block a row of `width` takes and
// std::integral_constant<int, N>, N >= the chunks per thread it needs with that block.
template <class F>
void with_block_and_chunks(int64_t width, F&& f) {
  const auto with_chunks = [&](auto block) {
    constexpr int kBlock = decltype(block)::value;
    switch ((width / 4 + kBlock - 1) / kBlock) {
      case 1: f(block, std::integral_constant<int, 1>()); break;
      case 2: f(block, std::integral_constant<int, 2>()); break;
      case 3: f(block, std::integral_constant<int, 3>()); break;
      default: f(block, std::integral_constant<int, kMaxChunksPerThread>()); break;
    }
  };
  if (width / 4 <= int64_t{kMaxChunksPerThread} * kNarrowBlock) {
    with_chunks(std::integral_constant<int, kNarrowBlock>());
  } else {
    with_chunks(std::integral_constant<int, kThreads>());
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
  with_block_and_chunks(shape.width, [&](auto block, auto chunks) {
    constexpr int kBlock = decltype(block)::value;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, backward_kernel<__nv_bfloat16, kBlock, decltype(chunks)::value>, kBlock, 0);
  });
  const int64_t resident = std::max<int64_t>(1, static_cast<int64_t>(sms) * per_sm);
  const int64_t blocks =
      std::min(resident, (shape.rows + kMinBackwardRowsPerBlock - 1) / kMinBackwardRowsPerBlock);
  return (shape.rows + blocks - 1) / std::max<int64_t>(1, blocks);
}

}  // namespace

bool rms_norm_rope_supports(const RmsNormRopeShape& shape) {
  return shape.width % 4 == 0 && shape.head_dim % 4 == 0 && shape.head_dim > 0 &&
         shape.width % shape.head_dim == 0 &&
         shape.width / 4 <= int64_t{kMaxChunksPerThread} * kThreads && shape.tokens > 0 &&
         shape.x_row_stride >= shape.width && shape.x_row_stride % 4 == 0 &&
         shape.x_sample_stride >= shape.tokens * shape.x_row_stride &&
         shape.x_sample_stride % 4 == 0 && shape.out_row_stride >= shape.width &&
         shape.out_row_stride % 4 == 0 &&
         shape.out_sample_stride >= shape.tokens * shape.out_row_stride &&
         shape.out_sample_stride % 4 == 0 && shape.grad_x_row_stride >= shape.width &&
         shape.grad_x_row_stride % 4 == 0;
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
  with_block_and_chunks(shape.width, [&](auto block_size, auto chunks) {
    constexpr int kBlock = decltype(block_size)::value, kChunks = decltype(chunks)::value;
    const dim3 grid(static_cast<unsigned>(shape.rows)), block(kBlock);
    if (precision == Precision::kBFloat16) {
      forward_kernel<__nv_bfloat16, kBlock, kChunks>
          <<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), weight, rotation,
                                       static_cast<__nv_bfloat16*>(out), rstd, shape, eps);
    } else {
      forward_kernel<float, kBlock, kChunks>
          <<<grid, block, 0, stream>>>(static_cast<const float*>(x), weight, rotation,
                                       static_cast<float*>(out), rstd, shape, eps);
    }
  });
  check_launch("rms_norm_rope_forward");
}

void rms_norm_rope_backward(const void* grad_out, const void* x, const float* weight,
                            const float* rotation, const float* rstd, void* grad_x,
                            float* grad_weight_partials, const RmsNormRopeShape& shape,
                            Precision precision, CUstream_st* stream) {
  if (shape.rows == 0) return;
  const int64_t rows_per_block = backward_rows_per_block(shape);
  const dim3 grid(static_cast<unsigned>((shape.rows + rows_per_block - 1) / rows_per_block));
  with_block_and_chunks(shape.width, [&](auto block_size, auto chunks) {
    constexpr int kBlock = decltype(block_size)::value, kChunks = decltype(chunks)::value;
    if (precision == Precision::kBFloat16) {
      backward_kernel<__nv_bfloat16, kBlock, kChunks><<<grid, kBlock, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(grad_out), static_cast<const __nv_bfloat16*>(x), weight,
          rotation, rstd, static_cast<__nv_bfloat16*>(grad_x), grad_weight_partials, shape,
          rows_per_block);
    } else {
      backward_kernel<float, kBlock, kChunks><<<grid, kBlock, 0, stream>>>(
          static_cast<const float*>(grad_out), static_cast<const float*>(x), weight, rotation, rstd,
          static_cast<float*>(grad_x), grad_weight_partials, shape, rows_per_block);
    }
  });
  check_launch("rms_norm_rope_backward");
}

}  // namespace wam::kernels
