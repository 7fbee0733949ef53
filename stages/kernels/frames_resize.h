// A camera's uint8 RGB frames resized into unit float planes in one pass, for Augment on the GPU.
// augment_ops.cc's ATen composition converts the full frames to float planes first (a strided
// copy, then a division: LIBERO's 512x512 frames are 69 MB of floats a camera and sample) and
// resizes those with ATen's antialiased bilinear filter; this reads the uint8 frames once and
// writes only the resized planes. Raw pointers and a stream only: this header is shared by nvcc
// and the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

// A window of rows x columns pixels at (top, left) of images of height x width.
struct ImageWindow {
  int64_t height = 0, width = 0;
  int64_t top = 0, left = 0, rows = 0, columns = 0;
};

// Windows the kernel takes: non-empty, inside their images, shrunk at most 15 times on each axis
// (at most 32 taps a side).
bool resize_frames_supports(const ImageWindow& source, const ImageWindow& target);

// Resizes the window `source` of each of `count` frames (contiguous uint8 [count, height, width,
// 3]) into the window `target` of planes (contiguous float [count, 3, height, width]), as ATen's
// bilinear interpolate with antialias and align_corners false does it on the frames converted to
// [0, 1] (x * (1 / 255)): the same taps and weights, the sums in its order (each row's taps, then
// the rows). Pixels of `planes` outside the target window are left as they are.
void resize_frames_to_unit_planes(const uint8_t* frames, const ImageWindow& source, float* planes,
                                  const ImageWindow& target, int64_t count, CUstream_st* stream);

}  // namespace wam::kernels
