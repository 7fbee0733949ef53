// VideoDecode through the stage harness: frame order, modes, frames: current, counters and errors.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>
#include <thread>

extern "C" {
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

#include <filesystem>
#include <string>
#include <vector>

#if WAM_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#endif

#include "data/image_ops.h"
#include "data/pixel_kernels.h"
#include "data/video_io.h"
#include "data/video_reader.h"
#if WAM_FUSED_KERNELS
#include "kernels/nv12_rgb.h"
#endif
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/tensor.h"

namespace wam {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Encoder statistics and the demuxer's complaints about the broken files below are expected.
const bool kQuietFfmpeg = (av_log_set_level(AV_LOG_FATAL), true);

constexpr int kFps = 30;
constexpr int kFrames = 60;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("wam_video_decode_test_" + std::to_string(getpid()) + "_" +
                                         std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// A video whose frame k shows k in its stamp; `shade` tells the cameras apart.
std::string encode(const std::string& path, const video::EncodeOptions& options, int width = 96,
                   int height = 64, uint8_t shade = 90) {
  video::VideoWriter writer(path, width, height, options);
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int k = 0; k < kFrames; ++k) {
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(shade + (i + k) % 64);
    video::stamp_frame_index(rgb.data(), width, height, k);
    writer.write(rgb.data());
  }
  writer.finish();
  return path;
}

int64_t stamp_of(const at::Tensor& frame) {
  at::Tensor contiguous = frame.contiguous();
  return video::read_frame_index(contiguous.data_ptr<uint8_t>(), static_cast<int>(frame.size(1)),
                                 static_cast<int>(frame.size(0)));
}

Sample make_sample(const std::vector<std::string>& files, const json& plan) {
  Sample sample("sample:7");
  sample.set("video_files", FieldValue(std::in_place_type<json>, json(files)));
  sample.set("frame_plan", FieldValue(std::in_place_type<json>, plan));
  return sample;
}

const json kPlan = {
    {"fps", 30.0}, {"anchor", 0}, {"recent", 3}, {"window", {20, 24, 28, 32, 36, 40, 44, 48, 52}}};
const std::vector<int64_t> kExpectedOrder = {0, 3, 20, 24, 28, 32, 36, 40, 44, 48, 52};

class VideoDecodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    av1_ = encode(dir_->file("cam_high.mp4"), {"av1", kFps, 2, false, 30});
    h264_ = encode(dir_->file("cam_wrist.mp4"), {"h264", kFps, 30, true, 23}, 96, 64, 20);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline TempDir* dir_ = nullptr;
  static inline std::string av1_, h264_;
};

TEST_F(VideoDecodeTest, AllFramesInPlanOrderForEveryCameraInBothModes) {
  std::vector<at::Tensor> by_mode;
  for (const char* mode : {"sparse", "full"}) {
    auto out = testing::run_stage("VideoDecode", json{{"mode", mode}}.dump(),
                                  {make_sample({av1_, h264_}, kPlan)});
    ASSERT_EQ(out.size(), 1u);
    const at::Tensor& frames = out[0].tensor("frames");
    ASSERT_EQ(frames.sizes(), (at::IntArrayRef{2, 11, 64, 96, 3})) << mode;
    ASSERT_EQ(frames.scalar_type(), at::kByte);
    for (int64_t v = 0; v < 2; ++v) {
      for (int64_t t = 0; t < 11; ++t) {
        EXPECT_EQ(stamp_of(frames[v][t]), kExpectedOrder[t]) << mode << " camera " << v;
      }
    }
    // The cameras are different videos, not one decoded twice.
    EXPECT_FALSE(at::equal(frames[0][2], frames[1][2]));
    by_mode.push_back(frames);
  }
  EXPECT_TRUE(at::equal(by_mode[0], by_mode[1]));
}

// The graph's workers provide the parallelism: a worker that decodes runs torch's ops (the frame
// copies) with one intra-op thread, whatever it had (stages/common/torch_threads.h). Run on a
// thread of its own, since the count is per OS thread under OpenMP.
TEST_F(VideoDecodeTest, DecodesWithOneTorchThreadOnItsWorker) {
  int before = 0, after = 0;
  size_t samples = 0;
  std::thread worker([&] {
    at::set_num_threads(2);
    before = at::get_num_threads();
    samples = testing::run_stage("VideoDecode", json{{"mode", "sparse"}}.dump(),
                                 {make_sample({av1_, h264_}, kPlan)})
                  .size();
    after = at::get_num_threads();
  });
  worker.join();
  EXPECT_EQ(before, 2);
  EXPECT_EQ(samples, 1u);
  EXPECT_EQ(after, 1);
}

TEST_F(VideoDecodeTest, CurrentFrameOnly) {
  for (const char* mode : {"sparse", "full"}) {
    auto out = testing::run_stage("VideoDecode", json{{"mode", mode}, {"frames", "current"}}.dump(),
                                  {make_sample({av1_, h264_}, kPlan)});
    const at::Tensor& frames = out[0].tensor("frames");
    ASSERT_EQ(frames.sizes(), (at::IntArrayRef{2, 1, 64, 96, 3})) << mode;
    EXPECT_EQ(stamp_of(frames[0][0]), 20);
    EXPECT_EQ(stamp_of(frames[1][0]), 20);
  }
}

TEST_F(VideoDecodeTest, RepeatedIndicesNearEpisodeStart) {
  // At the episode start anchor, recent and the first window frame coincide; clamped window
  // indices repeat at the end.
  json plan = {
      {"fps", 30.0}, {"anchor", 0}, {"recent", 0}, {"window", {0, 4, 8, 12, 16, 20, 24, 24, 24}}};
  auto out = testing::run_stage("VideoDecode", "{}", {make_sample({h264_}, plan)});
  const at::Tensor& frames = out[0].tensor("frames");
  std::vector<int64_t> expected = {0, 0, 0, 4, 8, 12, 16, 20, 24, 24, 24};
  for (int64_t t = 0; t < 11; ++t) EXPECT_EQ(stamp_of(frames[0][t]), expected[t]);
}

TEST_F(VideoDecodeTest, CountsSparseAndFullWork) {
  json counts;
  for (const char* mode : {"sparse", "full"}) {
    testing::SteppedStage stage("VideoDecode", json{{"mode", mode}}.dump());
    stage.process(make_sample({av1_}, kPlan));
    for (const auto& [name, value] : stage.counters()) counts[mode][name] = value;
  }
  // AV1 with a keyframe every 2 frames: sparse seeks to 0, to 2 (decoding 2 and 3) and to each
  // even window frame; full decodes 20..52 in one pass, then anchor and recent as sparse does.
  EXPECT_EQ(counts["sparse"]["frames_decoded"], 12);
  EXPECT_EQ(counts["sparse"]["seeks"], 11);
  EXPECT_EQ(counts["full"]["frames_decoded"], 36);
  EXPECT_EQ(counts["full"]["seeks"], 3);
  EXPECT_EQ(counts["sparse"]["frames_skipped"], 0);
}

// H.264 with B-frames (x264's, each second one a reference): the pictures that no wanted frame
// needs and no other picture predicts from are left out undecoded, and the frames are the ones a
// decode of every picture gives.
TEST_F(VideoDecodeTest, LeavesOutThePicturesNoWantedFrameNeeds) {
  testing::SteppedStage stage("VideoDecode", R"({"mode": "sparse"})");
  const Sample out = stage.process_one(make_sample({h264_}, kPlan));
  const at::Tensor& frames = out.tensor("frames");
  for (int64_t t = 0; t < 11; ++t) EXPECT_EQ(stamp_of(frames[0][t]), kExpectedOrder[t]);
  // One pass from the keyframe at 0 through 52: 54 pictures in decoding order, 14 of them
  // B-frames that are neither references nor wanted.
  EXPECT_EQ(stage.counter("seeks"), 1);
  EXPECT_EQ(stage.counter("frames_decoded"), 40);
  EXPECT_EQ(stage.counter("frames_skipped"), 14);
}

// Readers are kept per stage and per thread: a second stage on the same thread opens its own (with
// its own decoder choice and counters), and a stage's second sample reuses the first's.
TEST_F(VideoDecodeTest, EachStageKeepsItsOwnReaders) {
  testing::SteppedStage first("VideoDecode", "{}");
  testing::SteppedStage second("VideoDecode", R"({"mode": "full"})");
  for (int round = 0; round < 2; ++round) {
    first.process(make_sample({av1_, h264_}, kPlan));
    second.process(make_sample({av1_, h264_}, kPlan));
  }
  EXPECT_EQ(first.counter("readers_opened"), 2);
  EXPECT_EQ(second.counter("readers_opened"), 2);
}

TEST_F(VideoDecodeTest, CamerasOfDifferentSizesAreAnError) {
  TempDir dir;
  std::string small = encode(dir.file("small.mp4"), {"h264", kFps, 30, false, 23}, 64, 32);
  EXPECT_EQ(testing::error_of([&] {
              testing::run_stage("VideoDecode", "{}", {make_sample({av1_, small}, kPlan)});
            }),
            "cameras of one sample must share a frame size: \"" + av1_ + "\" is 96x64 but \"" +
                small + "\" is 64x32");
}

TEST_F(VideoDecodeTest, MissingAndTruncatedFilesNameTheFile) {
  TempDir dir;
  std::string missing = dir.file("episode_000009.mp4");
  EXPECT_EQ(testing::error_of([&] {
              testing::run_stage("VideoDecode", "{}", {make_sample({av1_, missing}, kPlan)});
            }),
            "cannot open video \"" + missing + "\": no such file");
  std::string cut = encode(dir.file("cut.mp4"), {"av1", kFps, 2, false, 30});
  fs::resize_file(cut, fs::file_size(cut) / 2);
  EXPECT_EQ(testing::error_of([&] {
              testing::run_stage("VideoDecode", "{\"mode\": \"full\"}",
                                 {make_sample({cut}, kPlan)});
            }),
            "cannot open video \"" + cut + "\": Invalid data found when processing input");
}

TEST_F(VideoDecodeTest, FrameOutsideTheVideoNamesFileAndTimestamp) {
  json plan = kPlan;
  plan["window"] = {40, 44, 48, 52, 56, 60, 64, 68, 72};
  EXPECT_EQ(testing::error_of(
                [&] { testing::run_stage("VideoDecode", "{}", {make_sample({h264_}, plan)}); }),
            "video \"" + h264_ + "\": has no frame at 2.000 s (frame 60 at 30 fps)");
}

TEST_F(VideoDecodeTest, MalformedPlanNamesTheField) {
  EXPECT_EQ(testing::error_of([&] {
              testing::run_stage("VideoDecode", "{}",
                                 {make_sample({h264_}, json{{"fps", 30.0}, {"anchor", 0}})});
            }),
            "field frame_plan: expected {\"fps\": number, \"anchor\": int, \"recent\": int, "
            "\"window\": [int...]}, got {\"anchor\":0,\"fps\":30.0} ([json.exception.out_of_range"
            ".403] key 'recent' not found)");
}

TEST_F(VideoDecodeTest, RejectsUnknownMode) {
  const auto error = testing::caught<ConfigError>(
      [] { testing::make_stage("VideoDecode", R"({"mode": "sparce"})"); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->diagnostics().render(),
            "<test>:/params/mode [VideoDecode]: unknown value \"sparce\"; did you mean "
            "\"sparse\"? (allowed: sparse, full)\n");
}

// Consecutive samples of an episode share frames: with a frame cache the second sample decodes
// only what the first did not, and both get exactly the frames an uncached decode gives.
TEST_F(VideoDecodeTest, FrameCacheDecodesSharedFramesOnce) {
  const json next_plan = {{"fps", 30.0},
                          {"anchor", 0},
                          {"recent", 7},
                          {"window", {24, 28, 32, 36, 40, 44, 48, 52, 56}}};
  const std::vector<Sample> inputs = {make_sample({av1_, h264_}, kPlan),
                                      make_sample({av1_, h264_}, next_plan)};
  const auto cached = testing::run_stage_counted("VideoDecode", R"({"frame_cache": 40})", inputs);
  const auto uncached = testing::run_stage_counted("VideoDecode", "{}", inputs);
  ASSERT_EQ(cached.outputs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(at::equal(cached.outputs[i].tensor("frames"), uncached.outputs[i].tensor("frames")))
        << "sample " << i;
  }
  EXPECT_EQ(stamp_of(cached.outputs[1].tensor("frames")[0][10]), 56);
  // Sample 2 shares anchor 0 and window 24..52 (9 frames) per camera with sample 1.
  EXPECT_EQ(cached.counters.at("frame_cache_hits"), 2 * 9);
  EXPECT_LT(cached.counters.at("frames_decoded"), uncached.counters.at("frames_decoded"));
  EXPECT_EQ(testing::error_of([&] {
              testing::run_stage("VideoDecode", R"({"frame_cache": 5})",
                                 {make_sample({av1_}, kPlan)});
            }),
            "VideoDecode: param frame_cache (5) is smaller than the 11 frames one sample needs "
            "from " +
                av1_);
}

// decoder nvdec and auto (data/video_reader.h).
TEST_F(VideoDecodeTest, NvdecIsRefusedAtValidateAndAutoDecodesOnTheCpuWhereThereIsNone) {
  const std::string& problem = video::nvdec_problem(0);
  if (problem.empty()) GTEST_SKIP() << "this machine decodes on NVDEC";
  EXPECT_EQ(testing::error_of(
                [] { testing::SteppedStage stage("VideoDecode", R"({"decoder": "nvdec"})"); }),
            "<test>:/params/decoder [VideoDecode]: \"nvdec\" needs NVIDIA's hardware decoder, and "
            "this machine has none: " +
                problem + "; decode with \"cpu\", or \"auto\" to use it where present");
  testing::SteppedStage automatic("VideoDecode", R"({"decoder": "auto"})");
  EXPECT_EQ(automatic.log(),
            (std::vector<std::string>{"[test] VideoDecode: decoding on the CPU (decoder auto): " +
                                      problem}));
  const at::Tensor frames =
      automatic.process_one(make_sample({av1_, h264_}, kPlan)).tensor("frames");
  const auto cpu = testing::run_stage("VideoDecode", "{}", {make_sample({av1_, h264_}, kPlan)});
  EXPECT_TRUE(at::equal(frames, cpu[0].tensor("frames")));
  EXPECT_FALSE(automatic.has_counter("nvdec_readers_opened"));
}

// decoder cpu_first (data/video_decode.cc): what it cannot combine with is refused at validate;
// without NVDEC it decodes every sample on the CPU, saying why once.
TEST_F(VideoDecodeTest, CpuFirstRefusesWhatItCannotTakeAndDecodesOnTheCpuWhereThereIsNoNvdec) {
  const auto refusal = [](const json& params) {
    return testing::error_of([&] { testing::SteppedStage stage("VideoDecode", params.dump()); });
  };
  const std::string with_device_frames =
      refusal({{"decoder", "cpu_first"}, {"device_frames", true}});
  EXPECT_NE(with_device_frames.find(
                "<test>:/params/device_frames [VideoDecode]: must be false with decoder "
                "\"cpu_first\", which keeps the frames of the samples NVDEC decodes in GPU memory "
                "and the CPU's in host memory"),
            std::string::npos)
      << with_device_frames;
  EXPECT_EQ(refusal({{"decoder", "cpu_first"}, {"mode", "full"}}),
            "<test>:/params/decoder [VideoDecode]: \"cpu_first\" needs mode \"sparse\" (the "
            "baseline's full decoding stays on the CPU)");
  EXPECT_EQ(refusal({{"decoder", "cpu_first"}, {"frame_cache", 33}}),
            "<test>:/params/decoder [VideoDecode]: \"cpu_first\" needs frame_cache 0: the frame "
            "cache holds host frames");
  EXPECT_EQ(refusal({{"decoder", "cpu_first"}, {"cpu_decodes", -1}}),
            "<test>:/params/cpu_decodes [VideoDecode]: must be >= 0, got -1");

  const std::string& problem = video::nvdec_problem(0);
  if (problem.empty()) GTEST_SKIP() << "this machine decodes on NVDEC";
  testing::SteppedStage cpu_first("VideoDecode",
                                  R"({"decoder": "cpu_first", "planes_size": [32, 48]})");
  EXPECT_EQ(cpu_first.log(),
            (std::vector<std::string>{
                "[test] VideoDecode: decoding on the CPU (decoder cpu_first): " + problem}));
  const Sample decoded = cpu_first.process_one(make_sample({av1_, h264_}, kPlan));
  const auto cpu = testing::run_stage("VideoDecode", R"({"planes_size": [32, 48]})",
                                      {make_sample({av1_, h264_}, kPlan)});
  EXPECT_TRUE(at::equal(decoded.tensor("frames"), cpu[0].tensor("frames")));
  EXPECT_TRUE(at::equal(decoded.tensor("frame_planes"), cpu[0].tensor("frame_planes")));
  EXPECT_FALSE(cpu_first.has_counter("nvdec_samples"));
}

TEST_F(VideoDecodeTest, NvdecFramesEqualTheCpusWithinALevelInBothModes) {
  if (const std::string& problem = video::nvdec_problem(0); !problem.empty()) {
    GTEST_SKIP() << "no NVDEC here: " << problem;
  }
  // Two H.264 cameras (every NVDEC decodes H.264; the H200's has no AV1: the next test).
  const std::string bframes =
      encode(dir_->file("nvdec_h264_b.mp4"), {"h264", kFps, 30, true, 23}, 320, 256, 20);
  const std::string short_gop =
      encode(dir_->file("nvdec_h264.mp4"), {"h264", kFps, 4, false, 23}, 320, 256, 140);
  for (const char* mode : {"sparse", "full"}) {
    const auto cpu = testing::run_stage("VideoDecode", json{{"mode", mode}}.dump(),
                                        {make_sample({bframes, short_gop}, kPlan)});
    testing::SteppedStage nvdec("VideoDecode", json{{"mode", mode}, {"decoder", "nvdec"}}.dump());
    EXPECT_EQ(nvdec.log(), (std::vector<std::string>{
                               "[test] VideoDecode: decoding on NVDEC, CUDA device 0 (decoder "
                               "nvdec), at most 64 sessions"}));
    const at::Tensor got =
        nvdec.process_one(make_sample({bframes, short_gop}, kPlan)).tensor("frames");
    const at::Tensor& want = cpu[0].tensor("frames");
    ASSERT_EQ(got.sizes(), want.sizes()) << mode;
    for (int64_t v = 0; v < 2; ++v) {
      for (int64_t t = 0; t < 11; ++t) {
        EXPECT_EQ(stamp_of(got[v][t]), kExpectedOrder[t]) << mode << " camera " << v;
      }
    }
    EXPECT_LE((got.to(at::kFloat) - want.to(at::kFloat)).abs().mean().item<double>(), 1.0) << mode;
    EXPECT_EQ(nvdec.counter("nvdec_readers_opened"), 2) << mode;
    EXPECT_EQ(nvdec.counter("nvdec_overflow"), 0) << mode;
    EXPECT_EQ(nvdec.counter("nvdec_refused"), 0) << mode;
  }
}

// device_frames: the frames stay in GPU memory, the same frames within a level as the CPU's (the
// colour conversion is nv12_to_rgb's), in both modes and through the frame cache.
TEST_F(VideoDecodeTest, NvdecDeviceFramesEqualTheCpusWithinALevel) {
  if (const std::string& problem = video::nvdec_problem(0); !problem.empty()) {
    GTEST_SKIP() << "no NVDEC here: " << problem;
  }
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string bframes =
      encode(dir_->file("device_h264_b.mp4"), {"h264", kFps, 30, true, 23}, 320, 256, 20);
  const std::string short_gop =
      encode(dir_->file("device_h264.mp4"), {"h264", kFps, 4, false, 23}, 320, 256, 140);
  for (const json& params : {json{{"mode", "sparse"}}, json{{"mode", "full"}},
                             json{{"mode", "sparse"}, {"frame_cache", 33}}}) {
    SCOPED_TRACE(params.dump());
    const auto cpu = testing::run_stage("VideoDecode", params.dump(),
                                        {make_sample({bframes, short_gop}, kPlan)});
    json on_device = params;
    on_device["decoder"] = "nvdec";
    on_device["device_frames"] = true;
    testing::SteppedStage nvdec("VideoDecode", on_device.dump());
    EXPECT_EQ(nvdec.log(), (std::vector<std::string>{
                               "[test] VideoDecode: decoding on NVDEC, CUDA device 0 (decoder "
                               "nvdec), at most 64 sessions, frames kept in GPU memory"}));
    const at::Tensor got =
        nvdec.process_one(make_sample({bframes, short_gop}, kPlan)).tensor("frames");
    ASSERT_TRUE(got.is_cuda());
    const at::Tensor on_host = got.cpu();
    const at::Tensor& want = cpu[0].tensor("frames");
    ASSERT_EQ(on_host.sizes(), want.sizes());
    for (int64_t v = 0; v < 2; ++v) {
      for (int64_t t = 0; t < 11; ++t) {
        EXPECT_EQ(stamp_of(on_host[v][t]), kExpectedOrder[t]) << "camera " << v;
      }
    }
    const double mean = (on_host.to(at::kFloat) - want.to(at::kFloat)).abs().mean().item<double>();
    std::cout << params.dump() << ": NVDEC frames in GPU memory vs the CPU's, mean " << mean
              << " levels\n";
    EXPECT_LE(mean, 1.0);
  }
}

TEST_F(VideoDecodeTest, DeviceFramesAreRefusedAtValidateWithoutCuda) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_EQ(testing::error_of([] {
              testing::SteppedStage stage("VideoDecode",
                                          R"({"decoder": "auto", "device_frames": true})");
            }),
            "<test>:/params/device_frames [VideoDecode]: needs a CUDA device, and this LibTorch "
            "(" TORCH_VERSION ") sees none; set it to false");
  const std::string on_cpu = testing::error_of(
      [] { testing::SteppedStage stage("VideoDecode", R"({"device_frames": true})"); });
  EXPECT_NE(on_cpu.find("<test>:/params/device_frames [VideoDecode]: needs decoder \"nvdec\" or "
                        "\"auto\": the CPU decoders' frames are in host memory (Augment's device "
                        "\"cuda\" uploads them instead)"),
            std::string::npos)
      << on_cpu;
}

// `planes_size` at half the frames' size or another: the planes come straight from the decoder's
// 4:2:0, within three quarters of a level of resizing the RGB frames as Augment does (the reader's
// tests bound it on real frames). `frames` holds the current frame, bit for bit the RGB run's, and
// the decoding is the same work.
TEST_F(VideoDecodeTest, PlanesSizeWritesEveryFrameAsPlanesAndTheCurrentFrameAtFullSize) {
  testing::SteppedStage rgb_stage("VideoDecode", "{}");
  const auto rgb_run = rgb_stage.process(make_sample({av1_, h264_}, kPlan));
  const at::Tensor& rgb = rgb_run.at(0).tensor("frames");
  for (const auto& [height, width] : {std::pair{32, 48}, std::pair{24, 40}}) {
    SCOPED_TRACE(std::to_string(height) + "x" + std::to_string(width));
    testing::SteppedStage stage("VideoDecode", json{{"planes_size", {height, width}}}.dump());
    const auto out = stage.process(make_sample({av1_, h264_}, kPlan));
    ASSERT_EQ(out.size(), 1u);
    const at::Tensor& frames = out[0].tensor("frames");
    const at::Tensor& planes = out[0].tensor("frame_planes");
    ASSERT_EQ(frames.sizes(), (at::IntArrayRef{2, 1, 64, 96, 3}));
    ASSERT_EQ(planes.sizes(), (at::IntArrayRef{2, 11, 3, height, width}));
    for (int64_t v = 0; v < 2; ++v) {
      EXPECT_TRUE(at::equal(frames[v][0], rgb[v][2])) << "camera " << v;
      const at::Tensor resized =
          image_ops::frames_to_planes_as(rgb[v], height, width, image_ops::ResizeMode::kStretch, 0);
      const double mean =
          (planes[v].to(at::kFloat) - resized.to(at::kFloat)).abs().mean().item<double>();
      EXPECT_LE(mean, 0.75) << "camera " << v;  // measured 0.41-0.58
      EXPECT_GT(mean, 0.0) << "camera " << v << ": converted after the resize, not before";
    }
    EXPECT_EQ(stage.counter("frames_decoded"), rgb_stage.counter("frames_decoded"));
    EXPECT_EQ(stage.counter("seeks"), rgb_stage.counter("seeks"));
  }
}

// `anchor_cache`: an episode's anchor decoded once, its planes copied into the samples after:
// the same bytes as decoding it, fewer frames decoded and seeks, one hit a camera and later
// sample; an anchor inside the window and a capacity below the files' count give the same.
TEST_F(VideoDecodeTest, AnchorCacheGivesTheDecodedAnchorsPlanesAndDecodesItOnce) {
  const json second_plan = {{"fps", 30.0},
                            {"anchor", 0},
                            {"recent", 5},
                            {"window", {30, 34, 38, 42, 46, 50, 54, 58, 59}}};
  // The episode's start: the anchor is also window[0], the current frame.
  const json at_start = {
      {"fps", 30.0}, {"anchor", 0}, {"recent", 0}, {"window", {0, 1, 2, 3, 4, 5, 6, 7, 8}}};
  const std::vector<Sample> inputs = {make_sample({av1_, h264_}, kPlan),
                                      make_sample({av1_, h264_}, second_plan),
                                      make_sample({av1_, h264_}, at_start)};
  // At capacity 1 each camera's anchor evicts the other's: never a hit, the same planes.
  for (const auto& [capacity, hits] : {std::pair{4, 2 * 2}, std::pair{1, 0}}) {
    SCOPED_TRACE("anchor_cache " + std::to_string(capacity));
    const auto kept = testing::run_stage_counted(
        "VideoDecode", json{{"planes_size", {32, 48}}, {"anchor_cache", capacity}}.dump(), inputs);
    const auto decoded =
        testing::run_stage_counted("VideoDecode", json{{"planes_size", {32, 48}}}.dump(), inputs);
    ASSERT_EQ(kept.outputs.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(at::equal(kept.outputs[i].tensor("frame_planes"),
                            decoded.outputs[i].tensor("frame_planes")))
          << "sample " << i;
      EXPECT_TRUE(at::equal(kept.outputs[i].tensor("frames"), decoded.outputs[i].tensor("frames")))
          << "sample " << i;
    }
    // At capacity 4 samples 2 and 3 find both cameras' anchors kept.
    EXPECT_EQ(kept.counters.at("anchor_cache_hits"), hits);
    if (hits > 0) {
      EXPECT_LT(kept.counters.at("frames_decoded"), decoded.counters.at("frames_decoded"));
      EXPECT_LT(kept.counters.at("seeks"), decoded.counters.at("seeks"));
    } else {
      EXPECT_EQ(kept.counters.at("frames_decoded"), decoded.counters.at("frames_decoded"));
    }
  }
  // Without planes_size there are no planes to keep: no effect, no counter.
  const auto full_size =
      testing::run_stage_counted("VideoDecode", R"({"anchor_cache": 4})", {inputs[0]});
  EXPECT_EQ(full_size.counters.count("anchor_cache_hits"), 0u);
  EXPECT_EQ(full_size.outputs.at(0).tensor("frames").size(1), 11);
}

TEST_F(VideoDecodeTest, PlanesSizeIsRefusedAtValidateWhereItCannotApply) {
  EXPECT_EQ(testing::error_of([] {
              testing::SteppedStage stage(
                  "VideoDecode",
                  R"({"planes_size": [32, 48], "frames": "current", "mode": "full",
                      "frame_cache": 33})");
            }),
            "<test>:/params/planes_size [VideoDecode]: needs frames \"all\": with \"current\" "
            "only the VLM's full-size frames are decoded\n"
            "<test>:/params/planes_size [VideoDecode]: needs mode \"sparse\" (the baseline's full "
            "decoding keeps the reference's RGB frames)\n"
            "<test>:/params/planes_size [VideoDecode]: needs frame_cache 0: the frame cache holds "
            "full-size RGB frames");
  EXPECT_EQ(testing::error_of(
                [] { testing::SteppedStage stage("VideoDecode", R"({"planes_size": [32]})"); }),
            "<test>:/params/planes_size [VideoDecode]: must be [H, W] or [], got 1 values");
}

// libswscale's conversion of planar 4:2:0 (luma [H, W], chroma planes [H / 2, W / 2]) to RGB24,
// as VideoReader's to_rgb makes the CPU decoders' frames (SWS_BILINEAR, the default BT.601
// matrix; the J format for full range): uint8 [1, H, W, 3].
at::Tensor libswscale_rgb(const at::Tensor& luma, const at::Tensor& cb, const at::Tensor& cr,
                          bool full_range) {
  const int height = static_cast<int>(luma.size(0)), width = static_cast<int>(luma.size(1));
  SwsContext* scaler =
      sws_getContext(width, height, full_range ? AV_PIX_FMT_YUVJ420P : AV_PIX_FMT_YUV420P, width,
                     height, AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
  EXPECT_NE(scaler, nullptr);
  const at::Tensor y_plane = luma.contiguous(), u_plane = cb.contiguous(),
                   v_plane = cr.contiguous();
  const uint8_t* planes[3] = {y_plane.data_ptr<uint8_t>(), u_plane.data_ptr<uint8_t>(),
                              v_plane.data_ptr<uint8_t>()};
  const int strides[3] = {width, width / 2, width / 2};
  at::Tensor rgb = torch::empty({1, height, width, 3}, torch::kUInt8);
  uint8_t* out[1] = {rgb.data_ptr<uint8_t>()};
  const int out_strides[1] = {3 * width};
  sws_scale(scaler, planes, strides, 0, height, out, out_strides);
  sws_freeContext(scaler);
  return rgb;
}

// pixel_kernels' halve_yuv420 against libswscale's conversion of the same 4:2:0 to RGB24 (the CPU
// decoders' frames) then halve_rgb, limited and full range, on camera-like content: smooth
// gradients, edges and noise, with colours that clip.
TEST(HalveYuv420Test, IsLibswscalesRgbHalvedWithinThreeQuartersOfALevel) {
  constexpr int kWidth = 96, kHeight = 64;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(29);
  const auto ramp = [](int64_t n) { return torch::arange(n, torch::kFloat) / n; };
  const at::Tensor noise = torch::randn({kHeight, kWidth}, generator) * 6.0;
  const at::Tensor luma =
      (ramp(kHeight).unsqueeze(1) * 180 + ramp(kWidth).unsqueeze(0) * 60 + 16 + noise)
          .clamp(0, 255)
          .to(torch::kUInt8)
          .contiguous();
  const at::Tensor cb = (ramp(kWidth / 2).unsqueeze(0).expand({kHeight / 2, kWidth / 2}) * 220 + 16)
                            .to(torch::kUInt8)
                            .contiguous();
  at::Tensor cr = (ramp(kHeight / 2).unsqueeze(1).expand({kHeight / 2, kWidth / 2}) * -200 + 236)
                      .to(torch::kUInt8)
                      .contiguous();
  cr.narrow(1, 10, 6).fill_(240);  // an edge of a strong red
  for (const bool full_range : {false, true}) {
    SCOPED_TRACE(full_range ? "full range" : "limited range");
    const at::Tensor rgb = libswscale_rgb(luma, cb, cr, full_range);
    const at::Tensor want = image_ops::frames_to_planes_as(rgb, kHeight / 2, kWidth / 2,
                                                           image_ops::ResizeMode::kStretch, 0)[0];
    at::Tensor got = torch::empty({3, kHeight / 2, kWidth / 2}, torch::kUInt8);
    pixel_kernels::halve_yuv420(luma.data_ptr<uint8_t>(), kWidth, cb.data_ptr<uint8_t>(),
                                cr.data_ptr<uint8_t>(), kWidth / 2, kHeight, kWidth, full_range,
                                got[0].data_ptr<uint8_t>(), got[1].data_ptr<uint8_t>(),
                                got[2].data_ptr<uint8_t>(), kWidth / 2);
    const at::Tensor d = (got.to(at::kFloat) - want.contiguous().to(at::kFloat)).abs();
    std::cout << "halve_yuv420 vs libswscale then halve_rgb: mean " << d.mean().item<double>()
              << ", max " << d.max().item<double>() << " levels\n";
    // Measured: means 0.57 (limited) and 0.49 (full); 2.1% and 1.6% of values beyond 4 levels,
    // at the red edge, where some of the pixels a plane pixel averages clip and others do not.
    EXPECT_LE(d.mean().item<double>(), 0.75);
    EXPECT_LE((d > 4.0).to(at::kFloat).mean().item<double>(), 0.03);
    // Not a copy of the luma: the colour went through the matrix.
    EXPECT_FALSE(at::equal(got[0], got[2]));
  }
}

// nv12_to_rgb against libswscale's conversion of the same YUV as planar 4:2:0, the CPU decoders'
// frames (VideoReader's to_rgb: SWS_BILINEAR, the default BT.601 matrix), limited and full range.
TEST(Nv12ToRgbTest, MatchesLibswscalesPlanarConversionWithinALevel) {
  constexpr int kWidth = 64, kHeight = 48;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(17);
  const at::Tensor luma = torch::randint(16, 236, {1, kHeight, kWidth}, generator, torch::kUInt8);
  const at::Tensor u = torch::randint(16, 241, {kHeight / 2, kWidth / 2}, generator, torch::kUInt8);
  const at::Tensor v = torch::randint(16, 241, {kHeight / 2, kWidth / 2}, generator, torch::kUInt8);
  const at::Tensor chroma = torch::stack({u, v}, 2).reshape({1, kHeight / 2, kWidth});
  for (const bool full_range : {false, true}) {
    SCOPED_TRACE(full_range ? "full range" : "limited range");
    const at::Tensor want = libswscale_rgb(luma[0], u, v, full_range);
    const at::Tensor got = video::nv12_to_rgb(luma, chroma, full_range);
    ASSERT_EQ(got.sizes(), want.sizes());
    const at::Tensor d = (got.to(at::kFloat) - want.to(at::kFloat)).abs();
    std::cout << "nv12_to_rgb vs libswscale: mean " << d.mean().item<double>() << ", max "
              << d.max().item<double>() << " levels\n";
    // Measured: means 0.19 (limited) and 0.07 (full), maxima 1; 0.79 and 0.51 without the
    // offsets nv12_to_rgb takes off.
    EXPECT_LE(d.mean().item<double>(), 0.3);
    EXPECT_LE(d.max().item<double>(), 2.0);
  }
}

#if WAM_FUSED_KERNELS
// kernels/nv12_rgb.cu against nv12_to_rgb (ATen) on the GPU: the same bytes, over every level,
// both ranges and odd sizes, from planes with padded rows as NVDEC's surfaces have them, into rows
// wider than the frame (the padding left as it was).
TEST(Nv12ToRgbTest, TheCudaKernelGivesTheAtenConversionsBytes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto generator = at::make_generator<at::CPUGeneratorImpl>(23);
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{48, 64}, {37, 53}, {480, 640}};
  for (const auto& [height, width] : sizes) {
    const int64_t chroma_height = (height + 1) / 2, chroma_width = 2 * ((width + 1) / 2);
    const at::Tensor luma_rows =
        torch::randint(0, 256, {height, width + 77}, generator, torch::kUInt8).cuda();
    const at::Tensor chroma_rows =
        torch::randint(0, 256, {chroma_height, chroma_width + 46}, generator, torch::kUInt8).cuda();
    const at::Tensor luma = luma_rows.narrow(1, 0, width);
    const at::Tensor chroma = chroma_rows.narrow(1, 0, chroma_width);
    for (const bool full_range : {false, true}) {
      SCOPED_TRACE(std::to_string(height) + "x" + std::to_string(width) +
                   (full_range ? ", full range" : ", limited range"));
      const at::Tensor want =
          video::nv12_to_rgb(luma.unsqueeze(0), chroma.unsqueeze(0), full_range)[0];
      at::Tensor got_rows =
          torch::full({height, 3 * width + 16}, 7,
                      torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA));
      const kernels::Nv12Frame frame{luma.data_ptr<uint8_t>(),
                                     luma_rows.stride(0),
                                     chroma.data_ptr<uint8_t>(),
                                     chroma_rows.stride(0),
                                     height,
                                     width,
                                     full_range};
      kernels::nv12_to_rgb(frame, got_rows.data_ptr<uint8_t>(), got_rows.stride(0),
                           at::cuda::getCurrentCUDAStream().stream());
      const at::Tensor got = got_rows.narrow(1, 0, 3 * width).view({height, width, 3});
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(torch::equal(got, want))
          << "levels apart at most "
          << (got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<double>();
      EXPECT_TRUE(torch::equal(got_rows.narrow(1, 3 * width, 16),
                               torch::full({height, 16}, 7, got_rows.options())));
    }
  }
}
#endif

// A stream this GPU's NVDEC cannot decode: an error naming the file with "nvdec", the CPU's frames
// with "auto", said once. Where the GPU decodes AV1 (not the H200's NVDEC), both decode on it.
TEST_F(VideoDecodeTest, AutoDecodesOnTheCpuTheStreamsNvdecCannot) {
  if (const std::string& problem = video::nvdec_problem(0); !problem.empty()) {
    GTEST_SKIP() << "no NVDEC here: " << problem;
  }
  // Above NVDEC's smallest AV1 frame (128x128).
  const std::string av1 =
      encode(dir_->file("nvdec_av1.mp4"), {"av1", kFps, 2, false, 30}, 320, 256);
  const std::string h264 =
      encode(dir_->file("nvdec_h264.mp4"), {"h264", kFps, 30, true, 23}, 320, 256, 20);
  const video::DecoderChoice fallback{.decoder = video::Decoder::kNvdec, .cpu_fallback = true};
  const std::string refusal = video::VideoReader(av1, fallback).nvdec_refusal();
  const auto cpu = testing::run_stage("VideoDecode", "{}", {make_sample({av1, h264}, kPlan)});
  testing::SteppedStage automatic("VideoDecode", R"({"decoder": "auto"})");
  const at::Tensor got = automatic.process_one(make_sample({av1, h264}, kPlan)).tensor("frames");
  EXPECT_LE(
      (got.to(at::kFloat) - cpu[0].tensor("frames").to(at::kFloat)).abs().mean().item<double>(),
      1.0);
  if (refusal.empty()) {
    EXPECT_EQ(automatic.counter("nvdec_readers_opened"), 2);
    EXPECT_EQ(automatic.counter("nvdec_refused"), 0);
    return;
  }
  EXPECT_EQ(refusal,
            "NVDEC on CUDA device 0 cannot decode its av1 stream (the codec, profile, bit depth or "
            "frame size is beyond this GPU's decoder, or the decoder could not be set up, e.g. out "
            "of GPU memory)");
  EXPECT_EQ(automatic.log(),
            (std::vector<std::string>{
                "[test] VideoDecode: decoding on NVDEC, CUDA device 0 (decoder auto), at most 64 "
                "sessions",
                "[test] VideoDecode: \"" + av1 + "\": " + refusal +
                    "; such streams decode on the CPU (decoder auto; counted in nvdec_refused)"}));
  EXPECT_EQ(automatic.counter("nvdec_readers_opened"), 1);
  EXPECT_EQ(automatic.counter("nvdec_refused"), 1);
  testing::SteppedStage nvdec("VideoDecode", R"({"decoder": "nvdec"})");
  EXPECT_EQ(testing::error_of([&] {
              nvdec.process_one(make_sample({av1, h264}, kPlan));
            }),
            "video \"" + av1 + "\": " + refusal + ": decode it with decoder \"cpu\" or \"auto\"");
}

}  // namespace
}  // namespace wam
