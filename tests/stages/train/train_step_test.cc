// TrainStep and its machinery (schedule, AdamW, clipping, checkpoints, compiled step) on the tiny
// preset. CUDA-only checks skip without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include <gtest/gtest.h>

#include "models/bf16_weights.h"
#include "models/fp8_linear.h"
#include "models/weights_file.h"
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "testing/temp_dir.h"
#include "train/optimizer.h"
#include "train/step_runner.h"
#include "train/training_step.h"
#include "wam/tensor.h"

namespace wam {
namespace {

// The tiny preset on 8x8 latents (16 tokens per frame) instead of 24x16: a quarter of the tokens
// keeps this file's ~60 CPU steps fast.
nlohmann::json tiny_preset() {
  std::ifstream in(std::string(WAM_SOURCE_DIR) + "/configs/model/tiny.json");
  nlohmann::json preset = nlohmann::json::parse(in);
  preset["future_delta_tokens"] = 16;
  return preset;
}

// A batch as the encoders deliver it (B = 2), drawn from `seed`.
Sample make_batch(const models::MoTConfig& config, int64_t seed) {
  torch::manual_seed(seed);
  const int64_t b = 2, h = 8, w = 8, text_len = 8, vlm_len = 6, chunk = 32;
  Sample batch("batch:" + std::to_string(seed));
  batch.set_tensor("video_latents", torch::randn({b, config.latent_channels, 3, h, w}));
  batch.set_tensor("memory_video_anchor_latents",
                   torch::randn({b, config.latent_channels, 1, h, w}));
  batch.set_tensor("memory_video_recent_latents",
                   torch::randn({b, config.latent_channels, 1, h, w}));
  batch.set_tensor("memory_video_recent_is_pad", torch::tensor({false, true}).view({b, 1}));
  batch.set_tensor("context", torch::randn({b, text_len, config.text_dim}));
  batch.set_tensor("context_mask", torch::ones({b, text_len}, torch::kBool));
  at::Tensor vlm_mask = torch::ones({b, vlm_len}, torch::kBool);
  vlm_mask[1].narrow(0, 4, 2).fill_(false);
  batch.set_tensor("vlm_context", torch::randn({b, vlm_len, config.vlm_dim}));
  batch.set_tensor("vlm_mask", vlm_mask);
  batch.set_tensor("action", torch::randn({b, chunk, config.action_dim}));
  at::Tensor action_is_pad = torch::zeros({b, chunk}, torch::kBool);
  action_is_pad[1].narrow(0, 28, 4).fill_(true);
  batch.set_tensor("action_is_pad", action_is_pad);
  at::Tensor dim_is_pad = torch::zeros({b, config.action_dim}, torch::kBool);
  dim_is_pad.narrow(1, config.action_dim - 6, 6).fill_(true);
  batch.set_tensor("action_dim_is_pad", dim_is_pad);
  batch.set_tensor("proprio", torch::randn({b, chunk, config.proprio_dim}));
  return batch;
}

std::string params(const nlohmann::json& extra) {
  nlohmann::json p = {{"model", tiny_preset()}, {"log_every", 1000}};
  p.update(extra);
  return p.dump();
}

testing::HarnessOptions cpu_settings() {
  testing::HarnessOptions options;
  options.settings.device = "cpu";
  return options;
}

// Runs TrainStep as node "step" on the CPU, keeping its log lines.
testing::StageRun run_logged(const std::string& params_json, std::vector<Sample> inputs) {
  testing::HarnessOptions options = cpu_settings();
  options.node_id = "step";
  return testing::run_stage_counted("TrainStep", params_json, std::move(inputs), options);
}

TEST(LrScheduleTest, WarmupPeakCosineAndFloor) {
  train::LrSchedule schedule{1e-3, 0.2, 0.01, 25};  // warmup 5 steps, cosine over 20
  EXPECT_EQ(schedule.warmup_steps(), 5);
  EXPECT_DOUBLE_EQ(schedule.at(1), 1e-3 / 5);
  EXPECT_DOUBLE_EQ(schedule.at(3), 1e-3 * 3 / 5);
  EXPECT_DOUBLE_EQ(schedule.at(5), 1e-3);
  EXPECT_DOUBLE_EQ(schedule.at(15), 1e-5 + (1e-3 - 1e-5) * 0.5);
  EXPECT_DOUBLE_EQ(schedule.at(25), 1e-5);
  EXPECT_DOUBLE_EQ(schedule.at(30), 1e-5);
  // 5% of 100 is 5 warmup steps despite binary rounding.
  EXPECT_EQ((train::LrSchedule{1e-4, 0.05, 0.01, 100}.warmup_steps()), 5);
}

TEST(ClipGradNormTest, MatchesTorchClipGradNorm) {
  torch::manual_seed(3);
  std::vector<at::Tensor> ours, theirs;
  for (auto sizes : {std::vector<int64_t>{4, 5}, std::vector<int64_t>{7}}) {
    at::Tensor a = torch::zeros(sizes, torch::requires_grad());
    at::Tensor b = torch::zeros(sizes, torch::requires_grad());
    at::Tensor grad = torch::randn(sizes) * 3;
    a.mutable_grad() = grad.clone();
    b.mutable_grad() = grad.clone();
    ours.push_back(a);
    theirs.push_back(b);
  }
  const double expected = torch::nn::utils::clip_grad_norm_(theirs, 1.0);
  const double norm = train::clip_grad_norm(ours, 1.0).item<double>();
  EXPECT_NEAR(norm, expected, 1e-5);
  EXPECT_GT(norm, 1.0);
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ours[i].grad(), theirs[i].grad(), 1e-6, 1e-7));
  }
  // Below the limit the gradients are left as they are.
  const at::Tensor before = ours[0].grad().clone();
  train::clip_grad_norm(ours, 100.0);
  EXPECT_TRUE(torch::equal(ours[0].grad(), before));
}

TEST(AdamWTest, MatchesTorchOptimAdamW) {
  torch::manual_seed(4);
  at::Tensor ours = torch::randn({6, 3}, torch::requires_grad());
  at::Tensor theirs = ours.detach().clone().requires_grad_();
  train::AdamW adamw({ours}, train::AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  torch::optim::AdamW reference(
      {theirs}, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  for (int step = 0; step < 5; ++step) {
    const at::Tensor grad = torch::randn({6, 3});
    ours.mutable_grad() = grad.clone();
    theirs.mutable_grad() = grad.clone();
    adamw.set_lr(1e-2);
    adamw.step();
    reference.step();
  }
  EXPECT_EQ(adamw.step_count(), 5);
  EXPECT_TRUE(torch::allclose(ours, theirs, 1e-5, 1e-6))
      << (ours - theirs).abs().max().item<double>();
}

#if WAM_FUSED_KERNELS
// The compiled step's update (kernels/adamw.h) against ATen's fused AdamW on the same tensors:
// matrices and vectors, sizes not a multiple of 4, one over a block's chunk (65,536), more tensors
// than one launch takes (96), with clipping. Also: the gradients are not written, every parameter's
// bfloat16 copy is its parameter cast, kept in one buffer, and a parameter changed through ATen is
// copied again.
TEST(AdamWCudaTest, OwnKernelMatchesAtensAndKeepsTheBf16Copies) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(9);
  std::vector<std::vector<int64_t>> shapes = {{300, 257}, {1031}, {3}, {512, 512}, {70001}};
  for (int64_t i = 0; i < 100; ++i) shapes.push_back({17 + i});
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  std::vector<at::Tensor> ours, theirs;
  for (const auto& shape : shapes) {
    ours.push_back(torch::randn(shape, cuda).requires_grad_());
    theirs.push_back(ours.back().detach().clone().requires_grad_());
  }
  const train::AdamWOptions options{0.9, 0.95, 1e-8, 0.01};
  train::AdamW own(ours, options), aten(theirs, options);
  own.use_own_kernel(train::AdamW::Bf16Copies::kAll);
  for (int step = 0; step < 3; ++step) {
    std::vector<at::Tensor> grads;
    for (size_t i = 0; i < ours.size(); ++i) {
      grads.push_back(torch::randn(ours[i].sizes(), cuda) * (step + 1));
      ours[i].mutable_grad() = grads.back().clone();
      theirs[i].mutable_grad() = grads.back().clone();
    }
    own.set_lr(1e-3 * (step + 1));
    aten.set_lr(1e-3 * (step + 1));
    const double max_norm = 20.0;  // the norm is far above: every step clips
    const at::Tensor own_norm = own.clip_and_step(max_norm);
    aten.clip_and_step(max_norm);
    EXPECT_GT(own_norm.item<double>(), max_norm);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::equal(ours[i].grad(), grads[i])) << "tensor " << i << " step " << step;
    }
  }
  const auto largest_difference = [](const std::vector<at::Tensor>& a,
                                     const std::vector<at::Tensor>& b) {
    double largest = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      largest = std::max(largest, (a[i] - b[i]).abs().max().item<double>());
    }
    return largest;
  };
  torch::NoGradGuard no_grad;
  // ATen's arithmetic, operation for operation: equal up to the compilers' contractions.
  EXPECT_LE(largest_difference(ours, theirs), 1e-6);
  EXPECT_LE(largest_difference(own.exp_avg(), aten.exp_avg()), 1e-6);
  EXPECT_LE(largest_difference(own.exp_avg_sq(), aten.exp_avg_sq()), 1e-6);
  for (size_t i = 0; i < ours.size(); ++i) {
    const at::Tensor copy = models::weight_in(ours[i], at::kBFloat16);
    EXPECT_TRUE(torch::equal(copy, ours[i].to(at::kBFloat16))) << "tensor " << i;
    // Every parameter has a kept copy (the same tensor again), not a fresh cast.
    EXPECT_EQ(copy.data_ptr(), models::weight_in(ours[i], at::kBFloat16).data_ptr())
        << "tensor " << i;
  }
  // One buffer, the matrices first: the 512 x 512 copy right after the 300 x 257 one.
  EXPECT_EQ(static_cast<const char*>(models::weight_in(ours[3], at::kBFloat16).data_ptr()),
            static_cast<const char*>(models::weight_in(ours[0], at::kBFloat16).data_ptr()) +
                300 * 257 * 2);
  ours[0].mul_(2);  // through ATen: the version counter moves
  EXPECT_TRUE(torch::equal(models::weight_in(ours[0], at::kBFloat16), ours[0].to(at::kBFloat16)));
}

// The least-memory setting's copies: the vectors' only, adjacent in one buffer, so that the joint
// products read their biases in place and cast their weights on every forward.
TEST(AdamWCudaTest, VectorCopiesOnlyCastTheMatricesEveryTime) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(10);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  std::vector<at::Tensor> params = {torch::randn({64, 32}, cuda), torch::randn({64}, cuda),
                                    torch::randn({48}, cuda), torch::randn({40, 64}, cuda)};
  for (at::Tensor& p : params) p.requires_grad_();
  train::AdamW adamw(params, {0.9, 0.95, 1e-8, 0.01});
  adamw.use_own_kernel(train::AdamW::Bf16Copies::kVectors);
  for (at::Tensor& p : params) p.mutable_grad() = torch::randn(p.sizes(), cuda);
  adamw.set_lr(1e-3);
  adamw.clip_and_step(1.0);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor copy = models::weight_in(params[i], at::kBFloat16);
    EXPECT_TRUE(torch::equal(copy, params[i].to(at::kBFloat16))) << "tensor " << i;
    const bool kept = copy.data_ptr() == models::weight_in(params[i], at::kBFloat16).data_ptr();
    EXPECT_EQ(kept, params[i].dim() == 1) << "tensor " << i;
  }
  // The two biases' copies are one vector: their concatenation is a view of it.
  const at::Tensor biases = models::concatenated_bf16_weights({params[1], params[2]});
  EXPECT_EQ(biases.data_ptr(), models::weight_in(params[1], at::kBFloat16).data_ptr());
  EXPECT_TRUE(torch::equal(biases, at::cat({params[1], params[2]}).to(at::kBFloat16)));
}
#endif

TEST(TrainStepTest, LossDecreasesOverThirtyStepsOnAFixedBatch) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  std::vector<Sample> inputs;
  for (int i = 0; i < 30; ++i) inputs.push_back(make_batch(config, 7));
  const auto records = testing::run_stage(
      "TrainStep", params({{"learning_rate", 1e-2}, {"warmup_ratio", 0.0}, {"total_steps", 30}}),
      inputs, cpu_settings());
  ASSERT_EQ(records.size(), 30u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += records[i].get_double("loss");
    last += records[25 + i].get_double("loss");
  }
  std::string curve;
  for (const Sample& r : records) curve += std::to_string(r.get_double("loss")) + " ";
  // Fresh noise every step leaves an irreducible flow-matching loss (about 3.8 here from 4.7), so
  // the drop is measured against that floor's neighbourhood rather than zero.
  EXPECT_LT(last, 0.93 * first) << curve;
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(records[i].get_int("step"), i + 1);
    EXPECT_TRUE(std::isfinite(records[i].get_double("loss_video")));
    EXPECT_TRUE(std::isfinite(records[i].get_double("loss_action")));
    EXPECT_TRUE(std::isfinite(records[i].get_double("loss_future_delta")));
    EXPECT_TRUE(std::isfinite(records[i].get_double("loss_semantic")));
  }
}

TEST(TrainStepTest, RecordsCarryTheScheduledLearningRate) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  std::vector<Sample> inputs;
  for (int i = 0; i < 4; ++i) inputs.push_back(make_batch(config, i));
  const auto records = testing::run_stage(
      "TrainStep", params({{"learning_rate", 1e-3}, {"warmup_ratio", 0.5}}), inputs, [] {
        auto options = cpu_settings();
        options.settings.steps = 4;  // total_steps 0: the schedule follows settings.steps
        return options;
      }());
  const train::LrSchedule schedule{1e-3, 0.5, 0.01, 4};
  ASSERT_EQ(records.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(records[i].get_double("lr"), schedule.at(i + 1));
  EXPECT_DOUBLE_EQ(records[1].get_double("lr"), 1e-3);
  EXPECT_DOUBLE_EQ(records[3].get_double("lr"), 1e-5);
}

TEST(TrainStepTest, ResumeReproducesTheUninterruptedLossCurve) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  auto batches = [&](int from, int to) {
    std::vector<Sample> inputs;
    for (int i = from; i <= to; ++i) inputs.push_back(make_batch(config, 100 + i));
    return inputs;
  };
  const auto full = testing::run_stage("TrainStep",
                                       params({{"total_steps", 10},
                                               {"checkpoint_dir", ckpt},
                                               {"save_every", 5},
                                               {"learning_rate", 1e-3}}),
                                       batches(1, 10), cpu_settings());
  ASSERT_EQ(full.size(), 10u);
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/step_5.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/step_10.safetensors"));
  std::ifstream latest(ckpt + "/latest");
  std::string pointer;
  latest >> pointer;
  EXPECT_EQ(pointer, "step_10.safetensors");

  const auto resumed = testing::run_stage(
      "TrainStep",
      params(
          {{"total_steps", 10}, {"resume", ckpt + "/step_5.safetensors"}, {"learning_rate", 1e-3}}),
      batches(6, 10), cpu_settings());
  ASSERT_EQ(resumed.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    const Sample& a = full[5 + i];
    const Sample& b = resumed[i];
    EXPECT_EQ(b.get_int("step"), a.get_int("step"));
    for (const char* name :
         {"loss", "loss_video", "loss_action", "loss_future_delta", "loss_semantic", "lr"}) {
      EXPECT_DOUBLE_EQ(b.get_double(name), a.get_double(name)) << name << " at step " << 6 + i;
    }
  }
}

TEST(TrainStepTest, ResumeFromAnotherPresetIsRefused) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  testing::TempDir dir;
  testing::run_stage("TrainStep", params({{"total_steps", 1}, {"checkpoint_dir", dir.file("c")}}),
                     {make_batch(config, 1)}, cpu_settings());
  nlohmann::json other = tiny_preset();
  other["lambda_video"] = 0.25;
  nlohmann::json p = {{"model", other}, {"total_steps", 1}, {"resume", dir.file("c")}};
  const std::string error = testing::error_of(
      [&] { testing::run_stage("TrainStep", p.dump(), {make_batch(config, 1)}, cpu_settings()); });
  EXPECT_NE(error.find("resume: checkpoint " + dir.file("c") +
                       "/step_1.safetensors was written for model config"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("resume with the same model preset"), std::string::npos);
}

// `weights` starts the model from a file's tensors: with a learning rate and decay of 0 the state
// saved after one step holds exactly the file's values, a training-state file's "model." tensors
// included; a misfit is named, and `weights` with `resume` is refused.
TEST(TrainStepTest, WeightsStartTheModelFromAFileByName) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  testing::TempDir dir;
  testing::run_stage("TrainStep", params({{"total_steps", 1}, {"checkpoint_dir", dir.file("a")}}),
                     {make_batch(config, 1)}, cpu_settings());
  const std::string trained = dir.file("a") + "/step_1.safetensors";
  testing::run_stage("TrainStep",
                     params({{"total_steps", 1},
                             {"seed", 9},
                             {"learning_rate", 0.0},
                             {"weight_decay", 0.0},
                             {"weights", trained},
                             {"weights_prefix", "model."},
                             {"checkpoint_dir", dir.file("b")}}),
                     {make_batch(config, 2)}, cpu_settings());
  const safetensors::Reader want(trained), got(dir.file("b") + "/step_1.safetensors");
  int64_t compared = 0;
  for (const safetensors::TensorInfo& info : want.tensors()) {
    if (info.name.rfind("model.", 0) != 0) continue;
    const safetensors::TensorInfo* other = got.find(info.name);
    ASSERT_NE(other, nullptr) << info.name;
    EXPECT_TRUE(torch::equal(models::read_tensor(got, *other), models::read_tensor(want, info)))
        << info.name;
    ++compared;
  }
  EXPECT_GT(compared, 10);

  EXPECT_EQ(testing::error_of([&] {
              testing::run_stage("TrainStep", params({{"total_steps", 1}, {"weights", trained}}),
                                 {make_batch(config, 1)}, cpu_settings());
            }).rfind(trained + ": the weights do not fit the model: missing ", 0),
            0u);
  EXPECT_EQ(testing::error_of([&] {
              testing::run_stage(
                  "TrainStep",
                  params({{"total_steps", 1}, {"weights", trained}, {"resume", dir.file("a")}}),
                  {make_batch(config, 1)}, cpu_settings());
            }),
            "<test>:/params/weights [TrainStep]: a resumed training state brings its own "
            "weights: set `weights` or `resume`, not both");
  EXPECT_EQ(
      testing::error_of([&] {
        testing::run_stage("TrainStep",
                           params({{"total_steps", 1}, {"weights", dir.file("missing")}}),
                           {make_batch(config, 1)}, cpu_settings());
      }),
      "<test>:/params/weights [TrainStep]: weights file " + dir.file("missing") + ": no such file");
}

TEST(TrainStepTest, LogsInTheReferenceFormat) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  const auto run = run_logged(params({{"total_steps", 4}, {"log_every", 2}}),
                              {make_batch(config, 1), make_batch(config, 2)});
  std::vector<std::string> train_lines;
  for (const auto& line : run.log) {
    if (line.rfind("[step] [train]", 0) == 0) train_lines.push_back(line.substr(7));
  }
  ASSERT_EQ(train_lines.size(), 1u);
  const std::regex format(
      R"(\[train\] epoch=0 step=2/4 loss=\d+\.\d{4} video=\d+\.\d{4} action=\d+\.\d{4} )"
      R"(future_delta=\d+\.\d{4} semantic=\d+\.\d{4} lr=\d\.\d{2}e[-+]\d{2} )"
      R"(speed=\d+\.\d{2} optimizer_step/s, \d+\.\d{2} samples/s eta=\d{2}:\d{2}:\d{2})");
  EXPECT_TRUE(std::regex_match(train_lines[0], format)) << train_lines[0];
}

// A run shorter than log_every still shows its loss: the last step is logged at close.
TEST(TrainStepTest, LogsTheLastStepWhateverLogEvery) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  const auto run =
      run_logged(params({{"total_steps", 3}, {"log_every", 10}}),
                 {make_batch(config, 1), make_batch(config, 2), make_batch(config, 3)});
  std::vector<std::string> train_lines;
  for (const auto& line : run.log) {
    if (line.rfind("[step] [train]", 0) == 0) train_lines.push_back(line.substr(7));
  }
  ASSERT_EQ(train_lines.size(), 1u) << ::testing::PrintToString(run.log);
  char loss[32];
  std::snprintf(loss, sizeof(loss), "%.4f", run.outputs.at(2).get_double("loss"));
  EXPECT_EQ(train_lines[0].rfind("[train] epoch=0 step=3/3 loss=" + std::string(loss) + " ", 0), 0u)
      << train_lines[0];
}

TEST(TrainStepTest, CompiledModeOnCpuRunsEagerAndSaysWhyOnce) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  const auto run = run_logged(params({{"total_steps", 2}, {"mode", "compiled"}}),
                              {make_batch(config, 1), make_batch(config, 2)});
  const std::string expected =
      "[step] TrainStep: mode \"compiled\" needs CUDA graphs and a CUDA device; the training "
      "device is cpu, so the step runs eager.";
  EXPECT_EQ(std::count(run.log.begin(), run.log.end(), expected), 1)
      << ::testing::PrintToString(run.log);
  // The start-up line names the mode that runs, not the one asked for.
  const std::regex startup(
      R"(\[step\] TrainStep: \d+ parameters on cpu, mode eager \("compiled" without CUDA )"
      R"(graphs\), checkpoint_group 3, 2 steps)");
  EXPECT_EQ(std::count_if(run.log.begin(), run.log.end(),
                          [&](const std::string& line) { return std::regex_match(line, startup); }),
            1)
      << ::testing::PrintToString(run.log);
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_TRUE(std::isfinite(run.outputs[1].get_double("loss")));
}

// The runner's loss series, progress line and report take the loss from here, not from a sample
// field of that name.
TEST(TrainStepTest, ReportsEachStepsLossAsTheScalarLoss) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  const auto run =
      run_logged(params({{"total_steps", 2}}), {make_batch(config, 1), make_batch(config, 2)});
  ASSERT_EQ(run.outputs.size(), 2u);
  ASSERT_EQ(run.scalars.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(run.scalars[i].name, "loss");
    EXPECT_EQ(run.scalars[i].value, run.outputs[i].get_double("loss"));
  }
}

// What bench and compile call through the TrainingStep interface: with the state off, neither the
// missing resume file is read nor anything saved, whatever the params say.
TEST(TrainStepTest, DisabledTrainingStateIsNeitherResumedNorSaved) {
  testing::TempDir dir;
  const auto config = models::MoTConfig::from_json(tiny_preset());
  std::unique_ptr<StageBase> base =
      testing::make_stage("TrainStep", params({{"total_steps", 2},
                                               {"checkpoint_dir", dir.file("state")},
                                               {"save_every", 1},
                                               {"resume", dir.file("missing/step_1.pt")}}));
  auto* step = dynamic_cast<stages::TrainingStep*>(base.get());
  ASSERT_NE(step, nullptr);
  step->disable_training_state();
  const Settings settings = cpu_settings().settings;
  Context context("step", "TrainStep", settings, nullptr);
  base->open(context);
  auto& stage = static_cast<Stage&>(*base);
  testing::CollectingEmitter out;
  stage.process(make_batch(config, 1), out);
  stage.process(make_batch(config, 2), out);
  stage.close(out);
  EXPECT_EQ(out.take().size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir.file("state")));
}

TEST(TrainStepTest, VlmContextLongerThanThePadIsAnError) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  EXPECT_ERROR(testing::run_stage(
                   "TrainStep",
                   params({{"total_steps", 1}, {"mode", "compiled"}, {"vlm_context_pad_to", 4}}),
                   {make_batch(config, 1)}, cpu_settings()),
               "VLM context length 6 exceeds vlm_context_pad_to=4: increase it; the context "
               "will not be truncated.");
}

TEST(TrainStepTest, ScheduleNeedsARunLength) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  EXPECT_ERROR(testing::run_stage("TrainStep", params(nlohmann::json::object()),
                                  {make_batch(config, 1)}, cpu_settings()),
               "TrainStep: the learning-rate schedule needs the run length: set "
               "params.total_steps or settings.steps (both are 0)");
}

TEST(TrainStepTest, Fp8IsForTheCompiledStepWithTheFusedKernels) {
  const auto config = models::MoTConfig::from_json(tiny_preset());
  EXPECT_ERROR(testing::run_stage("TrainStep", params({{"total_steps", 1}, {"precision", "fp8"}}),
                                  {make_batch(config, 1)}, cpu_settings()),
               "<test>:/params/precision [TrainStep]: \"fp8\" is the compiled step's: set mode "
               "to \"compiled\", or precision to \"bf16\"");
  EXPECT_ERROR(testing::run_stage("TrainStep",
                                  params({{"total_steps", 1},
                                          {"mode", "compiled"},
                                          {"precision", "fp8"},
                                          {"autocast_bf16", false}}),
                                  {make_batch(config, 1)}, cpu_settings()),
               std::string("<test>:/params/precision [TrainStep]: \"fp8\" casts the bf16 "
                           "activations of autocast: set autocast_bf16 to true") +
                   (models::fp8_linears_built()
                        ? ""
                        : "\n<test>:/params/precision [TrainStep]: \"fp8\" needs the fused "
                          "CUDA kernels (stages/kernels, built where LibTorch has CUDA and nvcc "
                          "is found), and this build has none: set precision to \"bf16\""));
}

models::TrainBatch to_train_batch(const Sample& s, at::Device device) {
  auto f = [&](const char* name) { return s.tensor(name).to(device); };
  return {f("video_latents"),
          f("memory_video_anchor_latents"),
          f("memory_video_recent_latents"),
          f("memory_video_recent_is_pad"),
          f("context"),
          f("context_mask"),
          f("vlm_context"),
          f("vlm_mask"),
          f("action"),
          f("action_is_pad"),
          f("action_dim_is_pad"),
          f("proprio")};
}

// After 5 steps from the same weights on the same batches, the CUDA-graph step and the eager step
// moved the parameters alike: the replayed optimizer advanced its step count and bias correction.
// The same with a memory budget that lets every checkpoint group keep its activations, and with
// that budget uncaptured (cuda_graph off: the compiled step's kernels launched op by op).
TEST(TrainStepCudaTest, CompiledMatchesEagerAfterFiveSteps) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device device(at::kCUDA, 0);
  auto config = models::MoTConfig::from_json(tiny_preset());
  config.activation_checkpoint_group = 1;
  std::vector<std::vector<at::Tensor>> before, after;
  // budget -1: eager; else compiled with that budget, captured or not.
  const std::vector<std::pair<double, bool>> runs = {
      {-1.0, true}, {0.0, true}, {0.9, true}, {0.9, false}};
  for (const auto& [budget, cuda_graph] : runs) {
    const bool compiled = budget >= 0;
    torch::manual_seed(5);
    models::WorldActionModel model(config);
    model->to(device);
    model->train();
    std::vector<at::Tensor> initial;
    for (const auto& p : model->parameters()) initial.push_back(p.detach().clone());
    train::AdamW adamw(model->parameters(), train::AdamWOptions{});
    train::StepOptions options;
    options.memory_budget = std::max(budget, 0.0);
    options.cuda_graph = cuda_graph;
    train::StepRunner runner(model, adamw, device, options, compiled, "");
    EXPECT_EQ(runner.compiled(), compiled);
    at::Generator gen = train::make_noise_generator(device, 9);
    for (int step = 1; step <= 5; ++step) {
      models::TrainBatch batch = to_train_batch(make_batch(config, step), device);
      train::pad_vlm_context(batch, 8);
      runner.step(batch, 1e-3, gen);
    }
    EXPECT_EQ(adamw.step_count(), 5);
    ASSERT_TRUE(runner.last_device_ms().has_value());  // CUDA events around every step
    EXPECT_GT(*runner.last_device_ms(), 0.0);
    if (budget > 0) {
      EXPECT_NE(runner.recompute_note().find("recomputing 0 of "), std::string::npos)
          << runner.recompute_note();
    }
    std::vector<at::Tensor> final_params;
    for (const auto& p : model->parameters()) final_params.push_back(p.detach().clone());
    before.push_back(initial);
    after.push_back(final_params);
  }
  for (size_t run = 1; run < before.size(); ++run) {
    ASSERT_EQ(before[0].size(), before[run].size());
    std::vector<at::Tensor> eager_delta, compiled_delta;
    for (size_t i = 0; i < before[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(before[0][i], before[run][i]));
      eager_delta.push_back((after[0][i] - before[0][i]).flatten());
      compiled_delta.push_back((after[run][i] - before[run][i]).flatten());
    }
    const at::Tensor e = torch::cat(eager_delta), c = torch::cat(compiled_delta);
    const double cosine = (torch::dot(e, c) / (e.norm() * c.norm())).item<double>();
    const double relative = ((e - c).norm() / e.norm()).item<double>();
    EXPECT_GT(cosine, 0.99) << "run " << run;
    EXPECT_LT(relative, 0.1) << "run " << run;  // bf16 autocast: the paths round differently
  }
}

// FP8 products (E4M3 forward, E5M2 input gradients) train the tiny preset as the bf16 ones do:
// the same losses to within FP8's rounding over 5 steps, the parameters moved the same way.
TEST(TrainStepCudaTest, Fp8StepFollowsTheBf16Step) {
  if (!torch::cuda::is_available() || !models::fp8_linears_built()) {
    GTEST_SKIP() << "no CUDA device, or no FP8 kernels in this build";
  }
  const at::Device device(at::kCUDA, 0);
  const auto config = models::MoTConfig::from_json(tiny_preset());
  std::vector<std::vector<double>> losses(2);
  std::vector<at::Tensor> deltas;
  for (const bool fp8 : {false, true}) {
    torch::manual_seed(5);
    models::WorldActionModel model(config);
    model->to(device);
    model->train();
    std::vector<at::Tensor> initial;
    for (const auto& p : model->parameters()) initial.push_back(p.detach().flatten().clone());
    train::AdamW adamw(model->parameters(), train::AdamWOptions{});
    train::StepOptions options;
    options.fp8 = fp8;
    train::StepRunner runner(model, adamw, device, options, /*compiled=*/true, "");
    at::Generator gen = train::make_noise_generator(device, 9);
    for (int step = 1; step <= 5; ++step) {
      models::TrainBatch batch = to_train_batch(make_batch(config, step), device);
      train::pad_vlm_context(batch, 8);
      losses[fp8].push_back(runner.step(batch, 1e-3, gen).total);
    }
    std::vector<at::Tensor> moved;
    size_t i = 0;
    for (const auto& p : model->parameters()) moved.push_back(p.detach().flatten() - initial[i++]);
    deltas.push_back(torch::cat(moved));
  }
  for (size_t step = 0; step < losses[0].size(); ++step) {
    EXPECT_TRUE(std::isfinite(losses[1][step]));
    EXPECT_NEAR(losses[1][step], losses[0][step], 0.03 * losses[0][step]) << "step " << step + 1;
  }
  const double cosine =
      (torch::dot(deltas[0], deltas[1]) / (deltas[0].norm() * deltas[1].norm())).item<double>();
  EXPECT_GT(cosine, 0.9);
}

}  // namespace
}  // namespace wam
