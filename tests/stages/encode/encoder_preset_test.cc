// The reference-cost encoder preset (configs/encoders/reference.json, docs/ENCODERS.md): it
// validates with every shipped pipeline, its stand-ins hold the parameters docs/ENCODERS.md
// derives from their structure, and they run at small sizes on the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/text_encoder.h"
#include "models/vae.h"
#include "models/vlm.h"
#include "testing/stage_harness.h"
#include "wam/pipeline.h"

namespace wam::testing {
namespace {

const std::string kPreset = std::string(WAM_SOURCE_DIR) + "/configs/encoders/reference.json";

nlohmann::json preset() {
  std::ifstream in(kPreset);
  return nlohmann::json::parse(in);
}

// conv(in, out, kernel) = in * out * kernel^3 + out; a norm of c channels holds c.
int64_t conv(int64_t in, int64_t out, int64_t kernel) {
  return in * out * kernel * kernel * kernel + out;
}

// docs/ENCODERS.md, "VAE parameters": Wan2.2's encoder with base width w.
int64_t wan22_parameters(int64_t w, const std::vector<int64_t>& multipliers, int64_t blocks) {
  int64_t count = conv(12, w, 3);
  int64_t in = w;
  for (size_t i = 0; i < multipliers.size(); ++i) {
    const int64_t out = w * multipliers[i];
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t block_in = b == 0 ? in : out;
      count += block_in + conv(block_in, out, 3) + out + conv(out, out, 3);
      if (block_in != out) count += block_in * out + out;  // 1x1x1 shortcut
    }
    if (i + 1 < multipliers.size()) count += out * out * 9 + out;  // spatial downsampling
    if (i == 1 || i == 2) count += out * out * 3 + out;            // temporal downsampling
    in = out;
  }
  count += 2 * (2 * in + 2 * conv(in, in, 3));            // middle residual blocks
  count += in + (in * 3 * in + 3 * in) + (in * in + in);  // middle attention
  count += in + conv(in, 96, 3) + (96 * 96 + 96);         // head and moments
  return count;
}

// docs/ENCODERS.md, "VLM parameters".
int64_t qwen3_vl_parameters(const models::VlmConfig& c) {
  auto linear = [](int64_t in, int64_t out) { return in * out + out; };
  const int64_t vw = c.vision_width, lw = c.language_width, grouped = vw * 4;
  int64_t count = linear(3 * c.temporal_patch * c.patch_size * c.patch_size, vw);
  count += c.position_grid * c.position_grid * vw;
  count += c.vision_layers * (2 * vw + linear(vw, 3 * vw) + linear(vw, vw) +
                              linear(vw, c.vision_mlp) + linear(c.vision_mlp, vw));
  const int64_t merger_mlp = linear(grouped, grouped) + linear(grouped, lw);
  count += vw + merger_mlp;
  count += static_cast<int64_t>(c.deepstack_layers.size()) * (grouped + merger_mlp);
  count += c.vocab_size * lw;
  const int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  count += c.layers * (2 * lw + linear(lw, q + 2 * kv) + linear(q, lw) + linear(lw, 2 * c.mlp) +
                       linear(c.mlp, lw) + 2 * c.head_dim);
  count += lw;
  if (lw != c.width) count += linear(lw, c.width);
  return count;
}

std::vector<std::string> shipped_pipelines() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(WAM_SOURCE_DIR "/pipelines")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(EncoderPreset, ValidatesWithEveryShippedPipelineAndReachesEveryEncoder) {
  for (const std::string& file : shipped_pipelines()) {
    SCOPED_TRACE(file);
    ValidatedPipeline pipeline = load_pipeline(file, {{"include.encoders=" + kPreset}});
    for (const ValidatedNode& node : pipeline.nodes()) {
      if (node.type == "VaeEncode") {
        EXPECT_EQ(node.params.at("architecture"), "wan22");
      }
      if (node.type == "VlmEncode") {
        EXPECT_EQ(node.params.at("architecture"), "qwen3_vl");
      }
      if (node.type == "TextEmbed") {
        EXPECT_EQ(node.params.at("ffn"), 10240);
      }
      if (node.type == "LatentCacheLookup") {
        EXPECT_EQ(node.params.at("vae").at("width"), 160);
        EXPECT_EQ(node.params.at("vlm").at("layers"), 28);
      }
    }
  }
}

TEST(EncoderPreset, Wan22ParameterCountIsTheDocumentedFormula) {
  const nlohmann::json vae = preset().at("vae");
  const auto multipliers = vae.at("width_multipliers").get<std::vector<int64_t>>();
  // The figure docs/ENCODERS.md gives for the preset (scripts/encoder-flops.py prints it too).
  EXPECT_EQ(wan22_parameters(vae.at("width"), multipliers, vae.at("res_blocks")), 149637088);
  for (int64_t blocks : {1, 2}) {
    const auto encoder = models::make_wan22_vae(8, multipliers, blocks, {}, {});
    EXPECT_EQ(encoder->parameter_count(), wan22_parameters(8, multipliers, blocks)) << blocks;
  }
}

TEST(EncoderPreset, Qwen3VlParameterCountIsTheDocumentedFormula) {
  models::VlmConfig config;
  config.architecture = "qwen3_vl";
  config.width = 24;
  config.language_width = 32;
  config.layers = 3;
  config.heads = 4;
  config.kv_heads = 2;
  config.head_dim = 8;
  config.mlp = 48;
  config.vision_layers = 4;
  config.vision_width = 16;
  config.vision_heads = 2;
  config.vision_mlp = 40;
  config.position_grid = 6;
  config.vocab_size = 64;
  config.deepstack_layers = {0, 2};
  const models::BuiltinVlm vlm(config, {}, {});
  EXPECT_EQ(vlm.parameter_count(), qwen3_vl_parameters(config));
}

// Wan2.2's full-width encoder on a small video: 16x spatial, 4x causal temporal, 48 channels, and
// the first latent frame depends on the first video frame only, through the chunked encoding.
TEST(EncoderPreset, Wan22EncoderGivesTheLatentShapeCausally) {
  const nlohmann::json vae = preset().at("vae");
  const auto encoder = models::make_wan22_vae(
      vae.at("width"), vae.at("width_multipliers").get<std::vector<int64_t>>(),
      vae.at("res_blocks"), {}, {});
  torch::manual_seed(5);
  const at::Tensor video = torch::rand({1, 3, 5, 32, 32}) * 2 - 1;
  const at::Tensor latents = encoder->encode(video);
  EXPECT_EQ(latents.sizes(), (std::vector<int64_t>{1, 48, 2, 2, 2}));
  const at::Tensor first = encoder->encode(video.narrow(2, 0, 1));
  EXPECT_TRUE(torch::allclose(first, latents.narrow(2, 0, 1), 1e-4, 1e-5));
}

// The VLM of the preset at a small width and depth through VlmEncode: images resized to multiples
// of patch x merge, one token per merged group, the context projected to `width`.
TEST(EncoderPreset, Qwen3VlEncodesMergedImageTokensAndThePrompt) {
  const std::string params =
      R"({"architecture": "qwen3_vl", "width": 24, "language_width": 32, "layers": 2,
          "heads": 4, "kv_heads": 2, "head_dim": 8, "mlp": 48, "vision_layers": 3,
          "vision_width": 16, "vision_heads": 2, "vision_mlp": 40, "position_grid": 6,
          "deepstack_layers": [0, 1], "patch_size": 8, "vocab_size": 1024,
          "max_pixels": 4096, "device": "cpu"})";
  torch::manual_seed(3);
  Sample batch("batch:0");
  batch.set_tensor("vlm_current_images",
                   torch::randint(0, 256, {2, 2, 3, 96, 128}).to(torch::kByte));
  batch.set("task", nlohmann::json({"pick up the cup", "open the drawer"}));
  const Sample out = run_stage("VlmEncode", params, {batch}).at(0);
  // 96 x 128 with max_pixels 4096, factor 16 -> 48 x 64: 6 x 8 patches, 3 x 4 merged tokens.
  const std::vector<std::string> views = {"camera 1", "camera 2"};
  const auto prompt = static_cast<int64_t>(
      models::tokenize_words(models::format_vlm_prompt("pick up the cup", views), 1024).size());
  const at::Tensor& context = out.tensor("vlm_context");
  EXPECT_EQ(context.size(0), 2);
  EXPECT_EQ(context.size(2), 24);
  EXPECT_EQ(out.tensor("vlm_mask")[0].sum().item<int64_t>(), 2 * 12 + prompt);
}

TEST(EncoderPreset, TextEncoderIdNamesTheMlpOnlyOffItsDefault) {
  models::TextCacheParams params;
  EXPECT_EQ(models::encoder_id(params), "builtin:width=512,layers=2,heads=8,seed=0");
  params.ffn = 64;
  params.activation = "gelu";
  EXPECT_EQ(models::encoder_id(params),
            "builtin:width=512,layers=2,heads=8,seed=0,ffn=64,activation=gelu");
}

}  // namespace
}  // namespace wam::testing
