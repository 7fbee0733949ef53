#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include <torch/cuda.h>
#include <torch/version.h>

extern "C" {
#include <libswscale/swscale.h>
}

#include "data/augment_ops.h"
#include "data/augment_params.h"
#include "data/image_ops.h"
#include "data/pixel_kernels.h"
#include "data/plane_resize.h"
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/tensor.h"

namespace wam::testing {
namespace {

using Colour = std::array<int64_t, 3>;

// uint8 [V, T, H, W, 3]; camera v, frame t is filled with colours[v] + t * time_step per channel.
at::Tensor solid_frames(const std::vector<Colour>& colours, int64_t time, int64_t height,
                        int64_t width, int64_t time_step = 0) {
  auto frames =
      torch::empty({static_cast<int64_t>(colours.size()), time, height, width, 3}, torch::kUInt8);
  for (size_t v = 0; v < colours.size(); ++v) {
    for (int64_t t = 0; t < time; ++t) {
      for (int64_t c = 0; c < 3; ++c) {
        frames[v][t].select(2, c).fill_(colours[v][c] + t * time_step);
      }
    }
  }
  return frames;
}

at::Tensor noise_frames(int64_t cameras, int64_t time, int64_t height, int64_t width) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1234);
  return torch::randint(0, 256, {cameras, time, height, width, 3}, generator,
                        torch::TensorOptions().dtype(torch::kUInt8));
}

// Camera-like content: a low-resolution random picture upsampled (smooth regions and edges) plus
// mild pixel noise, uint8 [V, T, H, W, 3]. The same picture for every frame of a camera.
at::Tensor smooth_frames(int64_t cameras, int64_t time, int64_t height, int64_t width,
                         uint64_t seed = 99) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto low = torch::rand({cameras, 3, 12, 16}, generator) * 255.0;
  auto picture =
      torch::nn::functional::interpolate(low, torch::nn::functional::InterpolateFuncOptions()
                                                  .size(std::vector<int64_t>{height, width})
                                                  .mode(torch::kBilinear)
                                                  .align_corners(false));
  picture = (picture + 8.0 * torch::randn(picture.sizes(), generator)).clamp(0, 255).round();
  return picture.to(torch::kUInt8)
      .permute({0, 2, 3, 1})
      .unsqueeze(1)
      .expand({cameras, time, height, width, 3})
      .contiguous();
}

// Max and mean absolute difference, in uint8 levels, of two float tensors in the same unit.
struct Difference {
  double max = 0, mean = 0;
};
Difference difference(const at::Tensor& a, const at::Tensor& b) {
  const auto d = (a.to(torch::kFloat) - b.to(torch::kFloat)).abs();
  return {d.max().item<double>(), d.mean().item<double>()};
}

Sample frame_sample(const at::Tensor& frames, int64_t sample_id, int64_t epoch = 0) {
  Sample sample("sample:" + std::to_string(sample_id));
  sample.set_tensor("frames", frames);
  sample.set("sample_id", sample_id);
  sample.set("epoch", epoch);
  return sample;
}

Sample run_one(const std::string& params, Sample sample, const HarnessOptions& options = {}) {
  auto out = run_stage("Augment", params, {std::move(sample)}, options);
  EXPECT_EQ(out.size(), 1u);
  return out.at(0);
}

// Where a colour lands after normalisation to [-1, 1], as a [3, 1, 1, 1] tensor.
at::Tensor normalised(const Colour& colour) {
  return torch::tensor({colour[0] / 127.5 - 1.0, colour[1] / 127.5 - 1.0, colour[2] / 127.5 - 1.0},
                       torch::kFloat)
      .view({3, 1, 1, 1});
}

// video [3, T, 384, 256] restricted to rows [top, top + height) and columns [left, left + width).
at::Tensor region(const at::Tensor& video, int64_t top, int64_t height, int64_t left,
                  int64_t width) {
  return video.narrow(2, top, height).narrow(3, left, width);
}

void expect_filled(const at::Tensor& video, int64_t top, int64_t height, int64_t left,
                   int64_t width, const Colour& colour) {
  auto expected = normalised(colour).expand_as(region(video, top, height, left, width));
  EXPECT_TRUE(torch::allclose(region(video, top, height, left, width), expected, 0, 1e-5))
      << "rows " << top << "+" << height << ", columns " << left << "+" << width;
}

// Every random transform on, so that a determinism test would see any stray randomness.
const char* kEverythingOn = R"({
  "canvas": "robotwin", "camera_size": [60, 80],
  "camera_jitter_cameras": [0, 1], "camera_jitter_prob": 1, "camera_jitter_scale": [0.9, 1],
  "camera_jitter_translate": 0.03, "camera_jitter_rotation": 5, "camera_jitter_random_crop": true,
  "color_jitter_brightness": 0.2, "color_jitter_contrast": 0.2, "color_jitter_saturation": 0.25,
  "color_jitter_gamma": 0.1,
  "domain_jitter_rgb_prob": 1, "domain_jitter_shadow_prob": 1,
  "sensor_noise_cameras": [0, 2], "sensor_noise_gaussian_prob": 1, "sensor_noise_blur_prob": 1,
  "sensor_noise_downsample_prob": 1)";

std::string everything_on(bool deterministic) {
  return std::string(kEverythingOn) + ", \"deterministic\": " + (deterministic ? "true" : "false") +
         "}";
}

const std::vector<std::string> kCanvasFields = {"video", "memory_video_anchor",
                                                "memory_video_recent"};

// Processes the same sample on `threads` std::threads at once through one opened stage.
std::vector<Sample> run_concurrently(const std::string& params, const Sample& sample, int threads,
                                     const Settings& settings = {}) {
  HarnessOptions options;
  options.settings = settings;
  SteppedStage stage("Augment", params, options);
  CollectingEmitter emitter;
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      for (int repeat = 0; repeat < 2; ++repeat) stage.stage().process(sample, emitter);
    });
  }
  for (auto& worker : workers) worker.join();
  return emitter.take();
}

void expect_same_canvas(const Sample& a, const Sample& b) {
  for (const auto& field : kCanvasFields) {
    EXPECT_TRUE(torch::equal(a.tensor(field), b.tensor(field))) << field;
  }
}

TEST(AugmentTest, VerticalCanvasStacksCameraZeroAboveCameraOne) {
  const Colour top = {200, 40, 10}, bottom = {10, 120, 250};
  auto out = run_one(R"({"canvas": "vertical", "camera_size": [192, 256], "deterministic": true})",
                     frame_sample(solid_frames({top, bottom}, 11, 24, 32), 0));
  const auto& video = out.tensor("video");
  ASSERT_EQ(video.sizes(), (std::vector<int64_t>{3, 9, 384, 256}));
  expect_filled(video, 0, 192, 0, 256, top);
  expect_filled(video, 192, 192, 0, 256, bottom);
}

TEST(AugmentTest, RobotwinCanvasPutsHighCameraOnTopAndWristsSideBySideBelow) {
  const Colour high = {250, 0, 0}, left_wrist = {0, 250, 0}, right_wrist = {0, 0, 250};
  auto out = run_one(R"({"canvas": "robotwin", "camera_size": [240, 320], "deterministic": true})",
                     frame_sample(solid_frames({high, left_wrist, right_wrist}, 11, 48, 64), 0));
  for (const auto& field : kCanvasFields) {
    const auto& video = out.tensor(field);
    ASSERT_EQ(video.size(0), 3);
    ASSERT_EQ(video.size(2), 384);
    ASSERT_EQ(video.size(3), 256);
    expect_filled(video, 0, 256, 0, 256, high);
    expect_filled(video, 256, 128, 0, 128, left_wrist);
    expect_filled(video, 256, 128, 128, 128, right_wrist);
  }
}

TEST(AugmentTest, SplitsAnchorRecentAndWindowAndKeepsRawCurrentFrameForVlm) {
  // Frame t of every camera is brighter by 10 * t: anchor = t 0, recent = t 1, window = t 2..10.
  const Colour base = {20, 30, 40};
  auto frames = solid_frames({base, base}, 11, 16, 16, 10);
  auto out = run_one(R"({"deterministic": true})", frame_sample(frames, 3));
  auto shade = [&](int64_t t) { return Colour{20 + 10 * t, 30 + 10 * t, 40 + 10 * t}; };
  EXPECT_EQ(out.tensor("memory_video_anchor").sizes(), (std::vector<int64_t>{3, 1, 384, 256}));
  EXPECT_EQ(out.tensor("memory_video_recent").sizes(), (std::vector<int64_t>{3, 1, 384, 256}));
  expect_filled(out.tensor("memory_video_anchor"), 0, 384, 0, 256, shade(0));
  expect_filled(out.tensor("memory_video_recent"), 0, 384, 0, 256, shade(1));
  for (int64_t k = 0; k < 9; ++k) {
    expect_filled(out.tensor("video").narrow(1, k, 1), 0, 384, 0, 256, shade(2 + k));
  }
  const auto& vlm = out.tensor("vlm_current_images");
  EXPECT_EQ(vlm.scalar_type(), torch::kUInt8);
  EXPECT_EQ(vlm.sizes(), (std::vector<int64_t>{2, 3, 16, 16}));
  EXPECT_TRUE(torch::equal(vlm, frames.select(1, 2).permute({0, 3, 1, 2})));
  EXPECT_FALSE(out.has("frames"));
  EXPECT_TRUE(out.has("sample_id"));
  // Each output owns just its own memory, not the whole canvas it was cut from.
  for (const char* field : {"video", "memory_video_anchor", "memory_video_recent"}) {
    const auto& tensor = out.tensor(field);
    EXPECT_EQ(tensor.storage().nbytes(), tensor.nbytes()) << field;
  }
}

TEST(AugmentTest, CurrentFramesWriteOnlyVlmImages) {
  auto frames = noise_frames(3, 1, 12, 16);
  auto out = run_one(R"({"frames": "current", "canvas": "robotwin"})", frame_sample(frames, 1));
  EXPECT_TRUE(
      torch::equal(out.tensor("vlm_current_images"), frames.select(1, 0).permute({0, 3, 1, 2})));
  EXPECT_FALSE(out.has("frames"));
  for (const auto& field : kCanvasFields) EXPECT_FALSE(out.has(field)) << field;
}

TEST(AugmentTest, DeterministicIsBitIdenticalAcrossRunsAndThreads) {
  const std::string params = everything_on(/*deterministic=*/true);
  const Sample sample = frame_sample(noise_frames(3, 11, 30, 40), 5);
  const Sample reference = run_one(params, sample);
  expect_same_canvas(reference, run_one(params, sample));
  // Different ids and epochs do not matter when deterministic.
  expect_same_canvas(reference, run_one(params, frame_sample(sample.tensor("frames"), 6, 3)));
  for (const Sample& out : run_concurrently(params, sample, 4)) expect_same_canvas(reference, out);
  // Deterministic means no transform at all: the same as every strength at zero.
  expect_same_canvas(reference,
                     run_one(R"({"canvas": "robotwin", "camera_size": [60, 80]})", sample));
}

TEST(AugmentTest, RandomAugmentDependsOnlyOnSeedEpochAndSampleId) {
  const std::string params = everything_on(/*deterministic=*/false);
  const auto frames = noise_frames(3, 11, 30, 40);
  const Sample reference = run_one(params, frame_sample(frames, 5, 2));
  expect_same_canvas(reference, run_one(params, frame_sample(frames, 5, 2)));
  for (const Sample& out : run_concurrently(params, frame_sample(frames, 5, 2), 4)) {
    expect_same_canvas(reference, out);
  }
  const auto differs = [&](const Sample& other) {
    return !torch::equal(reference.tensor("video"), other.tensor("video"));
  };
  EXPECT_TRUE(differs(run_one(params, frame_sample(frames, 6, 2))));
  EXPECT_TRUE(differs(run_one(params, frame_sample(frames, 5, 3))));
  HarnessOptions other_seed;
  other_seed.settings.seed = 7;
  EXPECT_TRUE(differs(run_one(params, frame_sample(frames, 5, 2), other_seed)));
  // The output differs from the deterministic rendering, so the transforms did run.
  EXPECT_TRUE(differs(run_one(everything_on(true), frame_sample(frames, 5, 2))));
}

TEST(AugmentTest, SameRandomParametersForEveryFrameOfASample) {
  // Identical frames in, identical frames out: the draws are per sample, not per frame. Gaussian
  // pixel noise is off here: like a real sensor's, its realisation differs from frame to frame.
  auto frames = solid_frames({{90, 60, 30}, {30, 60, 90}, {60, 90, 30}}, 11, 30, 40)
                    .add(noise_frames(3, 1, 30, 40).div(4, "floor"));
  auto params = nlohmann::json::parse(everything_on(false));
  params["sensor_noise_gaussian_prob"] = 0;
  auto out = run_one(params.dump(), frame_sample(frames, 9));
  const auto& video = out.tensor("video");
  for (int64_t k = 1; k < 9; ++k) {
    EXPECT_TRUE(torch::equal(video.select(1, 0), video.select(1, k))) << "frame " << k;
  }
  EXPECT_TRUE(torch::equal(video.select(1, 0), out.tensor("memory_video_anchor").select(1, 0)));
}

TEST(AugmentTest, OutputStaysInSignedUnitRangeAndInputIsUnchanged) {
  const auto frames = noise_frames(3, 11, 30, 40);
  const auto before = frames.clone();
  for (int64_t id = 0; id < 4; ++id) {
    auto out = run_one(everything_on(false), frame_sample(frames, id));
    for (const auto& field : kCanvasFields) {
      const auto& tensor = out.tensor(field);
      EXPECT_EQ(tensor.scalar_type(), torch::kFloat) << field;
      EXPECT_GE(tensor.min().item<float>(), -1.0f) << field;
      EXPECT_LE(tensor.max().item<float>(), 1.0f) << field;
    }
  }
  EXPECT_TRUE(torch::equal(frames, before));
}

TEST(AugmentTest, RejectsFramesThatDoNotFitTheParams) {
  EXPECT_ERROR(run_one(R"({"deterministic": true})", frame_sample(noise_frames(2, 1, 8, 8), 0)),
               "field frames has 1 frames per camera; `frames: all` needs [anchor, recent, "
               "window...] (at least 3; VideoDecode's planes_size leaves only the current frame "
               "there: set Augment's planes_from_decode too); got Byte[2, 1, 8, 8, 3]");
  EXPECT_ERROR(run_one(R"({"canvas": "robotwin", "deterministic": true})",
                       frame_sample(noise_frames(2, 11, 8, 8), 0)),
               "canvas \"robotwin\" needs 3 cameras (high, left wrist, right wrist), got 2; "
               "check the sampler's cameras");
  EXPECT_ERROR(run_one(R"({"camera_jitter_cameras": [2], "camera_jitter_prob": 1})",
                       frame_sample(noise_frames(2, 11, 8, 8), 0)),
               "param camera_jitter_cameras names camera 2 but the sample has 2 cameras "
               "(indices follow the sampler's cameras order)");
  // A params-only rule: reported when the stage is built, as `validate` does.
  EXPECT_ERROR(
      run_one(R"({"camera_jitter_scale": [1, 0.9]})", frame_sample(noise_frames(2, 11, 8, 8), 0)),
      "<test>:/params/camera_jitter_scale [Augment]: must be [min, max] with min <= max, got "
      "[1.0,0.9]");
}

// planes_from_decode: the canvas from VideoDecode's planes at camera_size and the VLM's images
// from the current frame alone give, for planes resized as Augment resizes, Augment's own outputs
// bit for bit, every random transform on; planes of another size, or all frames where only the
// current one belongs, are errors naming the params to set.
TEST(AugmentTest, PlanesFromDecodeAreAugmentsOwnResizeBitForBit) {
  const auto frames = smooth_frames(3, 11, 48, 64, 3);
  auto params = nlohmann::json::parse(everything_on(false));
  params["camera_size"] = {24, 32};
  const Sample own = run_one(params.dump(), frame_sample(frames, 6, 1));
  std::vector<at::Tensor> cameras;
  for (int64_t v = 0; v < 3; ++v) {
    cameras.push_back(
        image_ops::frames_to_planes_as(frames[v], 24, 32, image_ops::ResizeMode::kStretch, 0));
  }
  Sample from_planes = frame_sample(frames.narrow(1, 2, 1).contiguous(), 6, 1);
  from_planes.set_tensor("frame_planes", torch::stack(cameras));
  params["planes_from_decode"] = true;
  const Sample got = run_one(params.dump(), from_planes);
  for (const char* field :
       {"video", "memory_video_anchor", "memory_video_recent", "vlm_current_images"}) {
    EXPECT_TRUE(torch::equal(got.tensor(field), own.tensor(field))) << field;
  }
  EXPECT_FALSE(got.has("frame_planes"));
  EXPECT_FALSE(got.has("frames"));

  Sample wrong_size = frame_sample(frames.narrow(1, 2, 1).contiguous(), 6, 1);
  wrong_size.set_tensor("frame_planes", torch::zeros({3, 11, 3, 20, 32}, torch::kUInt8));
  EXPECT_ERROR(run_one(params.dump(), wrong_size),
               "field frame_planes holds 20x32 (HxW) planes, but camera_size is [24, 32]: set "
               "VideoDecode's planes_size to camera_size");
  Sample all_frames = frame_sample(frames, 6, 1);
  all_frames.set_tensor("frame_planes", torch::stack(cameras));
  EXPECT_ERROR(run_one(params.dump(), all_frames),
               "field frames has 11 frames per camera; with planes_from_decode it holds the "
               "current frame only (VideoDecode's planes_size); got Byte[3, 11, 48, 64, 3]");
  EXPECT_EQ(testing::error_of([] {
              SteppedStage stage("Augment",
                                 R"({"planes_from_decode": true, "frames": "current",
                                     "resize": "fit"})");
            }),
            "<test>:/params/planes_from_decode [Augment]: needs frames \"all\": the planes are the "
            "canvas's cameras");
  // Planes resized other than by a halving were stretched: another resize mode is an error. A
  // halving is the same in every mode.
  params["resize"] = "fit";
  params["camera_size"] = {20, 30};
  Sample stretched = frame_sample(frames.narrow(1, 2, 1).contiguous(), 6, 1);
  stretched.set_tensor("frame_planes", torch::zeros({3, 11, 3, 20, 30}, torch::kUInt8));
  EXPECT_ERROR(run_one(params.dump(), stretched),
               "field frame_planes: VideoDecode stretches frames of 64x48 to planes of 30x20 (not "
               "a halving), but resize is not \"stretch\": set VideoDecode's planes_size to [] and "
               "Augment's planes_from_decode to false");
  params["camera_size"] = {24, 32};
  const at::Tensor fit_from_planes = run_one(params.dump(), from_planes).tensor("video");
  params["planes_from_decode"] = false;
  EXPECT_TRUE(torch::equal(fit_from_planes,
                           run_one(params.dump(), frame_sample(frames, 6, 1)).tensor("video")));
}

TEST(AugmentTest, CameraJitterAndSensorNoiseTouchOnlySelectedCameras) {
  const auto frames = noise_frames(2, 11, 24, 32);
  const Sample plain = run_one(R"({"deterministic": true})", frame_sample(frames, 4));
  const Sample jittered = run_one(R"({"camera_jitter_cameras": [0], "camera_jitter_prob": 1,
      "camera_jitter_rotation": 20, "camera_jitter_translate": 0.1, "sensor_noise_cameras": [0],
      "sensor_noise_gaussian_prob": 1, "sensor_noise_gaussian_std": 0.1})",
                                  frame_sample(frames, 4));
  // Camera 0 fills rows [0, 192) of the vertical canvas, camera 1 rows [192, 384).
  for (const auto& field : kCanvasFields) {
    const auto& before = plain.tensor(field);
    const auto& after = jittered.tensor(field);
    EXPECT_FALSE(torch::equal(region(before, 0, 192, 0, 256), region(after, 0, 192, 0, 256)))
        << field;
    EXPECT_TRUE(torch::equal(region(before, 192, 192, 0, 256), region(after, 192, 192, 0, 256)))
        << field;
  }
}

// Every shipped data config: only the sampler and augment blocks pipelines reference (a key
// beside them would be read by nothing), an augment block that is valid Augment params (unknown
// keys would be rejected) and runs, and the VLM jitter synced as the reference does.
TEST(AugmentTest, DataConfigsHoldValidSamplerAndAugmentBlocks) {
  std::vector<std::string> names;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(WAM_SOURCE_DIR) + "/configs/data")) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"gr00t_picknplace_deterministic.json", "libero.json",
                                             "libero_deterministic.json", "robotwin.json",
                                             "robotwin_deterministic.json"}));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    std::ifstream file(std::string(WAM_SOURCE_DIR) + "/configs/data/" + name);
    const auto config = nlohmann::json::parse(file);
    std::vector<std::string> keys;
    for (const auto& [key, value] : config.items()) keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"augment", "notes", "sampler", "text_cache"}));
    const bool deterministic = name.find("_deterministic") != std::string::npos;
    // The text cache is named after the dataset: a deterministic variant shares its prompts.
    const std::string dataset = name.substr(0, name.find(deterministic ? "_deterministic" : "."));
    EXPECT_EQ(config.at("text_cache"), "${WAM_CACHE_ROOT}/text_embed/" + dataset + ".h5");
    const auto& augment = config.at("augment");
    EXPECT_EQ(augment.at("deterministic").get<bool>(), deterministic);
    EXPECT_EQ(config.at("sampler").at("state_noise_std").get<double>() == 0.0,
              deterministic || name.rfind("robotwin", 0) == 0);
    EXPECT_TRUE(augment.at("sync_vlm_color_jitter").get<bool>());
    EXPECT_TRUE(augment.at("sync_vlm_camera_jitter").get<bool>());
    const auto cameras = static_cast<int64_t>(config.at("sampler").at("cameras").size());
    auto out = run_one(augment.dump(), frame_sample(noise_frames(cameras, 11, 24, 32), 1));
    EXPECT_EQ(out.tensor("video").sizes(), (std::vector<int64_t>{3, 9, 384, 256}));
  }
}

// ---- uint8 geometry against the float kernels it replaced ---------------------------------------

namespace ops = wam::image_ops;

TEST(AugmentImageOpsTest, ToPlanesIsAnExactDeinterleave) {
  const auto frames = noise_frames(1, 3, 37, 53).select(0, 0);
  const auto planes = ops::to_planes(frames);
  EXPECT_EQ(planes.sizes(), (std::vector<int64_t>{3, 3, 37, 53}));
  EXPECT_GT(planes.stride(2), 53);  // padded rows
  EXPECT_TRUE(torch::equal(planes, frames.permute({0, 3, 1, 2})));
}

// libswscale's bilinear on uint8 planes against torch's float antialiased bilinear (what Augment
// did before), at the sizes the data configs use. Prints the figures quoted in image_ops.h.
TEST(AugmentImageOpsTest, ResizePlanesMatchesTorchAntialiasedBilinear) {
  struct Case {
    int64_t height, width, out_height, out_width;
  };
  for (const Case& c :
       {Case{480, 640, 240, 320}, Case{240, 320, 256, 256}, Case{240, 320, 128, 128},
        Case{512, 512, 192, 256}, Case{24, 32, 192, 256}}) {
    const auto planes = ops::to_planes(smooth_frames(1, 2, c.height, c.width).select(0, 0));
    const auto ours = ops::resize_planes(planes, c.out_height, c.out_width);
    ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{2, 3, c.out_height, c.out_width}));
    ASSERT_EQ(ours.scalar_type(), torch::kUInt8);
    const auto reference = ops::resize(planes.to(torch::kFloat), c.out_height, c.out_width);
    const auto inside = [&](const at::Tensor& t) {
      return t.narrow(2, 2, c.out_height - 4).narrow(3, 2, c.out_width - 4);
    };
    const Difference all = difference(ours, reference);
    const Difference interior = difference(inside(ours), inside(reference));
    std::cout << c.height << "x" << c.width << " -> " << c.out_height << "x" << c.out_width
              << ": max " << all.max << ", mean " << all.mean << " levels; without the two "
              << "outermost rows and columns: max " << interior.max << ", mean " << interior.mean
              << "\n";
    EXPECT_LE(interior.max, 0.55);  // rounding to uint8
    EXPECT_LE(all.mean, 0.35);
    EXPECT_LE(all.max, 6.0);  // edge pixels: swscale repeats the edge, torch renormalises
  }
  // The same size is no work at all.
  const auto planes = ops::to_planes(noise_frames(1, 1, 8, 8).select(0, 0));
  EXPECT_TRUE(ops::resize_planes(planes, 8, 8).is_same(planes));
}

// libswscale's own bilinear resize of every plane, with the flags resize_planes gives it: what
// resize_planes must equal bit for bit, however it computes it.
at::Tensor libswscale_resize(const at::Tensor& planes, int64_t height, int64_t width) {
  SwsContext* scaler = sws_getContext(
      static_cast<int>(planes.size(3)), static_cast<int>(planes.size(2)), AV_PIX_FMT_GRAY8,
      static_cast<int>(width), static_cast<int>(height), AV_PIX_FMT_GRAY8,
      SWS_BILINEAR | SWS_ACCURATE_RND | SWS_BITEXACT, nullptr, nullptr, nullptr);
  EXPECT_NE(scaler, nullptr);
  // Rows padded: libswscale's vector stores may write past a row's end.
  at::Tensor out =
      torch::empty({planes.size(0), planes.size(1), height + 1, width + 64}, torch::kUInt8);
  for (int64_t i = 0; i < planes.size(0); ++i) {
    for (int64_t k = 0; k < planes.size(1); ++k) {
      const at::Tensor source = planes[i][k].contiguous();
      at::Tensor destination = out[i][k];
      const uint8_t* source_data[1] = {source.data_ptr<uint8_t>()};
      const int source_stride[1] = {static_cast<int>(planes.size(3))};
      uint8_t* destination_data[1] = {destination.data_ptr<uint8_t>()};
      const int destination_stride[1] = {static_cast<int>(width + 64)};
      sws_scale(scaler, source_data, source_stride, 0, static_cast<int>(planes.size(2)),
                destination_data, destination_stride);
    }
  }
  sws_freeContext(scaler);
  return out.narrow(2, 0, height).narrow(3, 0, width).contiguous();
}

at::Tensor checkerboard_planes(int64_t height, int64_t width) {
  const auto rows = torch::arange(height).view({height, 1}), columns = torch::arange(width);
  return ops::to_planes(((rows + columns) % 2 * 255)
                            .to(torch::kUInt8)
                            .expand({1, 3, height, width})
                            .permute({0, 2, 3, 1})
                            .contiguous());
}

// A halving takes pixel_kernels' halve_plane instead of libswscale: the same bits as libswscale's
// bilinear with the flags resize_planes gives it, on noise and on the extremes 0 and 255 side by
// side, from the smallest size it takes (8 a side: four output pixels, each near an edge) up.
// Below that libswscale narrows its filter, and resize_planes leaves halvings to it.
TEST(AugmentImageOpsTest, HalvingIsLibswscalesBilinearBitForBit) {
  struct Case {
    int64_t height, width;
  };
  for (const Case& c : {Case{480, 640}, Case{38, 54}, Case{8, 8}, Case{8, 12}, Case{4, 6}}) {
    for (const auto& planes : {ops::to_planes(noise_frames(1, 2, c.height, c.width).select(0, 0)),
                               checkerboard_planes(c.height, c.width)}) {
      const auto ours = ops::resize_planes(planes, c.height / 2, c.width / 2);
      ASSERT_EQ(ours.sizes(), (std::vector<int64_t>{planes.size(0), 3, c.height / 2, c.width / 2}));
      const auto expected = libswscale_resize(planes, c.height / 2, c.width / 2);
      EXPECT_TRUE(torch::equal(ours.contiguous(), expected))
          << c.height << "x" << c.width << ": " << difference(ours, expected).max
          << " levels apart at most";
    }
  }
}

// plane_resize's filters are libswscale's: applied as its scalers apply them (resize_plainly:
// horizontal sums >> 7, then the vertical sum + 2^18 >> 19), they give its output bit for bit, on
// the configs' sizes and on random ones up to 8 taps an axis. Plain loops, so this holds on every
// CPU, with or without the AVX-512 kernel.
TEST(AugmentImageOpsTest, PlaneResizeFiltersAreLibswscales) {
  const auto apply = [](const at::Tensor& planes, int64_t height, int64_t width) {
    const int source_height = static_cast<int>(planes.size(2));
    const int source_width = static_cast<int>(planes.size(3));
    const auto across =
        wam::plane_resize::bilinear_filter(source_width, static_cast<int>(width), 1 << 14, 4);
    const auto down =
        wam::plane_resize::bilinear_filter(source_height, static_cast<int>(height), 1 << 12, 2);
    const at::Tensor source = planes.contiguous();
    at::Tensor out = torch::empty({planes.size(0), planes.size(1), height, width}, torch::kUInt8);
    for (int64_t plane = 0; plane < planes.size(0) * planes.size(1); ++plane) {
      wam::plane_resize::resize_plainly(
          source.data_ptr<uint8_t>() + plane * source_height * source_width, source_width, across,
          down, 19, out.data_ptr<uint8_t>() + plane * height * width, width);
    }
    return out;
  };
  std::mt19937 random(5);
  std::vector<std::array<int64_t, 4>> cases = {
      {240, 320, 256, 256}, {240, 320, 128, 128}, {512, 512, 192, 256}, {24, 32, 192, 256}};
  while (cases.size() < 60) {
    const int64_t height = 3 + random() % 200, width = 3 + random() % 200;
    const int64_t out_height = std::max<int64_t>(1, height * (25 + random() % 300) / 100);
    const int64_t out_width = std::max<int64_t>(1, width * (25 + random() % 300) / 100);
    cases.push_back({height, width, out_height, out_width});
  }
  int checked = 0;
  for (const auto& [height, width, out_height, out_width] : cases) {
    if (wam::plane_resize::bilinear_filter(static_cast<int>(width), static_cast<int>(out_width),
                                           1 << 14, 4)
                .taps > 8 ||
        wam::plane_resize::bilinear_filter(static_cast<int>(height), static_cast<int>(out_height),
                                           1 << 12, 2)
                .taps > 8) {
      continue;  // beyond the kernel: libswscale's own
    }
    for (const auto& planes : {ops::to_planes(noise_frames(1, 1, height, width).select(0, 0)),
                               checkerboard_planes(height, width)}) {
      const auto expected = libswscale_resize(planes, out_height, out_width);
      const auto ours = apply(planes, out_height, out_width);
      EXPECT_TRUE(torch::equal(ours, expected))
          << height << "x" << width << " -> " << out_height << "x" << out_width << ": "
          << difference(ours, expected).max << " levels apart at most";
      ++checked;
    }
  }
  EXPECT_GE(checked, 80);
}

// A random plane of `height` x `width` bytes.
at::Tensor random_plane(int64_t height, int64_t width, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randint(0, 256, {height, width}, generator, torch::kUInt8);
}

// over_pairs' filter on 4:2:0 chroma is the luma's filter on that chroma repeated over its 2x2
// pixels (as libswscale's RGB conversion repeats it), bit for bit in resize_plainly's integers,
// at levels and at 64 times the levels, on LIBERO's and RoboTwin's sizes and random ones.
TEST(AugmentImageOpsTest, ChromaFilterOverPairsIsTheFilterOnTheRepeatedChroma) {
  namespace pr = wam::plane_resize;
  std::mt19937 random(17);
  std::vector<std::array<int, 4>> cases = {
      {512, 512, 192, 256}, {480, 640, 256, 256}, {480, 640, 128, 128}, {8, 8, 3, 5}};
  while (cases.size() < 40) {
    const int height = 8 + 2 * static_cast<int>(random() % 150);
    const int width = 8 + 2 * static_cast<int>(random() % 150);
    cases.push_back({height, width, 1 + static_cast<int>(random() % (height * 2)),
                     1 + static_cast<int>(random() % (width * 2))});
  }
  for (const auto& [height, width, out_height, out_width] : cases) {
    SCOPED_TRACE(std::to_string(height) + "x" + std::to_string(width) + " -> " +
                 std::to_string(out_height) + "x" + std::to_string(out_width));
    const pr::AxisFilter across = pr::bilinear_filter(width, out_width, 1 << 14, 4);
    const pr::AxisFilter down = pr::bilinear_filter(height, out_height, 1 << 12, 2);
    const pr::AxisFilter pairs_across = pr::over_pairs(across, width, 4);
    const pr::AxisFilter pairs_down = pr::over_pairs(down, height, 2);
    EXPECT_TRUE(pairs_across.taps % 4 == 0 || pairs_across.taps == width / 2);
    EXPECT_TRUE(pairs_down.taps % 2 == 0 || pairs_down.taps == 1 || pairs_down.taps == height / 2);
    const at::Tensor chroma = random_plane(height / 2, width / 2, random());
    const at::Tensor repeated = chroma.repeat_interleave(2, 0).repeat_interleave(2, 1).contiguous();
    for (const int shift : {19, 13}) {
      std::vector<uint16_t> want_values(static_cast<size_t>(out_height * out_width));
      std::vector<uint16_t> got_values(want_values.size());
      pr::resize_plainly(repeated.data_ptr<uint8_t>(), width, across, down, shift,
                         want_values.data(), out_width);
      pr::resize_plainly(chroma.data_ptr<uint8_t>(), width / 2, pairs_across, pairs_down, shift,
                         got_values.data(), out_width);
      EXPECT_EQ(got_values, want_values) << "shift " << shift;
    }
  }
}

// Yuv420Resizer takes PlaneResizer's AVX-512 kernel where the CPU has it and the filters fit it
// (luma and chroma at 64 times the levels) and gives resize_plainly's bits then rgb_from_yuv64's,
// on LIBERO's sizes and random ones: every machine renders a sample alike.
TEST(AugmentImageOpsTest, Yuv420ResizerIsThePlainLoopsBitForBit) {
  namespace pr = wam::plane_resize;
  namespace pk = wam::pixel_kernels;
  std::mt19937 random(19);
  std::vector<std::array<int, 4>> cases = {
      {512, 512, 192, 256}, {480, 640, 200, 300}, {64, 96, 24, 48}, {8, 8, 3, 5}};
  while (cases.size() < 40) {
    const int height = 8 + 2 * static_cast<int>(random() % 200);
    const int width = 8 + 2 * static_cast<int>(random() % 200);
    cases.push_back({height, width, 1 + static_cast<int>(random() % height),
                     1 + static_cast<int>(random() % width)});
  }
  int on_the_kernel = 0;
  for (const auto& [height, width, out_height, out_width] : cases) {
    SCOPED_TRACE(std::to_string(height) + "x" + std::to_string(width) + " -> " +
                 std::to_string(out_height) + "x" + std::to_string(out_width));
    const at::Tensor luma = random_plane(height, width, random());
    const at::Tensor cb = random_plane(height / 2, width / 2, random());
    const at::Tensor cr = random_plane(height / 2, width / 2, random());
    const pr::AxisFilter across = pr::bilinear_filter(width, out_width, 1 << 14, 4);
    const pr::AxisFilter down = pr::bilinear_filter(height, out_height, 1 << 12, 2);
    const pr::AxisFilter pairs_across = pr::over_pairs(across, width, 4);
    const pr::AxisFilter pairs_down = pr::over_pairs(down, height, 2);
    if (pr::PlaneResizer::make(width, height, across, down) &&
        pr::PlaneResizer::make(width / 2, height / 2, pairs_across, pairs_down)) {
      ++on_the_kernel;
    }
    const int64_t plane = static_cast<int64_t>(out_height) * out_width;
    std::vector<uint16_t> levels(static_cast<size_t>(3 * plane));
    pr::resize_plainly(luma.data_ptr<uint8_t>(), width, across, down, 13, levels.data(), out_width);
    pr::resize_plainly(cb.data_ptr<uint8_t>(), width / 2, pairs_across, pairs_down, 13,
                       levels.data() + plane, out_width);
    pr::resize_plainly(cr.data_ptr<uint8_t>(), width / 2, pairs_across, pairs_down, 13,
                       levels.data() + 2 * plane, out_width);
    for (const bool full_range : {false, true}) {
      at::Tensor want = torch::empty({3, out_height, out_width}, torch::kUInt8);
      pk::rgb_from_yuv64(pk::Yuv64Matrix(full_range), levels.data(), levels.data() + plane,
                         levels.data() + 2 * plane, plane, want[0].data_ptr<uint8_t>(),
                         want[1].data_ptr<uint8_t>(), want[2].data_ptr<uint8_t>());
      // Output rows a few bytes apart beyond their width, as in a tensor's padded planes.
      const int64_t row = out_width + 5;
      at::Tensor got = torch::zeros({3, out_height, row}, torch::kUInt8);
      auto resizer = pr::Yuv420Resizer::make(width, height, out_width, out_height);
      ASSERT_TRUE(resizer);
      resizer->resize(luma.data_ptr<uint8_t>(), width, cb.data_ptr<uint8_t>(),
                      cr.data_ptr<uint8_t>(), width / 2, full_range, got[0].data_ptr<uint8_t>(),
                      got[1].data_ptr<uint8_t>(), got[2].data_ptr<uint8_t>(), row);
      EXPECT_TRUE(torch::equal(got.narrow(2, 0, out_width), want)) << "full range " << full_range;
      EXPECT_EQ(got.narrow(2, out_width, 5).count_nonzero().item<int64_t>(), 0);
    }
  }
  std::cout << on_the_kernel << " of " << cases.size() << " cases on the AVX-512 kernel\n";
  // The others are shrinks beyond the kernel's 8 taps (26 of the 40 took it on 2026-12-06).
  if (pr::PlaneResizer::make(320, 240, 256, 256)) {
    EXPECT_GE(on_the_kernel, 20);
  }
  EXPECT_FALSE(pr::Yuv420Resizer::make(63, 64, 10, 10));
  EXPECT_FALSE(pr::Yuv420Resizer::make(6, 6, 3, 3));
}

// resize_planes gives libswscale's bits whichever way it takes (plane_resize's AVX-512 kernel
// where the CPU has it, libswscale itself otherwise), on the configs' sizes, random sizes, plane
// views that start inside a row (resize_planes_as' fill mode) and every size near the kernel's
// limits (a 128-byte window per 32 outputs, 8 taps).
TEST(AugmentImageOpsTest, ResizePlanesIsLibswscalesBilinearBitForBit) {
  std::cout << "plane_resize kernel on this CPU: "
            << (wam::plane_resize::PlaneResizer::make(320, 240, 256, 256) ? "yes" : "no") << "\n";
  std::mt19937 random(11);
  std::vector<std::array<int64_t, 4>> cases = {
      {240, 320, 256, 256}, {240, 320, 128, 128}, {512, 512, 192, 256}, {24, 32, 192, 256},
      {480, 640, 240, 321}, {100, 300, 30, 90},   {5, 5, 1, 1},         {3, 3, 7, 2}};
  while (cases.size() < 70) {
    const auto size = [&] { return static_cast<int64_t>(random() % 300); };
    cases.push_back({3 + size(), 3 + size(), 1 + size(), 1 + size()});
  }
  for (const auto& [height, width, out_height, out_width] : cases) {
    const auto frames = noise_frames(1, 2, height + 2, width + 5).select(0, 0);
    // A view one row and three columns into wider planes: rows start unaligned, end short of the
    // stride.
    const auto planes = ops::to_planes(frames).narrow(2, 1, height).narrow(3, 3, width);
    const auto ours = ops::resize_planes(planes, out_height, out_width);
    const auto expected = libswscale_resize(planes, out_height, out_width);
    ASSERT_EQ(ours.sizes(), expected.sizes());
    EXPECT_TRUE(torch::equal(ours, expected))
        << height << "x" << width << " -> " << out_height << "x" << out_width << ": "
        << difference(ours, expected).max << " levels apart at most";
  }
}

TEST(AugmentImageOpsTest, WarpPlanesMatchesTorchGridSample) {
  const auto smooth = ops::to_planes(smooth_frames(1, 2, 96, 128).select(0, 0));
  const auto noise = ops::to_planes(noise_frames(1, 2, 60, 80).select(0, 0));
  EXPECT_TRUE(torch::equal(ops::warp_planes(smooth, {}), smooth));
  for (const ops::CameraWarp& warp :
       {ops::CameraWarp{0.94, 0.03, -0.02, 5.0}, ops::CameraWarp{0.9, -0.05, 0.04, -12.0},
        ops::CameraWarp{1.0, 0.3, 0.2, 30.0}, ops::CameraWarp{0.97, 0.0, 0.0, 0.0}}) {
    for (const auto* planes : {&smooth, &noise}) {
      const auto ours = ops::warp_planes(*planes, warp);
      ASSERT_EQ(ours.sizes(), planes->sizes());
      const auto reference = ops::warp_float(planes->to(torch::kFloat), warp);
      EXPECT_LE(difference(ours, reference).max, 0.52)
          << "scale " << warp.scale << ", rotation " << warp.rotation_degrees;
    }
  }
}

// Without rotation warp_planes samples per axis (pixel_kernels' sample_separable); a full turn
// takes the per-pixel path (sin 2pi is not 0 in doubles, so the map has a cross term) through the
// same positions. Both must give the same bits, on even and odd sizes, zooming in and out, with
// the crop pushed to either border.
TEST(AugmentImageOpsTest, WarpWithoutRotationIsThePerPixelWarpBitForBit) {
  const auto smooth = ops::to_planes(smooth_frames(1, 2, 96, 128).select(0, 0));
  const auto noise = ops::to_planes(noise_frames(1, 3, 61, 77).select(0, 0));
  const auto strip = ops::to_planes(noise_frames(1, 1, 1, 9).select(0, 0));
  int64_t warps = 0;
  for (const double scale : {0.9, 0.95, 0.973, 1.0, 1.08}) {
    const double slack = std::abs(1.0 - scale) / 2.0;
    for (const double shift : {-slack, 0.0, 0.4 * slack, slack, 0.07}) {
      const ops::CameraWarp straight{scale, shift, -0.5 * shift, 0.0};
      ops::CameraWarp full_turn = straight;
      full_turn.rotation_degrees = 360.0;
      for (const auto* planes : {&smooth, &noise, &strip}) {
        const auto separable = ops::warp_planes(*planes, straight);
        ASSERT_EQ(separable.sizes(), planes->sizes());
        EXPECT_TRUE(torch::equal(separable, ops::warp_planes(*planes, full_turn)))
            << "scale " << scale << ", shift " << shift << ", " << planes->size(2) << "x"
            << planes->size(3) << ": "
            << difference(separable, ops::warp_planes(*planes, full_turn)).max
            << " levels apart at most";
        ++warps;
      }
    }
  }
  EXPECT_EQ(warps, 75);
  // And the warp is not the identity: a zoom moves the levels.
  EXPECT_FALSE(torch::equal(ops::warp_planes(noise, {0.9, 0.0, 0.0, 0.0}), noise));
}

// The rotated warp's sampling (pixel_kernels::sample_bilinear: AVX-512 blocks of 16 pixels where
// the CPU has AVX-512) against the per-pixel formula it documents, bit for bit, on random levels:
// rotations of LIBERO's range and steeper ones (whose blocks span more source rows or columns than
// the blocks take, and go pixel by pixel), zooms in and out, widths with and without a tail of
// under 16 pixels, rows wider than the plane.
TEST(AugmentImageOpsTest, RotatedSamplingIsThePerPixelFormulaBitForBit) {
  namespace pk = pixel_kernels;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> level(0, 255);
  int64_t planes = 0;
  for (const auto& [h, w] :
       std::vector<std::pair<int64_t, int64_t>>{{61, 77}, {96, 128}, {33, 16}, {64, 250}, {7, 9}}) {
    const int64_t row = w + 3;
    std::vector<uint8_t> source(static_cast<size_t>(h * row));
    for (auto& value : source) value = static_cast<uint8_t>(level(rng));
    const auto count = static_cast<size_t>(h * w);
    std::vector<int32_t> offsets(count);
    std::vector<float> weights(2 * count);
    const pk::PixelTaps taps{offsets.data(), weights.data(), weights.data() + count};
    for (const double degrees : {-5.0, -2.3, 0.7, 4.9, 30.0, 90.0}) {
      for (const double scale : {0.8, 1.0, 1.15, 1.6}) {
        const double radians = degrees * M_PI / 180.0;
        const auto c = static_cast<float>(scale * std::cos(radians));
        const auto s = static_cast<float>(scale * std::sin(radians));
        const float theta[6] = {c, -s, 0.03f, s, c, -0.02f};
        pk::warp_taps(theta, h, w, row, taps);
        std::vector<float> levels(static_cast<size_t>(pk::bilinear_levels_size(h, row)));
        std::vector<uint8_t> got(count);
        pk::sample_bilinear(source.data(), row, taps, h, w, levels.data(), got.data(), w);
        const auto at = [&](int32_t offset) { return static_cast<float>(source[offset]); };
        int64_t differing = 0;
        for (size_t k = 0; k < count; ++k) {
          // The next column and row within the plane, the edge's own pixel on the last ones.
          const int32_t x0 = taps.offset[k] % static_cast<int32_t>(row);
          const int32_t y0 = taps.offset[k] / static_cast<int32_t>(row);
          const int32_t right = x0 + 1 < w ? 1 : 0;
          const int32_t p = taps.offset[k], q = p + (y0 + 1 < h ? static_cast<int32_t>(row) : 0);
          const float top = at(p) + taps.fx[k] * (at(p + right) - at(p));
          const float bottom = at(q) + taps.fx[k] * (at(q + right) - at(q));
          const auto want = static_cast<uint8_t>(top + taps.fy[k] * (bottom - top) + 0.5f);
          differing += got[k] != want;
        }
        EXPECT_EQ(differing, 0) << h << "x" << w << ", " << degrees << " degrees, scale " << scale;
        ++planes;
      }
    }
  }
  EXPECT_EQ(planes, 120);
}

// The fused colour pass (pixel_kernels.h) against the torch ops that define it, every step on,
// on camera-like content and on noise at an odd width (the vector loops' tails). Prints the
// figures quoted in docs/BENCHMARKS.md (issue 24).
TEST(AugmentImageOpsTest, FusedColourJitterMatchesTheTorchOps) {
  const auto smooth = ops::to_planes(smooth_frames(1, 3, 96, 128).select(0, 0));
  const auto noise = ops::to_planes(noise_frames(1, 2, 37, 53).select(0, 0));
  // No jitter: levels / 255, bit for bit.
  EXPECT_TRUE(torch::equal(ops::jittered_unit_float(noise, {}), ops::to_unit_float(noise)));
  ops::ColourJitter jitter;
  jitter.color = {1.15, 0.85, 1.2, 0.92};
  jitter.rgb_gain = std::array<double, 3>{1.1, 0.9, 1.05};
  jitter.shadow = ops::Shadow{0.3, 0.6, 0.25, 0.4};
  const ops::ColorAdjustment darker = {0.8, 1.2, 0.75, 1.08};
  for (const auto* planes : {&smooth, &noise}) {
    at::Tensor reference = ops::to_unit_float(*planes);
    ops::adjust_color_(reference, jitter.color);
    ops::apply_rgb_gain_(reference, *jitter.rgb_gain);
    ops::apply_shadow_(reference, *jitter.shadow);
    const at::Tensor fused = ops::jittered_unit_float(*planes, jitter);
    ASSERT_EQ(fused.sizes(), planes->sizes());
    ASSERT_TRUE(fused.is_contiguous());
    const double unit_max = (fused - reference).abs().max().item<double>();
    for (const auto& color : {jitter.color, darker}) {
      at::Tensor unit = ops::to_unit_float(*planes);
      ops::adjust_color_(unit, color);
      const at::Tensor expected = ops::to_uint8_(unit);
      const at::Tensor levels = ops::jittered_levels(*planes, color);
      ASSERT_EQ(levels.scalar_type(), torch::kUInt8);
      const Difference d = difference(levels, expected);
      const double changed = expected.ne(levels).to(torch::kFloat).mean().item<double>();
      std::cout << "fused colour jitter: float max " << unit_max << "; levels max " << d.max
                << ", share of levels changed " << changed << "\n";
      EXPECT_LE(d.max, 1.0);     // a value within float rounding of a half level
      EXPECT_LE(changed, 2e-4);  // and rarely: 3e-5 measured
    }
    EXPECT_LE(unit_max, 1e-6);  // float rounding: 3e-7 measured
  }
}

// Augment's camera resize from the decoder's packed frames: to_planes then resize_planes_as, bit
// for bit, in every resize mode, whether it halves (straight from the packed frames), does not, or
// halves a frame too small for the halving kernel.
TEST(AugmentImageOpsTest, FramesToPlanesAsIsToPlanesThenResizePlanesAs) {
  struct Case {
    int64_t height, width, out_height, out_width;
  };
  for (const Case& c : {Case{480, 640, 240, 320}, Case{38, 54, 19, 27}, Case{30, 40, 24, 32},
                        Case{30, 40, 15, 10}, Case{6, 8, 3, 4}}) {
    const auto frames = noise_frames(1, 2, c.height, c.width).select(0, 0);
    for (const auto mode :
         {ops::ResizeMode::kStretch, ops::ResizeMode::kFit, ops::ResizeMode::kFill}) {
      const auto ours = ops::frames_to_planes_as(frames, c.out_height, c.out_width, mode, 7);
      const auto expected =
          ops::resize_planes_as(ops::to_planes(frames), c.out_height, c.out_width, mode, 7);
      ASSERT_EQ(ours.sizes(), expected.sizes());
      EXPECT_TRUE(torch::equal(ours, expected))
          << c.height << "x" << c.width << " -> " << c.out_height << "x" << c.out_width << ", mode "
          << static_cast<int>(mode) << ": " << difference(ours, expected).max
          << " levels apart at most";
    }
  }
}

// The whole deterministic RoboTwin canvas at the real sizes (480x640 -> 240x320 -> 256x256 and
// 128x128 slots) against the float path Augment had before: torch antialiased resizes in float.
TEST(AugmentTest, CanvasMatchesTheFloatResizePipelineItReplaces) {
  const auto frames = smooth_frames(3, 11, 480, 640);
  auto out = run_one(R"({"canvas": "robotwin", "camera_size": [240, 320], "deterministic": true})",
                     frame_sample(frames, 0));
  at::Tensor reference = torch::zeros({11, 3, 384, 256});
  const auto slots = ops::canvas_layout(ops::Canvas::kRobotwin, 3, 384, 256);
  for (int64_t v = 0; v < 3; ++v) {
    const auto& slot = slots[static_cast<size_t>(v)];
    const auto unit = frames[v].permute({0, 3, 1, 2}).to(torch::kFloat).div(255.0);
    reference.narrow(2, slot.top, slot.height)
        .narrow(3, slot.left, slot.width)
        .copy_(ops::resize(ops::resize(unit, 240, 320), slot.height, slot.width));
  }
  reference = (reference * 2.0 - 1.0).permute({1, 0, 2, 3});
  const Difference d = difference(out.tensor("video") * 127.5, reference.narrow(1, 2, 9) * 127.5);
  std::cout << "robotwin canvas vs the float path: max " << d.max << ", mean " << d.mean
            << " levels\n";
  EXPECT_LE(d.mean, 0.4);
  EXPECT_LE(d.max, 8.0);
}

// The canvas is zero wherever no camera's slot covers it (two cameras in RoboTwin's three slots),
// and a tiled one is every camera's planes: compose_canvas skips the zeroing only for the latter.
TEST(AugmentImageOpsTest, ComposeCanvasIsZeroOutsideTheCamerasSlots) {
  const auto planes = [](uint8_t level, int64_t height, int64_t width) {
    return torch::full({2, 3, height, width}, level, torch::kUInt8);
  };
  const auto slots = ops::canvas_layout(ops::Canvas::kRobotwin, 3, 48, 32);
  // A dirty allocation of the canvas's size first, which a fresh canvas may reuse.
  { at::Tensor dirty = torch::full({2, 3, 48, 32}, 77, torch::kUInt8); }
  const at::Tensor two = ops::compose_canvas({planes(200, 32, 32), planes(100, 16, 16)}, slots, 48,
                                             32, ops::ResizeMode::kStretch, 0);
  EXPECT_EQ(two.narrow(2, 0, 32).min().item<int>(), 200);
  EXPECT_EQ(two.narrow(2, 32, 16).narrow(3, 0, 16).min().item<int>(), 100);
  EXPECT_EQ(two.narrow(2, 32, 16).narrow(3, 16, 16).max().item<int>(), 0);
  const at::Tensor three =
      ops::compose_canvas({planes(200, 32, 32), planes(100, 16, 16), planes(50, 16, 16)}, slots, 48,
                          32, ops::ResizeMode::kStretch, 0);
  EXPECT_EQ(three.narrow(2, 32, 16).narrow(3, 16, 16).min().item<int>(), 50);
  EXPECT_EQ(three.narrow(2, 32, 16).narrow(3, 16, 16).max().item<int>(), 50);
}

// ---- resize modes -------------------------------------------------------------------------------

// uint8 planes [1, 3, h, w] of levels 100 + (row + 3 column) % 100: never the fill level 7 below,
// nor after a bilinear resize (which stays within [100, 199]).
at::Tensor patterned_planes(int64_t height, int64_t width) {
  auto rows = torch::arange(height).view({height, 1});
  auto columns = torch::arange(width).view({1, width});
  auto levels = ((rows + 3 * columns) % 100 + 100).to(torch::kUInt8);
  return levels.unsqueeze(0).unsqueeze(0).expand({1, 3, height, width}).contiguous();
}

int64_t count_level(const at::Tensor& planes, int64_t level) {
  return planes.eq(level).sum().item<int64_t>();
}

TEST(AugmentImageOpsTest, FitLetterboxesWithTheFillLevelExactlyInTheBars) {
  // Same width: no scaling, the content rows are the source's rows, the bars 8 rows each.
  const auto planes = patterned_planes(48, 64);
  auto out = ops::resize_planes_as(planes, 64, 64, ops::ResizeMode::kFit, 7);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 3, 64, 64}));
  EXPECT_EQ(count_level(out.narrow(2, 0, 8), 7), 3 * 8 * 64);
  EXPECT_EQ(count_level(out.narrow(2, 56, 8), 7), 3 * 8 * 64);
  EXPECT_TRUE(torch::equal(out.narrow(2, 8, 48), planes));
  // The newcomer's 640x480 camera in a 384x256 slot: scale 0.4, image 256x192 at row 96.
  const auto camera = patterned_planes(480, 640);
  out = ops::resize_planes_as(camera, 384, 256, ops::ResizeMode::kFit, 7);
  EXPECT_EQ(count_level(out.narrow(2, 0, 96), 7), 3 * 96 * 256);
  EXPECT_EQ(count_level(out.narrow(2, 288, 96), 7), 3 * 96 * 256);
  EXPECT_EQ(count_level(out.narrow(2, 96, 192), 7), 0);
  EXPECT_TRUE(torch::equal(out.narrow(2, 96, 192), ops::resize_planes(camera, 192, 256)));
}

TEST(AugmentImageOpsTest, FillCutsTheCentreThenScales) {
  const auto planes = patterned_planes(64, 96);
  auto out = ops::resize_planes_as(planes, 64, 64, ops::ResizeMode::kFill, 7);
  EXPECT_TRUE(torch::equal(out, planes.narrow(3, 16, 64)));
  // 640x480 into 384x256: the centre 320 columns, scaled by 0.8.
  const auto camera = patterned_planes(480, 640);
  out = ops::resize_planes_as(camera, 384, 256, ops::ResizeMode::kFill, 7);
  EXPECT_TRUE(
      torch::equal(out, ops::resize_planes(camera.narrow(3, 160, 320).contiguous(), 384, 256)));
  // Stretch is the plain resize.
  EXPECT_TRUE(torch::equal(ops::resize_planes_as(camera, 384, 256, ops::ResizeMode::kStretch, 7),
                           ops::resize_planes(camera, 384, 256)));
}

// On the canvas: a 64x48 camera in the one-camera slot (256x384) through camera_size [384, 256].
TEST(AugmentTest, ResizeFitLeavesBarsOfTheFillLevelAroundTheCamera) {
  const Colour colour = {200, 40, 10}, bars = {7, 7, 7};
  auto out = run_one(R"({"canvas": "vertical", "camera_size": [384, 256], "deterministic": true,
                         "resize": "fit", "resize_fill": 7})",
                     frame_sample(solid_frames({colour}, 11, 48, 64), 0));
  for (const auto& field : kCanvasFields) {
    const auto& video = out.tensor(field);
    // Scale 4: the image is 256x192 at row 96.
    expect_filled(video, 0, 96, 0, 256, bars);
    expect_filled(video, 96, 192, 0, 256, colour);
    expect_filled(video, 288, 96, 0, 256, bars);
  }
}

TEST(AugmentTest, ResizeFillShowsTheCentreOfTheCamera) {
  // Columns 0-31 one colour, 32-63 another: the 32 centre columns (16-47) fill the slot, so each
  // colour takes half of it, blended only near the middle.
  const Colour left = {200, 40, 10}, right = {10, 120, 250};
  auto frames = solid_frames({left}, 11, 48, 64);
  frames.narrow(3, 32, 32).copy_(solid_frames({right}, 11, 48, 32));
  auto out = run_one(R"({"canvas": "vertical", "camera_size": [384, 256], "deterministic": true,
                         "resize": "fill"})",
                     frame_sample(frames, 0));
  const auto& video = out.tensor("video");
  expect_filled(video, 0, 384, 0, 112, left);
  expect_filled(video, 0, 384, 144, 112, right);
}

TEST(AugmentTest, ResizeDefaultsToTheReferenceStretch) {
  Diagnostics diagnostics;
  const auto params = parse_params<stages::AugmentParams>({}, "/augment", diagnostics);
  EXPECT_EQ(params.resize, ops::ResizeMode::kStretch);
  EXPECT_EQ(params.resize_fill, 0);
}

// ---- sync_vlm_* --------------------------------------------------------------------------------

// One camera whose raw size is the canvas: nothing is resized, so with sync on the VLM image and
// the video's current frame show the same jittered picture, up to the VLM image's rounding.
std::string sync_params(bool color, bool camera) {
  auto params = nlohmann::json::parse(R"({"canvas": "vertical", "camera_size": [384, 256],
      "camera_jitter_cameras": [0], "camera_jitter_prob": 1, "camera_jitter_scale": [0.9, 0.95],
      "camera_jitter_translate": 0.03, "camera_jitter_rotation": 5,
      "color_jitter_brightness": 0.2, "color_jitter_contrast": 0.2,
      "color_jitter_saturation": 0.25, "color_jitter_gamma": 0.1})");
  params["sync_vlm_color_jitter"] = color;
  params["sync_vlm_camera_jitter"] = camera;
  return params.dump();
}

// The video's current frame [3, H, W] in uint8 levels.
at::Tensor current_frame_levels(const Sample& out) {
  return (out.tensor("video").select(1, 0) + 1.0) * 127.5;
}

at::Tensor raw_current(const at::Tensor& frames) {
  return frames.select(1, 2).permute({0, 3, 1, 2});
}

TEST(AugmentTest, SyncedVlmImageIsTheJitteredCurrentFrame) {
  const auto frames = smooth_frames(1, 11, 384, 256);
  for (int64_t id : {0, 1, 2}) {
    SCOPED_TRACE(id);
    auto out = run_one(sync_params(true, true), frame_sample(frames, id));
    const auto& vlm = out.tensor("vlm_current_images");
    ASSERT_EQ(vlm.scalar_type(), torch::kUInt8);
    ASSERT_EQ(vlm.sizes(), (std::vector<int64_t>{1, 3, 384, 256}));
    EXPECT_LE(difference(vlm[0], current_frame_levels(out)).max, 0.501);
    EXPECT_GT(difference(vlm, raw_current(frames)).mean, 1.0);  // it was jittered
  }
}

TEST(AugmentTest, UnsyncedVlmImageIsTheRawCurrentFrame) {
  const auto frames = smooth_frames(1, 11, 384, 256);
  const auto before = frames.clone();
  auto out = run_one(sync_params(false, false), frame_sample(frames, 0));
  EXPECT_TRUE(torch::equal(out.tensor("vlm_current_images"), raw_current(frames)));
  EXPECT_GT(difference(current_frame_levels(out), raw_current(frames)[0]).mean, 1.0);
  EXPECT_TRUE(torch::equal(frames, before));
}

TEST(AugmentTest, EachSyncSwitchAppliesOnlyItsOwnJitter) {
  const auto frames = smooth_frames(1, 11, 384, 256);
  // Camera only = both switches with zero colour strengths: the warp is drawn before the colour
  // factors, so it is the same warp.
  auto camera_only = run_one(sync_params(false, true), frame_sample(frames, 4));
  auto no_colour = nlohmann::json::parse(sync_params(true, true));
  for (const char* key : {"color_jitter_brightness", "color_jitter_contrast",
                          "color_jitter_saturation", "color_jitter_gamma"}) {
    no_colour[key] = 0;
  }
  auto warped_only = run_one(no_colour.dump(), frame_sample(frames, 4));
  EXPECT_TRUE(torch::equal(camera_only.tensor("vlm_current_images"),
                           warped_only.tensor("vlm_current_images")));
  EXPECT_FALSE(torch::equal(camera_only.tensor("vlm_current_images"), raw_current(frames)));
  // Colour only: a solid frame looks the same under any warp, so its VLM image is the colour of
  // the video's current frame.
  const auto solid = solid_frames({{90, 140, 200}}, 11, 384, 256);
  auto colour_only = run_one(sync_params(true, false), frame_sample(solid, 4));
  const auto& vlm = colour_only.tensor("vlm_current_images");
  EXPECT_LE(difference(vlm[0], current_frame_levels(colour_only)).max, 0.501);
  EXPECT_FALSE(torch::equal(vlm, raw_current(solid)));
}

TEST(AugmentTest, CurrentFramesGetTheSameVlmJitterAsAllFrames) {
  const auto frames = smooth_frames(3, 11, 48, 64);
  const auto all = run_one(everything_on(false), frame_sample(frames, 8, 1));
  auto params = nlohmann::json::parse(everything_on(false));
  params["frames"] = "current";
  const auto current =
      run_one(params.dump(), frame_sample(frames.narrow(1, 2, 1).contiguous(), 8, 1));
  EXPECT_TRUE(torch::equal(all.tensor("vlm_current_images"), current.tensor("vlm_current_images")));
  EXPECT_FALSE(torch::equal(all.tensor("vlm_current_images"), raw_current(frames)));
}

// ---- video_dtype uint8 --------------------------------------------------------------------------

// What HostToDevice's video_as_uint8 made of the float video before Augment could emit uint8,
// written out here so that the test pins the mapping instead of reusing the code under test.
at::Tensor quantised_as_host_to_device_did(const at::Tensor& video) {
  return video.add(1.0).mul(127.5).round().clamp(0, 255).to(torch::kUInt8);
}

std::string with_video_dtype(const std::string& params, const char* dtype) {
  auto json = nlohmann::json::parse(params);
  json["video_dtype"] = dtype;
  return json.dump();
}

TEST(AugmentTest, Uint8VideoIsTheFloatVideoQuantisedExactly) {
  const auto frames = smooth_frames(3, 11, 48, 64);
  for (const bool deterministic : {false, true}) {
    for (int64_t id : {0, 1, 2, 3}) {
      SCOPED_TRACE("deterministic " + std::to_string(deterministic) + ", sample " +
                   std::to_string(id));
      const std::string params = everything_on(deterministic);
      const Sample as_float = run_one(params, frame_sample(frames, id, 1));
      const Sample as_levels =
          run_one(with_video_dtype(params, "uint8"), frame_sample(frames, id, 1));
      const at::Tensor& levels = as_levels.tensor("video");
      ASSERT_EQ(levels.scalar_type(), torch::kUInt8);
      ASSERT_EQ(levels.sizes(), (std::vector<int64_t>{3, 9, 384, 256}));
      EXPECT_TRUE(levels.is_contiguous());
      EXPECT_EQ(levels.storage().nbytes(), levels.nbytes());
      EXPECT_TRUE(torch::equal(levels, quantised_as_host_to_device_did(as_float.tensor("video"))));
      // Only `video` changes: the memory frames stay float, the VLM images are the same.
      for (const char* field :
           {"memory_video_anchor", "memory_video_recent", "vlm_current_images"}) {
        EXPECT_TRUE(torch::equal(as_levels.tensor(field), as_float.tensor(field))) << field;
      }
    }
  }
}

TEST(AugmentTest, Float32VideoDtypeIsTheDefault) {
  const Sample sample = frame_sample(smooth_frames(3, 11, 48, 64), 2);
  const Sample as_default = run_one(everything_on(false), sample);
  EXPECT_EQ(as_default.tensor("video").scalar_type(), torch::kFloat);
  expect_same_canvas(as_default,
                     run_one(with_video_dtype(everything_on(false), "float32"), sample));
}

TEST(AugmentImageOpsTest, EveryLevelSurvivesTheRoundTripThroughSignedUnit) {
  const auto levels = torch::arange(256, torch::kInt).to(torch::kUInt8);
  at::Tensor unit = levels.to(torch::kFloat);
  ops::levels_to_signed_unit_(unit);
  EXPECT_EQ(unit[0].item<float>(), -1.0f);
  EXPECT_EQ(unit[255].item<float>(), 1.0f);
  EXPECT_TRUE(torch::equal(ops::signed_unit_to_levels(unit), levels));
  // Out-of-range values clamp; 0 is 127.5 levels, rounded to 128.
  EXPECT_TRUE(torch::equal(ops::signed_unit_to_levels(torch::tensor({-1.5f, 0.0f, 1.5f})),
                           torch::tensor({0, 128, 255}, torch::kUInt8)));
}

// Augment's outputs come straight from the unit canvas: the same bits as the torch ops they
// replace (x.mul_(2).sub_(1), the frames moved to [3, T, H, W], then signed_unit_to_levels), on
// random values, every level's edges and the ends of [0, 1].
TEST(AugmentImageOpsTest, UnitFramesToVideoIsTheTorchOpsBitForBit) {
  torch::manual_seed(4);
  at::Tensor canvas = torch::rand({6, 3, 16, 24});
  const at::Tensor edges = (torch::arange(256, torch::kFloat) + 0.5f) / 255.0f;
  canvas.view(-1).narrow(0, 0, 256).copy_(edges);
  canvas.view(-1).narrow(0, 256, 256).copy_(torch::arange(256, torch::kFloat) / 255.0f);
  canvas.view(-1)[600] = 0.0f;
  canvas.view(-1)[601] = 1.0f;
  const at::Tensor signed_frames = canvas.clone().mul_(2.0).sub_(1.0).permute({1, 0, 2, 3});
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 1}, {2, 4}, {0, 6}}) {
    SCOPED_TRACE("frames " + std::to_string(first) + " + " + std::to_string(count));
    const at::Tensor want = signed_frames.narrow(1, first, count);
    const at::Tensor as_float = ops::unit_frames_to_video(canvas, first, count, false);
    EXPECT_TRUE(as_float.is_contiguous());
    EXPECT_TRUE(torch::equal(as_float, want));
    EXPECT_TRUE(torch::equal(ops::unit_frames_to_video(canvas, first, count, true),
                             ops::signed_unit_to_levels(want)));
  }
}

// The host path's float and uint8 video straight from the colour jitter: the jittered unit canvas,
// then unit_frames_to_video, bit for bit, for every part of a sample and with no jitter at all.
TEST(AugmentImageOpsTest, JitteredVideosAreTheJitteredCanvasThenToVideoBitForBit) {
  const auto planes = ops::to_planes(noise_frames(1, 7, 37, 53).select(0, 0));
  ops::ColourJitter jitter;
  jitter.color = {1.15, 0.85, 1.2, 0.92};
  jitter.rgb_gain = std::array<double, 3>{1.1, 0.9, 1.05};
  jitter.shadow = ops::Shadow{0.3, 0.6, 0.25, 0.4};
  const std::vector<ops::FrameRange> ranges = {{2, 5},       {0, 1},       {1, 1},      {3, 0},
                                               {2, 5, true}, {0, 1, true}, {6, 1, true}};
  for (const ops::ColourJitter& each : {jitter, ops::ColourJitter{}}) {
    const at::Tensor canvas = ops::jittered_unit_float(planes, each);
    const std::vector<at::Tensor> videos = ops::jittered_videos(planes, each, ranges);
    ASSERT_EQ(videos.size(), ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      SCOPED_TRACE("frames " + std::to_string(ranges[i].first) + " + " +
                   std::to_string(ranges[i].count) + (ranges[i].as_levels ? " as levels" : ""));
      const at::Tensor want =
          ops::unit_frames_to_video(canvas, ranges[i].first, ranges[i].count, ranges[i].as_levels);
      ASSERT_EQ(videos[i].sizes(), want.sizes());
      EXPECT_TRUE(videos[i].is_contiguous());
      EXPECT_TRUE(torch::equal(videos[i], want));
    }
  }
  EXPECT_THROW(ops::jittered_videos(planes, jitter, {{5, 3}}), c10::Error);
}

// ---- as ATen ops (frames in GPU memory)
// ----------------------------------------------------------

// Every kind of draw, chosen here rather than drawn: camera 0 and 1 warped, colour, gain and
// shadow on, cameras 0 and 2 with all three kinds of sensor noise.
stages::SampleDraws explicit_draws(int64_t cameras) {
  stages::SampleDraws draws;
  draws.camera_warps.resize(static_cast<size_t>(cameras));
  draws.camera_warps[0] = ops::CameraWarp{0.9, 0.03, -0.02, 4.0};
  if (cameras > 1) draws.camera_warps[1] = ops::CameraWarp{0.95, -0.04, 0.01, -3.0};
  draws.color = {1.1, 0.9, 1.2, 0.95};
  draws.rgb_gain = std::array<double, 3>{1.05, 0.92, 1.1};
  draws.shadow = ops::Shadow{0.4, 0.6, 0.3, 0.35};
  draws.sensor_noise.resize(static_cast<size_t>(cameras));
  for (size_t camera : {size_t{0}, size_t{2}}) {
    if (camera < draws.sensor_noise.size()) draws.sensor_noise[camera] = {0.8, 0.7, 7 + camera};
  }
  return draws;
}

stages::AugmentParams augment_params(const std::string& json) {
  Diagnostics diagnostics;
  auto params =
      parse_params<stages::AugmentParams>(nlohmann::json::parse(json), "/augment", diagnostics);
  EXPECT_TRUE(diagnostics.empty());
  return params;
}

// The tensor-op path (what frames on a GPU get) against the host kernels on the same frames and
// draws, here both on the CPU (so the Gaussian noise is the same draws too). The bound on a GPU is
// a mean of one level a pixel (the next test); here it is tighter.
TEST(AugmentTensorOpsTest, MatchTheHostKernelsWithinALevel) {
  struct Case {
    const char* name;
    const char* params;
    int64_t cameras, height, width;
    bool random;
  };
  const std::vector<Case> cases = {
      {"robotwin halving", R"({"canvas": "robotwin", "camera_size": [240, 320]})", 3, 480, 640,
       false},
      {"robotwin halving, every draw", R"({"canvas": "robotwin", "camera_size": [240, 320]})", 3,
       480, 640, true},
      {"vertical fit", R"({"camera_size": [192, 256], "resize": "fit", "resize_fill": 7})", 2, 120,
       200, true},
      {"vertical fill, uint8 video",
       R"({"camera_size": [200, 150], "resize": "fill", "video_dtype": "uint8"})", 2, 96, 160,
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const stages::AugmentParams params = augment_params(c.params);
    const at::Tensor frames = smooth_frames(c.cameras, 11, c.height, c.width);
    const at::Tensor before = frames.clone();
    const stages::SampleDraws draws = explicit_draws(c.cameras);
    const stages::SampleDraws* drawn = c.random ? &draws : nullptr;
    const stages::AugmentedImages host = stages::augment_on_host(frames, params, drawn);
    const stages::AugmentedImages tensor = stages::augment_with_tensor_ops(frames, params, drawn);
    EXPECT_TRUE(torch::equal(frames, before));
    const std::vector<std::pair<const char*, std::pair<at::Tensor, at::Tensor>>> outputs = {
        {"video", {host.video, tensor.video}},
        {"memory_video_anchor", {host.memory_video_anchor, tensor.memory_video_anchor}},
        {"memory_video_recent", {host.memory_video_recent, tensor.memory_video_recent}},
        {"vlm_current_images", {host.vlm_current_images, tensor.vlm_current_images}}};
    for (const auto& [field, pair] : outputs) {
      const auto& [want, got] = pair;
      ASSERT_EQ(got.sizes(), want.sizes()) << field;
      ASSERT_EQ(got.scalar_type(), want.scalar_type()) << field;
      EXPECT_TRUE(got.is_contiguous()) << field;
      // Levels: uint8 outputs are levels already, the float ones are in [-1, 1].
      const double scale = got.scalar_type() == torch::kFloat ? 127.5 : 1.0;
      const Difference d = difference(got * scale, want * scale);
      std::cout << c.name << ", " << field << ": tensor ops vs host kernels, mean " << d.mean
                << ", max " << d.max << " levels\n";
      // Measured: means 0.0001-0.28, maxima 1-2 levels (the host rounds to levels between steps).
      EXPECT_LE(d.mean, 0.5) << field;
      EXPECT_LE(d.max, 3.0) << field;
    }
  }
}

TEST(AugmentTensorOpsTest, NothingRandomGivesTheRawCurrentFrameForTheVlm) {
  const at::Tensor frames = smooth_frames(2, 11, 48, 64);
  const stages::AugmentedImages out =
      stages::augment_with_tensor_ops(frames, augment_params("{}"), nullptr);
  EXPECT_TRUE(torch::equal(out.vlm_current_images, raw_current(frames)));
  EXPECT_EQ(out.video.sizes(), (std::vector<int64_t>{3, 9, 384, 256}));
}

TEST(AugmentTensorOpsTest, CudaIsRefusedAtValidateWithoutACudaDevice) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_EQ(testing::error_of([] { SteppedStage stage("Augment", R"({"device": "cuda"})"); }),
            "<test>:/params/device [Augment]: \"cuda\" needs a CUDA device, and this LibTorch "
            "(" TORCH_VERSION ") sees none; augment with \"frames\"");
}

// On a GPU with the fused kernels, each camera is resized from its uint8 frames by
// kernels/frames_resize.cu (into its slot where the slot is its size), warped by
// kernels/planes_warp.cu, and a sample that drew no sensor noise is jittered and scaled by
// kernels/canvas_colour.cu: the outputs against the same tensor ops on the CPU, enlarged and
// shrunk, with bars and cropped, with every part of the jitter on (brightness, contrast,
// saturation, gamma, gain, shadow, warps), with none, and with the contrast alone (its mean over
// the canvas, summed in chunks).
TEST(AugmentTensorOpsTest, OnTheGpuTheJitterWithoutSensorNoiseGivesTheCpusTensorOps) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  stages::SampleDraws every = explicit_draws(3);
  every.sensor_noise.assign(3, stages::SensorNoise{});
  stages::SampleDraws contrast_alone;
  contrast_alone.camera_warps.resize(3);
  contrast_alone.sensor_noise.resize(3);
  contrast_alone.color.contrast = 0.6;
  const std::vector<std::pair<const char*, const stages::SampleDraws*>> draws = {
      {"every draw but noise", &every}, {"no draws", nullptr}, {"contrast alone", &contrast_alone}};
  struct Setting {
    const char* name;
    const char* params;
    int64_t cameras, height, width;
  };
  const std::vector<Setting> settings = {
      {"robotwin, enlarged", R"({"canvas": "robotwin", "camera_size": [240, 320]})", 3, 120, 200},
      {"vertical fit, enlarged, uint8 video",
       R"({"camera_size": [192, 256], "resize": "fit", "resize_fill": 7, "video_dtype": "uint8"})",
       2, 120, 200},
      {"vertical stretch, shrunk as LIBERO's, uint8 video",
       R"({"camera_size": [192, 256], "video_dtype": "uint8"})", 2, 512, 512},
      {"vertical fill, shrunk", R"({"camera_size": [192, 256], "resize": "fill"})", 2, 300, 500}};
  for (const Setting& setting : settings) {
    const stages::AugmentParams params = augment_params(setting.params);
    const at::Tensor used = smooth_frames(setting.cameras, 11, setting.height, setting.width);
    for (const auto& [name, drawn] : draws) {
      SCOPED_TRACE(std::string(setting.name) + ", " + name);
      const stages::AugmentedImages cpu = stages::augment_with_tensor_ops(used, params, drawn);
      const stages::AugmentedImages gpu =
          stages::augment_with_tensor_ops(used.to(torch::kCUDA), params, drawn);
      const std::vector<std::pair<const char*, std::pair<at::Tensor, at::Tensor>>> outputs = {
          {"video", {cpu.video, gpu.video}},
          {"memory_video_anchor", {cpu.memory_video_anchor, gpu.memory_video_anchor}},
          {"memory_video_recent", {cpu.memory_video_recent, gpu.memory_video_recent}}};
      for (const auto& [field, pair] : outputs) {
        const auto& [want, got] = pair;
        ASSERT_TRUE(got.is_cuda()) << field;
        ASSERT_EQ(got.sizes(), want.sizes()) << field;
        ASSERT_EQ(got.scalar_type(), want.scalar_type()) << field;
        const double scale = got.scalar_type() == torch::kFloat ? 127.5 : 1.0;
        const Difference d = difference(got.cpu() * scale, want * scale);
        std::cout << setting.name << ", " << name << ", " << field
                  << ": GPU vs CPU tensor ops, mean " << d.mean << ", max " << d.max << " levels\n";
        EXPECT_LE(d.mean, 0.01) << field;
        EXPECT_LE(d.max, 1.0) << field;
      }
    }
  }
}

// On a GPU: host frames uploaded by `device: cuda`, and frames already there, give the host's
// images within a level, on the GPU, the same every run (the noise's generator is seeded per
// sample).
TEST(AugmentTensorOpsTest, OnTheGpuTheStageMatchesTheHostAndRepeatsItself) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Sample sample = frame_sample(smooth_frames(3, 11, 480, 640), 5, 2);
  auto params = nlohmann::json::parse(everything_on(false));
  params["camera_size"] = {240, 320};
  const Sample host = run_one(params.dump(), sample);
  params["device"] = "cuda";
  const Sample uploaded = run_one(params.dump(), sample);
  Sample on_device = sample;
  on_device.set_tensor("frames", sample.tensor("frames").to(torch::kCUDA));
  const Sample resident = run_one(params.dump(), on_device);
  for (const char* field :
       {"video", "memory_video_anchor", "memory_video_recent", "vlm_current_images"}) {
    SCOPED_TRACE(field);
    const at::Tensor& got = uploaded.tensor(field);
    EXPECT_TRUE(got.is_cuda());
    EXPECT_TRUE(torch::equal(got, resident.tensor(field)));
    const double scale = got.scalar_type() == torch::kFloat ? 127.5 : 1.0;
    // The Gaussian noise differs (a CUDA generator), so only the noise-free cameras are compared
    // closely: camera 1 holds the bottom-left slot of the robotwin canvas.
    const at::Tensor want = host.tensor(field);
    const bool canvas = got.size(-2) == 384;
    const Difference d = canvas ? difference(region(got.cpu(), 256, 128, 0, 128) * scale,
                                             region(want, 256, 128, 0, 128) * scale)
                                : difference(got.cpu() * scale, want * scale);
    std::cout << field << ": GPU tensor ops vs host kernels, mean " << d.mean << ", max " << d.max
              << " levels\n";
    EXPECT_LE(d.mean, 1.0);
  }
}

}  // namespace
}  // namespace wam::testing
