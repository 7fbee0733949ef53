#include "data/image_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "common/io/ffmpeg.h"
#include "data/pixel_kernels.h"
#include "data/plane_resize.h"
#include "wam/error.h"
#include "wam/tensor.h"

namespace wam::image_ops {
namespace F = torch::nn::functional;

namespace {

constexpr double kPi = 3.14159265358979323846;

// Bilinear, widened when shrinking (antialiased); exact rounding, and the same output whatever
// SIMD the CPU has, so a sample renders identically on every machine of a job.
constexpr int kResizeFlags = SWS_BILINEAR | SWS_ACCURATE_RND | SWS_BITEXACT;

// Row padding of the planes made here: libswscale's SIMD stores write up to a vector past a row's
// width (measured: 4 bytes on this machine's SSE/AVX paths), 64 leaves room for any vector width.
constexpr int64_t kRowPadding = 64;

// libswscale contexts and plane resizers are not thread-safe and cost far more to make than to
// use: each thread keeps its own, one per key (sizes, formats, flags), which is a handful (raw ->
// camera, camera -> slot).
template <class Key, class Value>
class PerThreadCache {
 public:
  template <class Make>
  const Value& get(const Key& key, Make make) {
    for (const auto& [k, value] : entries_) {
      if (k == key) return value;
    }
    Value value = make();
    if (entries_.size() == kCapacity) entries_.erase(entries_.begin());
    entries_.emplace_back(key, std::move(value));
    return entries_.back().second;
  }

 private:
  static constexpr size_t kCapacity = 16;
  std::vector<std::pair<Key, Value>> entries_;
};

struct ScalerKey {
  int src_width, src_height;
  AVPixelFormat src_format;
  int dst_width, dst_height;
  AVPixelFormat dst_format;
  int flags;
  bool operator==(const ScalerKey&) const = default;
};

SwsContext* scaler(const ScalerKey& key) {
  thread_local PerThreadCache<ScalerKey, ffmpeg::Scaler> cache;
  return cache
      .get(key,
           [&] {
             ffmpeg::Scaler context(sws_getContext(key.src_width, key.src_height, key.src_format,
                                                   key.dst_width, key.dst_height, key.dst_format,
                                                   key.flags, nullptr, nullptr, nullptr));
             if (!context) {
               throw Error("libswscale cannot convert " + std::to_string(key.src_width) + "x" +
                           std::to_string(key.src_height) + " " +
                           av_get_pix_fmt_name(key.src_format) + " to " +
                           std::to_string(key.dst_width) + "x" + std::to_string(key.dst_height) +
                           " " + av_get_pix_fmt_name(key.dst_format));
             }
             return context;
           })
      .get();
}

// The resizer of these sizes, or null where libswscale resizes them (plane_resize.h).
plane_resize::PlaneResizer* plane_resizer(int src_width, int src_height, int dst_width,
                                          int dst_height) {
  thread_local PerThreadCache<std::array<int, 4>, std::unique_ptr<plane_resize::PlaneResizer>>
      cache;
  return cache
      .get({src_width, src_height, dst_width, dst_height},
           [&] {
             return plane_resize::PlaneResizer::make(src_width, src_height, dst_width, dst_height);
           })
      .get();
}

void scale(SwsContext* scaler, const uint8_t* const source[], const int source_stride[],
           int source_height, uint8_t* const destination[], const int destination_stride[]) {
  const int rc =
      sws_scale(scaler, source, source_stride, 0, source_height, destination, destination_stride);
  if (rc < 0) throw Error("libswscale failed to scale an image (error " + std::to_string(rc) + ")");
}

void check_planes(const at::Tensor& planes, const char* what) {
  if (planes.dim() != 4 || planes.scalar_type() != at::kByte || planes.stride(3) != 1 ||
      planes.size(2) < 1 || planes.size(3) < 1) {
    throw Error(std::string(what) + ": expected uint8 planes [N, C, H, W] with unit column " +
                "stride, got " + describe_tensor(planes));
  }
}

const uint8_t* plane(const at::Tensor& planes, int64_t n, int64_t c) {
  return planes.data_ptr<uint8_t>() + n * planes.stride(0) + c * planes.stride(1);
}
uint8_t* plane(at::Tensor& planes, int64_t n, int64_t c) {
  return planes.data_ptr<uint8_t>() + n * planes.stride(0) + c * planes.stride(1);
}

// ITU-R 601 luma, as torchvision's rgb_to_grayscale: [N, 3, H, W] -> [N, 1, H, W].
at::Tensor grayscale(const at::Tensor& images) {
  at::Tensor grey = images.select(1, 0).mul(0.299);
  grey.add_(images.select(1, 1), 0.587).add_(images.select(1, 2), 0.114);
  return grey.unsqueeze(1);
}

// images = factor * images + (1 - factor) * other, clamped to [0, 1].
void blend_(at::Tensor& images, const at::Tensor& other, double factor) {
  images.mul_(factor).add_(other, 1.0 - factor).clamp_(0.0, 1.0);
}

}  // namespace

std::array<double, 6> warp_theta(const CameraWarp& camera_warp, double height, double width) {
  const double angle = camera_warp.rotation_degrees * kPi / 180.0;
  const double c = camera_warp.scale * std::cos(angle);
  const double s = camera_warp.scale * std::sin(angle);
  // clang-format off
  return {c,                  -s * height / width, 2.0 * camera_warp.translate_x,
          s * width / height, c,                   2.0 * camera_warp.translate_y};
  // clang-format on
}

// ---- uint8 planes -------------------------------------------------------------------------------

at::Tensor padded_planes(int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t stride = (w + kRowPadding + kRowPadding - 1) / kRowPadding * kRowPadding;
  return at::empty({n, c, h, stride}, at::kByte).narrow(3, 0, w);
}

namespace {

void check_frames(const at::Tensor& frames_nhwc, const char* what) {
  if (frames_nhwc.dim() != 4 || frames_nhwc.scalar_type() != at::kByte ||
      frames_nhwc.size(3) != 3) {
    throw Error(std::string(what) + ": expected uint8 RGB frames [N, H, W, 3], got " +
                describe_tensor(frames_nhwc));
  }
}

// Whether resizing h x w to height x width halves it in a way halve_plane / halve_rgb compute as
// libswscale does: below 8 source pixels a side libswscale narrows its filter.
bool halves(int64_t h, int64_t w, int64_t height, int64_t width) {
  return h == 2 * height && w == 2 * width && h >= 8 && w >= 8;
}

}  // namespace

at::Tensor to_planes(const at::Tensor& frames_nhwc) {
  check_frames(frames_nhwc, "to_planes");
  const at::Tensor packed = frames_nhwc.contiguous();
  const int64_t n = packed.size(0), h = packed.size(1), w = packed.size(2);
  at::Tensor out = padded_planes(n, 3, h, w);
  // A plain loop, vectorised: libswscale's RGB24 -> GBRP took a tenth of a sample's time
  // (docs/BENCHMARKS.md, issue 24).
  for (int64_t i = 0; i < n; ++i) {
    pixel_kernels::deinterleave_rgb(packed.data_ptr<uint8_t>() + i * h * w * 3, h, w,
                                    plane(out, i, 0), plane(out, i, 1), plane(out, i, 2),
                                    out.stride(2));
  }
  return out;
}

at::Tensor resize_planes(const at::Tensor& planes, int64_t height, int64_t width) {
  check_planes(planes, "resize_planes");
  const int64_t n = planes.size(0), c = planes.size(1), h = planes.size(2), w = planes.size(3);
  if (h == height && w == width) return planes;
  at::Tensor out = padded_planes(n, c, height, width);
  if (halves(h, w, height, width)) {  // libswscale's own output, faster (pixel_kernels.h)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < c; ++k) {
        pixel_kernels::halve_plane(plane(planes, i, k), planes.stride(2), h, w, plane(out, i, k),
                                   out.stride(2));
      }
    }
    return out;
  }
  const int src_width = static_cast<int>(w), src_height = static_cast<int>(h);
  const int dst_width = static_cast<int>(width), dst_height = static_cast<int>(height);
  if (plane_resize::PlaneResizer* resizer =
          plane_resizer(src_width, src_height, dst_width, dst_height)) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < c; ++k) {
        resizer->resize(plane(planes, i, k), planes.stride(2), plane(out, i, k), out.stride(2));
      }
    }
    return out;
  }
  SwsContext* context = scaler({src_width, src_height, AV_PIX_FMT_GRAY8, dst_width, dst_height,
                                AV_PIX_FMT_GRAY8, kResizeFlags});
  const int source_stride[1] = {static_cast<int>(planes.stride(2))};
  const int destination_stride[1] = {static_cast<int>(out.stride(2))};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      const uint8_t* source[1] = {plane(planes, i, k)};
      uint8_t* destination[1] = {plane(out, i, k)};
      scale(context, source, source_stride, src_height, destination, destination_stride);
    }
  }
  return out;
}

at::Tensor resize_planes_as(const at::Tensor& planes, int64_t height, int64_t width,
                            ResizeMode mode, uint8_t fill) {
  check_planes(planes, "resize_planes_as");
  const int64_t n = planes.size(0), c = planes.size(1), h = planes.size(2), w = planes.size(3);
  if (h == height && w == width) return planes;
  const Placement p = place(mode, h, w, height, width);
  const at::Tensor kept =
      planes.narrow(2, p.source.top, p.source.height).narrow(3, p.source.left, p.source.width);
  if (p.target.height == height && p.target.width == width) {
    return resize_planes(kept, height, width);
  }
  at::Tensor out = padded_planes(n, c, height, width);
  out.fill_(fill);
  out.narrow(2, p.target.top, p.target.height)
      .narrow(3, p.target.left, p.target.width)
      .copy_(resize_planes(kept, p.target.height, p.target.width));
  return out;
}

at::Tensor frames_to_planes_as(const at::Tensor& frames_nhwc, int64_t height, int64_t width,
                               ResizeMode mode, uint8_t fill) {
  check_frames(frames_nhwc, "frames_to_planes_as");
  const int64_t n = frames_nhwc.size(0), h = frames_nhwc.size(1), w = frames_nhwc.size(2);
  // A halving keeps the aspect ratio, so every resize mode places the whole frame on the target.
  if (!halves(h, w, height, width)) {
    return resize_planes_as(to_planes(frames_nhwc), height, width, mode, fill);
  }
  const at::Tensor packed = frames_nhwc.contiguous();
  at::Tensor out = padded_planes(n, 3, height, width);
  for (int64_t i = 0; i < n; ++i) {
    pixel_kernels::halve_rgb(packed.data_ptr<uint8_t>() + i * h * w * 3, h, w, plane(out, i, 0),
                             plane(out, i, 1), plane(out, i, 2), out.stride(2));
  }
  return out;
}

namespace {

// grid_sample's source position (align_corners false, border padding) along an axis of `size`
// pixels, for the output pixel whose normalised centre the warp maps to `mapped`.
float source_position(float mapped, float size) {
  return std::clamp(((mapped + 1.0f) * size - 1.0f) / 2.0f, 0.0f, size - 1.0f);
}
// The normalised centre of pixel `k` of `size`.
float normalised_centre(int64_t k, float size) {
  return static_cast<float>(2 * k + 1) / size - 1.0f;
}

// The taps of one axis of a warp without rotation: output pixel k samples at scale * centre +
// shift, as the per-pixel map below computes it (its cross term is a zero there, which changes no
// bit once 1 is added).
struct WarpAxis {
  std::vector<int32_t> first, second;
  std::vector<float> weight;

  WarpAxis(int64_t size, float scale, float shift)
      : first(static_cast<size_t>(size)), second(first.size()), weight(first.size()) {
    const float extent = static_cast<float>(size);
    for (int64_t k = 0; k < size; ++k) {
      const float x = source_position(scale * normalised_centre(k, extent) + shift, extent);
      const auto x0 = static_cast<int32_t>(x);
      first[static_cast<size_t>(k)] = x0;
      second[static_cast<size_t>(k)] = x0 + 1 < size ? x0 + 1 : x0;
      weight[static_cast<size_t>(k)] = x - static_cast<float>(x0);
    }
  }
  pixel_kernels::AxisTaps taps() const { return {first.data(), second.data(), weight.data()}; }
};

}  // namespace

// Written by hand: no library we link warps uint8 images (libswscale only scales; torch's
// grid_sample wants float and costs ~10x more on the CPU). Same arithmetic as torch's
// affine_grid + grid_sample (align_corners false, border padding, bilinear), in float. Without
// rotation (RoboTwin's camera jitter) the map is separable and pixel_kernels' sample_separable
// computes the same bits about 4x faster; with it (LIBERO's, up to 5 degrees) pixel_kernels'
// sample_bilinear picks each pixel's four source levels as floats, with the same bits as the
// scalar loop it replaced: by AVX-512 permutes of the two or three source rows a block of 16
// pixels spans, else by the vectoriser's gathers (docs/BENCHMARKS.md, issue 24).
at::Tensor warp_planes(const at::Tensor& planes, const CameraWarp& camera_warp) {
  check_planes(planes, "warp_planes");
  const int64_t n = planes.size(0), c = planes.size(1), h = planes.size(2), w = planes.size(3);
  const auto theta = warp_theta(camera_warp, static_cast<double>(h), static_cast<double>(w));
  const float t[6] = {static_cast<float>(theta[0]), static_cast<float>(theta[1]),
                      static_cast<float>(theta[2]), static_cast<float>(theta[3]),
                      static_cast<float>(theta[4]), static_cast<float>(theta[5])};
  const int64_t row = planes.stride(2);
  at::Tensor out = padded_planes(n, c, h, w);
  const int64_t out_row = out.stride(2);
  if (t[1] == 0.0f && t[3] == 0.0f) {
    const WarpAxis columns(w, t[0], t[2]), rows(h, t[4], t[5]);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t k = 0; k < c; ++k) {
        pixel_kernels::sample_separable(plane(planes, b, k), row, w, columns.taps(), rows.taps(), h,
                                        w, plane(out, b, k), out_row);
      }
    }
    return out;
  }
  // The sampling position of every output pixel, shared by all planes.
  // warp_taps writes every tap: not zeroed first (3 MB for the VLM's 512x512 images).
  const auto count = static_cast<size_t>(h * w);
  const auto offsets = std::make_unique_for_overwrite<int32_t[]>(count);
  const auto weights = std::make_unique_for_overwrite<float[]>(2 * count);
  const pixel_kernels::PixelTaps taps{offsets.get(), weights.get(), weights.get() + count};
  pixel_kernels::warp_taps(t, h, w, row, taps);
  std::vector<float> levels(static_cast<size_t>(pixel_kernels::bilinear_levels_size(h, row)));
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t k = 0; k < c; ++k) {
      pixel_kernels::sample_bilinear(plane(planes, b, k), row, taps, h, w, levels.data(),
                                     plane(out, b, k), out_row);
    }
  }
  return out;
}

at::Tensor compose_canvas(const std::vector<at::Tensor>& cameras, const std::vector<Rect>& slots,
                          int64_t canvas_height, int64_t canvas_width, ResizeMode mode,
                          uint8_t fill) {
  const int64_t frames = cameras.front().size(0);
  // Zeroed only where the cameras leave some of it uncovered (slots do not overlap): LIBERO's and
  // RoboTwin's layouts tile it whole.
  int64_t covered = 0;
  for (size_t i = 0; i < cameras.size(); ++i) covered += slots[i].height * slots[i].width;
  at::Tensor canvas = covered == canvas_height * canvas_width
                          ? at::empty({frames, 3, canvas_height, canvas_width}, at::kByte)
                          : at::zeros({frames, 3, canvas_height, canvas_width}, at::kByte);
  for (size_t i = 0; i < cameras.size(); ++i) {
    const Rect& slot = slots[i];
    canvas.narrow(2, slot.top, slot.height)
        .narrow(3, slot.left, slot.width)
        .copy_(resize_planes_as(cameras[i], slot.height, slot.width, mode, fill));
  }
  return canvas;
}

at::Tensor to_unit_float(const at::Tensor& planes) {
  return at::empty(planes.sizes(), at::kFloat).copy_(planes).div_(255.0);
}

at::Tensor to_uint8_(at::Tensor& images) {
  return images.mul_(255.0).round_().clamp_(0.0, 255.0).to(at::kByte);
}

// ---- float images -------------------------------------------------------------------------------

at::Tensor resize(const at::Tensor& images, int64_t height, int64_t width) {
  if (images.size(2) == height && images.size(3) == width) return images.clone();
  return F::interpolate(images, F::InterpolateFuncOptions()
                                    .size(std::vector<int64_t>{height, width})
                                    .mode(torch::kBilinear)
                                    .align_corners(false)
                                    .antialias(true));
}

at::Tensor warp_float(const at::Tensor& images, const CameraWarp& camera_warp) {
  const auto t = warp_theta(camera_warp, static_cast<double>(images.size(2)),
                            static_cast<double>(images.size(3)));
  const auto theta = torch::tensor({t[0], t[1], t[2], t[3], t[4], t[5]}, torch::kFloat)
                         .to(images.device())
                         .view({1, 2, 3})
                         .expand({images.size(0), 2, 3});
  const auto grid = F::affine_grid(theta, images.sizes(), /*align_corners=*/false);
  return F::grid_sample(images, grid,
                        F::GridSampleFuncOptions()
                            .mode(torch::kBilinear)
                            .padding_mode(torch::kBorder)
                            .align_corners(false));
}

void adjust_color_(at::Tensor& images, const ColorAdjustment& adjustment) {
  if (adjustment.brightness != 1.0) {
    images.mul_(adjustment.brightness).clamp_(0.0, 1.0);
  }
  if (adjustment.contrast != 1.0) {
    blend_(images, grayscale(images).mean({1, 2, 3}, /*keepdim=*/true), adjustment.contrast);
  }
  if (adjustment.saturation != 1.0) {
    blend_(images, grayscale(images), adjustment.saturation);
  }
  if (adjustment.gamma != 1.0) {
    // x^g as exp(g * log x): torch's vectorised log and exp cost a third of its pow on the CPU;
    // log 0 = -inf gives exp(-inf) = 0 = 0^g.
    images.log_().mul_(adjustment.gamma).exp_().clamp_(0.0, 1.0);
  }
}

void apply_rgb_gain_(at::Tensor& images, const std::array<double, 3>& gain) {
  const auto factors = torch::tensor({gain[0], gain[1], gain[2]}, torch::kFloat)
                           .to(images.device())
                           .view({1, 3, 1, 1});
  images.mul_(factors).clamp_(0.0, 1.0);
}

at::Tensor shadow_attenuation(const Shadow& shadow, int64_t height, int64_t width,
                              at::Device device) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const auto ys =
      (torch::arange(height, options).add(0.5).div(height) - shadow.center_y).view({height, 1});
  const auto xs =
      (torch::arange(width, options).add(0.5).div(width) - shadow.center_x).view({1, width});
  const auto squared_distance = ys * ys + xs * xs;
  return (1.0 - shadow.depth * torch::exp(-squared_distance / (2.0 * shadow.sigma * shadow.sigma)))
      .contiguous();
}

void apply_shadow_(at::Tensor& images, const Shadow& shadow) {
  const int64_t height = images.size(2);
  const int64_t width = images.size(3);
  images.mul_(
      shadow_attenuation(shadow, height, width, images.device()).view({1, 1, height, width}));
}

namespace {

pixel_kernels::ColourJitter kernel_jitter(const ColorAdjustment& color) {
  pixel_kernels::ColourJitter jitter;
  jitter.brightness = static_cast<float>(color.brightness);
  jitter.contrast = static_cast<float>(color.contrast);
  jitter.saturation = static_cast<float>(color.saturation);
  jitter.gamma = static_cast<float>(color.gamma);
  return jitter;
}

void check_rgb_planes(const at::Tensor& planes, const char* what) {
  check_planes(planes, what);
  if (planes.size(1) != 3) {
    throw Error(std::string(what) + ": expected 3 planes (RGB), got " + describe_tensor(planes));
  }
}

// `jitter` as the kernels take it for [h, w] images, with the shadow's factors it points to.
struct KernelJitter {
  pixel_kernels::ColourJitter kernel;
  at::Tensor attenuation;
};
KernelJitter kernel_jitter(const ColourJitter& jitter, int64_t h, int64_t w) {
  KernelJitter out{kernel_jitter(jitter.color), at::Tensor()};
  if (jitter.rgb_gain) {
    for (size_t c = 0; c < 3; ++c) out.kernel.gain[c] = static_cast<float>((*jitter.rgb_gain)[c]);
  }
  if (jitter.shadow) {
    out.attenuation = shadow_attenuation(*jitter.shadow, h, w);
    out.kernel.attenuation = out.attenuation.data_ptr<float>();
  }
  return out;
}

}  // namespace

at::Tensor jittered_unit_float(const at::Tensor& planes, const ColourJitter& jitter) {
  check_rgb_planes(planes, "jittered_unit_float");
  const int64_t n = planes.size(0), h = planes.size(2), w = planes.size(3);
  const KernelJitter j = kernel_jitter(jitter, h, w);
  at::Tensor out = at::empty({n, 3, h, w}, at::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    pixel_kernels::jitter_image(plane(planes, i, 0), planes.stride(1), planes.stride(2), h, w,
                                j.kernel, out.data_ptr<float>() + i * 3 * h * w);
  }
  return out;
}

std::vector<at::Tensor> jittered_videos(const at::Tensor& planes, const ColourJitter& jitter,
                                        const std::vector<FrameRange>& ranges) {
  check_rgb_planes(planes, "jittered_videos");
  const int64_t n = planes.size(0), h = planes.size(2), w = planes.size(3);
  const KernelJitter j = kernel_jitter(jitter, h, w);
  std::vector<at::Tensor> videos;
  for (const FrameRange& range : ranges) {
    TORCH_CHECK(range.first >= 0 && range.count >= 0 && range.first + range.count <= n,
                "jittered_videos: frames [", range.first, ", ", range.first + range.count, ") of ",
                n);
    at::Tensor video = at::empty({3, range.count, h, w}, range.as_levels ? at::kByte : at::kFloat);
    for (int64_t t = 0; t < range.count; ++t) {
      const uint8_t* source = plane(planes, range.first + t, 0);
      if (range.as_levels) {
        uint8_t* const out[3] = {video[0][t].data_ptr<uint8_t>(), video[1][t].data_ptr<uint8_t>(),
                                 video[2][t].data_ptr<uint8_t>()};
        pixel_kernels::jitter_image_video_levels(source, planes.stride(1), planes.stride(2), h, w,
                                                 j.kernel, out);
      } else {
        float* const out[3] = {video[0][t].data_ptr<float>(), video[1][t].data_ptr<float>(),
                               video[2][t].data_ptr<float>()};
        pixel_kernels::jitter_image_signed(source, planes.stride(1), planes.stride(2), h, w,
                                           j.kernel, out);
      }
    }
    videos.push_back(std::move(video));
  }
  return videos;
}

at::Tensor jittered_levels(const at::Tensor& planes, const ColorAdjustment& color) {
  check_rgb_planes(planes, "jittered_levels");
  const int64_t n = planes.size(0), h = planes.size(2), w = planes.size(3);
  const pixel_kernels::ColourJitter j = kernel_jitter(color);
  at::Tensor out = at::empty({n, 3, h, w}, at::kByte);
  for (int64_t i = 0; i < n; ++i) {
    pixel_kernels::jitter_image_levels(plane(planes, i, 0), planes.stride(1), planes.stride(2), h,
                                       w, j, out.data_ptr<uint8_t>() + i * 3 * h * w);
  }
  return out;
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
  // Back up without antialiasing: it only changes a shrink (an enlargement's filter is the plain
  // bilinear's, up to rounding), and ATen's antialiased kernel took 9% of a LIBERO sample's time
  // for the 8% of samples drawing this (docs/BENCHMARKS.md, "LIBERO's frames resized before their
  // colour conversion").
  const at::Tensor low = resize(images, low_height, low_width);
  return F::interpolate(low, F::InterpolateFuncOptions()
                                 .size(std::vector<int64_t>{height, width})
                                 .mode(torch::kBilinear)
                                 .align_corners(false))
      .clamp_(0.0, 1.0);
}

at::Tensor add_gaussian_noise(const at::Tensor& images, double stddev, at::Generator& generator) {
  const auto noise = torch::randn(images.sizes(), generator, images.options());
  return (images + stddev * noise).clamp(0.0, 1.0);
}

// One temporary, updated in place: 2.3x faster than a fresh tensor per operation (132 vs 311 ms
// for a RoboTwin batch of 16 on one EPYC core, measured when HostToDevice did this per batch).
at::Tensor signed_unit_to_levels(const at::Tensor& images) {
  return images.add(1.0).mul_(127.5).round_().clamp_(0, 255).to(at::kByte);
}

void levels_to_signed_unit_(at::Tensor& levels) { levels.div_(127.5).sub_(1.0); }

at::Tensor unit_frames_to_video(const at::Tensor& canvas, int64_t first, int64_t count,
                                bool as_levels) {
  TORCH_CHECK(canvas.dim() == 4 && canvas.size(1) == 3 && canvas.scalar_type() == at::kFloat &&
                  canvas.is_contiguous() && first >= 0 && count >= 0 &&
                  first + count <= canvas.size(0),
              "unit_frames_to_video: needs a contiguous float [T, 3, H, W] canvas holding frames [",
              first, ", ", first + count, "), got ", canvas.sizes());
  const int64_t plane = canvas.size(2) * canvas.size(3);
  at::Tensor video =
      at::empty({3, count, canvas.size(2), canvas.size(3)}, as_levels ? at::kByte : at::kFloat);
  const float* frames = canvas.data_ptr<float>();
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t t = 0; t < count; ++t) {
      const float* source = frames + ((first + t) * 3 + c) * plane;
      const int64_t out = (c * count + t) * plane;
      if (as_levels) {
        pixel_kernels::unit_to_levels(source, plane, video.data_ptr<uint8_t>() + out);
      } else {
        pixel_kernels::unit_to_signed(source, plane, video.data_ptr<float>() + out);
      }
    }
  }
  return video;
}

}  // namespace wam::image_ops
