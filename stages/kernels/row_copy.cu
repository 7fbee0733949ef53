// Hand-written because no copy linked here moves strided rows at the memory's bandwidth
// (kernels/row_copy.h).
#include "kernels/row_copy.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVectorsPerThread = 4;  // loads in flight a thread before its stores
constexpr int64_t kVector = 16;       // bytes a load

// The copy in 16-byte vectors: pitches in vectors, indices in 32 bits (copy_rows_supports).
struct VectorShape {
  int64_t dst_sample_pitch, dst_row_pitch, src_sample_pitch, src_row_pitch;
  uint32_t rows, row_vectors, total;
};

// Each thread loads kVectorsPerThread vectors kThreads apart, then stores them: consecutive
// threads touch consecutive 16 bytes of a row.
__global__ void __launch_bounds__(kThreads)
    copy_rows_kernel(uint4* dst, const uint4* src, VectorShape shape) {
  const uint32_t first = blockIdx.x * (kThreads * kVectorsPerThread) + threadIdx.x;
  uint4 v[kVectorsPerThread];
  int64_t at[kVectorsPerThread];
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    const uint32_t i = first + k * kThreads;
    if (i >= shape.total) continue;
    const uint32_t row = i / shape.row_vectors, column = i - row * shape.row_vectors;
    const uint32_t sample = row / shape.rows, row_in_sample = row - sample * shape.rows;
    v[k] = src[sample * shape.src_sample_pitch + row_in_sample * shape.src_row_pitch + column];
    at[k] = sample * shape.dst_sample_pitch + row_in_sample * shape.dst_row_pitch + column;
  }
#pragma unroll
  for (int k = 0; k < kVectorsPerThread; ++k) {
    if (first + k * kThreads < shape.total) dst[at[k]] = v[k];
  }
}

bool aligned(int64_t value) { return value % kVector == 0; }

}  // namespace

bool copy_rows_supports(const void* dst, RowLayout dst_layout, const void* src,
                        RowLayout src_layout, int64_t samples, int64_t rows, int64_t row_bytes) {
  if (samples <= 0 || rows <= 0 || row_bytes <= 0) return false;
  const int64_t total = samples * rows * (row_bytes / kVector);
  return aligned(reinterpret_cast<uintptr_t>(dst)) && aligned(reinterpret_cast<uintptr_t>(src)) &&
         aligned(row_bytes) && aligned(dst_layout.sample_pitch) && aligned(dst_layout.row_pitch) &&
         aligned(src_layout.sample_pitch) && aligned(src_layout.row_pitch) &&
         total <= std::numeric_limits<int32_t>::max() - int64_t{kThreads} * kVectorsPerThread;
}

void copy_rows(void* dst, RowLayout dst_layout, const void* src, RowLayout src_layout,
               int64_t samples, int64_t rows, int64_t row_bytes, CUstream_st* stream) {
  const VectorShape shape{dst_layout.sample_pitch / kVector,
                          dst_layout.row_pitch / kVector,
                          src_layout.sample_pitch / kVector,
                          src_layout.row_pitch / kVector,
                          static_cast<uint32_t>(rows),
                          static_cast<uint32_t>(row_bytes / kVector),
                          static_cast<uint32_t>(samples * rows * (row_bytes / kVector))};
  const unsigned blocks =
      (shape.total + kThreads * kVectorsPerThread - 1) / (kThreads * kVectorsPerThread);
  copy_rows_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint4*>(dst),
                                                    static_cast<const uint4*>(src), shape);
  check_launch("copy_rows");
}

}  // namespace wam::kernels
