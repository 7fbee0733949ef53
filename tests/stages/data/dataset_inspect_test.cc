// `dataset inspect` and `dataset stats` as functions: what they report about a synthetic dataset,
// and the problems they name in a broken one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/dataset_inspect.h"
#include "data/synth_dataset.h"
#include "data/video_io.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace wam {
namespace {

namespace fs = std::filesystem;

class DatasetInspect : public ::testing::Test {
 protected:
  void SetUp() override {
    data::SynthOptions options;
    options.preset = "robotwin";
    options.out = dir_.file("robotwin");
    options.episodes = 3;
    options.frames_per_episode = 12;
    options.codec = "h264";
    options.gop = 4;
    options.width = 64;
    options.height = 48;
    data::synthesize_dataset(options);
  }
  testing::TempDir dir_;
};

TEST_F(DatasetInspect, ReportsEveryCameraFromTheContainerIndex) {
  const data::DatasetReport report = data::inspect_dataset(dir_.file("robotwin"), 0);
  EXPECT_EQ(report.episodes, 3);
  EXPECT_EQ(report.frames, 36);
  EXPECT_EQ(report.inspected_episodes, 3);
  EXPECT_TRUE(report.has_episode_stats);
  ASSERT_EQ(report.cameras.size(), 3u);
  for (const data::CameraReport& camera : report.cameras) {
    EXPECT_EQ(camera.codec, "h264") << camera.key;
    EXPECT_EQ(camera.width, 64);
    EXPECT_EQ(camera.height, 48);
    EXPECT_EQ(camera.videos, 3);
    EXPECT_EQ(camera.frames, 36);
    EXPECT_EQ(camera.min_keyframe_gap, 4);
    EXPECT_EQ(camera.max_keyframe_gap, 4);
  }
  EXPECT_TRUE(report.problems.empty()) << report.problems.front();
  EXPECT_EQ(data::inspect_dataset(dir_.file("robotwin"), 2).inspected_episodes, 2);
}

TEST_F(DatasetInspect, NamesAMissingVideoAndAnUnreadableOne) {
  const fs::path videos = dir_.path() / "robotwin/videos/chunk-000";
  fs::remove(videos / "observation.images.cam_high/episode_000001.mp4");
  const fs::path broken = videos / "observation.images.cam_left_wrist/episode_000002.mp4";
  fs::resize_file(broken, 100);
  const data::DatasetReport report = data::inspect_dataset(dir_.file("robotwin"), 0);
  EXPECT_EQ(report.cameras[0].videos, 2);
  const auto& problems = report.problems;
  std::string listed;
  for (const auto& problem : problems) listed += "\n  " + problem;
  EXPECT_EQ(std::count(problems.begin(), problems.end(),
                       "observation.images.cam_high: 1 of 3 inspected episodes have no video file"),
            1)
      << listed;
  EXPECT_TRUE(std::any_of(problems.begin(), problems.end(), [&](const std::string& p) {
    return p.rfind(broken.string(), 0) == 0;
  })) << listed;
  EXPECT_TRUE(std::none_of(problems.begin(), problems.end(), [](const std::string& p) {
    return p.find("cam_right_wrist") != std::string::npos;
  })) << listed;
}

TEST_F(DatasetInspect, StatsAreKeptUnlessForced) {
  const std::string root = dir_.file("robotwin");
  const data::StatsResult kept = data::write_dataset_stats(root, false);
  EXPECT_FALSE(kept.written);
  EXPECT_EQ(kept.path, root + "/meta/episodes_stats.jsonl");
  EXPECT_EQ(kept.dataset_path, root + "/meta/stats.json");
  fs::remove(kept.path);
  fs::remove(kept.dataset_path);
  const data::StatsResult written = data::write_dataset_stats(root, false);
  EXPECT_TRUE(written.written);
  EXPECT_EQ(written.episodes, 3);
  // Every numeric column, pooled over the episodes into stats.json.
  const auto ds = data::LeRobotDataset::open(root);
  EXPECT_EQ(ds.episode_stats().at(2).at("frame_index").max[0], 11);
  EXPECT_EQ(ds.episode_stats().at(2).at("index").min[0], 24);
  std::ifstream in(written.dataset_path);
  const auto stats = nlohmann::json::parse(in);
  EXPECT_EQ(stats["index"]["max"], nlohmann::json({35.0}));
  EXPECT_EQ(stats["index"]["count"], nlohmann::json({36}));
  EXPECT_EQ(stats["action"]["mean"].size(), 14u);
}

TEST_F(DatasetInspect, StatsRefuseNonFiniteValuesNamingTheEpisode) {
  const std::string root = dir_.file("robotwin");
  const std::string file = root + "/data/chunk-000/episode_000001.parquet";
  const auto ds = data::LeRobotDataset::open(root);
  data::EpisodeData columns = ds.read_episode(1);
  columns.floats["action"].values[2 * 14 + 3] = std::nanf("");
  data::write_episode_parquet(file, columns, ds.info());
  EXPECT_ERROR(data::write_dataset_stats(root, true),
               file +
                   ": column \"action\" of episode 1 holds nan at row 2 (value 3); stats need "
                   "finite values: fix or drop the episode");
}

TEST_F(DatasetInspect, NamesACameraAtTheWrongResolution) {
  const std::string root = dir_.file("robotwin");
  const std::string info_path = root + "/meta/info.json";
  std::ifstream in(info_path);
  auto info = nlohmann::ordered_json::parse(in);
  info["features"]["observation.images.cam_high"]["shape"] = {480, 640, 3};
  std::ofstream(info_path) << info.dump(4);
  const auto problems = data::inspect_dataset(root, 1).problems;
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], root +
                             "/videos/chunk-000/observation.images.cam_high/episode_000000.mp4: "
                             "64x48, but meta/info.json gives observation.images.cam_high shape "
                             "[480,640,3] (height, width, channels)");
}

// A faststart mp4 keeps its index in front: cut short, the index still lists every frame.
TEST_F(DatasetInspect, NamesATruncatedFaststartVideo) {
  const std::string root = dir_.file("robotwin");
  const std::string file =
      root + "/videos/chunk-000/observation.images.cam_right_wrist/episode_000000.mp4";
  fs::remove(file);
  video::EncodeOptions encode;
  encode.codec = "h264";
  encode.gop = 4;
  encode.faststart = true;
  video::VideoWriter writer(file, 64, 48, encode);
  std::vector<uint8_t> rgb(64 * 48 * 3, 90);
  for (int64_t t = 0; t < 12; ++t) {
    video::stamp_frame_index(rgb.data(), 64, 48, t);
    writer.write(rgb.data());
  }
  writer.finish();
  const auto full_size = fs::file_size(file);
  EXPECT_TRUE(data::inspect_dataset(root, 1).problems.empty());
  fs::resize_file(file, full_size / 2);
  const auto problems = data::inspect_dataset(root, 1).problems;
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].rfind(file + ": truncated: frame ", 0), 0u) << problems[0];
  EXPECT_NE(problems[0].find(" but the file has " + std::to_string(full_size / 2) + " bytes"),
            std::string::npos)
      << problems[0];
}

// The GR00T sample's timestamps run 0.05 .. (length / fps): one period late.
TEST(DatasetInspectReal, ReportsTimestampsThatStartAtOnePeriod) {
  const std::string root = WAM_SOURCE_DIR "/../shared/data/lerobot-gr00t-picknplace";
  if (!fs::exists(root)) GTEST_SKIP() << root << " is not present";
  const data::DatasetReport report = data::inspect_dataset(root, 2);
  EXPECT_EQ(report.stats_source, "meta/stats.json (whole dataset)");
  const std::string file =
      fs::absolute(root).lexically_normal().string() + "/data/chunk-000/episode_000000.parquet";
  const auto& problems = report.problems;
  std::string listed;
  for (const auto& problem : problems) listed += "\n  " + problem;
  EXPECT_EQ(
      std::count(problems.begin(), problems.end(),
                 file + " (episode 0, column timestamp): starts at 0.050000 s = 1/fps, not 0; "
                        "row k is matched to video frame k"),
      1)
      << listed;
  EXPECT_EQ(report.cameras[1].codec, "h264");
  EXPECT_EQ(report.cameras[1].width, 256);
}

TEST(DatasetInspectV3, ReportsNoProblemsOnASyntheticV30Dataset) {
  testing::TempDir dir;
  data::SynthOptions options;
  options.preset = "libero";
  options.out = dir.file("v3");
  options.episodes = 3;
  options.frames_per_episode = 8;
  options.codec = "h264";
  options.width = 64;
  options.height = 48;
  options.codebase_version = "v3.0";
  data::synthesize_dataset(options);
  const data::DatasetReport report = data::inspect_dataset(options.out, 0);
  EXPECT_EQ(report.codebase_version, "v3.0");
  EXPECT_EQ(report.frames, 24);
  EXPECT_EQ(report.stats_source, "meta/episodes/ stats columns (per episode)");
  EXPECT_TRUE(report.problems.empty()) << report.problems.front();
}

}  // namespace
}  // namespace wam
