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
constexpr int kTile = 32;  // the transposing cast's tile: 32 x 32 elements, 32 x 8 threads
constexpr int kTileRowsPerPass = kThreads / kTile;

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

template <Fp8Format kFormat>
__device__ __forceinline__ uint8_t to_fp8(float value) {
  return __nv_cvt_float_to_fp8(value, __NV_SATFINITE, Fp8Traits<kFormat>::kInterpretation);
}

// Two values as two FP8 bytes, the first in the low byte (the lower address).
template <Fp8Format kFormat>
__device__ __forceinline__ uint32_t to_fp8x2(float first, float second) {
  return __nv_cvt_float2_to_fp8x2(make_float2(first, second), __NV_SATFINITE,
                                  Fp8Traits<kFormat>::kInterpretation);
}

__device__ __forceinline__ float to_float(float value) { return value; }
__device__ __forceinline__ float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

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

// kWrite: the cast (eight elements a thread at a time); otherwise the amax alone, recorded under
// the previous step's tag.
template <class In, Fp8Format kFormat, bool kWrite>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const In* x, int64_t chunks, Fp8Scaling scaling, uint2* out) {
  const float scale = kWrite ? block_scale<kFormat>(scaling) : 1.f;
  float amax = 0.f;
  for (int64_t chunk = blockIdx.x * int64_t{kThreads} + threadIdx.x; chunk < chunks;
       chunk += int64_t{gridDim.x} * kThreads) {
    float v[8];
    load8(x + chunk * 8, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    if (kWrite) {
      uint2 packed;
      packed.x = to_fp8x2<kFormat>(v[0] * scale, v[1] * scale) |
                 to_fp8x2<kFormat>(v[2] * scale, v[3] * scale) << 16;
      packed.y = to_fp8x2<kFormat>(v[4] * scale, v[5] * scale) |
                 to_fp8x2<kFormat>(v[6] * scale, v[7] * scale) << 16;
      out[chunk] = packed;
    }
  }
  record_amax(amax, scaling, current_tag(scaling) - (kWrite ? 0u : 1u));
}

// One 32 x 32 tile per block: read once, written row-major from registers and transposed through
// shared memory.
template <class In, Fp8Format kFormat>
__global__ void __launch_bounds__(kThreads)
    cast_transposed_kernel(const In* x, int64_t rows, int64_t cols, Fp8Scaling scaling,
                           uint8_t* out, uint8_t* out_transposed) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float scale = block_scale<kFormat>(scaling);
  float amax = 0.f;
  const int64_t col = blockIdx.x * int64_t{kTile} + threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
    const int64_t row = blockIdx.y * int64_t{kTile} + i;
    uint8_t value = 0;
    if (row < rows && col < cols) {
      const float v = to_float(x[row * cols + col]);
      amax = fmaxf(amax, fabsf(v));
      value = to_fp8<kFormat>(v * scale);
      out[row * cols + col] = value;
    }
    tile[i][threadIdx.x] = value;
  }
  __syncthreads();
  const int64_t row = blockIdx.y * int64_t{kTile} + threadIdx.x;
  for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
    const int64_t transposed_row = blockIdx.x * int64_t{kTile} + i;
    if (transposed_row < cols && row < rows) {
      out_transposed[transposed_row * rows + row] = tile[threadIdx.x][i];
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

template <bool kWrite>
void launch_cast(const void* x, Precision precision, int64_t n, Fp8Format format,
                 const Fp8Scaling& scaling, void* out, CUstream_st* stream) {
  const int64_t chunks = n / 8;
  const dim3 grid(static_cast<unsigned>(grid_for(chunks)));
  auto* packed = static_cast<uint2*>(out);
  const bool e4m3 = format == Fp8Format::kE4M3;
  if (precision == Precision::kBFloat16) {
    const auto* in = static_cast<const __nv_bfloat16*>(x);
    if (e4m3) {
      cast_kernel<__nv_bfloat16, Fp8Format::kE4M3, kWrite>
          <<<grid, kThreads, 0, stream>>>(in, chunks, scaling, packed);
    } else {
      cast_kernel<__nv_bfloat16, Fp8Format::kE5M2, kWrite>
          <<<grid, kThreads, 0, stream>>>(in, chunks, scaling, packed);
    }
  } else {
    const auto* in = static_cast<const float*>(x);
    if (e4m3) {
      cast_kernel<float, Fp8Format::kE4M3, kWrite>
          <<<grid, kThreads, 0, stream>>>(in, chunks, scaling, packed);
    } else {
      cast_kernel<float, Fp8Format::kE5M2, kWrite>
          <<<grid, kThreads, 0, stream>>>(in, chunks, scaling, packed);
    }
  }
  check_launch(kWrite ? "fp8_cast" : "fp8_record_previous_amax");
}

bool vector_aligned(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

}  // namespace

bool fp8_cast(const void* x, Precision precision, int64_t n, Fp8Format format,
              const Fp8Scaling& scaling, void* out, CUstream_st* stream) {
  if (n <= 0 || n % 8 != 0 || !vector_aligned(x) || !vector_aligned(out)) return false;
  launch_cast<true>(x, precision, n, format, scaling, out, stream);
  return true;
}

void fp8_record_previous_amax(const void* x, Precision precision, int64_t n,
                              const Fp8Scaling& scaling, CUstream_st* stream) {
  if (n <= 0) return;
  if (n % 8 != 0 || !vector_aligned(x)) {
    throw std::runtime_error("fp8_record_previous_amax: needs 8k elements, 16-byte aligned");
  }
  launch_cast<false>(x, precision, n, Fp8Format::kE4M3, scaling, nullptr, stream);
}

void fp8_cast_transposed(const void* x, Precision precision, int64_t rows, int64_t cols,
                         Fp8Format format, const Fp8Scaling& scaling, void* out,
                         void* out_transposed, CUstream_st* stream) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile));
  const dim3 block(kTile, kTileRowsPerPass);
  auto* o = static_cast<uint8_t*>(out);
  auto* t = static_cast<uint8_t*>(out_transposed);
  const bool e4m3 = format == Fp8Format::kE4M3;
  if (precision == Precision::kBFloat16) {
    const auto* in = static_cast<const __nv_bfloat16*>(x);
    if (e4m3) {
      cast_transposed_kernel<__nv_bfloat16, Fp8Format::kE4M3>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t);
    } else {
      cast_transposed_kernel<__nv_bfloat16, Fp8Format::kE5M2>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t);
    }
  } else {
    const auto* in = static_cast<const float*>(x);
    if (e4m3) {
      cast_transposed_kernel<float, Fp8Format::kE4M3>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t);
    } else {
      cast_transposed_kernel<float, Fp8Format::kE5M2>
          <<<grid, block, 0, stream>>>(in, rows, cols, scaling, o, t);
    }
  }
  check_launch("fp8_cast_transposed");
}

}  // namespace wam::kernels
