// Augment's camera warp on the GPU, written straight into the camera's slot of the canvas. The
// ATen composition (image_ops::warp_float: affine_grid, then grid_sample) writes a grid and a
// warped copy that is then copied into the slot. Raw pointers and a stream only: this header is
// shared by nvcc and the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

// Warps `count` images of unit float planes (contiguous [count, 3, height, width]) by the affine
// map `theta` (row-major 2x3, grid_sample's normalised coordinates: image_ops' warp_theta) into
// the window of the same size at (top, left) of `canvas` (contiguous float [count, 3,
// canvas_height, canvas_width]), as torch's affine_grid + grid_sample compute it (align_corners
// false, border padding, bilinear) up to float rounding.
void warp_planes_into(const float* planes, int64_t count, int64_t height, int64_t width,
                      const float theta[6], float* canvas, int64_t canvas_height,
                      int64_t canvas_width, int64_t top, int64_t left, CUstream_st* stream);

}  // namespace wam::kernels
