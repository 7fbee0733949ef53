// Image kernels of the Augment stage. The random parameters are drawn by the caller, so the
// kernels themselves are deterministic and testable on their own.
//
// Two kinds of images:
// - uint8 planes [N, C, H, W] (planar RGB): what the geometry works on, before any float. Buffers
//   made here have rows padded past the width (libswscale's SIMD writes a few bytes past a row's
//   end), so they are views with stride(2) >= W; kernels accept any tensor with unit column
//   stride. These kernels return new tensors (or their input, unchanged, when there is nothing
//   to do) and never write to their input.
// - float images [N, 3, H, W] with values in [0, 1]: the colour work, on the small canvas. Kernels
//   ending in `_` modify their argument in place: pass only tensors the caller made itself, never a
//   received field. The others return a new tensor.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/canvas_layout.h"

namespace wam::image_ops {

// ---- uint8 planes -------------------------------------------------------------------------------

// A new uint8 [n, c, h, w] whose rows are padded (stride(2) > w).
at::Tensor padded_planes(int64_t n, int64_t c, int64_t h, int64_t w);

// Decoder frames uint8 [N, H, W, 3] (packed RGB) -> planes [N, 3, H, W] (exact).
at::Tensor to_planes(const at::Tensor& frames_nhwc);

// Resizes every plane to height x width with libswscale's bilinear filter, which widens with the
// scale when shrinking (antialiased, like torch's interpolate(antialias=true)); each plane is
// scaled on its own (GRAY8), so there is no colour-space round trip (packed RGB24 or GBRP scaling
// goes through YUV inside libswscale). Against torch's float antialiased bilinear resize, which
// Augment used before, on camera-like content at the configs' sizes (augment_test's
// ResizePlanesMatchesTorchAntialiasedBilinear): mean 0.25 levels, i.e. the rounding to uint8; at
// most 0.51 inside the image; at most ~2 levels on the two outermost rows and columns, where
// swscale repeats the edge pixel and torch renormalises the truncated filter (up to 13 on pure
// noise). SWS_AREA, the other antialiasing filter, is a box: mean 2-4 levels off on the same
// content, max 13-24 (measured once, not kept). libswscale's output bit for bit, computed by
// pixel_kernels' halving and plane_resize's kernel where they apply (3x faster), by libswscale
// itself elsewhere. Returns `planes` itself when the size already matches.
at::Tensor resize_planes(const at::Tensor& planes, int64_t height, int64_t width);

// resize_planes() in a resize mode (canvas_layout.h's place()): stretch is resize_planes itself;
// fit resizes into the centred target and sets the bars around it to `fill`; fill resizes the
// centred part of the planes that has the target's aspect ratio. Returns `planes` itself when the
// size already matches.
at::Tensor resize_planes_as(const at::Tensor& planes, int64_t height, int64_t width,
                            ResizeMode mode, uint8_t fill);

// Decoder frames uint8 [N, H, W, 3] -> planes [N, 3, height, width]: resize_planes_as(
// to_planes(frames), ...), bit for bit. A halving (RoboTwin's 640x480 cameras to 240x320) goes
// straight from the packed frames (pixel_kernels' halve_rgb), never making the full-size planes.
at::Tensor frames_to_planes_as(const at::Tensor& frames_nhwc, int64_t height, int64_t width,
                               ResizeMode mode, uint8_t fill);

// A camera-motion warp. Output pixel p samples the input at c + scale * R(rotation) * (p - c) + t,
// where c is the image centre and t = (translate_x * W, translate_y * H): scale < 1 zooms in,
// keeping that fraction of the field of view. The map is in fractions of the image, so the same
// warp means the same motion at any resolution.
struct CameraWarp {
  double scale = 1.0;
  double translate_x = 0.0;  // fraction of the width
  double translate_y = 0.0;  // fraction of the height
  double rotation_degrees = 0.0;
};

// The affine map of a camera warp on a height x width image, in grid_sample's normalised [-1, 1]
// coordinates (row-major 2x3); the aspect factors keep a rotation rigid on non-square images.
std::array<double, 6> warp_theta(const CameraWarp& camera_warp, double height, double width);

// The warp on uint8 planes: bilinear sampling, coordinates outside the image clamped to its border
// (corners exposed by a rotation repeat the edge instead of becoming black wedges, which the model
// could learn as a cue for "augmented"), rounded to uint8. The same map and sampling as
// warp_float() (torch's affine_grid + grid_sample, align_corners false, border padding) to within
// the rounding.
at::Tensor warp_planes(const at::Tensor& planes, const CameraWarp& camera_warp);

// Resizes each camera's planes [N, 3, h, w] into its slot of a zero uint8 canvas [N, 3, H, W]
// (contiguous) with resize_planes_as().
at::Tensor compose_canvas(const std::vector<at::Tensor>& cameras, const std::vector<Rect>& slots,
                          int64_t canvas_height, int64_t canvas_width, ResizeMode mode,
                          uint8_t fill);

// uint8 [N, C, H, W] -> float [N, C, H, W] in [0, 1] (contiguous).
at::Tensor to_unit_float(const at::Tensor& planes);

// float [N, C, H, W] in [0, 1] -> a new uint8 tensor, rounded to the nearest level; `images` is
// scaled to [0, 255] in place on the way (pass only a tensor the caller made).
at::Tensor to_uint8_(at::Tensor& images);

// ---- float images -------------------------------------------------------------------------------
// These run on the images' device: they define the uint8 kernels above, and on a GPU they are
// Augment itself (data/augment_ops.h).

// Bilinear resize with antialiasing (a no-op copy when the size already matches).
at::Tensor resize(const at::Tensor& images, int64_t height, int64_t width);

// The camera warp in float with torch (affine_grid + grid_sample): the definition warp_planes()
// is tested against.
at::Tensor warp_float(const at::Tensor& images, const CameraWarp& camera_warp);

// Factors of 1 leave the image unchanged. Applied in this order, each result clamped to [0, 1];
// contrast blends with the mean grey level of each image.
struct ColorAdjustment {
  double brightness = 1.0;
  double contrast = 1.0;
  double saturation = 1.0;
  double gamma = 1.0;

  bool is_identity() const {
    return brightness == 1.0 && contrast == 1.0 && saturation == 1.0 && gamma == 1.0;
  }
};
void adjust_color_(at::Tensor& images, const ColorAdjustment& adjustment);

void apply_rgb_gain_(at::Tensor& images, const std::array<double, 3>& gain);

// Darkens a soft Gaussian blob: image * (1 - depth * exp(-d^2 / (2 sigma^2))), with d measured in
// fractions of the image height and width from (center_y, center_x).
struct Shadow {
  double center_y = 0.5;
  double center_x = 0.5;
  double depth = 0.0;
  double sigma = 0.5;
};
void apply_shadow_(at::Tensor& images, const Shadow& shadow);

// The factor apply_shadow_() multiplies every channel of pixel (y, x) by: float [height, width].
at::Tensor shadow_attenuation(const Shadow& shadow, int64_t height, int64_t width,
                              at::Device device = at::kCPU);

// What Augment does to the colours of a sample's canvas; unset parts are off.
struct ColourJitter {
  ColorAdjustment color;
  std::optional<std::array<double, 3>> rgb_gain;
  std::optional<Shadow> shadow;
};

// uint8 planes [N, 3, H, W] -> float [N, 3, H, W] in [0, 1] (contiguous) with `jitter` applied:
// to_unit_float(), then adjust_color_(), apply_rgb_gain_() and apply_shadow_(), which define it,
// fused into one pass per image (pixel_kernels.h); the same arithmetic in float, so it equals
// them within float rounding (augment_test's FusedColourJitterMatchesTheTorchOps bounds it).
at::Tensor jittered_unit_float(const at::Tensor& planes, const ColourJitter& jitter);

// uint8 planes [N, 3, H, W] -> uint8 [N, 3, H, W] (contiguous): jittered_unit_float() with only
// `color`, rounded to the nearest level as to_uint8_() does.
at::Tensor jittered_levels(const at::Tensor& planes, const ColorAdjustment& color);

// Separable Gaussian blur with reflect padding; kernel_size is odd.
at::Tensor gaussian_blur(const at::Tensor& images, int64_t kernel_size, double sigma);

// Resizes down to `scale` of the size and back up: the softness of a lower-resolution sensor.
at::Tensor downsample_upsample(const at::Tensor& images, double scale);

at::Tensor add_gaussian_noise(const at::Tensor& images, double stddev, at::Generator& generator);

// ---- video as uint8 levels ----------------------------------------------------------------------
// `video` can travel as uint8 levels (a quarter of the bytes): Augment writes them with
// video_dtype uint8, HostToDevice turns them back into float. Both ends use these two, so a level
// means the same everywhere.

// float in [-1, 1] -> a new uint8 tensor of levels round((x + 1) * 127.5), halves to even, clamped
// to [0, 255]; `images` is only read.
at::Tensor signed_unit_to_levels(const at::Tensor& images);

// Levels held in a float tensor (e.g. a float copy of the uint8 levels) -> [-1, 1] in place:
// x / 127.5 - 1, within half a level of what signed_unit_to_levels() was given.
void levels_to_signed_unit_(at::Tensor& levels);

// Frames [first, first + count) of a unit canvas (float [T, 3, H, W] in [0, 1], contiguous) -> a
// new compact [3, count, H, W]: x * 2 - 1 in [-1, 1] (Normalize(mean 0.5, std 0.5), rounded as
// torch's x.mul_(2).sub_(1) rounds it), or with `as_levels` the uint8 levels signed_unit_to_levels
// makes of those, bit for bit; one pass per plane, where the torch ops and a compacting copy made
// up to eight.
at::Tensor unit_frames_to_video(const at::Tensor& canvas, int64_t first, int64_t count,
                                bool as_levels);

// A frame range [first, first + count) of a canvas, and whether its video is uint8 levels.
struct FrameRange {
  int64_t first = 0, count = 0;
  bool as_levels = false;
};

// uint8 planes [T, 3, H, W] -> for each range, a new [3, count, H, W], float in [-1, 1] or uint8
// levels: unit_frames_to_video(jittered_unit_float(planes, jitter), first, count, as_levels) bit
// for bit, each value written once, without the float canvas between them.
std::vector<at::Tensor> jittered_videos(const at::Tensor& planes, const ColourJitter& jitter,
                                        const std::vector<FrameRange>& ranges);

}  // namespace wam::image_ops
