// The per-pixel loops of the Augment stage on raw pointers, without LibTorch: each one a single
// pass over its pixels in loops the compiler vectorises (built with -O3, and AVX2 and AVX-512
// clones picked at run time; CMakeLists.txt), where the torch ops they replace made one pass over
// the whole tensor per operation. image_ops.h wraps them for tensors; docs/BENCHMARKS.md ("CPU data
// path per core (issue 24)") has what they save.
#pragma once

#include <cstdint>

namespace wam::pixel_kernels {

// Packed RGB rows (3 * width bytes each, rows back to back) -> three planes whose rows are
// `plane_stride` bytes apart. Exact.
void deinterleave_rgb(const uint8_t* packed, int64_t height, int64_t width, uint8_t* red,
                      uint8_t* green, uint8_t* blue, int64_t plane_stride);

// One plane halved: `height` x `width` (both even, at least 8; rows `source_row` bytes apart) ->
// height / 2 x width / 2 at `out` (rows `out_row` bytes apart), each output the (1, 3, 3, 1) / 8
// filter per axis over the 4 x 4 source pixels around it (edge pixels repeated), rounded half up.
// This is what libswscale's bilinear (SWS_BILINEAR | SWS_ACCURATE_RND | SWS_BITEXACT, the filter
// widened by the scale) computes for a halving, bit for bit (augment_test checks), at about a
// third of its time: RoboTwin's 640x480 cameras go to 240x320 so (docs/BENCHMARKS.md, issue 24).
void halve_plane(const uint8_t* source, int64_t source_row, int64_t height, int64_t width,
                 uint8_t* out, int64_t out_row);
// The same halving of packed RGB rows (3 * width bytes each, rows back to back) into three
// planes: deinterleave_rgb then halve_plane on each plane, bit for bit, reading the frame once.
void halve_rgb(const uint8_t* packed, int64_t height, int64_t width, uint8_t* red, uint8_t* green,
               uint8_t* blue, int64_t out_row);

// ITU-R BT.601, limited or full range, as libswscale converts the decoders' frames (offsets as
// video_reader.h's nv12_to_rgb), on luma and chroma at 64 times their levels (filtered sums not
// yet rounded to levels), in 2^14 and 2^20 fixed point.
struct Yuv64Matrix {
  explicit Yuv64Matrix(bool full_range);
  int32_t y_gain, v_to_red, u_to_green, v_to_green, u_to_blue, luma_black, red_blue_add, green_add;
};
// `count` pixels of luma and chroma at 64 times their levels -> RGB, rounded and clipped to bytes.
void rgb_from_yuv64(const Yuv64Matrix& matrix, const uint16_t* y_sums, const uint16_t* u_sums,
                    const uint16_t* v_sums, int64_t count, uint8_t* red, uint8_t* green,
                    uint8_t* blue);

// A YUV 4:2:0 frame (8-bit luma `height` x `width`, both even, at least 8; chroma planes of half
// that, rows `luma_row` and `chroma_row` bytes apart) -> three RGB planes of half its width and
// height, rounded to levels: the luma halved by halve_plane's filter, the chroma by the filter that
// halving RGB gives a chroma sample covering its 2x2 pixels ((1, 6, 1) / 8 per axis), then
// rgb_from_yuv64. What libswscale's RGB24 then halve_rgb give, converting a quarter
// of the pixels, not bit for bit: 0.3 levels apart on average on the real dataset's frames, more
// where a colour clips in some of the pixels averaged (video_io_test, video_decode_test check).
void halve_yuv420(const uint8_t* luma, int64_t luma_row, const uint8_t* cb, const uint8_t* cr,
                  int64_t chroma_row, int64_t height, int64_t width, bool full_range, uint8_t* red,
                  uint8_t* green, uint8_t* blue, int64_t out_row);

// Where one output row or column samples the source along an axis: between source pixels
// `first` and `second` (the same one on the border) with `weight` on the second.
struct AxisTaps {
  const int32_t* first;
  const int32_t* second;
  const float* weight;
};

// Bilinear sampling of one plane at positions separable per axis (a camera warp without rotation:
// image_ops' warp_planes): output pixel (i, j), of `out_height` x `out_width` at `out` (rows
// `out_row` bytes apart), blends source columns `columns[j]` and rows `rows[i]` of `source`
// (`source_width` pixels a row, rows `source_row` bytes apart), as the per-pixel sampling does:
// each row first (a + fx * (b - a) in float), then across rows, + 0.5 and truncated to uint8. Bit
// for bit that sampling's result, each source row interpolated once instead of per output pixel.
void sample_separable(const uint8_t* source, int64_t source_row, int64_t source_width,
                      const AxisTaps& columns, const AxisTaps& rows, int64_t out_height,
                      int64_t out_width, uint8_t* out, int64_t out_row);

// Where each output pixel of a warp samples the source (`count` pixels, row-major): its top-left
// tap at `offset` (bytes into the source) and the weights along x and y toward the next column and
// row. A tap on the last column or row has weight exactly 0 toward the next (the position is
// clamped to the plane there), so the sampling may read past the plane, into finite zeros,
// without a step of its own per pixel (12 bytes a pixel, not 20).
struct PixelTaps {
  int32_t* offset;
  float* fx;
  float* fy;
};

// The taps of the affine map `theta` (row-major 2x3, grid_sample's normalised [-1, 1]
// coordinates, align_corners false, border padding) over a height x width plane whose rows are
// `row` bytes apart: output pixel (i, j) samples the source at theta applied to its normalised
// centre, clamped to the plane (image_ops' warp_planes).
void warp_taps(const float theta[6], int64_t height, int64_t width, int64_t row,
               const PixelTaps& taps);

// Bilinear sampling of one plane at the pixels' own taps (a camera warp with rotation): output
// pixel (i, j) of `height` x `width` at `out` (rows `out_row` bytes apart) blends its four pixels
// of `source` (the same size, rows `source_row` bytes apart) as the per-pixel sampling of torch's
// grid_sample does, each row first (a + fx * (b - a) in float), then across rows, + 0.5 and
// truncated to uint8. `levels` is scratch for bilinear_levels_size(height, source_row) floats,
// zeroed once (the sampling reads one row past the plane, and the vector path 32 levels further).
constexpr int64_t bilinear_levels_size(int64_t height, int64_t source_row) {
  return (height + 1) * source_row + 32;
}
void sample_bilinear(const uint8_t* source, int64_t source_row, const PixelTaps& taps,
                     int64_t height, int64_t width, float* levels, uint8_t* out, int64_t out_row);

// The colour work of one image, in this order, each step clamped to [0, 1] (the same steps as
// image_ops' adjust_color_, apply_rgb_gain_ and apply_shadow_, which define it): levels / 255,
// brightness, contrast (blend with the image's mean ITU-R 601 grey), saturation (blend with each
// pixel's grey), gamma, RGB gain, then the shadow's attenuation. Factors of 1 skip their step.
struct ColourJitter {
  float brightness = 1.0f;
  float contrast = 1.0f;
  float saturation = 1.0f;
  float gamma = 1.0f;
  float gain[3] = {1.0f, 1.0f, 1.0f};
  const float* attenuation = nullptr;  // [height * width] shadow factors, or none
};

// One uint8 image of three planes (`source_plane` bytes apart, rows `source_row` bytes apart) ->
// `out`: float [3, height, width] contiguous in [0, 1], or, with `levels`, uint8 [3, height,
// width] contiguous, rounded to the nearest level (halves to even).
void jitter_image(const uint8_t* source, int64_t source_plane, int64_t source_row, int64_t height,
                  int64_t width, const ColourJitter& jitter, float* out);
void jitter_image_levels(const uint8_t* source, int64_t source_plane, int64_t source_row,
                         int64_t height, int64_t width, const ColourJitter& jitter, uint8_t* out);

// jitter_image, then unit_to_signed, in one pass: channel c's [height, width] floats in [-1, 1]
// at planes[c] (three separate planes, e.g. one frame of a [3, T, H, W] video), bit for bit those
// two.
void jitter_image_signed(const uint8_t* source, int64_t source_plane, int64_t source_row,
                         int64_t height, int64_t width, const ColourJitter& jitter,
                         float* const planes[3]);

// jitter_image, then unit_to_levels, in one pass: channel c's [height, width] levels at planes[c],
// bit for bit those two.
void jitter_image_video_levels(const uint8_t* source, int64_t source_plane, int64_t source_row,
                               int64_t height, int64_t width, const ColourJitter& jitter,
                               uint8_t* const planes[3]);

// `count` floats in [0, 1] -> x * 2 - 1 at `out`, as torch's mul_(2) then sub_(1) round them: x * 2
// is exact, the subtraction rounds once.
void unit_to_signed(const float* unit, int64_t count, float* out);

// `count` floats in [0, 1] -> uint8 levels at `out`: unit_to_signed then image_ops'
// signed_unit_to_levels in one pass, each step rounded as those torch ops round it (((x * 2 - 1) +
// 1) * 127.5, halves to even, clamped to [0, 255]), so the levels are theirs bit for bit.
void unit_to_levels(const float* unit, int64_t count, uint8_t* out);

}  // namespace wam::pixel_kernels
