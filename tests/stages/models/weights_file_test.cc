// Tensors to and from safetensors files: weights loaded into a module by name (with every problem
// named), TrainStep's training-state files in that format, and the earlier LibTorch-archive
// format still resuming.
#include "models/weights_file.h"

#include <gtest/gtest.h>

#include <fstream>

#include "testing/expect_error.h"
#include "testing/temp_dir.h"
#include "train/training_state.h"
#include "wam/error.h"

namespace wam {
namespace {

struct TwoLayers : torch::nn::Module {
  TwoLayers(int64_t in, int64_t hidden) {
    first = register_module("first", torch::nn::Linear(in, hidden));
    second = register_module("second", torch::nn::Linear(hidden, 2));
    register_buffer("counts", torch::arange(3, torch::kLong));
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
};

std::vector<std::pair<std::string, at::Tensor>> named_tensors(torch::nn::Module& module,
                                                              const std::string& prefix = "") {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : module.named_parameters())
    tensors.emplace_back(prefix + item.key(), item.value());
  for (const auto& item : module.named_buffers())
    tensors.emplace_back(prefix + item.key(), item.value());
  return tensors;
}

TEST(WeightsFileTest, AModuleLoadsWhatAnotherSavedBitForBit) {
  testing::TempDir dir;
  torch::manual_seed(1);
  TwoLayers saved(4, 3);
  const std::string path = dir.file("w.safetensors");
  models::save_safetensors(path, named_tensors(saved, "net."), {{"note", "test"}});
  torch::manual_seed(2);
  TwoLayers loaded(4, 3);
  loaded.to(at::kDouble);  // converted on load
  ASSERT_FALSE(torch::equal(loaded.first->weight.to(at::kFloat), saved.first->weight));
  models::load_module_weights(loaded, path, "net.");
  EXPECT_TRUE(torch::equal(loaded.first->weight.to(at::kFloat), saved.first->weight));
  EXPECT_TRUE(torch::equal(loaded.second->bias.to(at::kFloat), saved.second->bias));
  EXPECT_EQ(loaded.first->weight.scalar_type(), at::kDouble);
  const safetensors::Reader reader(path);
  EXPECT_EQ(reader.find("net.counts")->dtype, safetensors::DType::kI64);
  EXPECT_TRUE(torch::equal(models::read_tensor(reader, *reader.find("net.counts")),
                           torch::arange(3, torch::kLong)));
}

TEST(WeightsFileTest, EveryMisfitIsNamedInOneError) {
  testing::TempDir dir;
  TwoLayers small(4, 3);
  auto tensors = named_tensors(small);
  tensors.erase(tensors.begin() + 1);                       // first.bias missing
  tensors.emplace_back("extra.weight", torch::zeros({2}));  // unexpected
  tensors[0].second = torch::zeros({3, 5});                 // first.weight mis-shaped
  const std::string path = dir.file("bad.safetensors");
  models::save_safetensors(path, tensors, {});
  TwoLayers model(4, 3);
  EXPECT_EQ(testing::error_of([&] { models::load_module_weights(model, path); }),
            path +
                ": the weights do not fit the model: missing 1: first.bias; unexpected 1: "
                "extra.weight; mis-shaped 1: first.weight (file [3, 5], model [3, 4])");
}

// The model part of a training-state file is published weights: "model.<name>" tensors a fresh
// model loads; the earlier LibTorch-archive format (step_<N>.pt) still resumes.
TEST(WeightsFileTest, TrainingStateFilesHoldTheModelByName) {
  testing::TempDir dir;
  std::ifstream in(std::string(WAM_SOURCE_DIR) + "/configs/model/tiny.json");
  const models::MoTConfig config = models::MoTConfig::from_json(nlohmann::json::parse(in));
  torch::manual_seed(3);
  models::WorldActionModel model(config);
  train::AdamW optimizer(model->parameters(), train::AdamWOptions{});
  train::TrainProgress progress;
  progress.step = 7;
  progress.noise_rng_state = torch::arange(16, torch::kByte);
  const std::string path =
      train::save_training_state(dir.file("state"), model, optimizer, progress);
  EXPECT_EQ(path, dir.file("state") + "/step_7.safetensors");
  const safetensors::Reader reader(path);
  EXPECT_EQ(reader.metadata().at("format"), "wam-pipeline training state 1");
  ASSERT_NE(reader.find("model.patch_embed.weight"), nullptr);
  ASSERT_NE(reader.find("optimizer.exp_avg.patch_embed.weight"), nullptr);

  torch::manual_seed(4);
  models::WorldActionModel fresh(config);
  models::load_module_weights(*fresh, path, "model.");
  const auto expected = model->named_parameters();
  const auto got = fresh->named_parameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(expected[i].value(), got[i].value())) << expected[i].key();
  }

  // The same state written as the earlier format wrote it, then resumed.
  torch::serialize::OutputArchive archive;
  archive.write("model_config", c10::IValue(config.to_json().dump()));
  std::string parameter_names, buffer_names;
  for (const auto& item : model->named_parameters()) parameter_names += item.key() + "\n";
  for (const auto& item : model->named_buffers()) buffer_names += item.key() + "\n";
  archive.write("parameter_names", c10::IValue(parameter_names));
  archive.write("buffer_names", c10::IValue(buffer_names));
  for (size_t i = 0; i < expected.size(); ++i) {
    archive.write("parameter_" + std::to_string(i), expected[i].value().detach());
    archive.write("exp_avg_" + std::to_string(i), optimizer.exp_avg()[i] + 1);
    archive.write("exp_avg_sq_" + std::to_string(i), optimizer.exp_avg_sq()[i]);
  }
  const auto buffers = model->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    archive.write("buffer_" + std::to_string(i), buffers[i].value(), /*is_buffer=*/true);
  }
  archive.write("optimizer_step", torch::tensor(3.0f));
  archive.write("step", torch::tensor(int64_t{3}));
  archive.write("noise_rng_state", torch::arange(8, torch::kByte));
  const std::string legacy = dir.file("step_3.pt");
  archive.save_to(legacy);
  torch::manual_seed(5);
  models::WorldActionModel resumed(config);
  train::AdamW resumed_optimizer(resumed->parameters(), train::AdamWOptions{});
  const train::TrainProgress back = train::load_training_state(legacy, resumed, resumed_optimizer);
  EXPECT_EQ(back.step, 3);
  EXPECT_EQ(resumed_optimizer.step_count(), 3);
  EXPECT_TRUE(torch::equal(resumed->named_parameters()[0].value(), expected[0].value()));
  EXPECT_TRUE(torch::equal(resumed_optimizer.exp_avg()[0], optimizer.exp_avg()[0] + 1));
}

}  // namespace
}  // namespace wam
