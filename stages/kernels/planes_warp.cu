// Hand-written: no library linked here samples an affine warp into a window of another tensor
// (kernels/planes_warp.h).
#include "kernels/planes_warp.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 128;

struct Theta {
  float t[6];
};

// grid_sample's source position of a normalised coordinate, clamped to the plane (border).
__device__ __forceinline__ float source_position(float normalised, float size) {
  const float position = ((normalised + 1.0f) * size - 1.0f) / 2.0f;
  return fminf(fmaxf(position, 0.0f), size - 1.0f);
}

__global__ void __launch_bounds__(kThreads)
    warp_kernel(const float* planes, int64_t height, int64_t width, Theta theta, float* canvas,
                int64_t canvas_height, int64_t canvas_width, int64_t top, int64_t left) {
  const int64_t x = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t y = blockIdx.y, n = blockIdx.z;
  if (x >= width) return;
  const float fw = static_cast<float>(width), fh = static_cast<float>(height);
  // affine_grid's base grid (align_corners false), then the map.
  const float xn = static_cast<float>(2 * x + 1) / fw - 1.0f;
  const float yn = static_cast<float>(2 * y + 1) / fh - 1.0f;
  const float* t = theta.t;
  const float ix = source_position(t[0] * xn + t[1] * yn + t[2], fw);
  const float iy = source_position(t[3] * xn + t[4] * yn + t[5], fh);
  // grid_sample's bilinear weights of the four neighbours; one beyond the last column or row
  // (ix clamped to width - 1) has weight 0 and is not read.
  const auto x0 = static_cast<int64_t>(floorf(ix)), y0 = static_cast<int64_t>(floorf(iy));
  const float east = ix - static_cast<float>(x0), west = static_cast<float>(x0 + 1) - ix;
  const float south = iy - static_cast<float>(y0), north = static_cast<float>(y0 + 1) - iy;
  const bool has_east = x0 + 1 < width, has_south = y0 + 1 < height;
  const int64_t plane = height * width, canvas_plane = canvas_height * canvas_width;
  for (int c = 0; c < 3; ++c) {
    const float* p = planes + (n * 3 + c) * plane + y0 * width + x0;
    float value = p[0] * (west * north);
    if (has_east) value += p[1] * (east * north);
    if (has_south) value += p[width] * (west * south);
    if (has_east && has_south) value += p[width + 1] * (east * south);
    canvas[(n * 3 + c) * canvas_plane + (top + y) * canvas_width + left + x] = value;
  }
}

}  // namespace

void warp_planes_into(const float* planes, int64_t count, int64_t height, int64_t width,
                      const float theta[6], float* canvas, int64_t canvas_height,
                      int64_t canvas_width, int64_t top, int64_t left, CUstream_st* stream) {
  if (count <= 0 || height <= 0 || width <= 0) return;
  Theta map;
  for (int k = 0; k < 6; ++k) map.t[k] = theta[k];
  const dim3 blocks(static_cast<unsigned>((width + kThreads - 1) / kThreads),
                    static_cast<unsigned>(height), static_cast<unsigned>(count));
  warp_kernel<<<blocks, kThreads, 0, stream>>>(planes, height, width, map, canvas, canvas_height,
                                               canvas_width, top, left);
  check_launch("warp_planes_into");
}

}  // namespace wam::kernels
