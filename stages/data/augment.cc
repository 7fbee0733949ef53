// Augment: turns decoded camera frames into the model's video canvas. Per camera: resize to
// `camera_size`, camera jitter (selected cameras); then canvas composition to 384x256, colour
// jitter, domain jitter (RGB gain, shadow), sensor noise (selected cameras), normalise to [-1, 1];
// with `video_dtype: uint8`, `video` then becomes uint8 levels.
// The random parameters are drawn once per sample from (settings.seed, epoch, sample_id) and used
// for every frame of it, so a sample is bit-identical serial or parallel, run to run.
//
// Cost: the geometry (resize, camera jitter, slot resize, composition) runs on uint8 planes
// (libswscale resizes, or a halving kernel of libswscale's bits straight from the packed frames; a
// uint8 warp), so float work only ever touches the 384x256 canvas, never the raw frames; only the
// VLM's current frame is made into full-size planes. The colour, gain and shadow jitter are one
// fused pass that makes the float canvas (and the jittered VLM images straight in uint8), not a
// torch op per step. `video_dtype: uint8` quantises here, per sample and in parallel, what
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
#include "data/augment_params.h"
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

void require_pair(ParamChecker& c, const char* name, const std::vector<int64_t>& value) {
  c.require(value.size() == 2, name,
            "must be [height, width], got " + std::to_string(value.size()) + " values");
}
void require_range(ParamChecker& c, const char* name, const std::vector<double>& value) {
  c.require(value.size() == 2 && value[0] <= value[1], name,
            "must be [min, max] with min <= max, got " + nlohmann::json(value).dump());
}

}  // namespace

void AugmentParams::check(ParamChecker& c) const {
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

namespace {

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

class AugmentStage final : public Stage, public CanvasRenderer {
 public:
  static constexpr std::string_view kType = "Augment";
  static constexpr std::string_view kSummary =
      "Per-camera resize and jitter, 384x256 canvas, colour/domain jitter, sensor noise, "
      "normalise to [-1, 1] (video optionally as uint8 levels); current frames for the VLM (raw, "
      "or with the sample's jitter).";
  using Params = AugmentParams;

  explicit AugmentStage(Params params) : params_(std::move(params)) {}

  const AugmentParams* canvas_params() const override { return all_frames() ? &params_ : nullptr; }
  std::string canvas_params_pointer() const override { return ""; }

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
    // `frames` itself is only read.
    sample.set_tensor("vlm_current_images",
                      vlm_images(frames, all_frames() ? kWindowStart : 0, drawn));
    if (all_frames()) {
      // The unit canvas [T, 3, H, W] -> each output its own compact [3, frames, H, W] tensor in
      // [-1, 1] (or levels), written straight from the canvas: views of it would keep all of it
      // alive downstream.
      const at::Tensor canvas = render(frames, drawn);
      const int64_t window = frames.size(1) - kWindowStart;
      sample.set_tensor("video", image_ops::unit_frames_to_video(canvas, kWindowStart, window,
                                                                 video_as_levels()));
      sample.set_tensor("memory_video_anchor",
                        image_ops::unit_frames_to_video(canvas, kAnchorIndex, 1, false));
      sample.set_tensor("memory_video_recent",
                        image_ops::unit_frames_to_video(canvas, kRecentIndex, 1, false));
    }
    sample.erase("frames");
    out.emit(std::move(sample));
  }

 private:
  bool all_frames() const { return params_.frames == FrameSet::kAll; }
  uint8_t fill() const { return static_cast<uint8_t>(params_.resize_fill); }
  bool video_as_levels() const { return params_.video_dtype == VideoDtype::kUint8; }
  bool sync_vlm() const { return params_.sync_vlm_color_jitter || params_.sync_vlm_camera_jitter; }
  // Whether samples are drawn at all: `frames: current` writes only the VLM images, which only
  // the sync_vlm_* jitter touches.
  bool uses_random() const { return !params_.deterministic && (all_frames() || sync_vlm()); }

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
  at::Tensor vlm_images(const at::Tensor& frames, int64_t current, const SampleDraws* draws) const {
    std::vector<at::Tensor> images;
    for (int64_t camera = 0; camera < frames.size(0); ++camera) {
      at::Tensor image = image_ops::to_planes(frames.select(0, camera).narrow(0, current, 1));
      if (draws && params_.sync_vlm_camera_jitter) {
        if (const auto& warp = draws->camera_warps[static_cast<size_t>(camera)]) {
          image = image_ops::warp_planes(image, *warp);
        }
      }
      images.push_back(std::move(image));
    }
    at::Tensor out = at::cat(images);
    if (draws && params_.sync_vlm_color_jitter && !draws->color.is_identity()) {
      out = image_ops::jittered_levels(out, draws->color);
    }
    return out;
  }

  // Frames uint8 [V, T, H, W, 3] -> canvas float [T, 3, 384, 256] in [0, 1], contiguous. `draws`
  // is null when deterministic.
  at::Tensor render(const at::Tensor& frames, const SampleDraws* draws) const {
    const int64_t cameras = frames.size(0);
    const auto slots =
        image_ops::canvas_layout(params_.canvas, cameras, kCanvasHeight, kCanvasWidth);
    std::vector<at::Tensor> images;
    for (int64_t camera = 0; camera < cameras; ++camera) {
      at::Tensor image =
          image_ops::frames_to_planes_as(frames.select(0, camera), params_.camera_size[0],
                                         params_.camera_size[1], params_.resize, fill());
      if (draws && draws->camera_warps[static_cast<size_t>(camera)]) {
        image = image_ops::warp_planes(image, *draws->camera_warps[static_cast<size_t>(camera)]);
      }
      images.push_back(std::move(image));
    }
    // The only float tensor of the sample, made with the colour, gain and shadow jitter in one
    // pass: everything from here on is in place on it.
    image_ops::ColourJitter jitter;
    if (draws) jitter = {draws->color, draws->rgb_gain, draws->shadow};
    at::Tensor canvas = image_ops::jittered_unit_float(
        image_ops::compose_canvas(images, slots, kCanvasHeight, kCanvasWidth, params_.resize,
                                  fill()),
        jitter);
    if (draws) {
      for (int64_t camera = 0; camera < cameras; ++camera) {
        const SensorNoise& noise = draws->sensor_noise[static_cast<size_t>(camera)];
        const image_ops::Rect& slot = slots[static_cast<size_t>(camera)];
        at::Tensor region =
            canvas.narrow(2, slot.top, slot.height).narrow(3, slot.left, slot.width);
        const at::Tensor noisy = add_sensor_noise(region, noise);
        if (!noisy.is_same(region)) region.copy_(noisy);
      }
    }
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
