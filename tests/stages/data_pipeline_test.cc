// The shipped data-path pipelines, end to end on a small synthetic RoboTwin dataset: batch shapes,
// bit-identical results serial vs parallel and sparse vs full decode, and a corrupt video that is
// skipped and counted (or fails the run naming the file).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "data/synth_dataset.h"
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
    ValidatedPipeline p = load_pipeline(std::string(WAM_SOURCE_DIR) + "/pipelines/" + pipeline,
                                        {overrides});
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

TEST_F(DataPipeline, SparseAndFullDecodeGiveTheSameBatches) {
  Run full = run("robotwin_data_baseline.json", {});
  Run sparse = run("robotwin_data_online.json", {});
  ASSERT_FALSE(full.result.error);
  ASSERT_FALSE(sparse.result.error);
  expect_same_batches(full, sparse);
}

TEST_F(DataPipeline, CorruptVideoIsSkippedAndCountedOrFailsNamingTheFile) {
  testing::TempDir copy;
  const std::string root = copy.file("robotwin");
  fs::copy(dataset_->file("robotwin"), root, fs::copy_options::recursive);
  const std::string broken =
      root + "/videos/chunk-000/observation.images.cam_left_wrist/episode_000001.mp4";
  fs::resize_file(broken, fs::file_size(broken) / 2);

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

}  // namespace
}  // namespace wam
