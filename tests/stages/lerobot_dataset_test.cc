#include "data/lerobot_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/expect_error.h"
#include "wam/error.h"

namespace wam::data {
namespace {

namespace fs = std::filesystem;

const char* kRealDataset = WAM_SOURCE_DIR "/../shared/data/lerobot-gr00t-picknplace";

class LeRobotDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lerobot_dataset_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Two episodes (3 and 2 frames) of 2-D actions, 1-D state; one declared camera, no videos.
  std::string write_dataset(const std::string& name, double fps) {
    DatasetInfo info;
    info.fps = fps;
    info.features = {{"observation.images.top",
                      "video",
                      {64, 64, 3},
                      {"height", "width", "channel"},
                      nlohmann::json{{"video.codec", "h264"}}},
                     {"action", "float32", {2}, {"a0", "a1"}, nullptr},
                     {"observation.state", "float32", {1}, {"s0"}, nullptr}};
    const std::string root = (dir_ / name).string();
    LeRobotWriter writer(root, info, {{0, "pick the cube"}, {1, "open the door"}});
    for (int64_t e = 0; e < 2; ++e) {
      const int64_t n = e == 0 ? 3 : 2;
      EpisodeData data;
      data.floats["action"] = {n, 2, {}};
      data.floats["observation.state"] = {n, 1, {}};
      for (int64_t t = 0; t < n; ++t) {
        data.floats["action"].values.push_back(static_cast<float>(10 * e + t));
        data.floats["action"].values.push_back(static_cast<float>(-t));
        data.floats["observation.state"].values.push_back(0.5f * static_cast<float>(t));
        data.ints["frame_index"].push_back(t);
        data.ints["task_index"].push_back(e);
      }
      writer.write_episode({e, {e == 0 ? "pick the cube" : "open the door"}, n}, data);
    }
    writer.finish();
    return root;
  }

  fs::path dir_;
};

TEST_F(LeRobotDatasetTest, WriterOutputReadsBack) {
  const std::string root = write_dataset("ds", 15);
  const auto ds = LeRobotDataset::open(root);
  EXPECT_EQ(ds.info().codebase_version, "v2.1");
  EXPECT_EQ(ds.info().fps, 15);
  EXPECT_EQ(ds.info().total_episodes, 2);
  EXPECT_EQ(ds.info().total_frames, 5);
  EXPECT_EQ(ds.info().total_chunks, 1);
  EXPECT_EQ(ds.info().video_keys(), std::vector<std::string>{"observation.images.top"});
  ASSERT_NE(ds.info().feature("action"), nullptr);
  EXPECT_EQ(ds.info().feature("action")->names, (std::vector<std::string>{"a0", "a1"}));
  ASSERT_EQ(ds.episodes().size(), 2u);
  EXPECT_EQ(ds.episodes()[1].length, 2);
  EXPECT_EQ(ds.episodes()[1].tasks, std::vector<std::string>{"open the door"});
  EXPECT_EQ(ds.tasks().at(1), "open the door");
  EXPECT_EQ(ds.total_frames(), 5);
  EXPECT_EQ(ds.data_file(1), root + "/data/chunk-000/episode_000001.h5");
  EXPECT_EQ(ds.video_file(1, "observation.images.top"),
            root + "/videos/chunk-000/observation.images.top/episode_000001.mp4");

  const EpisodeData data = ds.read_episode(1);
  const FloatColumn& action = data.floats.at("action");
  EXPECT_EQ(action.rows, 2);
  EXPECT_EQ(action.cols, 2);
  EXPECT_EQ(action.values, (std::vector<float>{10, 0, 11, -1}));
  EXPECT_EQ(data.ints.at("task_index"), (std::vector<int64_t>{1, 1}));

  // Stats per episode: action dim 0 of episode 0 is 0,1,2.
  ASSERT_TRUE(ds.has_episode_stats());
  const FeatureStats& s = ds.episode_stats().at(0).at("action");
  EXPECT_EQ(s.count, 3);
  EXPECT_DOUBLE_EQ(s.min[0], 0);
  EXPECT_DOUBLE_EQ(s.max[0], 2);
  EXPECT_DOUBLE_EQ(s.mean[0], 1);
  EXPECT_NEAR(s.std[0], std::sqrt(2.0 / 3.0), 1e-12);
  EXPECT_DOUBLE_EQ(s.min[1], -2);

  // Nothing is left behind by the atomic writes; the declared camera has no videos.
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
  const auto problems = ds.problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "camera observation.images.top is declared in meta/info.json but has no video files (" +
                root + "/videos/chunk-000/observation.images.top/episode_000000.mp4 is missing)");
}

TEST_F(LeRobotDatasetTest, AggregatesStatsLikeLeRobot) {
  FeatureStats a{{0}, {2}, {1}, {1}, 2};  // values 0, 2
  FeatureStats b{{4}, {4}, {4}, {0}, 1};  // value 4
  const FeatureStats total = aggregate_stats({a, b});
  EXPECT_EQ(total.count, 3);
  EXPECT_DOUBLE_EQ(total.min[0], 0);
  EXPECT_DOUBLE_EQ(total.max[0], 4);
  EXPECT_DOUBLE_EQ(total.mean[0], 2);
  // Population std of {0, 2, 4}: sqrt(8/3).
  EXPECT_NEAR(total.std[0], std::sqrt(8.0 / 3.0), 1e-12);
}

TEST_F(LeRobotDatasetTest, FormatsLeRobotPathTemplates) {
  EXPECT_EQ(format_path(kVideoPath, 1, 1234, "cam"), "videos/chunk-001/cam/episode_001234.mp4");
  EXPECT_EQ(format_path(kHdf5DataPath, 0, 7), "data/chunk-000/episode_000007.h5");
  EXPECT_ERROR(format_path("data/{episode:03d}.h5", 0, 0),
               "path template \"data/{episode:03d}.h5\": unknown field {episode} (allowed: "
               "episode_chunk, episode_index, video_key)");
}

TEST_F(LeRobotDatasetTest, RefusesParquetColumnsNamingTheFile) {
  if (!fs::exists(kRealDataset)) GTEST_SKIP() << kRealDataset << " is not present";
  const auto ds = LeRobotDataset::open(kRealDataset);
  const std::string root = ds.root();
  EXPECT_ERROR(ds.read_episode(0),
               root +
                   "/data/chunk-000/episode_000000.parquet: per-frame columns are stored in "
                   "parquet, which is not readable here (no parquet library on Debian 12); convert "
                   "the dataset to the HDF5 layout: one data/chunk-XXX/episode_XXXXXX.h5 per "
                   "episode with one dataset per column, and data_path "
                   "\"data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.h5\" in "
                   "meta/info.json");
}

TEST_F(LeRobotDatasetTest, ReportsTheQuirksOfRealData) {
  if (!fs::exists(kRealDataset)) GTEST_SKIP() << kRealDataset << " is not present";
  const auto ds = LeRobotDataset::open(kRealDataset);
  EXPECT_EQ(ds.info().fps, 20);
  EXPECT_EQ(ds.episodes().size(), 5u);
  EXPECT_EQ(ds.total_frames(), 2096);
  EXPECT_FALSE(ds.has_episode_stats());
  const std::string info = ds.root() + "/meta/info.json";
  const std::vector<std::string> expected = {
      info +
          ": total_chunks is 0 but the episodes need 1; chunks are computed from "
          "episode_index / chunks_size",
      info +
          ": splits.train \"0:100\" goes beyond the 5 episodes; every episode in "
          "meta/episodes.jsonl is used",
      info +
          ": data_path \"data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet\" "
          "is parquet, which is not readable here; convert to the HDF5 layout",
      "camera observation.images.egoview is declared in meta/info.json but has no video files (" +
          ds.root() +
          "/videos/chunk-000/observation.images.egoview/episode_000000.mp4 is missing)"};
  EXPECT_EQ(ds.problems(), expected);
}

TEST_F(LeRobotDatasetTest, CombinedDatasetsMustShareFps) {
  const std::string a = write_dataset("a", 10);
  const std::string b = write_dataset("b", 20);
  EXPECT_EQ(open_datasets({a, a}).size(), 2u);
  EXPECT_ERROR(open_datasets({a, b}), "All dataset_dirs must have the same fps: " + a +
                                          " has 10; " + b +
                                          " has 20; resample the videos or use the directories in "
                                          "separate runs");
}

TEST_F(LeRobotDatasetTest, MissingMetaNamesTheFile) {
  const std::string root = (dir_ / "empty").string();
  fs::create_directories(root);
  EXPECT_ERROR(LeRobotDataset::open(root),
               root + "/meta/info.json: cannot open; is " + root + " a LeRobot dataset directory?");
}

TEST_F(LeRobotDatasetTest, HdfErrorsNameTheFile) {
  const std::string root = write_dataset("ds", 10);
  // A truncated episode file: HDF5 refuses it, and the error says which file.
  const std::string file = root + "/data/chunk-000/episode_000000.h5";
  fs::resize_file(file, 100);
  const auto ds = LeRobotDataset::open(root);
  const std::string error = testing::error_of([&] { ds.read_episode(0); });
  EXPECT_EQ(error.rfind(file + ": HDF5 cannot open the file: ", 0), 0u) << error;
}

}  // namespace
}  // namespace wam::data
