// Multi-process tests on c10d's Gloo backend. tests/dist/two_ranks.sh runs this binary as two
// ranks on 127.0.0.1 (RANK, WORLD_SIZE=2, MASTER_ADDR, MASTER_PORT); run alone, the tests that
// need two ranks skip. Every test runs on every rank, in the same order, so the collectives match.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/distributed.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "models/world_model.h"
#include "testing/random_train_batch.h"
#include "testing/stage_harness.h"
#include "train/data_parallel.h"
#include "train/step_runner.h"
#include "wam/error.h"

namespace wam {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    dist::parse_launch_env([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchEnv, NamesTheVariableThatIsWrong) {
  EXPECT_EQ(error_of({}), "");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "1"}}), "");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "two"}}),
            "WORLD_SIZE=\"two\" is not an integer in [1, 2147483647]");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}}),
            "RANK is not set; the launcher (torchrun, Slurm, scripts/run.sh) sets RANK, "
            "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every process");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}}), "RANK=2 must be < WORLD_SIZE=2");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}, {"RANK", "1"}}),
            "MASTER_ADDR is not set; with WORLD_SIZE=2 every rank needs the address of rank 0 "
            "(MASTER_ADDR and MASTER_PORT)");
  EXPECT_EQ(
      error_of(
          {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}}),
      "MASTER_PORT=\"99999\" is not an integer in [1, 65535]");
  const dist::LaunchEnv env = dist::parse_launch_env([](const char* name) -> const char* {
    const std::map<std::string, std::string> values = {
        {"WORLD_SIZE", "4"}, {"RANK", "3"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node0"}};
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  });
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_TRUE(env.launched());
}

// torchrun --nproc-per-node 1 makes a group of one; WORLD_SIZE=1 alone, or a stray MASTER_ADDR
// without WORLD_SIZE, leaves the process alone.
TEST(LaunchEnv, OneRankUnderALauncherIsAGroupOfOne) {
  auto parse = [](std::map<std::string, std::string> values) {
    return dist::parse_launch_env([&values](const char* name) -> const char* {
      auto it = values.find(name);
      return it == values.end() ? nullptr : it->second.c_str();
    });
  };
  const dist::LaunchEnv torchrun = parse(
      {{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29511"}});
  EXPECT_TRUE(torchrun.launched());
  EXPECT_EQ(torchrun.world_size, 1);
  EXPECT_EQ(torchrun.master_port, 29511);
  EXPECT_FALSE(parse({{"WORLD_SIZE", "1"}}).launched());
  EXPECT_FALSE(parse({{"MASTER_ADDR", "127.0.0.1"}}).launched());
  EXPECT_EQ(error_of({{"WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}}),
            "MASTER_PORT=\"0\" is not an integer in [1, 65535]");
}

// A LeRobot dataset of episodes of 40 and 21 frames (61 samples); the sampler only needs the
// video files to exist.
constexpr const char* kCamera = "observation.images.cam_high";
constexpr int64_t kDims = 14;

std::string write_dataset() {
  const std::string root =
      (fs::temp_directory_path() / ("dist_test_dataset_" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  data::DatasetInfo info;
  info.fps = 25;
  info.features = {{kCamera, "video", {64, 64, 3}, {}, nlohmann::json::object()},
                   {"action", "float32", {kDims}, {}, nullptr},
                   {"observation.state", "float32", {kDims}, {}, nullptr}};
  data::LeRobotWriter writer(root, info, {{0, "stack the blocks"}});
  for (int64_t e = 0; e < 2; ++e) {
    const int64_t n = e == 0 ? 40 : 21;
    data::EpisodeData columns;
    columns.floats["action"] = {n, kDims, std::vector<float>(n * kDims, 0.5f)};
    columns.floats["observation.state"] = {n, kDims, std::vector<float>(n * kDims, 0.5f)};
    columns.ints["task_index"] = std::vector<int64_t>(n, 0);
    writer.write_episode({e, {"stack the blocks"}, n}, columns);
    const std::string video = writer.episode_video_file(e, kCamera);
    fs::create_directories(fs::path(video).parent_path());
    std::ofstream(video).put('\0');
  }
  writer.finish();
  data::FeatureStats s;
  s.min.assign(kDims, 0.0);
  s.max.assign(kDims, 1.0);
  s.mean.assign(kDims, 0.0);
  s.std.assign(kDims, 1.0);
  s.count = 10;
  std::map<int64_t, data::EpisodeStats> stats;
  for (int64_t e = 0; e < 2; ++e) stats[e] = {{"action", s}, {"observation.state", s}};
  data::write_episodes_stats(root + "/meta/episodes_stats.jsonl", stats);
  return root;
}

std::vector<int64_t> shard(const std::string& root, const std::string& extra, int64_t epochs) {
  testing::HarnessOptions options;
  options.settings.epochs = epochs;
  const auto samples =
      testing::drain_source("EpisodeSampler",
                            R"({"dataset_dirs": [")" + root + R"("], "cameras": [")" + kCamera +
                                R"("], "shuffle": true)" + extra + "}",
                            SIZE_MAX, options);
  std::vector<int64_t> ids;
  for (const auto& s : samples) ids.push_back(s.get_int("sample_id"));
  return ids;
}

// Explicit rank and world_size, in one process: 61 samples over 3 ranks are 21 each, the last
// of the 63 positions wrapping to the first two of the epoch's order.
TEST(EpisodeSamplerShards, EqualSizedDisjointAndCoveringWithWrappedPadding) {
  const std::string root = write_dataset();
  for (int64_t max_samples : {0, 50}) {
    const int64_t n = max_samples == 0 ? 61 : 50;
    const int64_t per_rank = (n + 2) / 3;
    std::map<int64_t, int> seen;
    std::vector<int64_t> order;  // the epoch's order, from a single shard
    for (int64_t rank = 0; rank < 3; ++rank) {
      const auto ids = shard(root,
                             R"(, "world_size": 3, "rank": )" + std::to_string(rank) +
                                 R"(, "max_samples": )" + std::to_string(max_samples),
                             1);
      EXPECT_EQ(static_cast<int64_t>(ids.size()), per_rank) << "rank " << rank;
      for (int64_t id : ids) ++seen[id];
    }
    order = shard(
        root, R"(, "world_size": 1, "rank": 0, "max_samples": )" + std::to_string(max_samples), 1);
    ASSERT_EQ(static_cast<int64_t>(order.size()), n);
    // Every sample of the epoch once; the padding (3 * per_rank - n) repeats the first ones.
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    const int64_t padding = 3 * per_rank - n;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(seen[order[i]], i < padding ? 2 : 1) << "sample " << order[i];
    }
  }
  fs::remove_all(root);
}

// rank and world_size from the launcher: the two processes' shards of each epoch.
TEST(EpisodeSamplerShards, FromTheLauncher) {
  dist::World& world = dist::World::get();
  if (world.size() != 2) GTEST_SKIP() << "needs two ranks (tests/dist/two_ranks.sh)";
  const std::string root = write_dataset();
  const auto ids = shard(root, "", 2);  // two epochs
  fs::remove_all(root);
  ASSERT_EQ(ids.size(), 62u);  // ceil(61 / 2) = 31 per epoch
  at::Tensor counts = at::zeros({2, 61}, at::kLong);
  for (size_t i = 0; i < ids.size(); ++i) counts[static_cast<int64_t>(i / 31)][ids[i]] += 1;
  world.all_reduce_sum({counts}, "test: sample counts");
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    const at::Tensor c = counts[epoch];
    EXPECT_EQ(c.sum().item<int64_t>(), 62) << "epoch " << epoch;
    EXPECT_EQ(c.min().item<int64_t>(), 1) << "epoch " << epoch << ": a sample is missing";
    EXPECT_EQ(c.eq(2).sum().item<int64_t>(), 1) << "epoch " << epoch << ": one padding sample";
  }
}

// The tiny preset on 8x8 latents, with activation checkpointing (nested backward passes).
models::MoTConfig tiny_config() {
  std::ifstream in(std::string(WAM_SOURCE_DIR) + "/configs/model/tiny.json");
  nlohmann::json preset = nlohmann::json::parse(in);
  preset["future_delta_tokens"] = 16;
  models::MoTConfig config = models::MoTConfig::from_json(preset);
  config.activation_checkpoint_group = 1;
  return config;
}

models::TrainBatch rows(const models::TrainBatch& b, int64_t first, int64_t count) {
  auto n = [&](const at::Tensor& t) { return t.narrow(0, first, count).contiguous(); };
  return {n(b.video_latents), n(b.anchor_latents), n(b.recent_latents),    n(b.recent_is_pad),
          n(b.context),       n(b.context_mask),   n(b.vlm_context),       n(b.vlm_mask),
          n(b.action),        n(b.action_is_pad),  n(b.action_dim_is_pad), n(b.proprio)};
}

models::FlowNoise rows(const models::FlowNoise& f, int64_t first, int64_t count) {
  auto n = [&](const at::Tensor& t) { return t.narrow(0, first, count).contiguous(); };
  return {n(f.video_noise), n(f.video_sigma), n(f.action_noise), n(f.action_sigma)};
}

std::vector<at::Tensor> grads_of(models::WorldActionModel& model) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : model->parameters()) {
    grads.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
  }
  return grads;
}

void clear_grads(models::WorldActionModel& model) {
  for (at::Tensor& p : model->parameters()) p.mutable_grad() = at::Tensor();
}

TEST(DataParallel, GradientsEqualSingleProcessGradientsOnTheConcatenatedBatch) {
  dist::World& world = dist::World::get();
  if (world.size() != 2) GTEST_SKIP() << "needs two ranks (tests/dist/two_ranks.sh)";
  const models::MoTConfig config = tiny_config();
  // Different initial weights on each rank; rank 0's are broadcast, as TrainStep does.
  torch::manual_seed(5 + world.rank());
  models::WorldActionModel model(config);
  {
    std::vector<at::Tensor> state;
    for (const at::Tensor& p : model->parameters()) state.push_back(p.detach());
    world.broadcast(state, 0, "test: broadcast of the initial weights");
  }
  torch::manual_seed(5);
  models::WorldActionModel reference(config);  // rank 0's initial weights
  {
    torch::NoGradGuard no_grad;
    auto ours = model->parameters(), theirs = reference->parameters();
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_TRUE(ours[i].equal(theirs[i])) << "parameter " << i << " was not broadcast";
    }
  }

  // B = 4 with nothing padded, so each loss term's mean over the batch is the mean of the two
  // halves' means (the semantic term's gate lets one sample of each half through).
  const models::TrainBatch batch = testing::random_train_batch(config, 4);
  at::Generator gen = train::make_noise_generator(at::Device(at::kCPU), 3);
  models::FlowNoise noise = models::sample_flow_noise(batch, config, gen);
  noise.video_sigma = torch::tensor({0.2f, 0.9f, 0.8f, 0.3f});

  clear_grads(reference);
  reference->loss(batch, noise).total.backward();
  const std::vector<at::Tensor> expected = grads_of(reference);

  // Small buckets, so that several all-reduces overlap the backward pass.
  train::GradientAverager averager(model->named_parameters().pairs(), world, 64 << 10);
  ASSERT_GT(averager.bucket_count(), 2);
  const int64_t half = 2;
  const models::TrainBatch mine = rows(batch, half * world.rank(), half);
  const models::FlowNoise my_noise = rows(noise, half * world.rank(), half);
  for (int step = 0; step < 2; ++step) {  // the first backward learns the hook counts
    clear_grads(model);
    averager.begin_backward();
    model->loss(mine, my_noise).total.backward();
    averager.finish_backward();
    const std::vector<at::Tensor> got = grads_of(model);
    const auto names = model->named_parameters().keys();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(at::allclose(got[i], expected[i], 1e-4, 1e-6))
          << "step " << step << ": " << names[i] << " differs by "
          << (got[i] - expected[i]).abs().max().item<double>();
    }
    if (step == 0) EXPECT_EQ(averager.overlapped_buckets(), 0);
  }
  // From the second step on, buckets are reduced while backward still runs.
  EXPECT_GE(averager.overlapped_buckets(), averager.bucket_count() - 1);
}

// With the same batch and noise on every rank, the average of the ranks' gradients is each rank's
// own (exactly, for 1 or 2 ranks), so the data-parallel step trains exactly as the plain step:
// eager on the CPU (Gloo); on a GPU also compiled, with the all-reduces captured in the CUDA graph
// and with them between two graphs (NCCL). Run by two_ranks.sh as 2 ranks and as a group of one.
TEST(DataParallel, SameBatchOnEveryRankTrainsExactlyAsThePlainStep) {
  dist::World& world = dist::World::get();
  if (!world.distributed()) GTEST_SKIP() << "needs a launched group (tests/dist/two_ranks.sh)";
  const at::Device device =
      torch::cuda::is_available() ? at::Device(at::kCUDA, world.rank()) : at::Device(at::kCPU);
  models::MoTConfig config = tiny_config();
  struct Run {
    bool compiled;
    train::CollectivePlacement collectives;
    const char* name;
  };
  std::vector<Run> runs = {{false, train::CollectivePlacement::kInGraph, "eager"}};
  if (device.is_cuda()) {
    runs.push_back({true, train::CollectivePlacement::kInGraph, "compiled, in_graph"});
    runs.push_back({true, train::CollectivePlacement::kOutsideGraph, "compiled, outside_graph"});
  }
  auto train_three_steps = [&](const Run& run, bool data_parallel) {
    torch::manual_seed(7);
    models::WorldActionModel model(config);
    model->to(device);
    model->train();
    train::AdamW adamw(model->parameters(), train::AdamWOptions{});
    train::StepOptions options;
    options.collectives = run.collectives;
    train::StepRunner runner(model, adamw, device, options, run.compiled, "");
    EXPECT_EQ(runner.compiled(), run.compiled) << run.name;
    std::unique_ptr<train::GradientAverager> averager;
    if (data_parallel) {
      averager = std::make_unique<train::GradientAverager>(model->named_parameters().pairs(), world,
                                                           64 << 10);
      runner.set_gradient_sync(averager.get());
    }
    at::Generator gen = train::make_noise_generator(device, 3);
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      models::TrainBatch batch = testing::random_train_batch(config, 2);
      for (at::Tensor* field : {&batch.video_latents, &batch.anchor_latents, &batch.recent_latents,
                                &batch.recent_is_pad, &batch.context, &batch.context_mask,
                                &batch.vlm_context, &batch.vlm_mask, &batch.action,
                                &batch.action_is_pad, &batch.action_dim_is_pad, &batch.proprio}) {
        *field = (field->is_floating_point() ? *field * (1 + step) : *field).to(device);
      }
      losses.push_back(runner.step(batch, 1e-3, gen).total);
    }
    EXPECT_EQ(runner.last_device_ms().has_value(), device.is_cuda());
    std::vector<at::Tensor> params;
    for (const at::Tensor& p : model->parameters()) params.push_back(p.detach().cpu());
    return std::make_pair(losses, params);
  };
  for (const Run& run : runs) {
    const auto [plain_losses, plain_params] = train_three_steps(run, false);
    const auto [dp_losses, dp_params] = train_three_steps(run, true);
    EXPECT_EQ(dp_losses, plain_losses) << run.name;
    ASSERT_EQ(dp_params.size(), plain_params.size());
    for (size_t i = 0; i < dp_params.size(); ++i) {
      EXPECT_TRUE(dp_params[i].equal(plain_params[i])) << run.name << ": parameter " << i;
    }
  }
}

}  // namespace
}  // namespace wam
