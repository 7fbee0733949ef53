// WorldActionModel on the tiny preset: the semantic-alignment term, its sigma gate, activation
// checkpointing (gradients as without it) and the checkpoint groups around captured layers; the
// compiled step's attention biases.
#include "models/world_model.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "testing/expect_error.h"
#include "testing/random_train_batch.h"
#include "train/step_runner.h"
#include "wam/error.h"

namespace wam {
namespace {

nlohmann::json preset_json(const std::string& name) {
  std::ifstream in(std::string(WAM_SOURCE_DIR) + "/configs/model/" + name + ".json");
  return nlohmann::json::parse(in);
}

// The tiny preset on 8x8 latents (16 tokens per frame).
models::MoTConfig tiny_config() {
  nlohmann::json preset = preset_json("tiny");
  preset["future_delta_tokens"] = 16;
  return models::MoTConfig::from_json(preset);
}

// Flow noise with the given video sigmas (one per sample), which decide the semantic gate.
models::FlowNoise noise_with_video_sigma(const models::TrainBatch& batch,
                                         const models::MoTConfig& c,
                                         const std::vector<float>& video_sigma) {
  at::Generator gen = train::make_noise_generator(at::Device(at::kCPU), 3);
  models::FlowNoise noise = models::sample_flow_noise(batch, c, gen);
  noise.video_sigma = torch::tensor(video_sigma);
  return noise;
}

models::WorldActionModel make_model(const models::MoTConfig& c) {
  torch::manual_seed(5);
  models::WorldActionModel model(c);
  model->train();
  return model;
}

// The term written out: mean over tokens of 1 - cos(student, teacher) per sample, averaged over
// the samples with sigma <= max_sigma.
double hand_written_semantic(const at::Tensor& student, const at::Tensor& teacher,
                             const std::vector<float>& sigma, double max_sigma) {
  double sum = 0;
  int qualifying = 0;
  for (int64_t b = 0; b < student.size(0); ++b) {
    if (sigma[b] > max_sigma) continue;
    double sample = 0;
    for (int64_t n = 0; n < student.size(1); ++n) {
      const at::Tensor s = student[b][n].to(torch::kDouble), t = teacher[b][n].to(torch::kDouble);
      sample +=
          1 - (s * t).sum().item<double>() / (s.norm().item<double>() * t.norm().item<double>());
    }
    sum += sample / static_cast<double>(student.size(1));
    ++qualifying;
  }
  return qualifying == 0 ? 0 : sum / qualifying;
}

TEST(WorldModelTest, SemanticTermIsTheGatedCosineAlignmentOfCapturedFeatures) {
  const models::MoTConfig c = tiny_config();
  models::WorldActionModel model = make_model(c);
  const models::TrainBatch batch = testing::random_train_batch(c, 3);
  const std::vector<float> sigma = {0.2f, 0.9f, 0.5f};  // 0.5 is at the gate and qualifies
  const models::LossTerms terms = model->loss(batch, noise_with_video_sigma(batch, c, sigma));

  ASSERT_TRUE(terms.semantic_student.defined());
  EXPECT_EQ(terms.semantic_student.sizes(), (std::vector<int64_t>{3, 16, c.video_hidden}));
  EXPECT_EQ(terms.semantic_teacher.sizes(), (std::vector<int64_t>{3, 16, c.video_hidden}));
  EXPECT_TRUE(terms.semantic_student.requires_grad());
  EXPECT_FALSE(terms.semantic_teacher.requires_grad());

  const double expected = hand_written_semantic(
      terms.semantic_student.detach(), terms.semantic_teacher, sigma, c.semantic_max_sigma);
  EXPECT_GT(expected, 0.0);
  EXPECT_NEAR(terms.semantic.item<double>(), expected, 1e-5);
  EXPECT_NEAR(terms.total.item<double>(),
              0.5 * terms.video.item<double>() + 1.0 * terms.action.item<double>() +
                  0.5 * terms.future_delta.item<double>() + 0.1 * expected,
              1e-5);
}

TEST(WorldModelTest, SemanticTermIsZeroWithoutNaNWhenNoSampleQualifies) {
  const models::MoTConfig c = tiny_config();
  models::WorldActionModel model = make_model(c);
  const models::TrainBatch batch = testing::random_train_batch(c, 2);
  const models::LossTerms terms =
      model->loss(batch, noise_with_video_sigma(batch, c, {0.51f, 1.0f}));
  EXPECT_EQ(terms.semantic.item<double>(), 0.0);
  EXPECT_NEAR(terms.total.item<double>(),
              0.5 * terms.video.item<double>() + terms.action.item<double>() +
                  0.5 * terms.future_delta.item<double>(),
              1e-6);
  terms.total.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
  }
}

// The teacher is a detached target: the term alone sends gradient into the student layer's video
// expert (layer 0; video tokens never attend to action tokens, so its action expert gets none) and
// none into the teacher layer (layer 1, the last of the tiny preset).
TEST(WorldModelTest, SemanticTermTrainsTheStudentLayersOnly) {
  const models::MoTConfig c = tiny_config();
  ASSERT_EQ(c.semantic_student_layer, 0);
  ASSERT_EQ(c.semantic_teacher_layer, 1);
  models::WorldActionModel model = make_model(c);
  const models::TrainBatch batch = testing::random_train_batch(c, 2);
  model->loss(batch, noise_with_video_sigma(batch, c, {0.1f, 0.3f})).semantic.backward();
  int student_params = 0, teacher_params = 0;
  for (const auto& p : model->named_parameters()) {
    const at::Tensor& grad = p.value().grad();
    if (p.key().rfind("layers.0.video.", 0) == 0) {
      ++student_params;
      ASSERT_TRUE(grad.defined()) << p.key();
    } else if (p.key().rfind("layers.1.", 0) == 0) {
      ++teacher_params;
      EXPECT_TRUE(!grad.defined() || grad.abs().max().item<double>() == 0.0) << p.key();
    }
  }
  EXPECT_GT(student_params, 0);
  EXPECT_GT(teacher_params, 0);
  EXPECT_GT(model->named_parameters()["layers.0.video.q.weight"].grad().abs().max().item<double>(),
            0.0);
}

// Same loss and gradients with no checkpointing, per-layer checkpointing, groups of 3 split after
// the captured layers, on four layers with captures at 1 and 2 (groups [0,2) [2,3) [3,4)), and
// per-layer groups of which only the first 2 or none are recomputed (the memory budget's choice).
TEST(WorldModelTest, CheckpointingKeepsLossAndGradients) {
  models::MoTConfig c = tiny_config();
  c.num_layers = 4;
  c.semantic_student_layer = 1;
  c.semantic_teacher_layer = 2;
  const models::TrainBatch batch = testing::random_train_batch(c, 2);
  std::vector<double> losses;
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> grads;
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, -1}, {1, -1}, {3, -1}, {1, 2}, {1, 0}};
  for (const auto& [group, recomputed] : runs) {
    c.activation_checkpoint_group = group;
    models::WorldActionModel model = make_model(c);
    model->set_recomputed_groups(recomputed);
    const models::LossTerms terms =
        model->loss(batch, noise_with_video_sigma(batch, c, {0.3f, 0.7f}));
    EXPECT_GT(terms.semantic.item<double>(), 0.0);
    terms.total.backward();
    losses.push_back(terms.total.item<double>());
    grads.emplace_back();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key() << " with checkpoint_group " << group;
      grads.back().emplace_back(p.key(), p.value().grad().clone());
    }
  }
  for (size_t run = 1; run < grads.size(); ++run) {
    EXPECT_NEAR(losses[run], losses[0], 1e-6);
    ASSERT_EQ(grads[run].size(), grads[0].size());
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_TRUE(torch::allclose(grads[run][i].second, grads[0][i].second, 1e-4, 1e-6))
          << grads[0][i].first << " run " << run << ": max difference "
          << (grads[run][i].second - grads[0][i].second).abs().max().item<double>();
    }
  }
}

TEST(WorldModelTest, CheckpointGroupsSplitAfterCapturedLayers) {
  using Starts = std::vector<int64_t>;
  // The reference: 30 layers in groups of 3, captures at 8 and 20, so groups start at 9 and 21.
  const models::MoTConfig paper = models::MoTConfig::from_json(preset_json("paper"));
  EXPECT_EQ(paper.captured_layers(), (Starts{8, 20}));
  EXPECT_EQ(models::activation_checkpoint_group_starts(30, 3, paper.captured_layers()),
            (Starts{0, 3, 6, 9, 12, 15, 18, 21, 24, 27}));
  // Off the grid (the base preset's 5 and 13), the splits are added to it.
  const models::MoTConfig base = models::MoTConfig::from_json(preset_json("base"));
  EXPECT_EQ(models::activation_checkpoint_group_starts(20, 3, base.captured_layers()),
            (Starts{0, 3, 6, 9, 12, 14, 15, 18}));
  // No checkpointing still runs in pieces that end at the captured layers.
  EXPECT_EQ(models::activation_checkpoint_group_starts(20, 0, {5, 13}), (Starts{0, 6, 14}));
  EXPECT_EQ(models::activation_checkpoint_group_starts(5, 1, {1, 3}), (Starts{0, 1, 2, 3, 4}));
  // A capture at the last layer needs no split.
  EXPECT_EQ(models::activation_checkpoint_group_starts(2, 3, {0, 1}), (Starts{0, 1}));
  EXPECT_EQ(models::activation_checkpoint_group_starts(9, 3, {}), (Starts{0, 3, 6}));
  models::MoTConfig small = tiny_config();
  small.num_layers = 4;
  small.semantic_student_layer = 1;
  small.semantic_teacher_layer = 2;
  small.activation_checkpoint_group = 3;
  EXPECT_EQ(make_model(small)->checkpoint_group_layers(), (Starts{2, 1, 1}));
}

// The bias of a mask: 0 where a key may be attended, -inf elsewhere, rows padded to 16 elements.
// A key mask (one row for all queries) stays one row, expanded over the queries with stride 0.
TEST(WorldModelTest, AttentionBiasOfAKeyMaskIsOneRowExpandedOverTheQueries) {
  const at::Tensor keys_allowed =
      torch::tensor({1, 1, 0, 1, 0, 1, 1, 1, 1, 1}, at::kBool).view({2, 1, 1, 5});
  const at::Tensor bias = models::attention_bias(keys_allowed, 7, at::kFloat);
  EXPECT_EQ(bias.sizes(), (std::vector<int64_t>{2, 1, 7, 5}));
  EXPECT_EQ(bias.strides(), (std::vector<int64_t>{16, 16, 0, 1}));
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor expected =
      torch::tensor({0.f, 0.f, -inf, 0.f, -inf, 0.f, 0.f, 0.f, 0.f, 0.f}).view({2, 1, 1, 5});
  EXPECT_TRUE(at::equal(bias, expected.expand({2, 1, 7, 5})));

  // A mask with a row per query keeps them, each padded.
  at::Tensor rows_allowed = keys_allowed.expand({2, 1, 7, 5}).clone();
  rows_allowed.index_put_({0, 0, 3, 0}, false);
  const at::Tensor row_bias = models::attention_bias(rows_allowed, 7, at::kFloat);
  EXPECT_EQ(row_bias.strides(), (std::vector<int64_t>{7 * 16, 7 * 16, 16, 1}));
  at::Tensor expected_rows = expected.expand({2, 1, 7, 5}).clone();
  expected_rows.index_put_({0, 0, 3, 0}, -inf);
  EXPECT_TRUE(at::equal(row_bias, expected_rows));
}

TEST(WorldModelTest, SemanticConfigParsesAndIsChecked) {
  for (const char* name : {"tiny", "small", "base", "paper"}) {
    const models::MoTConfig c = models::MoTConfig::from_file(std::string(WAM_SOURCE_DIR) +
                                                             "/configs/model/" + name + ".json");
    EXPECT_TRUE(c.semantic_alignment) << name;
    EXPECT_LT(c.semantic_student_layer, c.semantic_teacher_layer) << name;
    EXPECT_LT(c.semantic_teacher_layer, c.num_layers) << name;
    EXPECT_DOUBLE_EQ(c.lambda_semantic, 0.1) << name;
    EXPECT_DOUBLE_EQ(c.semantic_max_sigma, 0.5) << name;
    EXPECT_EQ(models::MoTConfig::from_json(c.to_json()).to_json(), c.to_json()) << name;
  }
  auto error = [](nlohmann::json j) {
    return testing::error_of([&] { models::MoTConfig::from_json(j); });
  };
  nlohmann::json tiny = preset_json("tiny");
  tiny["semantic_teacher_layer"] = 2;
  EXPECT_EQ(error(tiny),
            "model config key \"semantic_teacher_layer\": must name one of the 2 layers (0-based), "
            "got 2");
  tiny["semantic_teacher_layer"] = 1;
  tiny["semantic_student_layer"] = 1;
  EXPECT_EQ(
      error(tiny),
      "model config key \"semantic_student_layer\": must be below semantic_teacher_layer (1), "
      "got 1");
  tiny["semantic_alignment"] = "yes";
  EXPECT_EQ(error(tiny), "model config key \"semantic_alignment\": expected bool, got string");
  tiny["semantic_alignment"] = true;
  tiny["head_dim"] = 9;
  tiny["num_layerz"] = 2;
  EXPECT_EQ(error(tiny),
            "model config key \"num_layerz\": unknown param \"num_layerz\"; did you mean "
            "\"num_layers\"? (allowed: latent_channels, video_hidden, video_ffn, action_hidden, "
            "action_ffn, num_layers, num_heads, head_dim, text_dim, vlm_dim, freq_dim, action_dim, "
            "proprio_dim, future_delta_tokens, future_latent_frames, video_shift, action_shift, "
            "lambda_video, lambda_action, lambda_future_delta, semantic_alignment, "
            "semantic_student_layer, semantic_teacher_layer, semantic_max_sigma, lambda_semantic, "
            "checkpoint_group, notes)");
  tiny.erase("num_layerz");
  EXPECT_EQ(error(tiny),
            "model config key \"head_dim\": must be even and >= 6 for 3-D RoPE over (frame, h, "
            "w), got 9; model config key \"semantic_student_layer\": must be below "
            "semantic_teacher_layer (1), got 1");
  tiny["head_dim"] = 16;
  // Off, the layers are not checked, nothing is captured and the term is a zero.
  tiny["semantic_alignment"] = false;
  tiny["future_delta_tokens"] = 16;
  const models::MoTConfig off = models::MoTConfig::from_json(tiny);
  EXPECT_TRUE(off.captured_layers().empty());
  models::WorldActionModel model = make_model(off);
  const models::TrainBatch batch = testing::random_train_batch(off, 2);
  const models::LossTerms terms =
      model->loss(batch, noise_with_video_sigma(batch, off, {0.1f, 0.2f}));
  EXPECT_EQ(terms.semantic.item<double>(), 0.0);
  EXPECT_FALSE(terms.semantic_student.defined());
}

}  // namespace
}  // namespace wam
