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
// Frames in GPU memory (VideoDecode's NVDEC frames, or host frames uploaded with `device: cuda`)
// take the same steps as ATen ops on that GPU, in float throughout (data/augment_ops.h); the
// outputs then stay on the GPU.
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
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/version.h>

#include "common/device.h"
#include "common/seeding.h"
#include "common/torch_threads.h"
#include "data/augment_ops.h"
#include "data/augment_params.h"
#include "data/image_ops.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

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
  c.require(device != "cuda" || torch::cuda::is_available(), "device",
            "\"cuda\" needs a CUDA device, and this LibTorch (" TORCH_VERSION
            ") sees none; augment with \"frames\"");
  if (planes_from_decode) {
    c.require(frames == FrameSet::kAll, "planes_from_decode",
              "needs frames \"all\": the planes are the canvas's cameras");
    c.require(device == "frames", "planes_from_decode",
              "needs device \"frames\": on the GPU Augment resizes the full-size frames itself");
  }
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
    if (params_.planes_from_decode) {
      contract.reads("frame_planes", FieldType::kTensor);
      contract.removes("frame_planes");
    }
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
    if (params_.device == "cuda") {
      upload_ = resolve_device("cuda", context.settings(), "Augment");
      context.log("Augment: augmenting on " + upload_->str() +
                  " as ATen ops (device cuda); host frames are uploaded as uint8");
    }
  }

  void process(Sample sample, Emitter& out) override {
    if (!params_.augment_if.empty() && !sample.get_bool(params_.augment_if)) {
      out.emit(std::move(sample));
      return;
    }
    use_one_torch_thread();
    const at::Tensor frames = sample.tensor("frames");
    // With planes_from_decode, host frames come with their planes; frames in GPU memory hold
    // every frame (VideoDecode's cpu_first decoder gives the samples NVDEC decodes so).
    const bool from_planes = params_.planes_from_decode && !frames.is_cuda();
    check_frames(frames, from_planes);
    at::Tensor planes;
    if (from_planes) {
      planes = sample.tensor("frame_planes");
      check_planes(planes, frames);
    }
    const int64_t cameras = frames.size(0);
    std::optional<SampleDraws> draws;
    if (uses_random()) {
      SampleRandom source(seed_, static_cast<uint64_t>(sample.get_int("epoch")),
                          static_cast<uint64_t>(sample.get_int("sample_id")));
      draws = draw(source, cameras);
    }
    const SampleDraws* drawn = draws ? &*draws : nullptr;
    // `frames` itself is only read.
    AugmentedImages images;
    if (frames.is_cuda()) {
      images = augment_on_gpu(frames, frames.device(), params_, drawn);
    } else if (upload_) {
      images = augment_on_gpu(frames, *upload_, params_, drawn);
    } else if (planes.defined()) {
      images = augment_planes_from_decode(frames, planes, params_, drawn);
    } else {
      images = augment_on_host(frames, params_, drawn);
    }
    sample.set_tensor("vlm_current_images", std::move(images.vlm_current_images));
    if (all_frames()) {
      sample.set_tensor("video", std::move(images.video));
      sample.set_tensor("memory_video_anchor", std::move(images.memory_video_anchor));
      sample.set_tensor("memory_video_recent", std::move(images.memory_video_recent));
    }
    sample.erase("frames");
    if (sample.has("frame_planes")) sample.erase("frame_planes");
    out.emit(std::move(sample));
  }

 private:
  bool all_frames() const { return params_.frames == FrameSet::kAll; }
  bool sync_vlm() const { return params_.sync_vlm_color_jitter || params_.sync_vlm_camera_jitter; }
  // Whether samples are drawn at all: `frames: current` writes only the VLM images, which only
  // the sync_vlm_* jitter touches.
  bool uses_random() const { return !params_.deterministic && (all_frames() || sync_vlm()); }

  void check_frames(const at::Tensor& frames, bool from_planes) const {
    const bool layout_ok = frames.dim() == 5 && frames.scalar_type() == at::kByte &&
                           frames.size(4) == 3 && frames.size(0) >= 1;
    if (!layout_ok) {
      throw FieldError("field frames must be uint8 [V, T, H, W, 3], got " +
                       describe_tensor(frames));
    }
    const int64_t time = frames.size(1);
    if (from_planes && time != 1) {
      throw FieldError("field frames has " + std::to_string(time) +
                       " frames per camera; with planes_from_decode it holds the current frame "
                       "only (VideoDecode's planes_size); got " +
                       describe_tensor(frames));
    }
    if (all_frames() && !from_planes && time <= kWindowStart) {
      throw FieldError("field frames has " + std::to_string(time) +
                       " frames per camera; `frames: all` needs [anchor, recent, window...] "
                       "(at least 3; VideoDecode's planes_size leaves only the current frame "
                       "there: set Augment's planes_from_decode too); got " +
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

  // VideoDecode's planes (planes_size): uint8 [V, T, 3, camera_size] of the cameras of `frames`, in
  // host memory, each plane's rows with unit column stride.
  void check_planes(const at::Tensor& planes, const at::Tensor& frames) const {
    const bool layout_ok = planes.dim() == 5 && planes.scalar_type() == at::kByte &&
                           planes.device().is_cpu() && planes.size(0) == frames.size(0) &&
                           planes.size(1) > kWindowStart && planes.size(2) == 3 &&
                           planes.stride(4) == 1;
    if (!layout_ok) {
      throw FieldError(
          "field frame_planes must be uint8 [V, T, 3, H, W] in host memory with T >= " +
          std::to_string(kWindowStart + 1) + " and the " + std::to_string(frames.size(0)) +
          " cameras of frames, got " + describe_tensor(planes));
    }
    if (planes.size(3) != params_.camera_size[0] || planes.size(4) != params_.camera_size[1]) {
      throw FieldError("field frame_planes holds " + std::to_string(planes.size(3)) + "x" +
                       std::to_string(planes.size(4)) + " (HxW) planes, but camera_size is [" +
                       std::to_string(params_.camera_size[0]) + ", " +
                       std::to_string(params_.camera_size[1]) +
                       "]: set VideoDecode's planes_size to camera_size");
    }
    // A halving keeps the aspect ratio, so every resize mode gives the same planes; otherwise
    // VideoDecode stretched them.
    const bool halved =
        frames.size(2) == 2 * planes.size(3) && frames.size(3) == 2 * planes.size(4);
    if (!halved && params_.resize != image_ops::ResizeMode::kStretch) {
      throw FieldError("field frame_planes: VideoDecode stretches frames of " +
                       std::to_string(frames.size(3)) + "x" + std::to_string(frames.size(2)) +
                       " to planes of " + std::to_string(planes.size(4)) + "x" +
                       std::to_string(planes.size(3)) +
                       " (not a halving), but resize is not \"stretch\": set VideoDecode's "
                       "planes_size to [] and Augment's planes_from_decode to false");
    }
  }

  // Everything random about one sample, drawn up front in a fixed order (the order is part of what
  // a sample is: changing it changes every sample), so that `frames: current` draws the same
  // camera and colour jitter for the VLM images as `frames: all` does.
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

  Params params_;
  uint64_t seed_ = 0;
  std::optional<at::Device> upload_;  // device: cuda, where host frames go before augmenting
};

WAM_REGISTER_STAGE(AugmentStage);

}  // namespace
}  // namespace wam::stages
