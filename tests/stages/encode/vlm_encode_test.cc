#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>

#include "models/vlm.h"
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/tensor.h"

namespace wam::testing {
namespace {

constexpr const char* kTiny =
    R"({"width": 32, "heads": 4, "layers": 1, "vocab_size": 1024, "max_pixels": 4096,
        "device": "cpu")";

std::string params(const std::string& extra = "") {
  return std::string(kTiny) + (extra.empty() ? "" : ", " + extra) + "}";
}

Sample vlm_batch(const std::vector<std::string>& tasks, int64_t views, int64_t height,
                 int64_t width, uint64_t seed = 3) {
  torch::manual_seed(seed);
  Sample batch("batch:0");
  const auto rows = static_cast<int64_t>(tasks.size());
  batch.set_tensor("vlm_current_images",
                   torch::randint(0, 256, {rows, views, 3, height, width}).to(torch::kByte));
  batch.set("task", nlohmann::json(tasks));
  return batch;
}

int64_t prompt_tokens(const std::string& task, const std::vector<std::string>& views) {
  return static_cast<int64_t>(
      models::tokenize_words(models::format_vlm_prompt(task, views), 1024).size());
}

StageRun run_with_counters(const std::string& params_json, const std::vector<Sample>& batches) {
  return run_stage_counted("VlmEncode", params_json, batches);
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("wam_vlm_test_" + name)).string();
}

TEST(VlmEncodeTest, FormatsTheReferenceChatPrompt) {
  EXPECT_EQ(models::format_vlm_prompt("stack the bowls", {"main camera", "wrist camera"}),
            "Task: stack the bowls\n"
            "Observations:\n"
            "- Frame 1: Current observation; views=main camera, wrist camera.\n"
            "Input Images: 2; ordered by temporal frame, then camera view.\n"
            "Output: Given the current multi-camera observation and task instruction, represent "
            "the task-relevant visual state needed to choose the next action.");
}

TEST(VlmEncodeTest, TokenizerIsDeterministicWordLevel) {
  const auto ids = models::tokenize_words("Put it, put it\nin", 1024);
  // begin, Put, it, ",", put, it, "\n", in, end
  ASSERT_EQ(ids.size(), 9u);
  EXPECT_EQ(ids.front(), models::kBeginToken);
  EXPECT_EQ(ids.back(), models::kEndToken);
  EXPECT_EQ(ids[2], ids[5]);  // "it" twice
  EXPECT_NE(ids[1], ids[4]);  // case matters
  for (size_t i = 1; i + 1 < ids.size(); ++i) {
    EXPECT_GE(ids[i], models::kFirstWordToken);
    EXPECT_LT(ids[i], 1024);
  }
  EXPECT_EQ(ids, models::tokenize_words("Put it, put it\nin", 1024));
}

TEST(VlmEncodeTest, ResizesToMaxPixelsKeepingAspectOnPatchMultiples) {
  EXPECT_EQ(models::fit_image_size(256, 256, 65536, 16), (std::pair<int64_t, int64_t>{256, 256}));
  EXPECT_EQ(models::fit_image_size(480, 640, 65536, 16), (std::pair<int64_t, int64_t>{208, 288}));
  EXPECT_EQ(models::fit_image_size(100, 60, 65536, 16), (std::pair<int64_t, int64_t>{96, 64}));
}

TEST(VlmEncodeTest, BuiltinGivesImagePlusPaddedPromptTokens) {
  const std::vector<std::string> tasks = {"pick up the cup",
                                          "open the drawer and put the red block inside"};
  const std::vector<std::string> views = {"camera 1", "camera 2", "camera 3"};
  // 96 x 128 with max_pixels 4096 -> 48 x 64: a 3 x 4 patch grid, 12 tokens per camera.
  const Sample out = run_stage("VlmEncode", params(), {vlm_batch(tasks, 3, 96, 128)}).at(0);
  const int64_t image_tokens = 3 * 12;
  const int64_t short_prompt = prompt_tokens(tasks[0], views);
  const int64_t long_prompt = prompt_tokens(tasks[1], views);
  ASSERT_LT(short_prompt, long_prompt);
  const at::Tensor& context = out.tensor("vlm_context");
  const at::Tensor& mask = out.tensor("vlm_mask");
  EXPECT_EQ(context.sizes(), (std::vector<int64_t>{2, image_tokens + long_prompt, 32}));
  EXPECT_EQ(mask.scalar_type(), torch::kBool);
  EXPECT_TRUE(torch::equal(
      mask.sum(1), torch::tensor({image_tokens + short_prompt, image_tokens + long_prompt})));
  EXPECT_TRUE(mask[0].narrow(0, 0, image_tokens + short_prompt).all().item<bool>());
  EXPECT_FALSE(mask[0]
                   .narrow(0, image_tokens + short_prompt, long_prompt - short_prompt)
                   .any()
                   .item<bool>());
  // Padding rows are zero, real rows are not.
  EXPECT_EQ(context[0].narrow(0, image_tokens + short_prompt, 1).abs().sum().item<float>(), 0.0f);
  EXPECT_GT(context.abs().sum(-1).masked_select(mask).min().item<float>(), 0.0f);
  EXPECT_FALSE(context.requires_grad());
}

// With device "auto" the model follows settings.device, also on a machine with CUDA.
TEST(VlmEncodeTest, SettingsDeviceCpuKeepsEveryOutputTensorOnTheCpu) {
  HarnessOptions options;
  options.settings.device = "cpu";
  const auto out =
      run_stage("VlmEncode", R"({"width": 32, "heads": 4, "layers": 1, "vocab_size": 1024})",
                {vlm_batch({"wipe the table"}, 2, 32, 48)}, options);
  ASSERT_EQ(out.size(), 1u);
  int tensors = 0;
  for (const auto& field : out[0].fields()) {
    const std::string& name = field.first;
    if (out[0].type(name) != FieldType::kTensor) continue;
    ++tensors;
    EXPECT_TRUE(out[0].tensor(name).device().is_cpu()) << name;
  }
  EXPECT_EQ(tensors, 3);  // vlm_current_images, vlm_context, vlm_mask
  // dtype "auto" follows the device: float32 on the CPU.
  EXPECT_EQ(out[0].tensor("vlm_context").scalar_type(), torch::kFloat);
}

TEST(VlmEncodeTest, SameSeedSameContextOtherSeedOthers) {
  const Sample batch = vlm_batch({"wipe the table"}, 2, 32, 48);
  const at::Tensor a = run_stage("VlmEncode", params(), {batch}).at(0).tensor("vlm_context");
  const at::Tensor b = run_stage("VlmEncode", params(), {batch}).at(0).tensor("vlm_context");
  const at::Tensor c =
      run_stage("VlmEncode", params(R"("seed": 9)"), {batch}).at(0).tensor("vlm_context");
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::allclose(a, c));
}

TEST(VlmEncodeTest, MetadataReuseHitsOnRepeatsAndChangesNothing) {
  const std::vector<Sample> batches = {
      vlm_batch({"pick up the cup", "stack the bowls"}, 2, 32, 48, 1),
      vlm_batch({"stack the bowls", "pick up the cup"}, 2, 32, 48, 2),
      vlm_batch({"pick up the cup", "wipe the table"}, 2, 32, 48, 3)};
  const StageRun reused = run_with_counters(params(R"("reuse_metadata": true)"), batches);
  EXPECT_EQ(reused.counters.at("prompt_cache_misses"), 3);  // three distinct tasks
  EXPECT_EQ(reused.counters.at("prompt_cache_hits"), 3);
  EXPECT_EQ(reused.counters.at("vision_metadata_cache_misses"), 1);  // one image grid
  EXPECT_EQ(reused.counters.at("vision_metadata_cache_hits"), 2);

  const StageRun baseline = run_with_counters(params(), batches);
  EXPECT_TRUE(baseline.counters.empty());
  ASSERT_EQ(reused.outputs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(torch::equal(reused.outputs[i].tensor("vlm_context"),
                             baseline.outputs[i].tensor("vlm_context")));
    EXPECT_TRUE(
        torch::equal(reused.outputs[i].tensor("vlm_mask"), baseline.outputs[i].tensor("vlm_mask")));
  }
}

TEST(VlmEncodeTest, ViewNamesMustMatchTheCameras) {
  EXPECT_ERROR(run_stage("VlmEncode", params(R"("view_names": ["main camera"])"),
                         {vlm_batch({"wipe"}, 2, 32, 32)}),
               "VlmEncode: param view_names has 1 names but vlm_current_images has 2 cameras; "
               "give one name per camera, in order");
}

// forward(images, token_ids): per image its mean colour (tiled to width 6), then per token its id
// / 100 (tiled): [B, V + L, 6].
const char* kMeanColourVlm = R"(
def forward(self, images, token_ids):
    b = token_ids.size(0)
    colours = images.mean([2, 3]).reshape([b, -1, 3]).repeat([1, 1, 2]) * self.scale
    words = token_ids.float().unsqueeze(-1).repeat([1, 1, 6]) / 100.0
    return torch.cat([colours, words], 1)
)";

TEST(VlmEncodeTest, TorchScriptModelLoadsAndMatchesItsReference) {
  torch::jit::Module module("MeanColourVlm");
  module.register_parameter("scale", torch::tensor(2.0), false);
  module.define(kMeanColourVlm);
  const std::string path = temp_file("mean_colour.pt");
  module.save(path);

  const std::vector<std::string> tasks = {"pick", "open the drawer"};
  const Sample input = vlm_batch(tasks, 2, 32, 32);  // 32 x 32: no resize
  const at::Tensor frames = input.tensor("vlm_current_images").to(torch::kFloat) / 255.0;
  const Sample out =
      run_stage(
          "VlmEncode",
          R"({"encoder": "torchscript", "width": 6, "device": "cpu", "path": ")" + path + R"("})",
          {input})
          .at(0);

  const std::vector<std::string> views = {"camera 1", "camera 2"};
  const auto ids0 = models::tokenize_words(models::format_vlm_prompt(tasks[0], views), 32768);
  const auto ids1 = models::tokenize_words(models::format_vlm_prompt(tasks[1], views), 32768);
  const auto longest = static_cast<int64_t>(std::max(ids0.size(), ids1.size()));
  at::Tensor token_ids = torch::zeros({2, longest}, torch::kLong);
  token_ids[0].narrow(0, 0, static_cast<int64_t>(ids0.size())).copy_(torch::tensor(ids0));
  token_ids[1].narrow(0, 0, static_cast<int64_t>(ids1.size())).copy_(torch::tensor(ids1));
  const at::Tensor expected =
      torch::cat({frames.mean({3, 4}).repeat({1, 1, 2}) * 2.0,
                  token_ids.to(torch::kFloat).unsqueeze(-1).repeat({1, 1, 6}) / 100.0},
                 1);
  EXPECT_EQ(out.tensor("vlm_context").sizes(), (std::vector<int64_t>{2, 2 + longest, 6}));
  EXPECT_TRUE(torch::allclose(out.tensor("vlm_context"), expected, 1e-5, 1e-6));
  EXPECT_TRUE(torch::equal(out.tensor("vlm_mask"),
                           torch::cat({torch::ones({2, 2}, torch::kBool), token_ids != 0}, 1)));
  std::filesystem::remove(path);
}

TEST(VlmEncodeTest, WrongWidthTorchScriptModelIsRejectedAtOpen) {
  torch::jit::Module module("MeanColourVlm");
  module.register_parameter("scale", torch::tensor(2.0), false);
  module.define(kMeanColourVlm);
  const std::string path = temp_file("width6.pt");
  module.save(path);
  EXPECT_ERROR(
      SteppedStage stage("VlmEncode",
                         R"({"encoder": "torchscript", "width": 5, "path": ")" + path + R"("})"),
      "TorchScript VLM " + path +
          ": for images [2, 3, 112, 112] and token_ids [1, 8] expected hidden states "
          "[B, S >= L, width] = [1, S >= 8, 5], got [1, 10, 6]; export a module whose "
          "forward(images, token_ids) returns the last hidden states (image tokens "
          "first, then one row per token id) and set param width");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace wam::testing
