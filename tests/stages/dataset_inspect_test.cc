// `dataset inspect` and `dataset stats` as functions: what they report about a synthetic dataset,
// and the problems they name in a broken one.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "data/dataset_inspect.h"
#include "data/synth_dataset.h"
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
  EXPECT_TRUE(std::any_of(problems.begin(), problems.end(),
                          [&](const std::string& p) { return p.rfind(broken.string(), 0) == 0; }))
      << listed;
  EXPECT_TRUE(std::none_of(problems.begin(), problems.end(), [](const std::string& p) {
    return p.find("cam_right_wrist") != std::string::npos;
  })) << listed;
}

TEST_F(DatasetInspect, StatsAreKeptUnlessForced) {
  const data::StatsResult kept = data::write_dataset_stats(dir_.file("robotwin"), false);
  EXPECT_FALSE(kept.written);
  EXPECT_EQ(kept.path, dir_.file("robotwin") + "/meta/episodes_stats.jsonl");
  fs::remove(kept.path);
  const data::StatsResult written = data::write_dataset_stats(dir_.file("robotwin"), false);
  EXPECT_TRUE(written.written);
  EXPECT_EQ(written.episodes, 3);
  EXPECT_TRUE(fs::exists(written.path));
}

}  // namespace
}  // namespace wam
