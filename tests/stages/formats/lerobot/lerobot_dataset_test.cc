#include "formats/lerobot/lerobot_dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "formats/parquet/parquet.h"
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
  std::string write_dataset(const std::string& name, double fps,
                            const std::string& version = "v2.1") {
    DatasetInfo info;
    info.codebase_version = version;
    info.fps = fps;
    info.features = {{"observation.images.top",
                      "video",
                      {64, 64, 3},
                      {"height", "width", "channel"},
                      nlohmann::json{{"video.codec", "h264"}}},
                     {"action", "float32", {2}, {"a0", "a1"}, nullptr},
                     {"observation.state", "float32", {1}, {"s0"}, nullptr},
                     {"frame_index", "int64", {1}, {}, nullptr},
                     {"task_index", "int64", {1}, {}, nullptr}};
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
  EXPECT_EQ(ds.data_file(1), root + "/data/chunk-000/episode_000001.parquet");
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
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
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

// `dataset stats --force` recomputes the numeric columns and keeps the camera stats a published
// v2.1 dataset has (LeRobot computes them from decoded frames; issue 26 lost them), as they were.
TEST_F(LeRobotDatasetTest, RecomputedStatsKeepTheCameraStats) {
  const std::string root = write_dataset("ds", 15);
  const std::string episodes_path = root + "/meta/episodes_stats.jsonl";
  const std::string dataset_path = root + "/meta/stats.json";
  // As LeRobot writes them: [3, 1, 1] per statistic, its key order and separators; the action
  // stats made wrong, and a camera info.json does not declare.
  auto camera = [](double scale, int count) {
    return nlohmann::ordered_json::parse(
        "{\"min\": [[[0.0]], [[0.0196078431372549]], [[1e-05]]], \"max\": [[[1.0]], [[1.0]], "
        "[[0.9921568627450981]]], \"mean\": [[[" +
        std::to_string(scale) +
        "]], [[0.41643717447916665]], [[0.3720296223958333]]], \"std\": "
        "[[[0.2837408154506163]], [[0.2595614317677106]], [[0.2562916085416455]]], \"count\": [" +
        std::to_string(count) + "]}");
  };
  std::map<int64_t, nlohmann::ordered_json> published;
  {
    std::ofstream out(episodes_path);
    for (int64_t e = 0; e < 2; ++e) {
      nlohmann::ordered_json row;
      row["episode_index"] = e;
      row["stats"]["observation.images.top"] = camera(0.5 + static_cast<double>(e), 100);
      row["stats"]["action"] = nlohmann::ordered_json::parse(
          R"({"min": [9, 9], "max": [9, 9], "mean": [9, 9], "std": [9, 9], "count": [9]})");
      row["stats"]["observation.images.gone"] = camera(0.25, 7);
      published[e] = row["stats"]["observation.images.top"];
      out << row.dump(-1, ' ', false) << "\n";
    }
  }
  nlohmann::ordered_json pooled = nlohmann::ordered_json::object();
  pooled["observation.images.top"] = camera(1.0, 200);
  pooled["observation.images.gone"] = camera(0.25, 14);
  pooled["action"] = published[0];  // wrong
  { std::ofstream(dataset_path) << pooled.dump(4) << "\n"; }

  const StatsResult result = write_dataset_stats(root, true);
  EXPECT_TRUE(result.written);
  EXPECT_EQ(result.episodes, 2);

  std::ifstream in(episodes_path);
  std::string line;
  int64_t rows = 0;
  while (std::getline(in, line)) {
    const auto row = nlohmann::ordered_json::parse(line);
    const int64_t e = row.at("episode_index").get<int64_t>();
    ASSERT_EQ(e, rows++);
    const auto& stats = row.at("stats");
    // The camera's entry value for value, in its key order (so its text as well).
    EXPECT_EQ(stats.at("observation.images.top"), published[e]);
    EXPECT_EQ(stats.at("observation.images.top").dump(), published[e].dump());
    EXPECT_FALSE(stats.contains("observation.images.gone")) << line;
    // The numeric columns recomputed: episode 0's action is (0, 0), (1, -1), (2, -2).
    if (e == 0) {
      EXPECT_EQ(stats.at("action").dump(),
                R"({"min":[0.0,-2.0],"max":[2.0,0.0],"mean":[1.0,-1.0],)"
                R"("std":[0.816496580927726,0.816496580927726],"count":[3]})");
    }
    EXPECT_TRUE(stats.contains("observation.state")) << line;
    EXPECT_TRUE(stats.contains("frame_index")) << line;
  }
  EXPECT_EQ(rows, 2);

  std::ifstream dataset_in(dataset_path);
  const auto dataset = nlohmann::ordered_json::parse(dataset_in);
  EXPECT_EQ(dataset.at("observation.images.top").dump(), camera(1.0, 200).dump());
  EXPECT_FALSE(dataset.contains("observation.images.gone"));
  // Actions 0, 1, 2 and 10, 11 (first dimension) pooled.
  EXPECT_EQ(dataset.at("action").at("count"), nlohmann::ordered_json({5}));
  EXPECT_DOUBLE_EQ(dataset.at("action").at("mean")[0].get<double>(), 24.0 / 5);
  EXPECT_DOUBLE_EQ(dataset.at("action").at("max")[0].get<double>(), 11);

  // Read back: the numeric stats are what normalisation uses; the camera's are not vectors.
  const auto ds = LeRobotDataset::open(root);
  EXPECT_DOUBLE_EQ(ds.feature_stats("action").mean[1], -(0.0 + 1 + 2 + 0 + 1) / 5);
  EXPECT_FALSE(ds.episode_stats().at(0).count("observation.images.top"));

  // Without --force nothing is touched.
  const std::string before = nlohmann::ordered_json(dataset).dump();
  EXPECT_FALSE(write_dataset_stats(root, false).written);
  std::ifstream again(dataset_path);
  EXPECT_EQ(nlohmann::ordered_json::parse(again).dump(), before);
}

TEST_F(LeRobotDatasetTest, FormatsLeRobotPathTemplates) {
  EXPECT_EQ(format_path(kVideoPath, 1, 1234, "cam"), "videos/chunk-001/cam/episode_001234.mp4");
  EXPECT_EQ(format_path(kDataPath, 0, 7), "data/chunk-000/episode_000007.parquet");
  PathFields v3;
  v3.chunk_index = 2;
  v3.file_index = 15;
  v3.video_key = "cam";
  EXPECT_EQ(format_path(kV3VideoPath, v3), "videos/cam/chunk-002/file-015.mp4");
  EXPECT_ERROR(format_path("data/{episode:03d}.h5", 0, 0),
               "path template \"data/{episode:03d}.h5\": unknown field {episode} (allowed: "
               "episode_chunk, episode_index, chunk_index, file_index, video_key)");
  EXPECT_ERROR(format_path("data/{episode_index:99999999999d}.parquet", 0, 0),
               "path template \"data/{episode_index:99999999999d}.parquet\": unsupported format "
               "{episode_index:99999999999d} (use e.g. {episode_index:03d})");
  EXPECT_ERROR(format_path("data/{episode_index:50d}.parquet", 0, 0),
               "path template \"data/{episode_index:50d}.parquet\": width 50 in "
               "{episode_index:50d} is over 20");
}

// LeRobot v2.0 as NVIDIA's GR00T demo data ships it (Arrow-written parquet, float64 vectors).
// Expected values were read with hyparquet, an independent JavaScript parquet reader.
TEST_F(LeRobotDatasetTest, ReadsRealLeRobotV20Episodes) {
  if (!fs::exists(kRealDataset)) GTEST_SKIP() << kRealDataset << " is not present";
  const auto ds = LeRobotDataset::open(kRealDataset);
  ASSERT_EQ(ds.episodes().size(), 5u);
  const std::vector<int64_t> lengths = {416, 470, 470, 412, 328};
  int64_t first_index = 0;
  for (size_t e = 0; e < lengths.size(); ++e) {
    const EpisodeData data = ds.read_episode(static_cast<int64_t>(e));
    EXPECT_EQ(data.floats.at("action").rows, lengths[e]);
    EXPECT_EQ(data.floats.at("action").cols, 44);
    EXPECT_EQ(data.floats.at("observation.state").cols, 44);
    EXPECT_EQ(data.ints.at("index").front(), first_index);  // `index` is global
    EXPECT_EQ(data.ints.at("index").back(), first_index + lengths[e] - 1);
    // No frame_index column in v2.0 files: it is the row's position.
    EXPECT_EQ(data.ints.at("frame_index").back(), lengths[e] - 1);
    first_index += lengths[e];
  }
  const EpisodeData one = ds.read_episode(1);
  const FloatColumn& state = one.floats.at("observation.state");
  const FloatColumn& action = one.floats.at("action");
  EXPECT_EQ(state.at(0, 1), static_cast<float>(0.11594200686530208));
  EXPECT_EQ(state.at(0, 3), static_cast<float>(-2.0999999999999996));
  EXPECT_EQ(action.at(0, 0), static_cast<float>(0.004474349363520933));
  EXPECT_EQ(action.at(0, 12), 3.0f);
  EXPECT_EQ(state.at(469, 12), static_cast<float>(1.7421746634082333));
  EXPECT_EQ(action.at(469, 22), static_cast<float>(-0.9078425935647945));
  const FloatColumn& timestamp = one.floats.at("timestamp");
  EXPECT_EQ(timestamp.values.front(), static_cast<float>(0.04999995231628418));  // 1/fps, not 0
  EXPECT_EQ(timestamp.values.back(), static_cast<float>(23.499977588653564));
  EXPECT_EQ(one.ints.at("task_index").front(), 2);
  EXPECT_EQ(ds.tasks().at(2), "pick the sweet potato from the counter and place it in the plate");
  EXPECT_EQ(one.ints.at("next.done").front(), 0);
  EXPECT_EQ(one.ints.at("next.done").back(), 1);
  EXPECT_EQ(one.floats.at("next.reward").values.back(), 1.0f);
  EXPECT_EQ(ds.read_episode(4).floats.at("observation.state").at(100, 27),
            static_cast<float>(0.37309702097253256));
  // v2.0 ships only the dataset's stats.
  EXPECT_FALSE(ds.has_episode_stats());
  const FeatureStats stats = ds.feature_stats("observation.state");
  EXPECT_EQ(stats.mean.size(), 44u);
  EXPECT_DOUBLE_EQ(stats.mean[0], 0.024073680862784386);
  EXPECT_EQ(stats.count, 2096);  // stats.json has no count: the frames
}

TEST_F(LeRobotDatasetTest, ReportsTheQuirksOfRealData) {
  if (!fs::exists(kRealDataset)) GTEST_SKIP() << kRealDataset << " is not present";
  const auto ds = LeRobotDataset::open(kRealDataset);
  EXPECT_EQ(ds.info().fps, 20);
  EXPECT_EQ(ds.episodes().size(), 5u);
  EXPECT_EQ(ds.total_frames(), 2096);
  const std::string info = ds.root() + "/meta/info.json";
  const std::vector<std::string> expected = {
      info +
          ": total_chunks is 0 but the episodes need 1; chunks are computed from "
          "episode_index / chunks_size",
      info +
          ": splits.train \"0:100\" goes beyond the 5 episodes; every episode in "
          "meta/episodes.jsonl is used",
      info + ": observation.state, action, timestamp, next.reward are float64; read as float32",
      info + ": no frame_index feature; a row's frame index is its position in the episode",
      "camera observation.images.egoview is declared in meta/info.json but has no video files (" +
          ds.root() +
          "/videos/chunk-000/observation.images.egoview/episode_000000.mp4 is missing)"};
  EXPECT_EQ(ds.problems(), expected);
}

TEST_F(LeRobotDatasetTest, ReadsTheV30LayoutWithSharedFiles) {
  const std::string root = write_dataset("v3", 15, "v3.0");
  const auto ds = LeRobotDataset::open(root);
  EXPECT_TRUE(ds.is_v3());
  EXPECT_EQ(ds.info().data_path, kV3DataPath);
  ASSERT_EQ(ds.episodes().size(), 2u);
  const EpisodeInfo& second = ds.episodes()[1];
  EXPECT_EQ(second.length, 2);
  EXPECT_EQ(second.tasks, std::vector<std::string>{"open the door"});
  EXPECT_EQ(second.data_file, root + "/data/chunk-000/file-000.parquet");
  EXPECT_EQ(second.first_row, 3);
  EXPECT_EQ(ds.tasks().at(1), "open the door");
  const VideoSegment segment = ds.video_segment(1, "observation.images.top");
  EXPECT_EQ(segment.file, root + "/videos/observation.images.top/chunk-000/file-000.mp4");
  EXPECT_DOUBLE_EQ(segment.from_timestamp, 3.0 / 15);
  const EpisodeData data = ds.read_episode(1);
  EXPECT_EQ(data.floats.at("action").values, (std::vector<float>{10, 0, 11, -1}));
  EXPECT_EQ(data.ints.at("frame_index"), (std::vector<int64_t>{0, 1}));
  // Per-episode stats come from the episode metadata's stats/* columns.
  ASSERT_TRUE(ds.has_episode_stats());
  EXPECT_DOUBLE_EQ(ds.episode_stats().at(0).at("action").max[0], 2);
  EXPECT_EQ(ds.episode_stats().at(1).at("action").count, 2);
  EXPECT_DOUBLE_EQ(ds.feature_stats("action").max[0], 11);
}

TEST_F(LeRobotDatasetTest, ColumnsAreCheckedAgainstTheMetadata) {
  const std::string root = write_dataset("ds", 10);
  // episodes.jsonl claims a longer episode 1 than its file holds.
  std::string episodes;
  {
    std::ifstream in(root + "/meta/episodes.jsonl");
    std::stringstream text;
    text << in.rdbuf();
    episodes = text.str();
  }
  const std::string two = "\"length\":2";
  episodes.replace(episodes.rfind(two), two.size(), "\"length\":4");
  std::ofstream(root + "/meta/episodes.jsonl") << episodes;
  const auto ds = LeRobotDataset::open(root);
  const std::string file = root + "/data/chunk-000/episode_000001.parquet";
  EXPECT_ERROR(ds.read_episode(1), file +
                                       ": 2 rows, but episode 1 needs rows 0..3 (length 4 in the "
                                       "episode metadata)");
  // A vector of another width than info.json's shape.
  const std::string wide = write_dataset("wide", 10);
  nlohmann::ordered_json info;
  {
    std::ifstream in(wide + "/meta/info.json");
    info = nlohmann::ordered_json::parse(in);
  }
  info["features"]["action"]["shape"] = {3};
  std::ofstream(wide + "/meta/info.json") << info.dump(4);
  EXPECT_ERROR(LeRobotDataset::open(wide).read_episode(0),
               wide +
                   "/data/chunk-000/episode_000000.parquet: column \"action\" has 2 values per "
                   "row, but meta/info.json gives shape [3]");
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

// Meta files are read as bounded regular files and bounded JSON (docs/RELIABILITY.md).
TEST_F(LeRobotDatasetTest, HostileMetaFilesAreNamedErrors) {
  const std::string root = write_dataset("ds", 10);
  std::ofstream(root + "/meta/info.json") << "{\"fps\": 1e309}";
  EXPECT_ERROR(LeRobotDataset::open(root),
               root +
                   "/meta/info.json:1:9: number 1e309 is out of range (a double holds at most "
                   "1.8e308)");
  std::ofstream(root + "/meta/info.json") << std::string(300, '[') << std::string(300, ']');
  EXPECT_ERROR(LeRobotDataset::open(root),
               root + "/meta/info.json:1:257: JSON nested deeper than 256 levels");
  // An episode claiming 2^40 rows is refused before any read or allocation.
  const std::string huge = write_dataset("huge", 10);
  std::ofstream(huge + "/meta/episodes.jsonl")
      << R"({"episode_index": 0, "tasks": ["pick the cube"], "length": 1099511627776})"
      << "\n";
  EXPECT_ERROR(LeRobotDataset::open(huge),
               huge +
                   "/meta/episodes.jsonl:1: field \"length\" is 1099511627776, outside 1 .. "
                   "4294967296");
  const std::string other = write_dataset("other", 10);
  fs::remove(other + "/meta/episodes.jsonl");
  fs::create_directory(other + "/meta/episodes.jsonl");
  EXPECT_ERROR(LeRobotDataset::open(other),
               other + "/meta/episodes.jsonl: not a regular file (a directory)");
}

// The sampler refuses a sample by the rows its window reads: every damaged row once, named by its
// first non-finite value.
TEST(NonFiniteRows, ListsEveryDamagedRowOnceByItsFirstValue) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const FloatColumn column{4, 3, {0, 1, 2, nan, 4, inf, 6, 7, 8, -inf, 10, 11}};
  const std::vector<NonFiniteRow> rows = non_finite_rows("action", 7, column);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].row, 1);
  EXPECT_EQ(rows[0].description, "column \"action\" of episode 7 holds nan at row 1 (value 0)");
  EXPECT_EQ(rows[1].row, 3);
  EXPECT_EQ(rows[1].description, "column \"action\" of episode 7 holds -inf at row 3 (value 0)");
  EXPECT_EQ(describe_non_finite("action", 7, column), rows[0].description);
  EXPECT_TRUE(non_finite_rows("action", 7, FloatColumn{2, 1, {0, 1}}).empty());
}

// NaN in action and +Inf in observation.state once trained silently, and `dataset inspect` said
// "problems 0" for them and for timestamps running backwards past the first episode (issue 25).
TEST_F(LeRobotDatasetTest, NonFiniteValuesAndBackwardTimestampsAreProblemsInEveryEpisode) {
  const std::string root = write_dataset("ds", 10);
  const auto ds = LeRobotDataset::open(root);
  const std::string file = root + "/data/chunk-000/episode_000001.parquet";
  EpisodeData columns = ds.read_episode(1);
  columns.floats["action"].values[1 * 2 + 1] = std::nanf("");
  columns.floats["observation.state"].values[0] = std::numeric_limits<float>::infinity();
  columns.floats["timestamp"] = {2, 1, {0.1f, 0.0f}};
  write_episode_parquet(file, columns, ds.info());
  EpisodeData first = ds.read_episode(0);
  first.floats["timestamp"] = {3, 1, {0.1f, 0.2f, 0.3f}};
  const std::string first_file = root + "/data/chunk-000/episode_000000.parquet";
  write_episode_parquet(first_file, first, ds.info());

  const EpisodeData damaged = ds.read_episode(1);
  EXPECT_EQ(describe_non_finite("action", 1, damaged.floats.at("action")),
            "column \"action\" of episode 1 holds nan at row 1 (value 1)");
  EXPECT_EQ(describe_non_finite("observation.state", 1, damaged.floats.at("observation.state")),
            "column \"observation.state\" of episode 1 holds inf at row 0 (value 0)");
  EXPECT_EQ(describe_non_finite("action", 0, ds.read_episode(0).floats.at("action")), "");

  EXPECT_EQ(episode_column_problems(ds, ds.episode(1), false),
            (std::vector<std::string>{
                file + ": column \"action\" of episode 1 holds nan at row 1 (value 1); training "
                       "refuses it",
                file + ": column \"observation.state\" of episode 1 holds inf at row 0 (value 0); "
                       "training refuses it",
                file + " (episode 1, column timestamp): runs backwards: 0.100000 s at row 0, "
                       "0.000000 s at row 1; row k is matched to video frame k"}));
  // Irregular steps are reported in every episode; the start quirk real datasets share only when
  // asked (once per dataset).
  columns.floats["timestamp"] = {2, 1, {0.0f, 0.5f}};
  columns.floats["action"].values[3] = 0;
  columns.floats["observation.state"].values[0] = 0;
  write_episode_parquet(file, columns, ds.info());
  EXPECT_EQ(episode_column_problems(ds, ds.episode(1), false),
            std::vector<std::string>{file + " (episode 1, column timestamp): irregular: 0.500000 s "
                                            "between rows 0 and 1 (1/fps is 0.100000 s); row k is "
                                            "matched to video frame k"});
  const std::string quirk = first_file +
                            " (episode 0, column timestamp): starts at 0.100000 s = 1/fps, not "
                            "0; row k is matched to video frame k";
  EXPECT_EQ(episode_column_problems(ds, ds.episode(0), true), std::vector<std::string>{quirk});
  EXPECT_EQ(episode_column_problems(ds, ds.episode(0), false), std::vector<std::string>{});
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Counts and shapes are whole numbers: a float out of int64's range was an undefined cast
// (found by the dataset_meta fuzzer); a whole float is taken.
TEST_F(LeRobotDatasetTest, CountsAndShapesMustBeWholeNumbers) {
  const std::string root = write_dataset("ds", 10);
  auto info = nlohmann::ordered_json::parse(read_text(root + "/meta/info.json"));
  info["total_chunks"] = 1.0;
  std::ofstream(root + "/meta/info.json") << info.dump(4);
  EXPECT_EQ(LeRobotDataset::open(root).info().total_chunks, 1);
  info["total_chunks"] = 1.44444e61;
  std::ofstream(root + "/meta/info.json") << info.dump(4);
  EXPECT_ERROR(LeRobotDataset::open(root),
               root +
                   "/meta/info.json: field \"total_chunks\" must be a whole number within 64 "
                   "bits, got 1.44444e+61");
  info["total_chunks"] = 1;
  info["features"]["action"]["shape"] = nlohmann::ordered_json::array({2.5});
  std::ofstream(root + "/meta/info.json") << info.dump(4);
  EXPECT_ERROR(LeRobotDataset::open(root), root +
                                               "/meta/info.json: field \"features/action/shape\" "
                                               "must be a whole number within 64 bits, got 2.5");
}

// The unclear errors of issue 25, each now naming the file, the field and what to do.
TEST_F(LeRobotDatasetTest, PathTemplatesLeavingTheRootAreRefused) {
  const std::string root = write_dataset("ds", 10);
  auto info = nlohmann::ordered_json::parse(read_text(root + "/meta/info.json"));
  info["data_path"] = "../outside/episode_{episode_index:06d}.parquet";
  std::ofstream(root + "/meta/info.json") << info.dump(4);
  EXPECT_ERROR(LeRobotDataset::open(root),
               root +
                   "/meta/info.json: \"data_path\" gives \"../outside/episode_000000.parquet\", "
                   "which leaves the dataset root " +
                   root + "; a dataset's files lie inside its directory");
  info["data_path"] = kDataPath;
  info["video_path"] = "/etc/{video_key}.mp4";
  std::ofstream(root + "/meta/info.json") << info.dump(4);
  const auto ds = LeRobotDataset::open(root);
  EXPECT_ERROR(ds.video_file(0, "observation.images.top"),
               root +
                   "/meta/info.json: \"video_path\" gives \"/etc/observation.images.top.mp4\", "
                   "which leaves the dataset root " +
                   root + "; a dataset's files lie inside its directory");
}

TEST_F(LeRobotDatasetTest, AnEpisodeShorterThanItsFileIsRefusedWithTheNumbers) {
  const std::string root = write_dataset("ds", 10);
  std::string episodes = read_text(root + "/meta/episodes.jsonl");
  const std::string three = "\"length\":3";
  episodes.replace(episodes.find(three), three.size(), "\"length\":2");
  std::ofstream(root + "/meta/episodes.jsonl") << episodes;
  EXPECT_ERROR(LeRobotDataset::open(root).read_episode(0),
               root +
                   "/data/chunk-000/episode_000000.parquet: 3 rows, but meta/episodes.jsonl gives "
                   "episode 0 length 2; fix the length there (or the file), or rows would be "
                   "dropped");
}

TEST_F(LeRobotDatasetTest, AnEpisodeListedTwiceNamesTheFileAndLines) {
  const std::string root = write_dataset("ds", 10);
  std::string episodes = read_text(root + "/meta/episodes.jsonl");
  std::ofstream(root + "/meta/episodes.jsonl")
      << episodes << R"({"episode_index": 0, "tasks": ["pick the cube"], "length": 3})"
      << "\n";
  EXPECT_ERROR(LeRobotDataset::open(root),
               root + "/meta/episodes.jsonl:3: episode 0 is listed twice (first at line 1)");
}

TEST_F(LeRobotDatasetTest, AColumnOfTheWrongTypeIsNamedAsSuch) {
  const std::string root = write_dataset("ds", 10);
  const std::string file = root + "/data/chunk-000/episode_000000.parquet";
  const auto ds = LeRobotDataset::open(root);
  EpisodeData columns = ds.read_episode(0);
  {
    parquet::ParquetWriter writer(file);
    writer.add_strings("action", {"a", "b", "c"});
    writer.add_floats("observation.state", columns.floats.at("observation.state").values, 1);
    writer.add_ints("frame_index", columns.ints.at("frame_index"));
    writer.add_ints("task_index", columns.ints.at("task_index"));
    writer.write();
  }
  EXPECT_ERROR(ds.read_episode(0),
               file +
                   ": column \"action\" holds BYTE_ARRAY (STRING) values, but meta/info.json "
                   "declares it float32; rewrite the column as numbers, or fix its dtype in "
                   "meta/info.json");
  // Integers where floats are declared are read as floats, not dropped as an integer vector.
  {
    parquet::ParquetWriter writer(file);
    writer.add_ints("action", {1, 2, 3, 4, 5, 6}, 2);
    writer.add_floats("observation.state", columns.floats.at("observation.state").values, 1);
    writer.add_ints("frame_index", columns.ints.at("frame_index"));
    writer.add_ints("task_index", columns.ints.at("task_index"));
    writer.write();
  }
  EXPECT_EQ(ds.read_episode(0).floats.at("action").values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

// A FIFO in place of a data file once blocked the reader in open() forever (issue 25).
TEST_F(LeRobotDatasetTest, DataFilesThatAreNotRegularAreRefused) {
  const std::string root = write_dataset("ds", 10);
  const std::string file = root + "/data/chunk-000/episode_000001.parquet";
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  const auto ds = LeRobotDataset::open(root);
  EXPECT_ERROR(ds.read_episode(1), file + ": not a regular file (a FIFO)");
  EXPECT_EQ(ds.read_episode(0).floats.at("action").rows, 3);
}

TEST_F(LeRobotDatasetTest, DamagedParquetNamesTheFile) {
  const std::string root = write_dataset("ds", 10);
  const std::string file = root + "/data/chunk-000/episode_000000.parquet";
  fs::resize_file(file, fs::file_size(file) - 3);
  const auto ds = LeRobotDataset::open(root);
  const std::string error = testing::error_of([&] { ds.read_episode(0); });
  EXPECT_EQ(error.rfind(file + ": ", 0), 0u) << error;
}

}  // namespace
}  // namespace wam::data
