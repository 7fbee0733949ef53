// The shipped data-path pipelines, end to end on a small synthetic RoboTwin dataset: batch shapes,
// bit-identical results serial vs parallel and sparse vs full decode, and a corrupt video that is
// skipped and counted (or fails the run naming the file).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "data/synth_dataset.h"
#include "data/video_io.h"
#include "data/video_reader.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "testing/stage_harness.h"
#include "testing/temp_dir.h"
#include "wam/runner.h"
#include "wam/tensor.h"

namespace wam {
namespace {

namespace fs = std::filesystem;

class DataPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dataset_ = new testing::TempDir();
    data::SynthOptions options;
    options.preset = "robotwin";
    options.out = dataset_->file("robotwin");
    options.episodes = 2;
    options.frames_per_episode = 40;
    options.codec = "h264";
    options.gop = 2;
    options.width = 80;
    options.height = 64;
    options.seed = 5;
    data::synthesize_dataset(options);
  }
  static void TearDownTestSuite() { delete dataset_; }

  struct Run {
    RunResult result;
    std::vector<Sample> batches;
  };

  static Run run(const std::string& pipeline, std::vector<std::string> overrides,
                 const std::string& root = dataset_->file("robotwin")) {
    setenv("ROBOTWIN_DATA_ROOT", root.c_str(), 1);
    overrides.push_back("settings.batch_size=4");
    overrides.push_back("nodes.sampler.params.max_samples=24");
    ValidatedPipeline p =
        load_pipeline(std::string(WAM_SOURCE_DIR) + "/pipelines/" + pipeline, {overrides});
    Run out;
    RunOptions options;
    options.log = [](const std::string&) {};
    options.on_output = [&](const Sample& s) { out.batches.push_back(s); };
    out.result = run_pipeline(p, options);
    return out;
  }

  static void expect_same_batches(const Run& a, const Run& b) {
    ASSERT_EQ(a.batches.size(), b.batches.size());
    for (size_t i = 0; i < a.batches.size(); ++i) {
      EXPECT_EQ(a.batches[i].get_json("sample_keys"), b.batches[i].get_json("sample_keys"));
      for (const char* field : {"video", "memory_video_anchor", "memory_video_recent", "action",
                                "proprio", "vlm_current_images"}) {
        EXPECT_TRUE(torch::equal(a.batches[i].tensor(field), b.batches[i].tensor(field)))
            << "batch " << i << " field " << field;
      }
    }
  }

  // The images of batches made on the GPU (`gpu`; with `mixed`, batches of host samples alone may
  // stay in host memory) within a level of the CPU's on average, the other fields equal, the same
  // samples in each batch.
  static void expect_gpu_batches_within_a_level(const Run& gpu, const Run& cpu,
                                                bool mixed = false) {
    ASSERT_EQ(gpu.batches.size(), cpu.batches.size());
    for (size_t i = 0; i < gpu.batches.size(); ++i) {
      EXPECT_EQ(gpu.batches[i].get_json("sample_keys"), cpu.batches[i].get_json("sample_keys"));
      for (const char* field :
           {"video", "memory_video_anchor", "memory_video_recent", "vlm_current_images"}) {
        const at::Tensor& got = gpu.batches[i].tensor(field);
        const at::Tensor& want = cpu.batches[i].tensor(field);
        ASSERT_TRUE(got.is_cuda() || mixed) << field;
        ASSERT_EQ(got.sizes(), want.sizes()) << field;
        ASSERT_EQ(got.scalar_type(), want.scalar_type()) << field;
        const double scale = want.scalar_type() == at::kByte ? 1.0 : 127.5;
        const double mean =
            (got.cpu().to(at::kFloat) - want.to(at::kFloat)).abs().mean().item<double>() * scale;
        EXPECT_LE(mean, 1.0) << "batch " << i << " field " << field;
      }
      EXPECT_TRUE(torch::equal(gpu.batches[i].tensor("action"), cpu.batches[i].tensor("action")));
    }
  }

  // Copies the dataset to `root` with episode 1's left wrist video cut in half; returns its path.
  static std::string copy_with_a_truncated_video(const std::string& root) {
    fs::copy(dataset_->file("robotwin"), root, fs::copy_options::recursive);
    const std::string broken =
        root + "/videos/chunk-000/observation.images.cam_left_wrist/episode_000001.mp4";
    fs::resize_file(broken, fs::file_size(broken) / 2);
    return broken;
  }

  static testing::TempDir* dataset_;
};

testing::TempDir* DataPipeline::dataset_ = nullptr;

TEST_F(DataPipeline, OnlinePipelineProducesModelInputBatches) {
  Run r = run("robotwin_data_online.json", {"settings.steps=2"});
  ASSERT_FALSE(r.result.error) << r.result.error->what();
  ASSERT_EQ(r.batches.size(), 2u);
  const Sample& b = r.batches[0];
  EXPECT_EQ(b.tensor("video").sizes(), (std::vector<int64_t>{4, 3, 9, 384, 256}));
  EXPECT_EQ(b.tensor("memory_video_anchor").sizes(), (std::vector<int64_t>{4, 3, 1, 384, 256}));
  EXPECT_EQ(b.tensor("vlm_current_images").sizes(), (std::vector<int64_t>{4, 3, 3, 64, 80}));
  EXPECT_EQ(b.tensor("action").sizes(), (std::vector<int64_t>{4, 32, 80}));
  EXPECT_EQ(b.tensor("sample_id").sizes(), (std::vector<int64_t>{4}));
  EXPECT_LE(b.tensor("video").max().item<float>(), 1.0f);
  EXPECT_GE(b.tensor("video").min().item<float>(), -1.0f);
  EXPECT_EQ(r.result.stats.stop_reason, "steps");
}

TEST_F(DataPipeline, RandomAugmentIsBitIdenticalSerialAndParallel) {
  Run serial = run("robotwin_data_online.json", {"settings.threads=1"});
  Run parallel = run("robotwin_data_online.json", {"settings.threads=4"});
  ASSERT_FALSE(serial.result.error);
  ASSERT_FALSE(parallel.result.error);
  EXPECT_EQ(serial.batches.size(), 6u);
  expect_same_batches(serial, parallel);
}

// The online graph's planes straight from the decoder's 4:2:0 are within a level of these
// (DecodedPlanesGiveTheFullSizeFramesBatchesWithinALevel), not bit for bit: off here.
TEST_F(DataPipeline, SparseAndFullDecodeGiveTheSameBatches) {
  Run full = run("robotwin_data_baseline.json", {});
  Run sparse = run("robotwin_data_online.json", {"nodes.decode.params.planes_size=[]",
                                                 "nodes.augment.params.planes_from_decode=false"});
  ASSERT_FALSE(full.result.error);
  ASSERT_FALSE(sparse.result.error);
  expect_same_batches(full, sparse);
}

// The online graph's frames straight to planes at camera_size (half the 80x64 frames, and a shrink
// by 2.67 and 1.67 as LIBERO's): the batches of the graph with the planes off within three quarters
// of a level (the VLM's full-size images bit for bit), the same serial and parallel.
TEST_F(DataPipeline, DecodedPlanesGiveTheFullSizeFramesBatchesWithinALevel) {
  for (const char* size : {"[32,40]", "[24,48]"}) {
    SCOPED_TRACE(size);
    const std::vector<std::string> planes_on = {
        std::string("nodes.augment.params.camera_size=") + size,
        std::string("nodes.decode.params.planes_size=") + size};
    std::vector<std::string> planes_off = planes_on;
    planes_off.push_back("nodes.decode.params.planes_size=[]");
    planes_off.push_back("nodes.augment.params.planes_from_decode=false");
    Run planes = run("robotwin_data_online.json", planes_on);
    Run frames = run("robotwin_data_online.json", planes_off);
    ASSERT_FALSE(planes.result.error) << planes.result.error->what();
    ASSERT_FALSE(frames.result.error) << frames.result.error->what();
    ASSERT_EQ(planes.batches.size(), frames.batches.size());
    ASSERT_EQ(planes.batches.size(), 6u);
    for (size_t i = 0; i < planes.batches.size(); ++i) {
      EXPECT_TRUE(torch::equal(planes.batches[i].tensor("vlm_current_images"),
                               frames.batches[i].tensor("vlm_current_images")));
      for (const char* field : {"video", "memory_video_anchor", "memory_video_recent"}) {
        const at::Tensor& got = planes.batches[i].tensor(field);
        const at::Tensor& want = frames.batches[i].tensor(field);
        ASSERT_EQ(got.sizes(), want.sizes()) << field;
        // [-1, 1] floats: a level is 1 / 127.5.
        const double mean = (got - want).abs().mean().item<double>() * 127.5;
        EXPECT_LE(mean, 0.75) << "batch " << i << " field " << field;
        EXPECT_GT(mean, 0.0) << "batch " << i << " field " << field << ": the planes path ran";
      }
    }
    std::vector<std::string> parallel = planes_on;
    parallel.push_back("settings.threads=4");
    expect_same_batches(planes, run("robotwin_data_online.json", parallel));
  }
}

TEST_F(DataPipeline, CorruptVideoIsSkippedAndCountedOrFailsNamingTheFile) {
  testing::TempDir copy;
  const std::string root = copy.file("robotwin");
  const std::string broken = copy_with_a_truncated_video(root);

  Run skipped = run("robotwin_data_online.json", {}, root);
  ASSERT_FALSE(skipped.result.error);
  const NodeStats& decode = skipped.result.stats.nodes[1];
  EXPECT_EQ(decode.id, "decode");
  EXPECT_GT(decode.skips, 0);
  EXPECT_EQ(decode.out + decode.skips, decode.in);
  for (const auto& batch : skipped.batches) {
    for (const auto& key : batch.get_json("sample_keys")) {
      EXPECT_LT(std::stoi(key.get<std::string>().substr(7)), 40) << "episode 1 sample kept";
    }
  }

  Run failed = run("robotwin_data_online.json", {"nodes.decode.on_error=fail"}, root);
  ASSERT_TRUE(failed.result.error);
  EXPECT_EQ(failed.result.error->node(), "decode");
  EXPECT_NE(failed.result.error->cause().find(broken), std::string::npos)
      << failed.result.error->cause();
}

// On a GPU with NVDEC: frames kept in GPU memory and Augment there give the CPU's batches within a
// level (deterministic augment: the Gaussian noise's draws differ on the GPU), on the GPU; with
// random augment the GPU's batches are the same serial and parallel; a corrupt video is skipped
// and counted as on the CPU.
TEST_F(DataPipeline, OnTheGpuDeviceFramesAndAugmentGiveTheCpusBatches) {
  if (const std::string& problem = video::nvdec_problem(0); !problem.empty()) {
    GTEST_SKIP() << "no NVDEC here: " << problem;
  }
  const std::vector<std::string> on_gpu = {
      "nodes.decode.params.decoder=nvdec", "nodes.decode.params.device_frames=true",
      "nodes.decode.params.planes_size=[]", "nodes.augment.params.planes_from_decode=false"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::string> deterministic = {"nodes.augment.params.deterministic=true"};
  Run cpu = run("robotwin_data_online.json", deterministic);
  Run gpu = run("robotwin_data_online.json", with(on_gpu, deterministic));
  ASSERT_FALSE(cpu.result.error) << cpu.result.error->what();
  ASSERT_FALSE(gpu.result.error) << gpu.result.error->what();
  expect_gpu_batches_within_a_level(gpu, cpu);

  Run serial = run("robotwin_data_online.json", with(on_gpu, {"settings.threads=1"}));
  Run parallel = run("robotwin_data_online.json", with(on_gpu, {"settings.threads=4"}));
  ASSERT_FALSE(serial.result.error);
  ASSERT_FALSE(parallel.result.error);
  expect_same_batches(serial, parallel);

  testing::TempDir copy;
  const std::string root = copy.file("robotwin");
  const std::string broken = copy_with_a_truncated_video(root);
  Run skipped = run("robotwin_data_online.json", on_gpu, root);
  ASSERT_FALSE(skipped.result.error);
  const NodeStats& decode = skipped.result.stats.nodes[1];
  EXPECT_GT(decode.skips, 0);
  EXPECT_EQ(decode.out + decode.skips, decode.in);
}

// On a GPU with NVDEC, decoder cpu_first with one CPU slot, spilling at once, and eight threads:
// the samples that find the slot taken decode on NVDEC and are augmented on the GPU, the others as
// the shipped graph does on the CPU, and every batch is on the GPU within a level of the CPU's
// (deterministic augment, as above).
TEST_F(DataPipeline, CpuFirstSpillsToNvdecAndGivesTheCpusBatchesWithinALevel) {
  if (const std::string& problem = video::nvdec_problem(0); !problem.empty()) {
    GTEST_SKIP() << "no NVDEC here: " << problem;
  }
  const std::vector<std::string> deterministic = {"nodes.augment.params.deterministic=true",
                                                  "settings.threads=8"};
  std::vector<std::string> cpu_first = deterministic;
  cpu_first.push_back("nodes.decode.params.decoder=cpu_first");
  cpu_first.push_back("nodes.decode.params.cpu_decodes=1");
  cpu_first.push_back("nodes.decode.params.spill_after_s=0");
  Run cpu = run("robotwin_data_online.json", deterministic);
  Run mixed = run("robotwin_data_online.json", cpu_first);
  ASSERT_FALSE(cpu.result.error) << cpu.result.error->what();
  ASSERT_FALSE(mixed.result.error) << mixed.result.error->what();
  const NodeStats& decode = mixed.result.stats.nodes[1];
  ASSERT_EQ(decode.id, "decode");
  int64_t spilled = -1;
  for (const auto& [name, value] : decode.counters) {
    if (name == "nvdec_samples") spilled = value;
  }
  std::cout << spilled << " of " << decode.out << " samples decoded on NVDEC\n";
  EXPECT_GT(spilled, 0);
  EXPECT_LT(spilled, decode.out);
  expect_gpu_batches_within_a_level(mixed, cpu, /*mixed=*/true);
}

// LeRobot v3.0 keeps every episode of a camera in one mp4: the sampler plans frames inside the
// episode and VideoDecode shifts them by the episode's start in the file. Each synthetic frame
// carries its index in the file, so the decoded stamps must be that start plus the planned index.
TEST_F(DataPipeline, V30SharedVideosDecodeEachEpisodesOwnFrames) {
  testing::TempDir dir;
  data::SynthOptions options;
  options.preset = "robotwin";
  options.out = dir.file("v3");
  options.episodes = 2;
  options.frames_per_episode = 40;
  options.codec = "h264";
  options.gop = 8;
  options.width = 80;
  options.height = 64;
  options.codebase_version = "v3.0";
  data::synthesize_dataset(options);
  const auto ds = data::LeRobotDataset::open(options.out);
  EXPECT_TRUE(ds.problems().empty()) << ds.problems().front();
  EXPECT_EQ(ds.episodes()[1].first_row, 40);

  const std::string sampler = R"({"dataset_dirs": [")" + options.out +
                              R"("], "cameras": ["observation.images.cam_high",
                              "observation.images.cam_left_wrist"], "shuffle": false})";
  std::vector<Sample> planned = testing::drain_source("EpisodeSampler", sampler);
  ASSERT_EQ(planned.size(), 80u);
  std::vector<Sample> chosen = {planned[3], planned[40], planned[79]};
  EXPECT_EQ(chosen[1].get_json("frame_plan")["video_offsets"], nlohmann::json({40, 40}));
  EXPECT_FALSE(chosen[0].get_json("frame_plan").contains("video_offsets"));
  for (const char* mode : {"sparse", "full"}) {
    const auto decoded =
        testing::run_stage("VideoDecode", std::string(R"({"mode": ")") + mode + R"("})", chosen);
    ASSERT_EQ(decoded.size(), 3u);
    for (const Sample& s : decoded) {
      const nlohmann::json plan = s.get_json("frame_plan");
      const int64_t start = s.get_int("episode_index") * 40;
      std::vector<int64_t> wanted = {plan["anchor"].get<int64_t>(), plan["recent"].get<int64_t>()};
      for (const auto& w : plan["window"]) wanted.push_back(w.get<int64_t>());
      const at::Tensor frames = s.tensor("frames");  // [V, T, H, W, 3]
      for (int64_t v = 0; v < 2; ++v) {
        for (size_t t = 0; t < wanted.size(); ++t) {
          const at::Tensor frame = frames[v][static_cast<int64_t>(t)].contiguous();
          EXPECT_EQ(video::read_frame_index(frame.data_ptr<uint8_t>(), 80, 64), start + wanted[t])
              << mode << " " << s.key() << " camera " << v << " frame " << t;
        }
      }
    }
  }
}

// The real LeRobot v2.0 dataset (GR00T's demo: one 256x256 H.264 camera with B-frames and a
// keyframe every 250 frames, 44-D float64 vectors, timestamps from 1/fps): a data graph runs on it
// end to end, and sparse decoding (seeking to the keyframe before each needed frame) gives
// exactly the frames of decoding every frame from the start.
class RealLeRobotData : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kRoot)) GTEST_SKIP() << kRoot << " is not present";
    root_ = fs::absolute(kRoot).lexically_normal().string();
  }
  std::string sampler_params() const {
    return R"({"dataset_dirs": [")" + root_ +
           R"("], "cameras": ["observation.images.ego_view"], "shuffle": false,
              "action_layout": [[0, 44, 0]], "state_layout": [[0, 44, 0]]})";
  }
  static constexpr const char* kRoot = WAM_SOURCE_DIR "/../shared/data/lerobot-gr00t-picknplace";
  std::string root_;
};

TEST_F(RealLeRobotData, ADataGraphRunsEndToEnd) {
  testing::TempDir dir;
  const std::string file = dir.file("gr00t_data.json");
  std::ofstream(file) << R"({"version": 1, "name": "gr00t_data",
    "settings": {"seed": 1, "batch_size": 4, "max_in_flight": 16, "ordered": true, "steps": 2},
    "nodes": [
      {"id": "sampler", "type": "EpisodeSampler", "params": )"
                      << sampler_params() << R"(},
      {"id": "decode", "type": "VideoDecode", "inputs": ["sampler"], "params": {"mode": "sparse"}},
      {"id": "augment", "type": "Augment", "inputs": ["decode"],
       "params": {"canvas": "vertical", "camera_size": [256, 256], "deterministic": true}},
      {"id": "collate", "type": "Collate", "inputs": ["augment"]}]})";
  ValidatedPipeline pipeline = load_pipeline(file);
  std::vector<Sample> batches;
  RunOptions options;
  options.log = [](const std::string&) {};
  options.on_output = [&](const Sample& s) { batches.push_back(s); };
  const RunResult result = run_pipeline(pipeline, options);
  ASSERT_FALSE(result.error) << result.error->what();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].tensor("video").sizes(), (std::vector<int64_t>{4, 3, 9, 384, 256}));
  EXPECT_EQ(batches[0].tensor("action").sizes(), (std::vector<int64_t>{4, 32, 80}));
  EXPECT_EQ(batches[1].get_json("sample_keys"),
            nlohmann::json({"sample:4", "sample:5", "sample:6", "sample:7"}));
  // Decoded pictures, not blank frames: the kitchen scene has texture.
  EXPECT_GT(batches[0].tensor("video").std().item<float>(), 0.1f);
}

TEST_F(RealLeRobotData, SparseDecodeEqualsFullDecode) {
  const std::vector<Sample> planned = testing::drain_source("EpisodeSampler", sampler_params());
  ASSERT_EQ(planned.size(), 2096u);
  // Episode 0 frames 0, 37 and 300 (past the keyframe at 250); episode 3's last frame.
  const std::vector<Sample> chosen = {planned[0], planned[37], planned[300], planned[1767]};
  const auto sparse = testing::run_stage("VideoDecode", R"({"mode": "sparse"})", chosen);
  const auto full = testing::run_stage("VideoDecode", R"({"mode": "full"})", chosen);
  ASSERT_EQ(sparse.size(), chosen.size());
  ASSERT_EQ(full.size(), chosen.size());
  for (size_t i = 0; i < chosen.size(); ++i) {
    EXPECT_EQ(sparse[i].tensor("frames").sizes(), (std::vector<int64_t>{1, 11, 256, 256, 3}));
    EXPECT_TRUE(torch::equal(sparse[i].tensor("frames"), full[i].tensor("frames")))
        << chosen[i].key();
  }
}

}  // namespace
}  // namespace wam
