// Augment: turns decoded camera frames into the model's video canvas. Per camera: resize to
// `camera_size`, camera jitter (selected cameras); then canvas composition to 384x256, colour
// jitter, domain jitter (RGB gain, shadow), sensor noise (selected cameras), normalise to [-1, 1];
// with `video_dtype: uint8`, `video` then becomes uint8 levels.
// The random parameters are drawn once per sample from (settings.seed, epoch, sample_id) and used
// for every frame of it, so a sample is bit-identical serial or parallel, run to run.
//
// Cost: the geometry (resize, camera jitter, slot resize, composition) runs on uint8 planes
// (libswscale resizes, a uint8 warp), so float work only ever touches the 384x256 canvas, never
// the raw frames. `video_dtype: uint8` quantises here, per sample and in parallel, what
// HostToDevice's video_as_uint8 would otherwise quantise per batch on its one thread.
//
// Reads:  frames (Tensor uint8 [V, T, H, W, 3]; T = 11 [anchor, recent, window 0..8] with
//         `frames: all`, T = 1 [current] with `frames: current`); sample_id, epoch (Int) unless
//         deterministic (or, with `frames: current`, unless a sync_vlm_* param is on)
// Writes: vlm_current_images (uint8 [V, 3, H, W], the current frame per camera at its raw size:
//         untouched, or with the sample's camera / colour jitter under sync_vlm_*); with
//         `frames: all` also video (float [3, T-2, 384, 256] in [-1, 1]; with
//         `video_dtype: uint8`, uint8 levels round((x + 1) * 127.5) of those values),
//         memory_video_anchor and memory_video_recent (float [3, 1, 384, 256], either way)
// Removes: frames
// With `augment_if` naming a Bool field, samples where it is false pass through untouched (they
// carry no frames: VideoDecode's decode_if skipped them).
// Example: {"id": "augment", "type": "Augment", "inputs": ["decode"],
//           "params": {"$ref": "data/augment"}}
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/seeding.h"
#include "data/image_ops.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

using image_ops::kCanvasHeight;
using image_ops::kCanvasWidth;
// frames: all = [anchor, recent, window...]
constexpr int64_t kAnchorIndex = 0;
constexpr int64_t kRecentIndex = 1;
constexpr int64_t kWindowStart = 2;

enum class FrameSet { kAll, kCurrent };
constexpr auto enum_names(FrameSet) {
  return std::array{EnumName{FrameSet::kAll, "all"}, EnumName{FrameSet::kCurrent, "current"}};
}
enum class VideoDtype { kFloat32, kUint8 };
constexpr auto enum_names(VideoDtype) {
  return std::array{EnumName{VideoDtype::kFloat32, "float32"},
                    EnumName{VideoDtype::kUint8, "uint8"}};
}

void require_pair(ParamChecker& c, const char* name, const std::vector<int64_t>& value) {
  c.require(value.size() == 2, name,
            "must be [height, width], got " + std::to_string(value.size()) + " values");
}
void require_range(ParamChecker& c, const char* name, const std::vector<double>& value) {
  c.require(value.size() == 2 && value[0] <= value[1], name,
            "must be [min, max] with min <= max, got " + nlohmann::json(value).dump());
}

struct AugmentParams {
  FrameSet frames = FrameSet::kAll;
  image_ops::Canvas canvas = image_ops::Canvas::kVertical;
  std::vector<int64_t> camera_size = {192, 256};
  bool deterministic = false;
  VideoDtype video_dtype = VideoDtype::kFloat32;

  std::vector<int64_t> camera_jitter_cameras;
  double camera_jitter_prob = 0.0;
  std::vector<double> camera_jitter_scale = {1.0, 1.0};
  double camera_jitter_translate = 0.0;
  double camera_jitter_rotation = 0.0;
  bool camera_jitter_random_crop = false;

  double color_jitter_brightness = 0.0;
  double color_jitter_contrast = 0.0;
  double color_jitter_saturation = 0.0;
  double color_jitter_gamma = 0.0;

  double domain_jitter_rgb_prob = 0.0;
  std::vector<double> domain_jitter_rgb_gain = {0.8, 1.2};
  double domain_jitter_shadow_prob = 0.0;
  std::vector<double> domain_jitter_shadow_depth = {0.15, 0.35};
  std::vector<double> domain_jitter_shadow_sigma = {0.25, 0.6};

  std::vector<int64_t> sensor_noise_cameras;
  double sensor_noise_gaussian_prob = 0.0;
  double sensor_noise_gaussian_std = 0.02;
  double sensor_noise_blur_prob = 0.0;
  int64_t sensor_noise_blur_kernel_size = 3;
  double sensor_noise_downsample_prob = 0.0;
  double sensor_noise_downsample_scale_min = 0.75;

  bool sync_vlm_color_jitter = true;
  bool sync_vlm_camera_jitter = true;
  std::string augment_if;

  template <class V>
  void visit(V& v) {
    v("frames", frames,
      "What `frames` holds: all = [anchor, recent, window...] (writes the video canvas), "
      "current = the current frame only (writes only vlm_current_images).");
    v("canvas", canvas,
      "Camera layout on the 384x256 canvas: vertical = cameras stacked in equal rows; robotwin = "
      "camera 0 at 256x256 on top, cameras 1 and 2 at 128x128 side by side below.");
    v("camera_size", camera_size, "Per-camera resize [H, W] before jitter and composition.",
      Min{1});
    v("deterministic", deterministic,
      "Turn every random transform off, whatever the jitter params say (latent caches need it).");
    v("video_dtype", video_dtype,
      "float32: `video` in [-1, 1]; uint8: the same values as uint8 levels round((x + 1) * 127.5) "
      "(a quarter of the bytes), quantised here per sample; HostToDevice turns them back into "
      "float [-1, 1]. The memory frames stay float32.");

    v("camera_jitter_cameras", camera_jitter_cameras, "Camera indices that get camera jitter.",
      Min{0});
    v("camera_jitter_prob", camera_jitter_prob, "Chance a selected camera is jittered.", Min{0.0},
      Max{1.0});
    v("camera_jitter_scale", camera_jitter_scale,
      "[min, max] fraction of the field of view kept (zoom in by up to 1/min).", Min{0.01},
      Max{1.0});
    v("camera_jitter_translate", camera_jitter_translate,
      "Largest shift, as a fraction of the camera's width and height.", Min{0.0}, Max{0.5});
    v("camera_jitter_rotation", camera_jitter_rotation, "Largest rotation in degrees.", Min{0.0},
      Max{180.0});
    v("camera_jitter_random_crop", camera_jitter_random_crop,
      "Place the kept field of view anywhere in the frame instead of at its centre.");

    v("color_jitter_brightness", color_jitter_brightness,
      "Brightness factor drawn from [1 - b, 1 + b] (0: off).", Min{0.0});
    v("color_jitter_contrast", color_jitter_contrast,
      "Contrast factor drawn from [1 - c, 1 + c] (0: off).", Min{0.0});
    v("color_jitter_saturation", color_jitter_saturation,
      "Saturation factor drawn from [1 - s, 1 + s] (0: off).", Min{0.0});
    v("color_jitter_gamma", color_jitter_gamma, "Gamma drawn from [1 - g, 1 + g] (0: off).",
      Min{0.0}, Max{0.99});

    v("domain_jitter_rgb_prob", domain_jitter_rgb_prob, "Chance of a per-channel RGB gain.",
      Min{0.0}, Max{1.0});
    v("domain_jitter_rgb_gain", domain_jitter_rgb_gain, "[min, max] gain of each channel.",
      Min{0.0});
    v("domain_jitter_shadow_prob", domain_jitter_shadow_prob, "Chance of a soft shadow.", Min{0.0},
      Max{1.0});
    v("domain_jitter_shadow_depth", domain_jitter_shadow_depth,
      "[min, max] darkening at the shadow's centre.", Min{0.0}, Max{1.0});
    v("domain_jitter_shadow_sigma", domain_jitter_shadow_sigma,
      "[min, max] shadow radius (Gaussian sigma) as a fraction of the canvas.", Min{0.01});

    v("sensor_noise_cameras", sensor_noise_cameras, "Camera indices that get sensor noise.",
      Min{0});
    v("sensor_noise_gaussian_prob", sensor_noise_gaussian_prob, "Chance of Gaussian pixel noise.",
      Min{0.0}, Max{1.0});
    v("sensor_noise_gaussian_std", sensor_noise_gaussian_std,
      "Standard deviation of the pixel noise (pixel values in [0, 1]).", Min{0.0});
    v("sensor_noise_blur_prob", sensor_noise_blur_prob, "Chance of a Gaussian blur.", Min{0.0},
      Max{1.0});
    v("sensor_noise_blur_kernel_size", sensor_noise_blur_kernel_size,
      "Blur kernel size (odd); sigma is drawn from [0.1, 2].", Min{1});
    v("sensor_noise_downsample_prob", sensor_noise_downsample_prob,
      "Chance of a down- and up-sampling round trip.", Min{0.0}, Max{1.0});
    v("sensor_noise_downsample_scale_min", sensor_noise_downsample_scale_min,
      "Smallest down-sampling scale; the scale is drawn from [min, 1].", Min{0.05}, Max{1.0});

    v("sync_vlm_color_jitter", sync_vlm_color_jitter,
      "Give the VLM's current images the sample's colour jitter (brightness, contrast, "
      "saturation, gamma; contrast against each image's own mean), as the reference's "
      "sync_vlm_color_jitter / apply_to_vlm.");
    v("sync_vlm_camera_jitter", sync_vlm_camera_jitter,
      "Give each camera's VLM current image that camera's camera jitter (the same motion at the "
      "raw size), as the reference's sync_vlm_camera_jitter / apply_to_vlm.");
    v("augment_if", augment_if,
      "Bool field: augment only samples where it is true, pass the others through unchanged "
      "(\"\": every sample).");
  }

  // What the params alone can tell; the camera count of the samples is checked as they come.
  void check(ParamChecker& c) const {
    require_pair(c, "camera_size", camera_size);
    require_range(c, "camera_jitter_scale", camera_jitter_scale);
    require_range(c, "domain_jitter_rgb_gain", domain_jitter_rgb_gain);
    require_range(c, "domain_jitter_shadow_depth", domain_jitter_shadow_depth);
    require_range(c, "domain_jitter_shadow_sigma", domain_jitter_shadow_sigma);
    c.require(sensor_noise_blur_kernel_size % 2 == 1, "sensor_noise_blur_kernel_size",
              "must be odd, got " + std::to_string(sensor_noise_blur_kernel_size));
    if (canvas == image_ops::Canvas::kRobotwin) {
      for (const auto& [name, list] : {std::pair{"camera_jitter_cameras", &camera_jitter_cameras},
                                       std::pair{"sensor_noise_cameras", &sensor_noise_cameras}}) {
        for (int64_t camera : *list) {
          c.require(camera < image_ops::kRobotwinCameras, name,
                    "names camera " + std::to_string(camera) + " but canvas \"robotwin\" has " +
                        std::to_string(image_ops::kRobotwinCameras) + " cameras");
        }
      }
    }
  }
};

using seeding::splitmix64;

// The random source of one sample: a function of (seed, epoch, sample id) only, never of the
// thread or the order in which samples arrive.
class SampleRandom {
 public:
  SampleRandom(uint64_t seed, uint64_t epoch, uint64_t sample_id)
      : engine_(splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ sample_id)) {}

  // From the top 53 bits, not std::uniform_real_distribution, whose algorithm is left to the
  // standard library: the draws stay the same across toolchains.
  double uniform(double low, double high) {
    return low + (high - low) * static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  }
  double uniform(const std::vector<double>& range) { return uniform(range[0], range[1]); }
  bool chance(double probability) { return probability > 0.0 && uniform(0.0, 1.0) < probability; }
  uint64_t seed() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// Everything random about one sample, drawn up front in a fixed order (the order is part of what
// a sample is: changing it changes every sample), so that `frames: current` draws the same camera
// and colour jitter for the VLM images as `frames: all` does.
struct SensorNoise {
  std::optional<double> downsample_scale;
  std::optional<double> blur_sigma;
  std::optional<uint64_t> gaussian_seed;
};
struct SampleDraws {
  std::vector<std::optional<image_ops::CameraWarp>> camera_warps;  // per camera
  image_ops::ColorAdjustment color;
  std::optional<std::array<double, 3>> rgb_gain;
  std::optional<image_ops::Shadow> shadow;
  std::vector<SensorNoise> sensor_noise;  // per camera
};

// Under OpenMP the intra-op thread count is per OS thread, so each worker that runs this stage
// sets it once; the graph, not torch, provides the parallelism.
void use_one_torch_thread() {
  if (at::get_num_threads() != 1) at::set_num_threads(1);
}

bool contains(const std::vector<int64_t>& list, int64_t value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

class AugmentStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Augment";
  static constexpr std::string_view kSummary =
      "Per-camera resize and jitter, 384x256 canvas, colour/domain jitter, sensor noise, "
      "normalise to [-1, 1] (video optionally as uint8 levels); current frames for the VLM (raw, "
      "or with the sample's jitter).";
  using Params = AugmentParams;

  explicit AugmentStage(Params params) : params_(std::move(params)) {}

  void declare(Contract& contract) const override {
    contract.reads("frames", FieldType::kTensor);
    contract.removes("frames");
    contract.writes("vlm_current_images", FieldType::kTensor);
    if (!params_.augment_if.empty()) contract.reads(params_.augment_if, FieldType::kBool);
    if (uses_random()) {
      contract.reads("sample_id", FieldType::kInt);
      contract.reads("epoch", FieldType::kInt);
    }
    if (all_frames()) {
      contract.writes("video", FieldType::kTensor);
      contract.writes("memory_video_anchor", FieldType::kTensor);
      contract.writes("memory_video_recent", FieldType::kTensor);
    }
    contract.concurrency(Concurrency::unlimited());
  }

  void open(Context& context) override {
    seed_ = static_cast<uint64_t>(context.settings().seed);
    use_one_torch_thread();
  }

  void process(Sample sample, Emitter& out) override {
    if (!params_.augment_if.empty() && !sample.get_bool(params_.augment_if)) {
      out.emit(std::move(sample));
      return;
    }
    use_one_torch_thread();
    const at::Tensor frames = sample.tensor("frames");
    check_frames(frames);
    const int64_t cameras = frames.size(0);
    std::optional<SampleDraws> draws;
    if (uses_random()) {
      SampleRandom source(seed_, static_cast<uint64_t>(sample.get_int("epoch")),
                          static_cast<uint64_t>(sample.get_int("sample_id")));
      draws = draw(source, cameras);
    }
    const SampleDraws* drawn = draws ? &*draws : nullptr;
    // Planar uint8 copies of each camera's frames; `frames` itself is only read.
    std::vector<at::Tensor> planes;
    for (int64_t camera = 0; camera < cameras; ++camera) {
      planes.push_back(image_ops::to_planes(frames.select(0, camera)));
    }
    sample.set_tensor("vlm_current_images",
                      vlm_images(planes, all_frames() ? kWindowStart : 0, drawn));
    if (all_frames()) {
      // [T, 3, H, W] -> [3, T, H, W], each output its own compact tensor. Copied explicitly:
      // contiguous() would hand out the one-frame outputs as views of the whole canvas (a
      // [3, 1, H, W] slice of it counts as contiguous), keeping all of it alive downstream.
      const at::Tensor canvas = render(planes, drawn).permute({1, 0, 2, 3});
      const int64_t window = frames.size(1) - kWindowStart;
      at::Tensor video = canvas.narrow(1, kWindowStart, window);
      if (video_as_levels()) video = image_ops::signed_unit_to_levels(video);
      sample.set_tensor("video", compact(video));
      sample.set_tensor("memory_video_anchor", compact(canvas.narrow(1, kAnchorIndex, 1)));
      sample.set_tensor("memory_video_recent", compact(canvas.narrow(1, kRecentIndex, 1)));
    }
    sample.erase("frames");
    out.emit(std::move(sample));
  }

 private:
  bool all_frames() const { return params_.frames == FrameSet::kAll; }
  bool video_as_levels() const { return params_.video_dtype == VideoDtype::kUint8; }
  bool sync_vlm() const { return params_.sync_vlm_color_jitter || params_.sync_vlm_camera_jitter; }
  // Whether samples are drawn at all: `frames: current` writes only the VLM images, which only
  // the sync_vlm_* jitter touches.
  bool uses_random() const { return !params_.deterministic && (all_frames() || sync_vlm()); }

  static at::Tensor compact(const at::Tensor& view) {
    return at::empty(view.sizes(), view.options()).copy_(view);
  }

  void check_frames(const at::Tensor& frames) const {
    const bool layout_ok = frames.dim() == 5 && frames.scalar_type() == at::kByte &&
                           frames.size(4) == 3 && frames.size(0) >= 1;
    if (!layout_ok) {
      throw FieldError("field frames must be uint8 [V, T, H, W, 3], got " +
                       describe_tensor(frames));
    }
    const int64_t time = frames.size(1);
    if (all_frames() && time <= kWindowStart) {
      throw FieldError("field frames has " + std::to_string(time) +
                       " frames per camera; `frames: all` needs [anchor, recent, window...] "
                       "(at least 3); got " +
                       describe_tensor(frames));
    }
    if (!all_frames() && time != 1) {
      throw FieldError("field frames has " + std::to_string(time) +
                       " frames per camera; `frames: current` needs exactly 1 (decode with "
                       "frames: current, or set Augment's frames: all)");
    }
    const int64_t cameras = frames.size(0);
    for (const auto& [name, list] :
         {std::pair{"camera_jitter_cameras", &params_.camera_jitter_cameras},
          std::pair{"sensor_noise_cameras", &params_.sensor_noise_cameras}}) {
      for (int64_t camera : *list) {
        if (camera >= cameras) {
          throw Error(std::string("param ") + name + " names camera " + std::to_string(camera) +
                      " but the sample has " + std::to_string(cameras) +
                      " cameras (indices follow the sampler's cameras order)");
        }
      }
    }
  }

  SampleDraws draw(SampleRandom& random, int64_t cameras) const {
    SampleDraws d;
    for (int64_t camera = 0; camera < cameras; ++camera) {
      const bool jitter = contains(params_.camera_jitter_cameras, camera) &&
                          random.chance(params_.camera_jitter_prob);
      d.camera_warps.push_back(jitter ? std::optional(draw_camera_warp(random)) : std::nullopt);
    }
    d.color = draw_color(random);
    if (random.chance(params_.domain_jitter_rgb_prob)) {
      const auto& gain = params_.domain_jitter_rgb_gain;
      // Braced initialisers evaluate left to right: red, green, blue.
      d.rgb_gain =
          std::array<double, 3>{random.uniform(gain), random.uniform(gain), random.uniform(gain)};
    }
    if (random.chance(params_.domain_jitter_shadow_prob)) {
      image_ops::Shadow shadow;
      shadow.center_y = random.uniform(0.0, 1.0);
      shadow.center_x = random.uniform(0.0, 1.0);
      shadow.depth = random.uniform(params_.domain_jitter_shadow_depth);
      shadow.sigma = random.uniform(params_.domain_jitter_shadow_sigma);
      d.shadow = shadow;
    }
    d.sensor_noise.resize(static_cast<size_t>(cameras));
    for (int64_t camera = 0; camera < cameras; ++camera) {
      if (!contains(params_.sensor_noise_cameras, camera)) continue;
      SensorNoise& noise = d.sensor_noise[static_cast<size_t>(camera)];
      if (random.chance(params_.sensor_noise_downsample_prob)) {
        noise.downsample_scale = random.uniform(params_.sensor_noise_downsample_scale_min, 1.0);
      }
      if (random.chance(params_.sensor_noise_blur_prob)) {
        noise.blur_sigma = random.uniform(0.1, 2.0);
      }
      if (random.chance(params_.sensor_noise_gaussian_prob)) noise.gaussian_seed = random.seed();
    }
    return d;
  }

  image_ops::CameraWarp draw_camera_warp(SampleRandom& random) const {
    image_ops::CameraWarp warp;
    warp.scale = random.uniform(params_.camera_jitter_scale);
    if (params_.camera_jitter_random_crop) {
      const double slack = (1.0 - warp.scale) / 2.0;
      warp.translate_x = random.uniform(-slack, slack);
      warp.translate_y = random.uniform(-slack, slack);
    }
    const double translate = params_.camera_jitter_translate;
    warp.translate_x += random.uniform(-translate, translate);
    warp.translate_y += random.uniform(-translate, translate);
    const double rotation = params_.camera_jitter_rotation;
    warp.rotation_degrees = random.uniform(-rotation, rotation);
    return warp;
  }

  image_ops::ColorAdjustment draw_color(SampleRandom& random) const {
    auto factor = [&](double strength) {
      return strength > 0.0 ? random.uniform(std::max(0.0, 1.0 - strength), 1.0 + strength) : 1.0;
    };
    image_ops::ColorAdjustment color;
    color.brightness = factor(params_.color_jitter_brightness);
    color.contrast = factor(params_.color_jitter_contrast);
    color.saturation = factor(params_.color_jitter_saturation);
    color.gamma = factor(params_.color_jitter_gamma);
    return color;
  }

  // The current frame of each camera at its raw size, uint8 [V, 3, H, W]: untouched, or with the
  // sample's camera jitter (the camera's own warp) and colour jitter when sync_vlm_* says so.
  at::Tensor vlm_images(const std::vector<at::Tensor>& planes, int64_t current,
                        const SampleDraws* draws) const {
    std::vector<at::Tensor> images;
    for (size_t camera = 0; camera < planes.size(); ++camera) {
      at::Tensor image = planes[camera].narrow(0, current, 1);
      if (draws && params_.sync_vlm_camera_jitter && draws->camera_warps[camera]) {
        image = image_ops::warp_planes(image, *draws->camera_warps[camera]);
      }
      images.push_back(std::move(image));
    }
    at::Tensor out = at::cat(images);
    if (draws && params_.sync_vlm_color_jitter && !draws->color.is_identity()) {
      at::Tensor unit = image_ops::to_unit_float(out);
      image_ops::adjust_color_(unit, draws->color);
      out = image_ops::to_uint8_(unit);
    }
    return out;
  }

  // Per-camera planes uint8 [T, 3, H, W] -> canvas float [T, 3, 384, 256] in [-1, 1]. `draws` is
  // null when deterministic.
  at::Tensor render(const std::vector<at::Tensor>& planes, const SampleDraws* draws) const {
    const int64_t cameras = static_cast<int64_t>(planes.size());
    const auto slots =
        image_ops::canvas_layout(params_.canvas, cameras, kCanvasHeight, kCanvasWidth);
    std::vector<at::Tensor> images;
    for (int64_t camera = 0; camera < cameras; ++camera) {
      at::Tensor image = image_ops::resize_planes(planes[static_cast<size_t>(camera)],
                                                  params_.camera_size[0], params_.camera_size[1]);
      if (draws && draws->camera_warps[static_cast<size_t>(camera)]) {
        image = image_ops::warp_planes(image, *draws->camera_warps[static_cast<size_t>(camera)]);
      }
      images.push_back(std::move(image));
    }
    // The only float tensor of the sample: everything from here on is in place on it.
    at::Tensor canvas = image_ops::to_unit_float(
        image_ops::compose_canvas(images, slots, kCanvasHeight, kCanvasWidth));
    if (draws) {
      if (!draws->color.is_identity()) image_ops::adjust_color_(canvas, draws->color);
      if (draws->rgb_gain) image_ops::apply_rgb_gain_(canvas, *draws->rgb_gain);
      if (draws->shadow) image_ops::apply_shadow_(canvas, *draws->shadow);
      for (int64_t camera = 0; camera < cameras; ++camera) {
        const SensorNoise& noise = draws->sensor_noise[static_cast<size_t>(camera)];
        const image_ops::Rect& slot = slots[static_cast<size_t>(camera)];
        at::Tensor region =
            canvas.narrow(2, slot.top, slot.height).narrow(3, slot.left, slot.width);
        const at::Tensor noisy = add_sensor_noise(region, noise);
        if (!noisy.is_same(region)) region.copy_(noisy);
      }
    }
    image_ops::to_signed_unit_(canvas);
    return canvas;
  }

  at::Tensor add_sensor_noise(const at::Tensor& region, const SensorNoise& noise) const {
    at::Tensor out = region;
    if (noise.downsample_scale) out = image_ops::downsample_upsample(out, *noise.downsample_scale);
    if (noise.blur_sigma) {
      out = image_ops::gaussian_blur(out, params_.sensor_noise_blur_kernel_size, *noise.blur_sigma);
    }
    if (noise.gaussian_seed) {
      at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(*noise.gaussian_seed);
      out = image_ops::add_gaussian_noise(out, params_.sensor_noise_gaussian_std, generator);
    }
    return out;
  }

  Params params_;
  uint64_t seed_ = 0;
};

WAM_REGISTER_STAGE(AugmentStage);

}  // namespace
}  // namespace wam::stages
