#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>

#include "common/io/sha256.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "models/text_encoder.h"
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/host_memory.h"
#include "wam/tensor.h"

namespace wam::testing {
namespace {
namespace fs = std::filesystem;

class TextEmbedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("wam_text_embed_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    params_.cache = (dir_ / "text_embed" / "tiny.h5").string();
    params_.text_dim = 16;
    params_.width = 16;
    params_.heads = 2;
    params_.layers = 1;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string stage_params(const std::string& extra = "") const {
    return R"({"cache": ")" + params_.cache +
           R"(", "text_dim": 16, "width": 16, "heads": 2, "layers": 1)" +
           (extra.empty() ? "" : ", " + extra) + "}";
  }

  static Sample prompt_batch(const std::vector<std::string>& prompts) {
    Sample batch("batch:0");
    batch.set("prompt", nlohmann::json(prompts));
    return batch;
  }

  std::string error_of(const std::string& params_json, const std::vector<std::string>& prompts) {
    return testing::error_of([&] { run_stage("TextEmbed", params_json, {prompt_batch(prompts)}); });
  }

  fs::path dir_;
  models::TextCacheParams params_;
};

TEST_F(TextEmbedTest, Sha256AndBytesTokensAreTheDocumentedOnes) {
  EXPECT_EQ(sha256_hex("abc"),  // the cache keys (common/sha256.h)
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const at::Tensor ids = models::text_byte_tokens({"ab", std::string(200, 'x')});
  EXPECT_EQ(ids.sizes(), (std::vector<int64_t>{2, 128}));
  EXPECT_TRUE(
      torch::equal(ids[0].narrow(0, 0, 4), torch::tensor({'a' + 2, 'b' + 2, 1, 0}, torch::kLong)));
  EXPECT_EQ(ids[0].count_nonzero().item<int64_t>(), 3);
  EXPECT_EQ(ids[1][127].item<int64_t>(), 1);  // truncated, the end token kept
  EXPECT_EQ(data::instruction_prompt("stack the bowls"),
            "A video recorded from a robot's point of view executing the following instruction: "
            "stack the bowls");
}

TEST_F(TextEmbedTest, BuildsTheCacheAndLooksPromptsUp) {
  std::vector<std::string> lines;
  const auto first = models::build_text_cache(params_, {"open the drawer", "wipe", "wipe"},
                                              [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(first.prompts, 2);
  EXPECT_EQ(first.encoded, 2);
  EXPECT_EQ(first.kept, 0);
  EXPECT_EQ(lines, (std::vector<std::string>{"encoded 2/2 prompts"}));
  EXPECT_TRUE(fs::is_regular_file(params_.cache));
  for (const auto& entry : fs::directory_iterator(fs::path(params_.cache).parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos)
        << "temporary left behind: " << entry.path();
  }

  // A second build keeps the entries and encodes only the new prompt.
  const auto second =
      models::build_text_cache(params_, {"wipe", "stack the bowls"}, [](const std::string&) {});
  EXPECT_EQ(second.encoded, 1);
  EXPECT_EQ(second.kept, 2);

  const Sample out =
      run_stage("TextEmbed", stage_params(), {prompt_batch({"wipe", "open the drawer", "wipe"})})
          .at(0);
  const at::Tensor& context = out.tensor("context");
  EXPECT_EQ(context.sizes(), (std::vector<int64_t>{3, 128, 16}));
  EXPECT_EQ(context.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(out.tensor("context_mask"), torch::ones({3, 128}, torch::kBool)));
  EXPECT_TRUE(torch::equal(context[0], context[2]));

  // Equal to encoding directly; rows past the prompt's tokens ("wipe" + end = 5) are zero.
  const models::TextContext direct = models::make_text_encoder(params_)->encode({"wipe"});
  EXPECT_TRUE(torch::allclose(context[0], direct.context[0], 1e-5, 1e-6));
  EXPECT_GT(context[0].narrow(0, 0, 5).abs().sum(-1).min().item<float>(), 0.0f);
  EXPECT_EQ(context[0].narrow(0, 5, 123).abs().sum().item<float>(), 0.0f);
  EXPECT_FALSE(torch::allclose(context[0], context[1]));
}

// The embeddings kept in memory come from the run's host memory budget (docs/RELIABILITY.md,
// "Host memory"): a budget that holds one entry of float32 [128, 16] (8 KiB) reads a prompt again
// from the file once another came between; a large one reads each prompt once.
TEST_F(TextEmbedTest, TheHostMemoryBudgetBoundsTheEmbeddingsKeptInMemory) {
  models::build_text_cache(params_, {"wipe", "stack the bowls"}, [](const std::string&) {});
  const std::vector<std::string> prompts = {"wipe", "stack the bowls", "wipe", "stack the bowls"};

  HostMemoryBudget tiny(20 << 10, "settings.host_memory_gib", 4, 8, 1);  // half of it: 10 KiB
  HarnessOptions options;
  options.host_memory = &tiny;
  const StageRun bounded =
      run_stage_counted("TextEmbed", stage_params(), {prompt_batch(prompts)}, options);
  EXPECT_EQ(bounded.counters.at("text_cache_reads"), 4);
  EXPECT_EQ(tiny.start_line(),
            "host memory budget 20.0 KiB (settings.host_memory_gib): up to 4 samples in flight, "
            "1 text embeddings (8.00 KiB)");

  HostMemoryBudget large(int64_t{1} << 30, "settings.host_memory_gib", 4, 8, 1);
  options.host_memory = &large;
  const StageRun unbounded =
      run_stage_counted("TextEmbed", stage_params(), {prompt_batch(prompts)}, options);
  EXPECT_EQ(unbounded.counters.at("text_cache_reads"), 2);
  EXPECT_TRUE(torch::equal(bounded.outputs.at(0).tensor("context"),
                           unbounded.outputs.at(0).tensor("context")));
}

TEST_F(TextEmbedTest, MissingPromptNamesItAndTheCommand) {
  models::build_text_cache(params_, {"wipe"}, [](const std::string&) {});
  EXPECT_EQ(error_of(stage_params(), {"wipe", "fold the towel"}),
            "Missing text embedding cache for prompt \"fold the towel\": run wam-pipeline "
            "text-cache build PIPELINE (cache file " +
                params_.cache + ")");
}

TEST_F(TextEmbedTest, MissingFileOrOtherEncoderSaysToRebuild) {
  EXPECT_EQ(error_of(stage_params(), {"wipe"}),
            "TextEmbed: text cache " + params_.cache +
                " does not exist: run wam-pipeline text-cache build PIPELINE");
  models::build_text_cache(params_, {"wipe"}, [](const std::string&) {});
  EXPECT_EQ(error_of(stage_params(R"("seed": 5)"), {"wipe"}),
            "TextEmbed: text cache " + params_.cache +
                " was built by encoder builtin:width=16,layers=1,heads=2,seed=0 but the TextEmbed "
                "params name builtin:width=16,layers=1,heads=2,seed=5: run wam-pipeline "
                "text-cache build PIPELINE");
  EXPECT_EQ(error_of(stage_params(R"("text_dim": 8)"), {"wipe"}),
            "TextEmbed: text cache " + params_.cache +
                " holds text_dim 16 but param text_dim is 8: run wam-pipeline text-cache build "
                "PIPELINE");
}

TEST_F(TextEmbedTest, TorchScriptEncoderFillsTheCache) {
  // forward(token_ids) = each token id / 100, tiled to text_dim 16.
  torch::jit::Module module("ByteIdEncoder");
  module.define(R"(
def forward(self, token_ids):
    return token_ids.float().unsqueeze(-1).repeat([1, 1, 16]) / 100.0
)");
  fs::create_directories(dir_);
  const std::string path = (dir_ / "byte_id.pt").string();
  module.save(path);
  params_.encoder = "torchscript";
  params_.path = path;
  models::build_text_cache(params_, {"hi"}, [](const std::string&) {});

  const Sample out =
      run_stage("TextEmbed", stage_params(R"("encoder": "torchscript", "path": ")" + path + R"(")"),
                {prompt_batch({"hi"})})
          .at(0);
  const at::Tensor expected =
      models::text_byte_tokens({"hi"}).to(torch::kFloat).unsqueeze(-1).repeat({1, 1, 16}) / 100.0;
  EXPECT_TRUE(torch::allclose(out.tensor("context"), expected, 1e-6, 1e-7));

  torch::jit::Module narrow("NarrowEncoder");
  narrow.define(R"(
def forward(self, token_ids):
    return token_ids.float().unsqueeze(-1).repeat([1, 1, 8])
)");
  narrow.save(path);
  EXPECT_ERROR(models::make_text_encoder(params_),
               "TorchScript text encoder " + path +
                   ": for token_ids [1, 128] expected [N, 128, text_dim] = [1, 128, 16], got "
                   "[1, 128, 8]");
}

}  // namespace
}  // namespace wam::testing
