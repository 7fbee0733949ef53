// The FP8 casts with delayed scaling (kernels/fp8.h), written by hand: ATen has no cast that
// reads a scale from an amax history and records the tensor's amax in the same pass.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "kernels/block_reduce.cuh"
#include "kernels/fp8.h"

namespace wam::kernels {
namespace {

constexpr int kThreads = 256;
// The transposing cast's tile: 64 x 64 elements, each thread reading 4 consecutive ones and
// writing them as 4 bytes, both ways (1-byte stores of a 32 x 32 tile ran at a third of the
// memory's rate: docs/KERNELS.md, version 7).
constexpr int kTile = 64;
constexpr int kQuadsPerTileRow = kTile / 4;                    // 16
constexpr int kTileRowsPerPass = kThreads / kQuadsPerTileRow;  // 16

template <Fp8Format kFormat>
struct Fp8Traits;
template <>
struct Fp8Traits<Fp8Format::kE4M3> {
  static constexpr float kLargest = 448.f;
  static constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E4M3;
};
template <>
struct Fp8Traits<Fp8Format::kE5M2> {
  static constexpr float kLargest = 57344.f;
  static constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E5M2;
};

// Two values as two FP8 bytes, the first in the low byte (the lower address).
template <Fp8Format kFormat>
__device__ __forceinline__ uint32_t to_fp8x2(float first, float second) {
  return __nv_cvt_float2_to_fp8x2(make_float2(first, second), __NV_SATFINITE,
                                  Fp8Traits<kFormat>::kInterpretation);
}

// Eight consecutive elements from p (16-byte aligned) as floats.
__device__ __forceinline__ void load8(const float* p, float* v) {
  const float4 lo = load4(p), hi = load4(p + 4);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
  v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* v) {
  const float4 lo = load4(p), hi = load4(p + 4);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
  v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

__device__ __forceinline__ uint32_t current_tag(const Fp8Scaling& scaling) {
  return static_cast<uint32_t>(*scaling.steps_done) + 1u;
}

// The cast's scale, from the history entries of the previous steps; the current step's slot is
// left out, as other blocks of the same cast may be writing it. Written for the product by one
// thread of the grid.
template <Fp8Format kFormat>
__device__ float block_scale(const Fp8Scaling& scaling) {
  __shared__ float scale;
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const uint32_t tag = current_tag(scaling);
    float amax = 0.f;
    for (int i = 0; i < kFp8HistoryLength; ++i) {
      const unsigned long long entry = scaling.history[i];
      const auto entry_tag = static_cast<uint32_t>(entry >> 32);
      if (entry_tag < tag && entry_tag + kFp8HistoryLength > tag) {
        amax = fmaxf(amax, __uint_as_float(static_cast<uint32_t>(entry)));
      }
    }
    scale = amax > 0.f && isfinite(amax) ? Fp8Traits<kFormat>::kLargest / amax : 1.f;
    if (blockIdx.x == 0 && blockIdx.y == 0) *scaling.scale_inverse = 1.f / scale;
  }
  __syncthreads();
  return scale;
}

// The block's largest value, recorded in the history under tag (amaxes are never negative, so
// their float bits order as integers do; a larger tag retires the slot's older entry).
__device__ void record_amax(float amax, const Fp8Scaling& scaling, uint32_t tag) {
  __shared__ float warp_amax[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  const int thread = threadIdx.y * blockDim.x + threadIdx.x;
  if (thread % 32 == 0) warp_amax[thread / 32] = amax;
  __syncthreads();
  if (thread == 0) {
    for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
    if (amax > 0.f) {
      const unsigned long long entry =
          (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(amax);
      atomicMax(scaling.history + tag % kFp8HistoryLength, entry);
    }
  }
}

// The amax alone, eight elements a thread at a time, recorded under the previous step's tag.
template <class In>
__global__ void __launch_bounds__(kThreads)
    previous_amax_kernel(const In* x, int64_t chunks, Fp8Scaling scaling) {
  float amax = 0.f;
  for (int64_t chunk = blockIdx.x * int64_t{kThreads} + threadIdx.x; chunk < chunks;
       chunk += int64_t{gridDim.x} * kThreads) {
    float v[8];
    load8(x + chunk * 8, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  }
  record_amax(amax, scaling, current_tag(scaling) - 1u);
}

// One 64 x 64 tile per block: read once, 4 elements a thread; written row-major from registers and
// transposed through shared memory, 4 bytes a thread both ways. rows and cols multiples of 4.
template <class In, Fp8Format kFormat>
__global__ void __launch_bounds__(kThreads)
    cast_transposed_kernel(const In* x, int64_t rows, int64_t cols, Fp8Scaling scaling,
                           uint8_t* out, uint8_t* out_transposed, float* column_partials) {
  __shared__ uint32_t tile[kTile][kQuadsPerTileRow + 1];  // 4 bytes of a tile row per word
  __shared__ float4 column_sums[kTileRowsPerPass][kQuadsPerTileRow];
  const float scale = block_scale<kFormat>(scaling);
  float amax = 0.f;
  float4 sums = make_float4(0.f, 0.f, 0.f, 0.f);
  const int quad = threadIdx.x % kQuadsPerTileRow, first_row = threadIdx.x / kQuadsPerTileRow;
  const int64_t col = blockIdx.x * int64_t{kTile} + quad * 4;
  for (int r = first_row; r < kTile; r += kTileRowsPerPass) {
    const int64_t row = blockIdx.y * int64_t{kTile} + r;
    uint32_t packed = 0;
    if (row < rows && col < cols) {
      const float4 v = load4(x + row * cols + col);
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
      sums = sums + v;
      packed = to_fp8x2<kFormat>(v.x * scale, v.y * scale) |
               to_fp8x2<kFormat>(v.z * scale, v.w * scale) << 16;
      *reinterpret_cast<uint32_t*>(out + row * cols + col) = packed;
    }
    tile[r][quad] = packed;
  }
  column_sums[first_row][quad] = sums;
  __syncthreads();
  // The tile's column sums, its 16 row groups added in a fixed order.
  if (column_partials != nullptr && threadIdx.x < kQuadsPerTileRow && col < cols) {
    float4 total = column_sums[0][threadIdx.x];
    for (int group = 1; group < kTileRowsPerPass; ++group) {
      total = total + column_sums[group][threadIdx.x];
    }
    store4(column_partials + blockIdx.y * cols + col, total);
  }
  // Transposed: thread (tile column c, row quad g) writes tile rows 4g .. 4g+3 of column c.
  const auto byte_of = [&](int r, int c) { return (tile[r][c / 4] >> (8 * (c % 4))) & 0xffu; };
  const int g = threadIdx.x % kQuadsPerTileRow;
  const int64_t row = blockIdx.y * int64_t{kTile} + g * 4;
  for (int c = threadIdx.x / kQuadsPerTileRow; c < kTile; c += kTileRowsPerPass) {
    const int64_t transposed_row = blockIdx.x * int64_t{kTile} + c;
    if (transposed_row < cols && row < rows) {
      const uint32_t packed = byte_of(g * 4, c) | byte_of(g * 4 + 1, c) << 8 |
                              byte_of(g * 4 + 2, c) << 16 | byte_of(g * 4 + 3, c) << 24;
      *reinterpret_cast<uint32_t*>(out_transposed + transposed_row * rows + row) = packed;
    }
  }
  record_amax(amax, scaling, current_tag(scaling));
}

// Enough blocks to fill the device a few times over; each loops over the rest.
int64_t grid_for(int64_t chunks) {
  int device = 0, processors = 132;
  if (cudaGetDevice(&device) == cudaSuccess) {
    cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device);
  }
  const int64_t needed = (chunks + kThreads - 1) / kThreads;
  return std::max<int64_t>(1, std::min<int64_t>(needed, int64_t{processors} * 8));
}

bool vector_aligned(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

}  // namespace

void fp8_record_previous_amax(const void* x, Precision precision, int64_t n,
                              const Fp8Scaling& scaling, CUstream_st* stream) {
  if (n <= 0) return;
  if (n % 8 != 0 || !vector_aligned(x)) {
    throw std::runtime_error("fp8_record_previous_amax: needs 8k elements, 16-byte aligned");
  }
  const int64_t chunks = n / 8;
  const dim3 grid(static_cast<unsigned>(grid_for(chunks)));
  if (precision == Precision::kBFloat16) {
    previous_amax_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                        chunks, scaling);
  } else {
    previous_amax_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), chunks,
                                                        scaling);
  }
  check_launch("fp8_record_previous_amax");
}

bool fp8_cast_transposed(const void* x, Precision precision, int64_t rows, int64_t cols,
                         Fp8Format format, const Fp8Scaling& scaling, void* out,
                         void* out_transposed, float* column_partials, CUstream_st* stream) {
  static_assert(kTile == kFp8TileRows, "the partial sums' rows are the tile's");
  if (rows <= 0 || cols <= 0 || rows % 4 != 0 || cols % 4 != 0 || !vector_aligned(x) ||
      reinterpret_cast<uintptr_t>(out) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(out_transposed) % 4 != 0) {
    return false;
  }
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  const dim3 block(kThreads);
  auto* o = static_cast<uint8_t*>(out);
  auto* t = static_cast<uint8_t*>(out_transposed);
  const bool e4m3 = format == Fp8Format::kE4M3;
  if (precision == Precision::kBFloat16) {
    const auto* in = static_cast<const __nv_bfloat16*>(x);
    if (e4m3) {
      cast_transposed_kernel<__nv_bfloat16, Fp8Format::kE4M3>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t, column_partials);
    } else {
      cast_transposed_kernel<__nv_bfloat16, Fp8Format::kE5M2>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t, column_partials);
    }
  } else {
    const auto* in = static_cast<const float*>(x);
    if (e4m3) {
      cast_transposed_kernel<float, Fp8Format::kE4M3>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t, column_partials);
    } else {
      cast_transposed_kernel<float, Fp8Format::kE5M2>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t, column_partials);
    }
  }
  check_launch("fp8_cast_transposed");
  return true;
}

}  // namespace wam::kernels
