// Image kernels of the Augment stage, on float images [N, 3, H, W] with values in [0, 1]. Every
// kernel returns a new tensor and leaves its input untouched; the random parameters are drawn by
// the caller, so the kernels themselves are deterministic and testable on their own.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <vector>

namespace wam::image_ops {

// uint8 [N, H, W, 3] (decoder layout) -> float [N, 3, H, W] in [0, 1].
at::Tensor to_float_images(const at::Tensor& frames_nhwc);

// Bilinear resize with antialiasing (a no-op copy when the size already matches).
at::Tensor resize(const at::Tensor& images, int64_t height, int64_t width);

// A camera-motion warp. Output pixel p samples the input at c + scale * R(rotation) * (p - c) + t,
// where c is the image centre and t = (translate_x * W, translate_y * H): scale < 1 zooms in,
// keeping that fraction of the field of view.
struct CameraWarp {
  double scale = 1.0;
  double translate_x = 0.0;  // fraction of the width
  double translate_y = 0.0;  // fraction of the height
  double rotation_degrees = 0.0;
};
at::Tensor warp(const at::Tensor& images, const CameraWarp& camera_warp);

// Factors of 1 leave the image unchanged. Applied in this order, each result clamped to [0, 1].
struct ColorAdjustment {
  double brightness = 1.0;
  double contrast = 1.0;
  double saturation = 1.0;
  double gamma = 1.0;
};
at::Tensor adjust_color(const at::Tensor& images, const ColorAdjustment& adjustment);

at::Tensor apply_rgb_gain(const at::Tensor& images, const std::array<double, 3>& gain);

// Darkens a soft Gaussian blob: image * (1 - depth * exp(-d^2 / (2 sigma^2))), with d measured in
// fractions of the image height and width from (center_y, center_x).
struct Shadow {
  double center_y = 0.5;
  double center_x = 0.5;
  double depth = 0.0;
  double sigma = 0.5;
};
at::Tensor apply_shadow(const at::Tensor& images, const Shadow& shadow);

// Separable Gaussian blur with reflect padding; kernel_size is odd.
at::Tensor gaussian_blur(const at::Tensor& images, int64_t kernel_size, double sigma);

// Resizes down to `scale` of the size and back up: the softness of a lower-resolution sensor.
at::Tensor downsample_upsample(const at::Tensor& images, double scale);

at::Tensor add_gaussian_noise(const at::Tensor& images, double stddev, at::Generator& generator);

// [0, 1] -> [-1, 1], i.e. Normalize(mean 0.5, std 0.5).
at::Tensor to_signed_unit(const at::Tensor& images);

// Where each camera goes on the canvas.
struct Rect {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// `vertical`: the cameras stacked top to bottom in equal rows of the full width.
// `robotwin`: camera 0 on the top two thirds at full width, cameras 1 and 2 side by side in the
// bottom third. Throws wam::Error when the camera count does not fit the layout.
std::vector<Rect> canvas_layout(const std::string& layout, int64_t cameras, int64_t canvas_height,
                                int64_t canvas_width);

// Resizes each camera [N, 3, h, w] into its slot of a zero canvas [N, 3, H, W].
at::Tensor compose_canvas(const std::vector<at::Tensor>& cameras, const std::vector<Rect>& slots,
                          int64_t canvas_height, int64_t canvas_width);

}  // namespace wam::image_ops
