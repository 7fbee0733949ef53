#include "data/image_ops.h"

#include <cmath>
#include <string>

#include "wam/error.h"
#include "wam/tensor.h"

namespace wam::image_ops {
namespace F = torch::nn::functional;

namespace {

constexpr double kPi = 3.14159265358979323846;

// ITU-R 601 luma, as torchvision's rgb_to_grayscale: [N, 3, H, W] -> [N, 1, H, W].
at::Tensor grayscale(const at::Tensor& images) {
  return (0.299 * images.select(1, 0) + 0.587 * images.select(1, 1) + 0.114 * images.select(1, 2))
      .unsqueeze(1);
}

at::Tensor blend(const at::Tensor& images, const at::Tensor& other, double factor) {
  return (factor * images + (1.0 - factor) * other).clamp(0.0, 1.0);
}

}  // namespace

at::Tensor to_float_images(const at::Tensor& frames_nhwc) {
  // Reordering the bytes first is cheaper than reordering floats.
  return frames_nhwc.permute({0, 3, 1, 2}).contiguous().to(at::kFloat).div_(255.0);
}

at::Tensor resize(const at::Tensor& images, int64_t height, int64_t width) {
  if (images.size(2) == height && images.size(3) == width) return images.clone();
  return F::interpolate(images, F::InterpolateFuncOptions()
                                    .size(std::vector<int64_t>{height, width})
                                    .mode(torch::kBilinear)
                                    .align_corners(false)
                                    .antialias(true));
}

at::Tensor warp(const at::Tensor& images, const CameraWarp& camera_warp) {
  const double height = static_cast<double>(images.size(2));
  const double width = static_cast<double>(images.size(3));
  const double angle = camera_warp.rotation_degrees * kPi / 180.0;
  const double c = camera_warp.scale * std::cos(angle);
  const double s = camera_warp.scale * std::sin(angle);
  // The pixel-space map expressed in grid_sample's normalised [-1, 1] coordinates; the aspect
  // factors keep a rotation rigid on non-square images.
  const auto theta = torch::tensor({c, -s * height / width, 2.0 * camera_warp.translate_x,  //
                                    s * width / height, c, 2.0 * camera_warp.translate_y},
                                   torch::kFloat)
                         .view({1, 2, 3})
                         .expand({images.size(0), 2, 3});
  const auto grid = F::affine_grid(theta, images.sizes(), /*align_corners=*/false);
  // Border padding: corners exposed by a rotation repeat the edge instead of becoming black
  // wedges, which the model could learn as a cue for "augmented".
  return F::grid_sample(images, grid,
                        F::GridSampleFuncOptions()
                            .mode(torch::kBilinear)
                            .padding_mode(torch::kBorder)
                            .align_corners(false));
}

at::Tensor adjust_color(const at::Tensor& images, const ColorAdjustment& adjustment) {
  at::Tensor out = images;
  if (adjustment.brightness != 1.0) {
    out = (out * adjustment.brightness).clamp(0.0, 1.0);
  }
  if (adjustment.contrast != 1.0) {
    out = blend(out, grayscale(out).mean({1, 2, 3}, /*keepdim=*/true), adjustment.contrast);
  }
  if (adjustment.saturation != 1.0) {
    out = blend(out, grayscale(out), adjustment.saturation);
  }
  if (adjustment.gamma != 1.0) {
    out = out.pow(adjustment.gamma).clamp(0.0, 1.0);
  }
  return out.is_same(images) ? images.clone() : out;
}

at::Tensor apply_rgb_gain(const at::Tensor& images, const std::array<double, 3>& gain) {
  const auto factors = torch::tensor({gain[0], gain[1], gain[2]}, torch::kFloat).view({1, 3, 1, 1});
  return (images * factors).clamp(0.0, 1.0);
}

at::Tensor apply_shadow(const at::Tensor& images, const Shadow& shadow) {
  const int64_t height = images.size(2);
  const int64_t width = images.size(3);
  const auto options = torch::TensorOptions().dtype(torch::kFloat);
  const auto ys =
      (torch::arange(height, options).add(0.5).div(height) - shadow.center_y).view({height, 1});
  const auto xs =
      (torch::arange(width, options).add(0.5).div(width) - shadow.center_x).view({1, width});
  const auto squared_distance = ys * ys + xs * xs;
  const auto attenuation =
      1.0 - shadow.depth * torch::exp(-squared_distance / (2.0 * shadow.sigma * shadow.sigma));
  return images * attenuation.view({1, 1, height, width});
}

at::Tensor gaussian_blur(const at::Tensor& images, int64_t kernel_size, double sigma) {
  const int64_t radius = kernel_size / 2;
  std::vector<double> taps;
  double total = 0.0;
  for (int64_t i = -radius; i <= radius; ++i) {
    taps.push_back(std::exp(-static_cast<double>(i * i) / (2.0 * sigma * sigma)));
    total += taps.back();
  }
  const int64_t height = images.size(2);
  const int64_t width = images.size(3);
  // Weighted sums of shifted views: for the small kernels used here this is several times
  // faster than a depthwise conv2d on the CPU.
  const auto padded =
      F::pad(images, F::PadFuncOptions({radius, radius, radius, radius}).mode(torch::kReflect));
  at::Tensor rows = padded.narrow(2, 0, height) * (taps[0] / total);
  for (int64_t i = 1; i < kernel_size; ++i) rows.add_(padded.narrow(2, i, height), taps[i] / total);
  at::Tensor out = rows.narrow(3, 0, width) * (taps[0] / total);
  for (int64_t i = 1; i < kernel_size; ++i) out.add_(rows.narrow(3, i, width), taps[i] / total);
  return out.clamp_(0.0, 1.0);
}

at::Tensor downsample_upsample(const at::Tensor& images, double scale) {
  const int64_t height = images.size(2);
  const int64_t width = images.size(3);
  const int64_t low_height = std::max<int64_t>(1, std::llround(height * scale));
  const int64_t low_width = std::max<int64_t>(1, std::llround(width * scale));
  return resize(resize(images, low_height, low_width), height, width).clamp(0.0, 1.0);
}

at::Tensor add_gaussian_noise(const at::Tensor& images, double stddev, at::Generator& generator) {
  const auto noise = torch::randn(images.sizes(), generator, images.options());
  return (images + stddev * noise).clamp(0.0, 1.0);
}

at::Tensor to_signed_unit(const at::Tensor& images) { return images * 2.0 - 1.0; }

std::vector<Rect> canvas_layout(const std::string& layout, int64_t cameras, int64_t canvas_height,
                                int64_t canvas_width) {
  if (layout == "vertical") {
    if (cameras < 1 || canvas_height % cameras != 0) {
      throw Error("canvas \"vertical\" stacks the cameras in equal rows of the " +
                  std::to_string(canvas_height) + "-pixel canvas; " + std::to_string(cameras) +
                  " cameras do not divide it");
    }
    std::vector<Rect> slots;
    const int64_t row = canvas_height / cameras;
    for (int64_t i = 0; i < cameras; ++i) slots.push_back({i * row, 0, row, canvas_width});
    return slots;
  }
  if (layout == "robotwin") {
    if (cameras != 3) {
      throw Error("canvas \"robotwin\" needs 3 cameras (high, left wrist, right wrist), got " +
                  std::to_string(cameras) + "; check the sampler's cameras");
    }
    const int64_t top = canvas_height * 2 / 3;
    const int64_t half = canvas_width / 2;
    return {{0, 0, top, canvas_width},
            {top, 0, canvas_height - top, half},
            {top, half, canvas_height - top, canvas_width - half}};
  }
  throw Error("unknown canvas layout \"" + layout + "\" (allowed: vertical, robotwin)");
}

at::Tensor compose_canvas(const std::vector<at::Tensor>& cameras, const std::vector<Rect>& slots,
                          int64_t canvas_height, int64_t canvas_width) {
  const int64_t frames = cameras.front().size(0);
  auto canvas = torch::zeros({frames, 3, canvas_height, canvas_width}, torch::kFloat);
  for (size_t i = 0; i < cameras.size(); ++i) {
    const Rect& slot = slots[i];
    auto region = canvas.narrow(2, slot.top, slot.height).narrow(3, slot.left, slot.width);
    const bool fits = cameras[i].size(2) == slot.height && cameras[i].size(3) == slot.width;
    region.copy_(fits ? cameras[i] : resize(cameras[i], slot.height, slot.width));
  }
  return canvas;
}

}  // namespace wam::image_ops
