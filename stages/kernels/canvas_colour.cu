// Hand-written: the jitter's operations fused into one pass over the canvas, each rounded as the
// ATen composition it replaces rounds it (kernels/canvas_colour.h).
#include "kernels/canvas_colour.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 256;

// ATen's clamp: NaN passes through.
__device__ __forceinline__ float clamp_unit(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}

// image_ops' grayscale: r * 0.299, then g and b added with their factors as ATen's add with alpha.
__device__ __forceinline__ float grey(float r, float g, float b) {
  return fmaf(0.114f, b, fmaf(0.587f, g, __fmul_rn(r, 0.299f)));
}

__global__ void __launch_bounds__(kThreads)
    grey_partials_kernel(Canvas canvas, float brightness, float* partials) {
  __shared__ float scratch[kThreads / 32];
  const int64_t plane = canvas.height * canvas.width;
  const int64_t chunk = (plane + kCanvasGreyChunks - 1) / kCanvasGreyChunks;
  const int64_t frame = blockIdx.y, begin = blockIdx.x * chunk;
  const int64_t end = begin + chunk < plane ? begin + chunk : plane;
  const float* red = canvas.pixels + frame * 3 * plane;
  float sum = 0.0f;
  for (int64_t p = begin + threadIdx.x; p < end; p += kThreads) {
    float rgb[3] = {red[p], red[plane + p], red[2 * plane + p]};
    if (brightness != 1.0f) {
      for (float& x : rgb) x = clamp_unit(__fmul_rn(x, brightness));
    }
    sum += grey(rgb[0], rgb[1], rgb[2]);
  }
  sum = block_sum<kThreads>(sum, scratch);
  if (threadIdx.x == 0) partials[frame * kCanvasGreyChunks + blockIdx.x] = sum;
}

// Each thread one pixel of one frame of the range: its three channels through the jitter, in
// adjust_color_'s, apply_rgb_gain_'s and apply_shadow_'s order, then x * 2 - 1 (and the levels).
template <bool kAsLevels>
__global__ void __launch_bounds__(kThreads)
    to_video_kernel(Canvas canvas, CanvasColour colour, const float* partials, int64_t first,
                    int64_t count, void* video) {
  const int64_t plane = canvas.height * canvas.width;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t t = blockIdx.y;
  if (p >= plane) return;
  const float* red = canvas.pixels + (first + t) * 3 * plane;
  float rgb[3] = {red[p], red[plane + p], red[2 * plane + p]};
  if (colour.brightness != 1.0f) {
    for (float& x : rgb) x = clamp_unit(__fmul_rn(x, colour.brightness));
  }
  if (colour.contrast != 1.0f) {
    const float* sums = partials + (first + t) * kCanvasGreyChunks;
    float total = 0.0f;
    for (int64_t k = 0; k < kCanvasGreyChunks; ++k) total += sums[k];
    const float mean = __fdiv_rn(total, static_cast<float>(plane));
    for (float& x : rgb) {
      x = clamp_unit(fmaf(colour.contrast_rest, mean, __fmul_rn(x, colour.contrast)));
    }
  }
  if (colour.saturation != 1.0f) {
    const float g = grey(rgb[0], rgb[1], rgb[2]);
    for (float& x : rgb) {
      x = clamp_unit(fmaf(colour.saturation_rest, g, __fmul_rn(x, colour.saturation)));
    }
  }
  if (colour.gamma != 1.0f) {
    for (float& x : rgb) x = clamp_unit(expf(__fmul_rn(logf(x), colour.gamma)));
  }
  if (colour.has_rgb_gain) {
    for (int c = 0; c < 3; ++c) rgb[c] = clamp_unit(__fmul_rn(rgb[c], colour.rgb_gain[c]));
  }
  if (colour.has_shadow) {
    const int64_t row = p / canvas.width, column = p - row * canvas.width;
    const float ys = __fsub_rn(
        __fdiv_rn(__fadd_rn(static_cast<float>(row), 0.5f), static_cast<float>(canvas.height)),
        colour.shadow_centre_y);
    const float xs = __fsub_rn(
        __fdiv_rn(__fadd_rn(static_cast<float>(column), 0.5f), static_cast<float>(canvas.width)),
        colour.shadow_centre_x);
    const float squared = __fadd_rn(__fmul_rn(ys, ys), __fmul_rn(xs, xs));
    const float attenuation = __fsub_rn(
        1.0f,
        __fmul_rn(colour.shadow_depth, expf(__fdiv_rn(-squared, colour.shadow_two_sigma_squared))));
    for (float& x : rgb) x = __fmul_rn(x, attenuation);
  }
  for (int c = 0; c < 3; ++c) {
    const float signed_unit = __fsub_rn(__fmul_rn(rgb[c], 2.0f), 1.0f);
    const int64_t at = (c * count + t) * plane + p;
    if constexpr (kAsLevels) {
      const float level = rintf(__fmul_rn(__fadd_rn(signed_unit, 1.0f), 127.5f));
      static_cast<uint8_t*>(video)[at] =
          static_cast<uint8_t>(level < 0.0f ? 0.0f : (level > 255.0f ? 255.0f : level));
    } else {
      static_cast<float*>(video)[at] = signed_unit;
    }
  }
}

}  // namespace

void canvas_grey_partials(const Canvas& canvas, float brightness, float* partials,
                          CUstream_st* stream) {
  if (canvas.frames <= 0 || canvas.height * canvas.width <= 0) return;
  const dim3 blocks(static_cast<unsigned>(kCanvasGreyChunks), static_cast<unsigned>(canvas.frames));
  grey_partials_kernel<<<blocks, kThreads, 0, stream>>>(canvas, brightness, partials);
  check_launch("canvas_grey_partials");
}

void canvas_to_video(const Canvas& canvas, const CanvasColour& colour, const float* partials,
                     int64_t first, int64_t count, bool as_levels, void* video,
                     CUstream_st* stream) {
  const int64_t plane = canvas.height * canvas.width;
  if (count <= 0 || plane <= 0) return;
  const dim3 blocks(static_cast<unsigned>((plane + kThreads - 1) / kThreads),
                    static_cast<unsigned>(count));
  if (as_levels) {
    to_video_kernel<true>
        <<<blocks, kThreads, 0, stream>>>(canvas, colour, partials, first, count, video);
  } else {
    to_video_kernel<false>
        <<<blocks, kThreads, 0, stream>>>(canvas, colour, partials, first, count, video);
  }
  check_launch("canvas_to_video");
}

}  // namespace wam::kernels
