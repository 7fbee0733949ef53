// NVDEC's NV12 frames to packed RGB in one pass, straight from the decoder's surface into the
// sample's frames. video::nv12_to_rgb (stages/data/video_reader.h), as ATen ops, made about twenty
// float passes over every decoded frame and a stack of the three channels, after two copies of
// the surface: 15-20 ms of kernels a step beside the step on LIBERO's NVDEC route
// (docs/BENCHMARKS.md, "LIBERO per core with the kept anchors, the whole graph's kernels").
// Raw pointers and a stream only: this header is shared by nvcc and the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

// One NV12 frame in device memory: a luma plane of height x width bytes, rows `luma_pitch` apart,
// and interleaved U, V samples at half the resolution, rounded up ((height + 1) / 2 rows of
// (width + 1) / 2 pairs), rows `chroma_pitch` apart. Each chroma pair covers its 2x2 pixels.
struct Nv12Frame {
  const uint8_t* luma = nullptr;
  int64_t luma_pitch = 0;
  const uint8_t* chroma = nullptr;
  int64_t chroma_pitch = 0;
  int64_t height = 0;
  int64_t width = 0;
  bool full_range = false;  // JPEG range; otherwise luma 16-235 and chroma 16-240
};

// Writes the frame as packed RGB, uint8 [height, width, 3] with rows `rgb_pitch` bytes apart, at
// `rgb`: the same bytes as video::nv12_to_rgb gives for the frame (the same float operations in
// the same order, each rounded as ATen rounds it). Frames of up to 2^31 pixels.
void nv12_to_rgb(const Nv12Frame& frame, uint8_t* rgb, int64_t rgb_pitch, CUstream_st* stream);

}  // namespace wam::kernels
