// EpisodeSampler against hand-computed cases on a tiny dataset: 2 episodes of 40 and 20 frames,
// 14-D action and state (RoboTwin's layout) where action[f][d] = 1000 * episode + f + 100 * d and
// state = action + 0.5. With z_score stats of mean 0 / std 1 the values pass through unchanged,
// so every number below is a frame index in disguise.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "formats/lerobot/lerobot_dataset.h"
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/pipeline.h"
#include "wam/registry.h"
#include "wam/runner.h"
#include "wam/tensor.h"

namespace wam {
namespace {

namespace fs = std::filesystem;
constexpr const char* kCamera = "observation.images.cam_high";
constexpr int64_t kDims = 14;

class EpisodeSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("episode_sampler_test_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(root_);
    write_dataset(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write_dataset(const std::string& root) {
    data::DatasetInfo info;
    info.fps = 25;
    info.features = {{kCamera, "video", {64, 64, 3}, {}, nlohmann::json::object()},
                     {"action", "float32", {kDims}, {}, nullptr},
                     {"observation.state", "float32", {kDims}, {}, nullptr}};
    data::LeRobotWriter writer(root, info, {{0, "stack the blocks"}, {1, "lift the pot"}});
    for (int64_t e = 0; e < 2; ++e) {
      const int64_t n = e == 0 ? 40 : 20;
      data::EpisodeData columns;
      columns.floats["action"] = {n, kDims, {}};
      columns.floats["observation.state"] = {n, kDims, {}};
      for (int64_t f = 0; f < n; ++f) {
        for (int64_t d = 0; d < kDims; ++d) {
          const auto value = static_cast<float>(1000 * e + f + 100 * d);
          columns.floats["action"].values.push_back(value);
          columns.floats["observation.state"].values.push_back(value + 0.5f);
        }
        columns.ints["task_index"].push_back(e);
      }
      writer.write_episode({e, {e == 0 ? "stack the blocks" : "lift the pot"}, n}, columns);
      // The sampler only plans frames; it checks that the videos exist but never decodes them.
      const std::string video = writer.episode_video_file(e, kCamera);
      fs::create_directories(fs::path(video).parent_path());
      std::ofstream(video).put('\0');
    }
    writer.finish();
    set_stats(root, {0.0, 1.0, 0.0, 1.0});
  }

  // Same stats for every dim of action and state in both episodes.
  static void set_stats(const std::string& root, std::array<double, 4> min_max_mean_std) {
    data::FeatureStats s;
    s.min.assign(kDims, min_max_mean_std[0]);
    s.max.assign(kDims, min_max_mean_std[1]);
    s.mean.assign(kDims, min_max_mean_std[2]);
    s.std.assign(kDims, min_max_mean_std[3]);
    s.count = 10;
    std::map<int64_t, data::EpisodeStats> stats;
    for (int64_t e = 0; e < 2; ++e) stats[e] = {{"action", s}, {"observation.state", s}};
    data::write_episodes_stats(root + "/meta/episodes_stats.jsonl", stats);
  }

  std::string params(const std::string& extra = "") const {
    return R"({"dataset_dirs": [")" + root_ + R"("], "cameras": [")" + kCamera +
           R"("], "shuffle": false)" + extra + "}";
  }

  std::vector<Sample> drain(const std::string& extra = "", int64_t epochs = 1) const {
    testing::HarnessOptions options;
    options.settings.epochs = epochs;
    return testing::drain_source("EpisodeSampler", params(extra), SIZE_MAX, options);
  }

  static std::vector<int64_t> ids(const std::vector<Sample>& samples) {
    std::vector<int64_t> out;
    for (const auto& s : samples) out.push_back(s.get_int("sample_id"));
    return out;
  }

  template <class T>
  static std::vector<T> values(const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
  }

  std::string root_;
};

TEST_F(EpisodeSamplerTest, FirstFrameOfAnEpisode) {
  const auto samples = drain();
  ASSERT_EQ(samples.size(), 60u);
  const Sample& s = samples[0];
  EXPECT_EQ(s.key(), "sample:0");
  EXPECT_EQ(s.get_int("sample_id"), 0);
  EXPECT_EQ(s.get_int("epoch"), 0);
  EXPECT_EQ(s.get_int("episode_index"), 0);
  EXPECT_EQ(s.get_int("frame_index"), 0);
  EXPECT_EQ(s.get_string("task"), "stack the blocks");
  EXPECT_EQ(s.get_string("prompt"),
            "A video recorded from a robot's point of view executing the following instruction: "
            "stack the blocks");
  EXPECT_EQ(s.get_json("video_files"),
            nlohmann::json::array({fs::absolute(root_).string() + "/videos/chunk-000/" + kCamera +
                                   "/episode_000000.mp4"}));
  EXPECT_EQ(s.get_json("frame_plan"),
            (nlohmann::json{{"fps", 25.0},
                            {"anchor", 0},
                            {"recent", 0},
                            {"window", {0, 4, 8, 12, 16, 20, 24, 28, 32}}}));
  EXPECT_EQ(values<bool>(s.tensor("image_is_pad")), std::vector<bool>(9, false));
  EXPECT_EQ(values<bool>(s.tensor("memory_video_anchor_is_pad")), std::vector<bool>{false});
  // Not yet 32 frames into the episode: recent is the episode start, flagged as padding.
  EXPECT_EQ(values<bool>(s.tensor("memory_video_recent_is_pad")), std::vector<bool>{true});

  const at::Tensor& action = s.tensor("action");
  ASSERT_EQ(describe_tensor(action), "Float[32, 80]");
  EXPECT_EQ(values<bool>(s.tensor("action_is_pad")), std::vector<bool>(32, false));
  // RoboTwin merger: [0,6)->[0,6), [6,7)->[16,17), [7,13)->[40,46), [13,14)->[56,57).
  EXPECT_EQ(action[5][0].item<float>(), 5);
  EXPECT_EQ(action[5][3].item<float>(), 305);
  EXPECT_EQ(action[5][16].item<float>(), 605);
  EXPECT_EQ(action[5][40].item<float>(), 705);
  EXPECT_EQ(action[5][45].item<float>(), 1205);
  EXPECT_EQ(action[5][56].item<float>(), 1305);
  EXPECT_EQ(action[5][6].item<float>(), 0);  // padded dim
  std::vector<bool> dim_pad(80, true);
  for (int d : {0, 1, 2, 3, 4, 5, 16, 40, 41, 42, 43, 44, 45, 56}) dim_pad[d] = false;
  EXPECT_EQ(values<bool>(s.tensor("action_dim_is_pad")), dim_pad);
  EXPECT_EQ(values<bool>(s.tensor("proprio_dim_is_pad")), dim_pad);
  EXPECT_EQ(s.tensor("proprio")[31][0].item<float>(), 31.5f);
  EXPECT_EQ(describe_tensor(s.tensor("memory_video_anchor_proprio")), "Float[1, 80]");
  EXPECT_EQ(s.tensor("memory_video_anchor_proprio")[0][16].item<float>(), 600.5f);
}

TEST_F(EpisodeSamplerTest, WindowNearTheEpisodeEndIsClampedAndFlagged) {
  const auto samples = drain();
  const Sample& s = samples[20];  // episode 0 (40 frames), frame 20
  EXPECT_EQ(s.get_int("frame_index"), 20);
  EXPECT_EQ(s.get_json("frame_plan")["window"],
            nlohmann::json({20, 24, 28, 32, 36, 39, 39, 39, 39}));
  EXPECT_EQ(values<bool>(s.tensor("image_is_pad")),
            (std::vector<bool>{false, false, false, false, false, true, true, true, true}));
  std::vector<bool> row_pad(32, false);
  for (int i = 20; i < 32; ++i) row_pad[i] = true;  // frames 40..51 are past the end (39)
  EXPECT_EQ(values<bool>(s.tensor("action_is_pad")), row_pad);
  EXPECT_EQ(values<bool>(s.tensor("proprio_is_pad")), row_pad);
  EXPECT_EQ(s.tensor("action")[19][0].item<float>(), 39);
  EXPECT_EQ(s.tensor("action")[25][0].item<float>(), 39);  // clamped to the last frame
  EXPECT_EQ(s.tensor("proprio")[31][40].item<float>(), 739.5f);
}

TEST_F(EpisodeSamplerTest, RecentFrameOnceFarEnoughIntoTheEpisode) {
  const auto samples = drain();
  const Sample& s = samples[35];  // episode 0, frame 35
  EXPECT_EQ(s.get_json("frame_plan")["recent"], 3);
  EXPECT_EQ(s.get_json("frame_plan")["anchor"], 0);
  EXPECT_EQ(values<bool>(s.tensor("memory_video_recent_is_pad")), std::vector<bool>{false});
  EXPECT_EQ(s.tensor("memory_video_recent_proprio")[0][0].item<float>(), 3.5f);
  EXPECT_EQ(s.tensor("memory_video_anchor_proprio")[0][0].item<float>(), 0.5f);
  // 35 + 4k > 39 from k = 2 on.
  EXPECT_EQ(s.get_json("frame_plan")["window"],
            nlohmann::json({35, 39, 39, 39, 39, 39, 39, 39, 39}));
}

TEST_F(EpisodeSamplerTest, SecondEpisodeStartsItsOwnFrames) {
  const auto samples = drain();
  const Sample& s = samples[45];  // episode 1 (20 frames), frame 5
  EXPECT_EQ(s.key(), "sample:45");
  EXPECT_EQ(s.get_int("episode_index"), 1);
  EXPECT_EQ(s.get_int("frame_index"), 5);
  EXPECT_EQ(s.get_string("task"), "lift the pot");
  EXPECT_EQ(s.get_json("frame_plan")["window"], nlohmann::json({5, 9, 13, 17, 19, 19, 19, 19, 19}));
  EXPECT_EQ(s.tensor("action")[0][0].item<float>(), 1005);
  EXPECT_EQ(s.tensor("action")[20][0].item<float>(), 1019);
  EXPECT_TRUE(s.tensor("action_is_pad")[15].item<bool>());
  EXPECT_FALSE(s.tensor("action_is_pad")[14].item<bool>());
  EXPECT_EQ(s.tensor("memory_video_anchor_proprio")[0][0].item<float>(), 1000.5f);
  EXPECT_EQ(s.get_json("video_files")[0].get<std::string>().substr(
                s.get_json("video_files")[0].get<std::string>().size() - 18),
            "episode_000001.mp4");
}

TEST_F(EpisodeSamplerTest, MinMaxNormalisesToMinusOneOne) {
  set_stats(root_, {-1.0, 3.0, 0.0, 1.0});
  const auto samples = drain(R"(, "normalization": "min_max")");
  // x -> 2 (x + 1) / 4 - 1: frame 1, dim 0 -> 0; state 1.5 -> 0.25.
  EXPECT_FLOAT_EQ(samples[0].tensor("action")[1][0].item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(samples[0].tensor("proprio")[1][0].item<float>(), 0.25f);
  EXPECT_FLOAT_EQ(samples[0].tensor("action")[3][0].item<float>(), 1.0f);
}

TEST_F(EpisodeSamplerTest, ZScoreNormalisesWithTheStats) {
  set_stats(root_, {0.0, 1.0, 2.0, 4.0});
  const auto samples = drain(R"(, "normalization": "z_score")");
  // (x - 2) / 4: frame 6 -> 1; dim 1 at frame 2 -> (102 - 2) / 4 = 25.
  EXPECT_FLOAT_EQ(samples[0].tensor("action")[6][0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(samples[0].tensor("action")[2][1].item<float>(), 25.0f);
  // std 0 is clamped to 1e-6 instead of dividing by zero.
  set_stats(root_, {0.0, 1.0, 0.0, 0.0});
  const auto clamped = drain(R"(, "normalization": "z_score")");
  EXPECT_FLOAT_EQ(clamped[0].tensor("action")[1][0].item<float>(), 1e6f);
}

TEST_F(EpisodeSamplerTest, CustomLayoutMergesIntoTheGivenDims) {
  const auto samples = drain(R"(, "action_layout": [[0, 7, 47], [13, 14, 0]])");
  const at::Tensor& action = samples[2].tensor("action");
  EXPECT_EQ(action[0][47].item<float>(), 2);
  EXPECT_EQ(action[0][53].item<float>(), 602);
  EXPECT_EQ(action[0][0].item<float>(), 1302);
  std::vector<bool> dim_pad(80, true);
  for (int d : {0, 47, 48, 49, 50, 51, 52, 53}) dim_pad[d] = false;
  EXPECT_EQ(values<bool>(samples[2].tensor("action_dim_is_pad")), dim_pad);
}

TEST_F(EpisodeSamplerTest, ShuffleIsASeededPermutationPerEpoch) {
  const auto two_epochs = drain(R"(, "shuffle": true)", 2);
  ASSERT_EQ(two_epochs.size(), 120u);
  std::vector<int64_t> all = ids(two_epochs);
  std::vector<int64_t> epoch0(all.begin(), all.begin() + 60), epoch1(all.begin() + 60, all.end());
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), 60u);
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), 60u);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(two_epochs[60].get_int("epoch"), 1);
  EXPECT_EQ(ids(drain(R"(, "shuffle": true)", 2)), all);  // same seed, same order
  testing::HarnessOptions other_seed;
  other_seed.settings.seed = 7;
  EXPECT_NE(
      ids(testing::drain_source("EpisodeSampler", params(R"(, "shuffle": true)"), 60, other_seed)),
      epoch0);
}

TEST_F(EpisodeSamplerTest, ShardsAreDisjointAndEqualSized) {
  for (int64_t max_samples : {0, 50}) {
    std::map<int64_t, int> seen;
    for (int64_t rank = 0; rank < 3; ++rank) {
      const auto shard =
          ids(drain(R"(, "shuffle": true, "world_size": 3, "rank": )" + std::to_string(rank) +
                    R"(, "max_samples": )" + std::to_string(max_samples)));
      // 60 samples -> 20 per rank; 50 -> 17 per rank, the 51st position wrapping to the first.
      EXPECT_EQ(shard.size(), max_samples == 0 ? 20u : 17u);
      for (int64_t id : shard) ++seen[id];
    }
    const auto order =
        ids(drain(R"(, "shuffle": true, "max_samples": )" + std::to_string(max_samples)));
    ASSERT_EQ(seen.size(), order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      EXPECT_EQ(seen[order[i]], max_samples == 50 && i == 0 ? 2 : 1) << "sample " << order[i];
    }
  }
}

TEST_F(EpisodeSamplerTest, ResumesExactlyFromASavedState) {
  const std::string p = params(R"(, "shuffle": true, "world_size": 2, "rank": 1)");
  testing::HarnessOptions options;
  options.settings.epochs = 2;

  std::vector<int64_t> reference;
  {
    testing::SteppedSource source("EpisodeSampler", p, options);
    while (auto s = source.next()) reference.push_back(s->get_int("sample_id"));
  }
  ASSERT_EQ(reference.size(), 60u);

  for (size_t cut : {size_t{0}, size_t{17}, size_t{30}, size_t{45}}) {
    nlohmann::json saved;
    {
      testing::SteppedSource source("EpisodeSampler", p, options);
      for (size_t i = 0; i < cut; ++i) source.next();
      saved = source.state();
    }
    testing::SteppedSource source("EpisodeSampler", p, options, saved);
    std::vector<int64_t> rest;
    while (auto s = source.next()) rest.push_back(s->get_int("sample_id"));
    EXPECT_EQ(rest, std::vector<int64_t>(reference.begin() + cut, reference.end()))
        << "cut " << cut << " state " << saved.dump();
  }
  EXPECT_EQ(nlohmann::json({{"epoch", 1}, {"position", 15}}), [&] {
    testing::SteppedSource source("EpisodeSampler", p, options);
    for (int i = 0; i < 45; ++i) source.next();
    return source.state();
  }());
}

TEST_F(EpisodeSamplerTest, ProprioNoiseIsSeededAndSkipsPaddedDims) {
  const auto clean = drain();
  const auto noisy = drain(R"(, "state_noise_std": 0.01)");
  const auto again = drain(R"(, "state_noise_std": 0.01)");
  const at::Tensor diff = noisy[3].tensor("proprio") - clean[3].tensor("proprio");
  EXPECT_TRUE(noisy[3].tensor("proprio").equal(again[3].tensor("proprio")));
  EXPECT_GT(diff.abs().max().item<float>(), 0.0f);
  EXPECT_LT(diff.abs().max().item<float>(), 0.1f);
  EXPECT_NEAR(
      diff.index_select(1, torch::tensor({0, 1, 2, 3, 4, 5, 16, 40, 56})).std().item<float>(),
      0.01f, 0.003f);
  EXPECT_EQ(noisy[3].tensor("proprio")[0][6].item<float>(), 0.0f);  // padded dim
  EXPECT_TRUE(noisy[3].tensor("action").equal(clean[3].tensor("action")));
}

TEST_F(EpisodeSamplerTest, RejectsWindowsTheVaeCannotTake) {
  auto error_of = [&](const std::string& extra) {
    return testing::error_of([&] { drain(extra); });
  };
  // Params-only rules: reported when the stage is built, as `validate` does.
  EXPECT_EQ(error_of(R"(, "num_frames": 31)"),
            "<test>:/params/num_frames [EpisodeSampler]: Action horizon must be divisible by "
            "action_video_freq_ratio: num_frames-1=30, action_video_freq_ratio=4");
  EXPECT_EQ(error_of(R"(, "num_frames": 29)"),
            "<test>:/params/num_frames [EpisodeSampler]: The sampled RGB window must satisfy "
            "T % 4 == 1 for the Wan VAE: num_frames=29 and action_video_freq_ratio=4 give T=8");
  EXPECT_EQ(error_of(R"(, "world_size": 2, "rank": 2)"),
            "<test>:/params/rank [EpisodeSampler]: rank 2 must be < world_size 2");
  EXPECT_EQ(error_of(R"(, "action_layout": [[0, 6, 0], [6, 8, 5]])"),
            "<test>:/params/action_layout/1 [EpisodeSampler]: destination dim 5 is used twice, "
            "in [6,8,5]");
  // The source dims are the dataset's: checked when it is opened.
  EXPECT_EQ(error_of(R"(, "action_layout": [[0, 15, 0]])"),
            "EpisodeSampler param action_layout[0] [0,15,0]: source range must lie in [0, 14) of "
            "the dataset's dims");
  EXPECT_EQ(error_of(R"(, "cameras": ["observation.images.wrist"])"),
            fs::absolute(root_).string() +
                "/meta/info.json: camera observation.images.wrist is not a video feature (video "
                "features: observation.images.cam_high)");
}

TEST_F(EpisodeSamplerTest, MissingStatsNameTheCommandToRun) {
  fs::remove(root_ + "/meta/episodes_stats.jsonl");
  fs::remove(root_ + "/meta/stats.json");
  const std::string root = fs::absolute(root_).string();
  EXPECT_ERROR(drain(), root + "/meta/episodes_stats.jsonl and " + root +
                            "/meta/stats.json: no \"action\" stats; normalisation needs them: run "
                            "`wam-pipeline dataset stats " +
                            root + "`");
}

TEST_F(EpisodeSamplerTest, StatsShorterThanTheVectorAreRefused) {
  data::FeatureStats s;
  s.min = s.max = s.mean = s.std = {0.0, 1.0};  // 2 values for 14 dims
  s.count = 10;
  std::map<int64_t, data::EpisodeStats> stats;
  for (int64_t e = 0; e < 2; ++e) stats[e] = {{"action", s}, {"observation.state", s}};
  data::write_episodes_stats(root_ + "/meta/episodes_stats.jsonl", stats);
  const std::string root = fs::absolute(root_).string();
  EXPECT_ERROR(drain(), root +
                            "/meta/episodes_stats.jsonl: stats of \"action\" have 2 values per "
                            "statistic, but meta/info.json gives it 14; recompute them with "
                            "`wam-pipeline dataset stats " +
                            root + " --force`");
}

// The real LeRobot v2.0 dataset: windows over its 44-D vectors, normalised with its
// meta/stats.json (v2.0 ships no per-episode stats).
TEST_F(EpisodeSamplerTest, SamplesRealLeRobotData) {
  const fs::path real = fs::path(WAM_SOURCE_DIR "/../shared/data/lerobot-gr00t-picknplace");
  if (!fs::exists(real)) GTEST_SKIP() << real << " is not present";
  const std::string root = fs::absolute(real).lexically_normal().string();
  const auto samples = testing::drain_source(
      "EpisodeSampler", R"({"dataset_dirs": [")" + root +
                            R"("], "cameras": ["observation.images.ego_view"], "shuffle": false,
                            "action_layout": [[0, 44, 0]], "state_layout": [[0, 44, 0]]})");
  ASSERT_EQ(samples.size(), 2096u);
  // Episode 1 starts at sample 416; its frame 0 and its last frame (469).
  const Sample& first = samples[416];
  EXPECT_EQ(first.get_int("episode_index"), 1);
  EXPECT_EQ(first.get_int("frame_index"), 0);
  EXPECT_EQ(first.get_string("task"),
            "pick the sweet potato from the counter and place it in the plate");
  EXPECT_EQ(first.get_json("video_files"),
            nlohmann::json::array(
                {root + "/videos/chunk-000/observation.images.ego_view/episode_000001.mp4"}));
  EXPECT_EQ(first.get_json("frame_plan"),
            (nlohmann::json{{"fps", 20.0},
                            {"anchor", 0},
                            {"recent", 0},
                            {"window", {0, 4, 8, 12, 16, 20, 24, 28, 32}}}));
  std::ifstream stats_in(root + "/meta/stats.json");
  const auto stats = nlohmann::json::parse(stats_in);
  const auto normalised = [&](const char* key, double raw, int d) {
    const double mean = stats[key]["mean"][d].get<double>();
    const double std = std::max(stats[key]["std"][d].get<double>(), 1e-6);
    return static_cast<float>(raw) * static_cast<float>(1.0 / std) +
           static_cast<float>(-mean / std);
  };
  // Raw values read with hyparquet (see lerobot_dataset_test.cc).
  EXPECT_FLOAT_EQ(first.tensor("action")[0][0].item<float>(),
                  normalised("action", 0.004474349363520933, 0));
  EXPECT_FLOAT_EQ(first.tensor("proprio")[0][1].item<float>(),
                  normalised("observation.state", 0.11594200686530208, 1));
  const Sample& last = samples[416 + 469];
  EXPECT_EQ(last.get_json("frame_plan")["window"],
            nlohmann::json({469, 469, 469, 469, 469, 469, 469, 469, 469}));
  EXPECT_EQ(values<bool>(last.tensor("image_is_pad")),
            (std::vector<bool>{false, true, true, true, true, true, true, true, true}));
  EXPECT_FLOAT_EQ(last.tensor("action")[0][22].item<float>(),
                  normalised("action", -0.9078425935647945, 22));
  EXPECT_EQ(values<bool>(last.tensor("action_is_pad"))[1], true);
}

// NaN in action and +Inf in observation.state were once normalised and trained on (issue 25). Here
// episode 0 gets a NaN in action row 30 and an infinity in state row 35, episode 1 (which gains a
// timestamp column) a NaN timestamp at row 4.
class NonFiniteTest : public EpisodeSamplerTest {
 protected:
  void SetUp() override {
    EpisodeSamplerTest::SetUp();
    const auto ds = data::LeRobotDataset::open(root_);
    data::EpisodeData first = ds.read_episode(0);
    first.floats["action"].values[30 * kDims + 2] = std::nanf("");
    first.floats["observation.state"].values[35 * kDims + 7] =
        std::numeric_limits<float>::infinity();
    data::write_episode_parquet(ds.data_file(0), first, ds.info());
    data::EpisodeData second = ds.read_episode(1);
    second.floats["timestamp"] = {20, 1, {}};
    for (int f = 0; f < 20; ++f) second.floats["timestamp"].values.push_back(f / 25.0f);
    second.floats["timestamp"].values[4] = std::nanf("");
    data::write_episode_parquet(ds.data_file(1), second, ds.info());
  }

  std::string file(int64_t episode) const {
    return root_ + "/data/chunk-000/episode_00000" + std::to_string(episode) + ".parquet";
  }

  // The sampler alone, as a pipeline's source with the given on_error.
  RunResult run(OnError on_error, std::vector<Sample>& served,
                std::vector<std::string>& log) const {
    PipelineConfig config;
    config.file = "non_finite.json";
    config.name = "non_finite";
    NodeConfig node;
    node.id = "sampler";
    node.type = "EpisodeSampler";
    node.params = nlohmann::json::parse(params());
    node.on_error = on_error;
    node.pointer = "/nodes/0";
    config.nodes.push_back(node);
    ValidatedPipeline pipeline = ValidatedPipeline::from_config(config, StageRegistry::builtin());
    RunOptions options;
    auto mutex = std::make_shared<std::mutex>();  // the runner also logs from its reporter
    options.log = [&log, mutex](const std::string& line) {
      std::lock_guard<std::mutex> lock(*mutex);
      log.push_back(line);
    };
    options.on_output = [&](const Sample& sample) { served.push_back(sample); };
    return run_pipeline(pipeline, options);
  }
};

TEST_F(NonFiniteTest, OnErrorFailStopsTheOpenNamingFileColumnAndRow) {
  std::vector<Sample> served;
  std::vector<std::string> log;
  const RunResult result = run(OnError::kFail, served, log);
  ASSERT_TRUE(result.error.has_value());
  EXPECT_EQ(std::string(result.error->what()),
            "[sampler: EpisodeSampler] open: " + file(0) +
                ": column \"action\" of episode 0 holds nan at row 30 (value 2); training needs "
                "finite values: fix or drop the episode (`wam-pipeline dataset inspect` lists "
                "every such episode)");
  EXPECT_TRUE(served.empty());
  // The stage alone (the harness's default is fail) says the same.
  EXPECT_ERROR(drain(), file(0) +
                            ": column \"action\" of episode 0 holds nan at row 30 (value 2); "
                            "training needs finite values: fix or drop the episode "
                            "(`wam-pipeline dataset inspect` lists every such episode)");
}

TEST_F(NonFiniteTest, OnErrorSkipSkipsAndCountsTheSamplesWhoseWindowsTouchThem) {
  std::vector<Sample> served;
  std::vector<std::string> log;
  const RunResult result = run(OnError::kSkip, served, log);
  ASSERT_FALSE(result.error.has_value()) << result.error->what();
  // Episode 0 (ids 0..39): the action rows [f, f + 31] of frames 0..30 reach row 30, the state
  // rows of frames 4..35 row 35. Episode 1 (ids 40..59): the video windows f, f + 4, ... of frames
  // 0 and 4 plan frame 4.
  std::vector<int64_t> expected = {36, 37, 38, 39};
  for (int64_t id = 41; id < 60; ++id) {
    if (id != 44) expected.push_back(id);
  }
  EXPECT_EQ(ids(served), expected);
  ASSERT_EQ(result.stats.nodes.size(), 1u);
  EXPECT_EQ(result.stats.nodes[0].skips, 38);
  EXPECT_EQ(result.stats.nodes[0].out, 22);
  for (const Sample& s : served) {
    for (const char* name :
         {"action", "proprio", "memory_video_anchor_proprio", "memory_video_recent_proprio"}) {
      EXPECT_TRUE(at::isfinite(s.tensor(name)).all().item<bool>()) << s.key() << " " << name;
    }
  }
  EXPECT_NE(std::find(log.begin(), log.end(),
                      "[sampler] EpisodeSampler: 2 episodes hold NaN or infinite values "
                      "(on_error: skip): "
                      "the samples whose windows touch them are skipped and counted"),
            log.end());
  // Sources have no sample key for the runner: a skipped one is named by the item it would have
  // been, and by the sampler's message.
  EXPECT_NE(std::find(log.begin(), log.end(),
                      "[sampler: EpisodeSampler] skipped item 0 (on_error: skip): " + file(0) +
                          ": column \"action\" of episode 0 holds nan at row 30 (value 2), in the "
                          "window of sample:0; training needs finite values: fix or drop the "
                          "episode (`wam-pipeline dataset inspect` lists every such episode)"),
            log.end());
}

// Each refused sample names the file, the column and the row its window touches.
TEST_F(NonFiniteTest, EachSkippedSampleNamesFileColumnAndRow) {
  testing::HarnessOptions options;
  options.on_error = OnError::kSkip;
  testing::SteppedSource source("EpisodeSampler", params(), options);
  std::map<int64_t, std::string> refused;
  std::vector<int64_t> served;
  for (int64_t id = 0; id < 60; ++id) {
    try {
      served.push_back(source.next()->get_int("sample_id"));
    } catch (const Error& e) {
      refused[id] = e.what();
    }
  }
  EXPECT_FALSE(source.next().has_value());
  EXPECT_EQ(served.size(), 22u);
  EXPECT_EQ(refused.size(), 38u);
  const std::string why =
      "; training needs finite values: fix or drop the episode (`wam-pipeline dataset inspect` "
      "lists every such episode)";
  EXPECT_EQ(refused[30], file(0) +
                             ": column \"action\" of episode 0 holds nan at row 30 (value 2), in "
                             "the window of sample:30" +
                             why);
  EXPECT_EQ(refused[31], file(0) +
                             ": column \"observation.state\" of episode 0 holds inf at row 35 "
                             "(value 7), in the window of sample:31" +
                             why);
  EXPECT_EQ(refused[44], file(1) +
                             ": column \"timestamp\" of episode 1 holds nan at row 4 (value 0), "
                             "in the window of sample:44" +
                             why);
}

TEST_F(EpisodeSamplerTest, LiberoStateTransformNeedsLiberosFifteenDims) {
  EXPECT_ERROR(drain(R"(, "state_transform": "libero_ee_rot6d")"),
               fs::absolute(root_).string() +
                   "/data/chunk-000/episode_000000.parquet: state_transform libero_ee_rot6d needs "
                   "LIBERO's 15-D observation.state [joint 7, ee position 3, ee axis-angle 3, "
                   "gripper 2], got 14 dims");
}

// LIBERO's state through the reference's transform, on one 40-frame episode whose every value is
// chosen so the expected numbers can be written down:
//   joint d = f + 10 d and ee position k = 0.1 f + k: min_max over f = 0..39 gives 2 f / 39 - 1;
//   ee axis-angle cycles through 0, pi/2 about z, pi/2 about x, pi about y (frame f % 4);
//   gripper fingers (0.01 (f % 5), -0.01 (f % 5)): aperture 0.01 (f % 5) in [0, 0.04], so
//   (f % 5) / 2 - 1.
class LiberoStateTest : public ::testing::Test {
 protected:
  static constexpr const char* kImage = "observation.images.image";
  static constexpr int64_t kFrames = 40;

  void SetUp() override {
    root_ =
        (fs::temp_directory_path() / ("libero_state_test_" + std::to_string(::getpid()))).string();
    fs::remove_all(root_);
    data::DatasetInfo info;
    info.fps = 10;
    info.features = {{kImage, "video", {64, 64, 3}, {}, nlohmann::json::object()},
                     {"action", "float32", {7}, {}, nullptr},
                     {"observation.state", "float32", {15}, {}, nullptr}};
    data::LeRobotWriter writer(root_, info, {{0, "open the drawer"}});
    const double half_pi = M_PI / 2;
    const std::array<std::array<double, 3>, 4> axis_angles = {
        {{0, 0, 0}, {0, 0, half_pi}, {half_pi, 0, 0}, {0, M_PI, 0}}};
    data::EpisodeData columns;
    columns.floats["action"] = {kFrames, 7, {}};
    columns.floats["observation.state"] = {kFrames, 15, {}};
    for (int64_t f = 0; f < kFrames; ++f) {
      for (int64_t d = 0; d < 7; ++d) {
        columns.floats["action"].values.push_back(static_cast<float>(f + 100 * d));
      }
      auto& state = columns.floats["observation.state"].values;
      for (int64_t d = 0; d < 7; ++d) state.push_back(static_cast<float>(f + 10 * d));
      for (int64_t k = 0; k < 3; ++k) state.push_back(static_cast<float>(0.1 * f + k));
      for (double v : axis_angles[f % 4]) state.push_back(static_cast<float>(v));
      const float finger = 0.01f * static_cast<float>(f % 5);
      state.push_back(finger);
      state.push_back(-finger);
      columns.ints["task_index"].push_back(0);
    }
    writer.write_episode({0, {"open the drawer"}, kFrames}, columns);
    const std::string video = writer.episode_video_file(0, kImage);
    fs::create_directories(fs::path(video).parent_path());
    std::ofstream(video).put('\0');
    writer.finish();
  }
  void TearDown() override { fs::remove_all(root_); }

  std::vector<Sample> drain() const {
    return testing::drain_source(
        "EpisodeSampler", R"({"dataset_dirs": [")" + root_ + R"("], "cameras": [")" + kImage +
                              R"("], "shuffle": false, "normalization": "min_max",
               "action_layout": [[0, 6, 47], [6, 7, 56]],
               "state_layout": [[0, 7, 40], [7, 16, 47], [16, 17, 56]],
               "state_transform": "libero_ee_rot6d"})");
  }

  std::string root_;
};

TEST_F(LiberoStateTest, EeBecomesPositionAndColumnFirstRot6dAndGripperTheAperture) {
  // Column-first 6-D rotation (R00 R10 R20 R01 R11 R21) of the four axis-angles.
  const std::array<std::array<float, 6>, 4> rot6d = {{{1, 0, 0, 0, 1, 0},     // identity
                                                      {0, 1, 0, -1, 0, 0},    // z by pi/2
                                                      {1, 0, 0, 0, 0, 1},     // x by pi/2
                                                      {-1, 0, 0, 0, 1, 0}}};  // y by pi
  const auto samples = drain();
  ASSERT_EQ(samples.size(), 40u);
  const at::Tensor proprio = samples[3].tensor("proprio");  // frame 3: rows are frames 3..34
  ASSERT_EQ(proprio.sizes(), (std::vector<int64_t>{32, 80}));
  for (int64_t i = 0; i < 32; ++i) {
    const int64_t f = 3 + i;
    SCOPED_TRACE("frame " + std::to_string(f));
    const float ramp = 2.0f * static_cast<float>(f) / 39.0f - 1.0f;
    for (int64_t d = 40; d < 50; ++d) EXPECT_NEAR(proprio[i][d].item<float>(), ramp, 1e-5);
    for (int64_t k = 0; k < 6; ++k) {  // passed through, not normalised
      EXPECT_NEAR(proprio[i][50 + k].item<float>(), rot6d[f % 4][k], 1e-6) << "rot6d " << k;
    }
    EXPECT_NEAR(proprio[i][56].item<float>(), 0.5f * static_cast<float>(f % 5) - 1.0f, 1e-5);
    EXPECT_EQ(proprio[i][39].item<float>(), 0.0f);
    EXPECT_EQ(proprio[i][57].item<float>(), 0.0f);
  }
  std::vector<bool> dim_pad(80, true);
  for (int64_t d = 40; d <= 56; ++d) dim_pad[d] = false;
  const at::Tensor mask = samples[3].tensor("proprio_dim_is_pad");
  EXPECT_EQ(std::vector<bool>(mask.data_ptr<bool>(), mask.data_ptr<bool>() + 80), dim_pad);
  // Memory proprio goes through the same transform: the anchor is frame 0.
  const at::Tensor anchor = samples[3].tensor("memory_video_anchor_proprio");
  EXPECT_NEAR(anchor[0][40].item<float>(), -1.0f, 1e-6);
  for (int64_t k = 0; k < 6; ++k) EXPECT_NEAR(anchor[0][50 + k].item<float>(), rot6d[0][k], 1e-6);
  EXPECT_NEAR(anchor[0][56].item<float>(), -1.0f, 1e-6);
  // The 7-D action is untouched by the state transform.
  const at::Tensor action = samples[3].tensor("action");
  EXPECT_NEAR(action[0][47].item<float>(), 2.0f * 3 / 39 - 1, 1e-5);
  EXPECT_NEAR(action[0][56].item<float>(), 2.0f * 3 / 39 - 1, 1e-5);
}

}  // namespace
}  // namespace wam
