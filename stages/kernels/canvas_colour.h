// Augment's colour jitter and the video's scaling on the GPU in one pass over the canvas, for
// frames in device memory. augment_ops.cc's ATen composition (image_ops::adjust_color_,
// apply_rgb_gain_, apply_shadow_, then the video's scaling and rounding) makes about twenty float
// passes over every sample's canvas (docs/BENCHMARKS.md, "LIBERO per core with the kept anchors,
// the whole graph's kernels"). Raw pointers and a stream only: this header is shared by nvcc and
// the host compiler.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace wam::kernels {

// What the jitter does to a canvas, each value a double of the draws rounded to float as ATen
// rounds a scalar for a float tensor; a factor of exactly 1 is off.
struct CanvasColour {
  float brightness = 1.0f;
  float contrast = 1.0f, contrast_rest = 0.0f;  // rest: 1 - contrast, rounded once
  float saturation = 1.0f, saturation_rest = 0.0f;
  float gamma = 1.0f;
  bool has_rgb_gain = false;
  float rgb_gain[3] = {1.0f, 1.0f, 1.0f};
  // image_ops::Shadow: 1 - depth * exp(-d^2 / two_sigma_squared), d from the centre in fractions.
  bool has_shadow = false;
  float shadow_centre_y = 0.5f, shadow_centre_x = 0.5f, shadow_depth = 0.0f,
        shadow_two_sigma_squared = 0.5f;
};

// A canvas: contiguous float [frames, 3, height, width] in [0, 1].
struct Canvas {
  const float* pixels = nullptr;
  int64_t frames = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// The contrast's blend target needs each frame's mean grey after the brightness: the kernel sums
// it over this many chunks of the frame into partials [frames, kCanvasGreyChunks], which the
// video kernel adds up in a fixed order (the same bits every run).
constexpr int64_t kCanvasGreyChunks = 32;
void canvas_grey_partials(const Canvas& canvas, float brightness, float* partials,
                          CUstream_st* stream);

// Frames [first, first + count) of the canvas, jittered by `colour`, as a new compact video
// [3, count, height, width]: floats in [-1, 1] (x * 2 - 1), or with `as_levels` uint8 levels
// (round((x * 2 - 1 + 1) * 127.5), clamped). `partials` from canvas_grey_partials when the
// contrast is not 1, else unused.
void canvas_to_video(const Canvas& canvas, const CanvasColour& colour, const float* partials,
                     int64_t first, int64_t count, bool as_levels, void* video,
                     CUstream_st* stream);

}  // namespace wam::kernels
