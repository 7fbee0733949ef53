// Rows of bytes copied between two strided [samples, rows, row bytes] layouts, for the compiled
// step's joint attention (each expert's v into the joint tensor and its gradient back). Neither
// ATen's strided copy (its unvectorised kernel) nor cudaMemcpy3DAsync (memcpyDtoD3DAligned) moves
// these at more than 1.4 TB/s on an H100 (docs/KERNELS.md, versions 29 and 31). Raw pointers and
// a stream only: this header is shared by nvcc and the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

// Where each row starts: sample s, row r at s * sample_pitch + r * row_pitch bytes.
struct RowLayout {
  int64_t sample_pitch = 0;
  int64_t row_pitch = 0;
};

// Layouts the kernel takes: both pointers, the row's bytes and every pitch multiples of 16 (one
// 16-byte load a thread), fewer than 2^31 such loads in all.
bool copy_rows_supports(const void* dst, RowLayout dst_layout, const void* src,
                        RowLayout src_layout, int64_t samples, int64_t rows, int64_t row_bytes);

// Copies samples x rows rows of row_bytes bytes each from src to dst. The two must not overlap.
void copy_rows(void* dst, RowLayout dst_layout, const void* src, RowLayout src_layout,
               int64_t samples, int64_t rows, int64_t row_bytes, CUstream_st* stream);

}  // namespace wam::kernels
