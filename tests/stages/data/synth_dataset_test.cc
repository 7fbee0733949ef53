#include "data/synth_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "data/video_reader.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "testing/expect_error.h"
#include "testing/hyparquet.h"
#include "testing/stage_harness.h"
#include "wam/error.h"
#include "wam/tensor.h"

namespace wam::data {
namespace {

namespace fs = std::filesystem;

class SynthDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = (fs::temp_directory_path() /
            ("synth_dataset_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(out_);
  }
  void TearDown() override { fs::remove_all(out_); }

  SynthOptions small(const std::string& preset) const {
    SynthOptions o;
    o.preset = preset;
    o.out = out_;
    o.episodes = 2;
    o.frames_per_episode = 12;
    o.codec = "h264";
    o.gop = 4;
    o.width = 64;
    o.height = 64;
    o.seed = 3;
    return o;
  }

  std::string out_;
};

TEST_F(SynthDatasetTest, LiberoRoundTripsThroughTheReader) {
  std::vector<SynthProgress> progress;
  SynthOptions options = small("libero");
  options.progress = [&](const SynthProgress& p) { progress.push_back(p); };
  synthesize_dataset(options);

  ASSERT_EQ(progress.size(), 2u);
  EXPECT_EQ(progress[1].episodes_done, 2);
  EXPECT_EQ(progress[1].episodes_total, 2);
  EXPECT_EQ(progress[1].frames_done, 24);

  const auto ds = LeRobotDataset::open(out_);
  EXPECT_EQ(ds.info().fps, 10);
  EXPECT_EQ(ds.info().codebase_version, "v2.1");
  EXPECT_EQ(ds.info().video_keys(), (std::vector<std::string>{"observation.images.image",
                                                              "observation.images.wrist_image"}));
  EXPECT_EQ(ds.info().feature("observation.images.image")->shape,
            (std::vector<int64_t>{64, 64, 3}));
  EXPECT_EQ(ds.info().feature("observation.images.image")->video_info["video.codec"], "h264");
  EXPECT_EQ(ds.info().feature("action")->shape, std::vector<int64_t>{7});
  const auto& state_names = ds.info().feature("observation.state")->names;
  ASSERT_EQ(state_names.size(), 15u);  // joint 7 + ee 6 + gripper 2
  EXPECT_EQ(state_names[0], "joint_0");
  EXPECT_EQ(state_names[7], "ee_x");
  EXPECT_EQ(state_names[14], "gripper_right");
  ASSERT_EQ(ds.episodes().size(), 2u);
  EXPECT_EQ(ds.episodes()[0].length, 12);
  EXPECT_EQ(ds.episodes()[1].length, 12);
  EXPECT_EQ(ds.episodes()[0].tasks, std::vector<std::string>{"put the black bowl on the plate"});
  EXPECT_EQ(ds.episodes()[1].tasks, std::vector<std::string>{"open the top drawer of the cabinet"});
  EXPECT_EQ(ds.tasks().size(), 4u);
  EXPECT_TRUE(ds.problems().empty()) << ds.problems().front();

  const EpisodeData columns = ds.read_episode(1);
  const FloatColumn& action = columns.floats.at("action");
  EXPECT_EQ(action.rows, 12);
  EXPECT_EQ(action.cols, 7);
  for (float v : action.values) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LE(v, 1.0f);
  }
  EXPECT_EQ(columns.ints.at("frame_index").back(), 11);
  EXPECT_EQ(columns.ints.at("index").front(), 12);
  EXPECT_EQ(columns.ints.at("task_index").front(), 1);
  EXPECT_FLOAT_EQ(columns.floats.at("timestamp").values[5], 0.5f);

  // episodes_stats.jsonl holds the stats of the written columns.
  const FeatureStats expected = compute_stats(columns.floats.at("observation.state"));
  const FeatureStats& stored = ds.episode_stats().at(1).at("observation.state");
  EXPECT_EQ(stored.count, 12);
  ASSERT_EQ(stored.mean.size(), 15u);
  for (size_t d = 0; d < 15; ++d) {
    EXPECT_DOUBLE_EQ(stored.min[d], expected.min[d]);
    EXPECT_DOUBLE_EQ(stored.max[d], expected.max[d]);
    EXPECT_NEAR(stored.mean[d], expected.mean[d], 1e-12);
    EXPECT_NEAR(stored.std[d], expected.std[d], 1e-12);
  }
  for (const auto& key : ds.info().video_keys()) {
    EXPECT_GT(fs::file_size(ds.video_file(1, key)), 0u);
  }
}

// `--codec hevc` (libx265; LeRobot's encoder takes hevc too) with `--b-frames` and one keyframe an
// episode: the videos say hevc in info.json, decode to one frame a row, and a sparse read of the
// first and last frames leaves out B-frames that are not references, giving the same frames.
TEST_F(SynthDatasetTest, HevcVideosWithBFramesDecodeToEveryFrame) {
  SynthOptions options = small("libero");
  options.codec = "hevc";
  options.gop = 12;
  options.b_frames = true;
  synthesize_dataset(options);
  const auto ds = LeRobotDataset::open(out_);
  for (const auto& key : ds.info().video_keys()) {
    SCOPED_TRACE(key);
    EXPECT_EQ(ds.info().feature(key)->video_info["video.codec"], "hevc");
    video::VideoReader reader(ds.video_file(1, key));
    video::DecodeStats full, sparse;
    const at::Tensor frames = reader.read_range(0, 11, ds.info().fps, full);
    EXPECT_EQ(frames.sizes(), (std::vector<int64_t>{12, 64, 64, 3}));
    EXPECT_EQ(full.frames_decoded, 12);
    const at::Tensor ends = reader.read_frames({0, 11}, ds.info().fps, sparse);
    EXPECT_TRUE(at::equal(ends[0], frames[0]));
    EXPECT_TRUE(at::equal(ends[1], frames[11]));
    EXPECT_GT(sparse.frames_skipped, 0);
    EXPECT_EQ(sparse.frames_decoded + sparse.frames_skipped, 12);
  }
  options.codec = "av1";
  EXPECT_EQ(testing::error_of([&] { synthesize_dataset(options); }),
            "dataset synth: --b-frames needs --codec h264 or hevc (AV1 has no B-frames)");
}

// `dataset synth` writes real LeRobot v2.1 parquet: hyparquet, an independent reader, sees every
// value of every column as ours does, and the schema HF `datasets` writes (float32 LISTs for the
// vectors, FLOAT timestamp, INT64 indices).
TEST_F(SynthDatasetTest, AnIndependentParquetReaderSeesEveryValue) {
  const std::string missing = testing::hyparquet_missing();
  if (!missing.empty()) GTEST_SKIP() << "hyparquet cannot run: " << missing;
  synthesize_dataset(small("robotwin"));
  const auto ds = LeRobotDataset::open(out_);
  for (const EpisodeInfo& episode : ds.episodes()) {
    SCOPED_TRACE(episode.data_file);
    const EpisodeData ours = ds.read_episode(episode.episode_index);
    const nlohmann::json theirs = testing::read_with_hyparquet(episode.data_file);
    ASSERT_EQ(theirs.size(), ours.floats.size() + ours.ints.size());
    for (const auto& [name, column] : ours.floats) {
      SCOPED_TRACE(name);
      const nlohmann::json& rows = theirs.at(name);
      ASSERT_EQ(static_cast<int64_t>(rows.size()), column.rows);
      for (int64_t r = 0; r < column.rows; ++r) {
        const bool is_list = name == "action" || name == "observation.state";
        ASSERT_EQ(rows[r].is_array(), is_list);
        for (int64_t d = 0; d < column.cols; ++d) {
          const double value = is_list ? rows[r][d].get<double>() : rows[r].get<double>();
          ASSERT_EQ(static_cast<double>(column.at(r, d)), value) << r << "," << d;
        }
      }
    }
    for (const auto& [name, column] : ours.ints) {
      SCOPED_TRACE(name);
      const nlohmann::json& rows = theirs.at(name);
      ASSERT_EQ(rows.size(), column.size());
      for (size_t r = 0; r < column.size(); ++r) {
        ASSERT_EQ(std::stoll(rows[r].get<std::string>()), column[r]) << r;
      }
    }
  }
}

TEST_F(SynthDatasetTest, SameSeedSameActions) {
  synthesize_dataset(small("libero"));
  const auto first = LeRobotDataset::open(out_).read_episode(0).floats.at("action").values;
  fs::remove_all(out_);
  synthesize_dataset(small("libero"));
  EXPECT_EQ(LeRobotDataset::open(out_).read_episode(0).floats.at("action").values, first);
  fs::remove_all(out_);
  SynthOptions other = small("libero");
  other.seed = 4;
  synthesize_dataset(other);
  EXPECT_NE(LeRobotDataset::open(out_).read_episode(0).floats.at("action").values, first);
}

TEST_F(SynthDatasetTest, RobotwinFeedsTheSampler) {
  SynthOptions options = small("robotwin");
  options.frames_per_episode = 40;
  options.episodes = 1;
  synthesize_dataset(options);
  const auto ds = LeRobotDataset::open(out_);
  EXPECT_EQ(ds.info().fps, 25);
  EXPECT_EQ(ds.info().feature("action")->shape, std::vector<int64_t>{14});
  EXPECT_EQ(ds.info().feature("observation.state")->shape, std::vector<int64_t>{14});

  const auto samples = testing::drain_source(
      "EpisodeSampler",
      R"({"dataset_dirs": [")" + out_ +
          R"("], "cameras": ["observation.images.cam_high", "observation.images.cam_left_wrist",
              "observation.images.cam_right_wrist"], "shuffle": false})",
      2);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].get_json("video_files").size(), 3u);
  EXPECT_EQ(describe_tensor(samples[1].tensor("action")), "Float[32, 80]");
  EXPECT_EQ(samples[1].get_string("task"), "place the empty cup on the coaster");
}

TEST_F(SynthDatasetTest, PresetsMatchTheReferenceCameras) {
  const SynthPreset libero = synth_preset("libero");
  ASSERT_EQ(libero.cameras.size(), 2u);
  EXPECT_EQ(libero.cameras[1].key, "observation.images.wrist_image");
  EXPECT_EQ(libero.cameras[1].height, 512);
  EXPECT_EQ(libero.cameras[1].width, 512);
  const SynthPreset robotwin = synth_preset("robotwin");
  ASSERT_EQ(robotwin.cameras.size(), 3u);
  EXPECT_EQ(robotwin.cameras[0].key, "observation.images.cam_high");
  EXPECT_EQ(robotwin.cameras[2].key, "observation.images.cam_right_wrist");
  EXPECT_EQ(robotwin.cameras[0].height, 480);
  EXPECT_EQ(robotwin.cameras[0].width, 640);
  EXPECT_EQ(robotwin.action_names.size(), 14u);
  EXPECT_ERROR(synth_preset("robotwim"),
               "unknown preset \"robotwim\"; did you mean \"robotwin\"? (allowed: libero, "
               "robotwin)");
}

TEST_F(SynthDatasetTest, RefusesToOverwriteADataset) {
  synthesize_dataset(small("libero"));
  EXPECT_ERROR(synthesize_dataset(small("libero")),
               out_ + "/meta/info.json: already a dataset; choose an empty --out directory");
}

}  // namespace
}  // namespace wam::data
