// Hand-written: no library linked here resizes uint8 NHWC frames into float planes with ATen's
// antialiased bilinear weights (kernels/frames_resize.h).
#include "kernels/frames_resize.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 128;
// The most taps a side: support 2 * scale + 1. A shrink of up to 15x fits.
constexpr int kMaxTaps = 32;

struct Axis {
  float scale, support, invscale;
};

// ATen's area_pixel_compute_scale (align_corners false, no explicit scale) and the antialiased
// filter's support for bilinear (interp_size 2).
Axis axis(int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  return {scale, scale >= 1.0f ? scale : 1.0f, scale >= 1.0f ? 1.0f / scale : 1.0f};
}

__device__ __forceinline__ float triangle(float x) {
  x = x < 0.0f ? -x : x;
  return x < 1.0f ? 1.0f - x : 0.0f;
}

// ATen's _compute_weights_aa for output index i of an axis of `size` inputs: the first tap, the
// taps' count and their weights, normalised by their sum.
__device__ __forceinline__ int weights(int64_t i, int64_t size, Axis a, float* w, int64_t& first) {
  // ATen's mix of float and double (its 0.5 are doubles), kept so that the taps are the same.
  const float centre = a.scale * (static_cast<float>(i) + 0.5f);
  const auto low = static_cast<int64_t>(static_cast<double>(centre - a.support) + 0.5);
  first = low > 0 ? low : 0;
  auto high = static_cast<int64_t>(static_cast<double>(centre + a.support) + 0.5);
  high = high < size ? high : size;
  int taps = static_cast<int>(high - first);
  taps = taps < kMaxTaps ? taps : kMaxTaps;
  float total = 0.0f;
  for (int j = 0; j < taps; ++j) {
    const float offset = static_cast<float>(j + first) - centre;
    w[j] = triangle(static_cast<float>((static_cast<double>(offset) + 0.5) * a.invscale));
    total += w[j];
  }
  if (total != 0.0f) {
    for (int j = 0; j < taps; ++j) w[j] /= total;
  }
  return taps;
}

__global__ void __launch_bounds__(kThreads)
    resize_kernel(const uint8_t* frames, ImageWindow source, float* planes, ImageWindow target,
                  Axis rows, Axis columns) {
  const int64_t x = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t y = blockIdx.y, n = blockIdx.z;
  if (x >= target.columns) return;
  float wy[kMaxTaps], wx[kMaxTaps];
  int64_t y0, x0;
  const int ny = weights(y, source.rows, rows, wy, y0);
  const int nx = weights(x, source.columns, columns, wx, x0);
  const uint8_t* frame = frames + n * source.height * source.width * 3;
  constexpr float kUnit = 1.0f / 255.0f;
  float sum[3] = {0.0f, 0.0f, 0.0f};
  for (int i = 0; i < ny; ++i) {
    const uint8_t* row = frame + ((source.top + y0 + i) * source.width + source.left + x0) * 3;
    float along[3] = {0.0f, 0.0f, 0.0f};
    for (int j = 0; j < nx; ++j) {
      for (int c = 0; c < 3; ++c) along[c] += wx[j] * (static_cast<float>(row[3 * j + c]) * kUnit);
    }
    for (int c = 0; c < 3; ++c) sum[c] += wy[i] * along[c];
  }
  const int64_t plane = target.height * target.width;
  float* out = planes + n * 3 * plane + (target.top + y) * target.width + target.left + x;
  for (int c = 0; c < 3; ++c) out[c * plane] = sum[c];
}

}  // namespace

bool resize_frames_supports(const ImageWindow& source, const ImageWindow& target) {
  const auto inside = [](const ImageWindow& w) {
    return w.rows > 0 && w.columns > 0 && w.top >= 0 && w.left >= 0 && w.top + w.rows <= w.height &&
           w.left + w.columns <= w.width;
  };
  // 2 * support + 1 taps, the support being the shrink factor.
  return inside(source) && inside(target) && source.rows <= 15 * target.rows &&
         source.columns <= 15 * target.columns;
}

void resize_frames_to_unit_planes(const uint8_t* frames, const ImageWindow& source, float* planes,
                                  const ImageWindow& target, int64_t count, CUstream_st* stream) {
  if (count <= 0 || target.rows <= 0 || target.columns <= 0) return;
  const dim3 blocks(static_cast<unsigned>((target.columns + kThreads - 1) / kThreads),
                    static_cast<unsigned>(target.rows), static_cast<unsigned>(count));
  resize_kernel<<<blocks, kThreads, 0, stream>>>(frames, source, planes, target,
                                                 axis(source.rows, target.rows),
                                                 axis(source.columns, target.columns));
  check_launch("resize_frames_to_unit_planes");
}

}  // namespace wam::kernels
