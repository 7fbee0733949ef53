#include <gtest/gtest.h>
#include <torch/script.h>

#include <filesystem>
#include <fstream>

#include "common/encoder_params.h"
#include "models/vae.h"
#include "models/weights_file.h"
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/host_memory.h"
#include "wam/tensor.h"

namespace wam::testing {
namespace {

// A batch as Collate emits it: a [B, 3, T, H, W] window and the two memory frames.
Sample video_batch(int64_t batch, int64_t frames, int64_t height, int64_t width,
                   uint64_t seed = 1) {
  torch::manual_seed(seed);
  Sample sample("batch:0");
  sample.set_tensor("video", torch::rand({batch, 3, frames, height, width}) * 2 - 1);
  sample.set_tensor("memory_video_anchor", torch::rand({batch, 3, 1, height, width}) * 2 - 1);
  sample.set_tensor("memory_video_recent", torch::rand({batch, 3, 1, height, width}) * 2 - 1);
  return sample;
}

Sample encode(const std::string& params, Sample input) {
  auto out = run_stage("VaeEncode", params, {std::move(input)});
  EXPECT_EQ(out.size(), 1u);
  return out.at(0);
}

std::string encode_error(const std::string& params, Sample input) {
  return error_of([&] { run_stage("VaeEncode", params, {std::move(input)}); });
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("wam_vae_test_" + name)).string();
}

constexpr const char* kBuiltin = R"({"width": 4, "device": "cpu"})";

TEST(VaeEncodeTest, BuiltinGivesWan22LatentShapes) {
  Sample out = encode(kBuiltin, video_batch(2, 9, 384, 256));
  EXPECT_EQ(out.tensor("video_latents").sizes(), (std::vector<int64_t>{2, 48, 3, 24, 16}));
  EXPECT_EQ(out.tensor("memory_video_anchor_latents").sizes(),
            (std::vector<int64_t>{2, 48, 1, 24, 16}));
  EXPECT_EQ(out.tensor("memory_video_recent_latents").sizes(),
            (std::vector<int64_t>{2, 48, 1, 24, 16}));
  EXPECT_EQ(out.tensor("video_latents").scalar_type(), torch::kFloat);
  EXPECT_FALSE(out.tensor("video_latents").requires_grad());
  EXPECT_TRUE(torch::isfinite(out.tensor("video_latents")).all().item<bool>());
  EXPECT_GT(out.tensor("video_latents").std().item<double>(), 0.0);
  // The inputs travel on unchanged.
  EXPECT_EQ(out.tensor("video").sizes(), (std::vector<int64_t>{2, 3, 9, 384, 256}));
}

// On the CPU a tight host memory budget has the batch encoded in chunks of rows: the same latents.
TEST(VaeEncodeTest, ATightHostMemoryBudgetEncodesInChunksOfRowsWithTheSameLatents) {
  const Sample whole = encode(kBuiltin, video_batch(4, 5, 64, 32));
  // A 64x32 frame at width 4 is priced 64 x 32 x 4 bytes x 2 x 4 = 64 KiB: half of 1 MiB holds 8
  // frames, one row of 5 at once (the 8 memory frames of one frame each go in one call).
  HostMemoryBudget budget(1 << 20, "test", 1, 1, 1);
  HarnessOptions options;
  options.host_memory = &budget;
  const auto out = run_stage("VaeEncode", kBuiltin, {video_batch(4, 5, 64, 32)}, options);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(
      budget.start_line(),
      "host memory budget 1.00 MiB (test): up to 1 samples in flight (settings.max_in_flight's "
      "limit), 8 VAE frames encoded at once (512 KiB)");
  for (const char* field :
       {"video_latents", "memory_video_anchor_latents", "memory_video_recent_latents"}) {
    EXPECT_EQ(out[0].tensor(field).sizes(), whole.tensor(field).sizes()) << field;
    EXPECT_TRUE(torch::allclose(out[0].tensor(field), whole.tensor(field), 1e-4, 1e-5)) << field;
  }
}

// With device "auto" the encoder follows settings.device, also on a machine with CUDA.
TEST(VaeEncodeTest, SettingsDeviceCpuKeepsEveryOutputTensorOnTheCpu) {
  HarnessOptions options;
  options.settings.device = "cpu";
  const auto out = run_stage("VaeEncode", R"({"width": 4})", {video_batch(1, 5, 64, 32)}, options);
  ASSERT_EQ(out.size(), 1u);
  int tensors = 0;
  for (const auto& field : out[0].fields()) {
    const std::string& name = field.first;
    if (out[0].type(name) != FieldType::kTensor) continue;
    ++tensors;
    EXPECT_TRUE(out[0].tensor(name).device().is_cpu()) << name;
  }
  EXPECT_EQ(tensors, 6);  // three inputs, three latents
  // dtype "auto" follows the device: float32 on the CPU.
  EXPECT_EQ(out[0].tensor("video_latents").scalar_type(), torch::kFloat);
}

TEST(VaeEncodeTest, SameSeedSameLatentsOtherSeedOthers) {
  const Sample a = encode(kBuiltin, video_batch(1, 5, 64, 32));
  const Sample b = encode(kBuiltin, video_batch(1, 5, 64, 32));
  const Sample c = encode(R"({"width": 4, "device": "cpu", "seed": 7})", video_batch(1, 5, 64, 32));
  EXPECT_TRUE(torch::equal(a.tensor("video_latents"), b.tensor("video_latents")));
  EXPECT_TRUE(torch::equal(a.tensor("memory_video_recent_latents"),
                           b.tensor("memory_video_recent_latents")));
  EXPECT_FALSE(torch::allclose(a.tensor("video_latents"), c.tensor("video_latents")));
}

TEST(VaeEncodeTest, FirstLatentFrameDependsOnFirstVideoFrameOnly) {
  // Causal: latent frame 0 of a 9-frame window equals the latent of frame 0 encoded alone, and
  // the memory frames (encoded as a batch of two) equal their separate encodings.
  Sample window = video_batch(1, 9, 64, 32);
  const at::Tensor first_frame = window.tensor("video").narrow(2, 0, 1);
  Sample single("batch:1");
  single.set_tensor("video", first_frame);
  single.set_tensor("memory_video_anchor", window.tensor("memory_video_anchor"));
  single.set_tensor("memory_video_recent", window.tensor("memory_video_anchor"));
  const Sample from_window = encode(kBuiltin, window);
  const Sample from_frame = encode(kBuiltin, single);
  EXPECT_TRUE(torch::allclose(from_window.tensor("video_latents").narrow(2, 0, 1),
                              from_frame.tensor("video_latents"), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(from_window.tensor("memory_video_anchor_latents"),
                              from_frame.tensor("memory_video_recent_latents"), 1e-5, 1e-6));
  // Later frames do change the later latent frames.
  EXPECT_FALSE(torch::allclose(from_window.tensor("video_latents").narrow(2, 1, 1),
                               from_window.tensor("video_latents").narrow(2, 0, 1)));
}

StageRun run_with_counters(const std::string& params_json, const std::vector<Sample>& batches) {
  return run_stage_counted("VaeEncode", params_json, batches);
}

// A batch of 3 whose anchor rows are all row 0's frame.
Sample batch_with_one_anchor(uint64_t seed) {
  Sample batch = video_batch(3, 5, 64, 32, seed);
  batch.set_tensor("memory_video_anchor",
                   batch.tensor("memory_video_anchor").narrow(0, 0, 1).repeat({3, 1, 1, 1, 1}));
  return batch;
}

TEST(VaeEncodeTest, IdenticalAnchorRowsAreEncodedOnceWithTheSameLatents) {
  const std::vector<Sample> batches = {batch_with_one_anchor(1), video_batch(3, 5, 64, 32, 2),
                                       batch_with_one_anchor(3)};
  const StageRun deduplicated = run_with_counters(kBuiltin, batches);
  const StageRun full = run_with_counters(
      R"({"width": 4, "device": "cpu", "deduplicate_identical_anchor_batch": false})", batches);
  EXPECT_EQ(deduplicated.counters.at("deduplicated_anchor_batches"), 2);
  EXPECT_EQ(full.counters.at("deduplicated_anchor_batches"), 0);
  ASSERT_EQ(deduplicated.outputs.size(), 3u);
  ASSERT_EQ(full.outputs.size(), 3u);
  for (size_t i = 0; i < batches.size(); ++i) {
    for (const char* field :
         {"video_latents", "memory_video_anchor_latents", "memory_video_recent_latents"}) {
      const at::Tensor ours = deduplicated.outputs[i].tensor(field);
      const at::Tensor theirs = full.outputs[i].tensor(field);
      ASSERT_EQ(ours.sizes(), theirs.sizes()) << field << " of batch " << i;
      // Encoded in batches of another size, so equal up to the convolutions' rounding.
      EXPECT_TRUE(torch::allclose(ours, theirs, 1e-5, 1e-6))
          << field << " of batch " << i << ": max difference "
          << (ours - theirs).abs().max().item<double>();
    }
  }
  const at::Tensor anchor = deduplicated.outputs[0].tensor("memory_video_anchor_latents");
  EXPECT_EQ(anchor.sizes(), (std::vector<int64_t>{3, 48, 1, 4, 2}));
  EXPECT_TRUE(torch::equal(anchor[2], anchor[0]));
}

TEST(VaeEncodeTest, AnchorRowsDifferingInOneByteAreEncodedSeparately) {
  // -0.0 == 0.0 as floats, but not bytewise: no deduplication.
  Sample batch = batch_with_one_anchor(4);
  at::Tensor anchor = batch.tensor("memory_video_anchor").clone();
  anchor.index_put_({0, 0, 0, 0, 0}, 0.0f);
  anchor.index_put_({1, 0, 0, 0, 0}, -0.0f);
  anchor.index_put_({2, 0, 0, 0, 0}, 0.0f);
  batch.set_tensor("memory_video_anchor", anchor);
  EXPECT_EQ(run_with_counters(kBuiltin, {batch}).counters.at("deduplicated_anchor_batches"), 0);
}

TEST(VaeEncodeTest, RejectsFrameCountsOutsideFourKPlusOne) {
  EXPECT_EQ(encode_error(kBuiltin, video_batch(1, 8, 64, 32)),
            "Video T must satisfy T % 4 == 1 (field \"video\" is Float[1, 3, 8, 64, 32], T = 8)");
}

TEST(VaeEncodeTest, RejectsSpatialSizesNotMultipleOf16) {
  EXPECT_EQ(
      encode_error(kBuiltin, video_batch(1, 5, 40, 32)),
      "Video spatial dims must be multiples of 16 (field \"video\" is Float[1, 3, 5, 40, 32], "
      "H x W = 40 x 32)");
}

TEST(VaeEncodeTest, RejectsUint8VideoNamingTheParamThatMadeIt) {
  Sample batch = video_batch(1, 5, 64, 32);
  batch.set_tensor("video", torch::zeros({1, 3, 5, 64, 32}, torch::kUInt8));
  EXPECT_EQ(encode_error(kBuiltin, batch),
            "field \"video\" is Byte[1, 3, 5, 64, 32]: VaeEncode takes float video in [-1, 1]. "
            "uint8 levels (Augment's video_dtype: uint8) become float in HostToDevice: put one "
            "before VaeEncode, or set Augment's video_dtype to float32");
}

// forward(video) = 16x16 mean pools of every 4th frame, channels tiled to 48, times `scale`.
const char* kPoolingVae = R"(
def forward(self, video):
    b, c, t, h, w = video.size(0), video.size(1), video.size(2), video.size(3), video.size(4)
    x = video[:, :, ::4]
    x = x.reshape([b, c, x.size(2), h // 16, 16, w // 16, 16]).mean([4, 6])
    return x.repeat([1, 16, 1, 1, 1]) * self.scale
)";

TEST(VaeEncodeTest, TorchScriptEncoderLoadsAndMatchesItsReference) {
  torch::jit::Module module("PoolingVae");
  module.register_parameter("scale", torch::tensor(0.5), false);
  module.define(kPoolingVae);
  const std::string path = temp_file("pooling.pt");
  module.save(path);

  Sample input = video_batch(2, 9, 64, 32);
  const at::Tensor video = input.tensor("video");
  const at::Tensor expected = video
                                  .index({torch::indexing::Slice(), torch::indexing::Slice(),
                                          torch::indexing::Slice(0, torch::indexing::None, 4)})
                                  .reshape({2, 3, 3, 4, 16, 2, 16})
                                  .mean({4, 6})
                                  .repeat({1, 16, 1, 1, 1}) *
                              0.5;
  const Sample out =
      encode(R"({"encoder": "torchscript", "device": "cpu", "path": ")" + path + R"("})", input);
  EXPECT_EQ(out.tensor("video_latents").sizes(), (std::vector<int64_t>{2, 48, 3, 4, 2}));
  EXPECT_TRUE(torch::allclose(out.tensor("video_latents"), expected, 1e-6, 1e-6));
  std::filesystem::remove(path);
}

TEST(VaeEncodeTest, WrongShapedTorchScriptEncoderIsRejectedAtOpen) {
  torch::jit::Module module("SixteenChannelVae");
  module.define(R"(
def forward(self, video):
    x = video[:, :, ::4]
    b, c, t, h, w = x.size(0), x.size(1), x.size(2), x.size(3), x.size(4)
    latents = x.reshape([b, c, t, h // 16, 16, w // 16, 16]).mean([4, 6])
    return latents.repeat([1, 6, 1, 1, 1])[:, :16]
)");
  const std::string path = temp_file("sixteen.pt");
  module.save(path);
  EXPECT_ERROR(
      SteppedStage stage("VaeEncode", R"({"encoder": "torchscript", "path": ")" + path + R"("})"),
      "TorchScript VAE " + path +
          ": for a video [1, 3, 5, 64, 64] expected latents [B, 48, (T-1)/4+1, H/16, W/16] "
          "= [1, 48, 2, 4, 4], got [1, 16, 2, 4, 4]; export an encoder whose "
          "forward(video) returns the latent mean");
  std::filesystem::remove(path);
}

TEST(VaeEncodeTest, TorchScriptNeedsAnExistingPath) {
  EXPECT_EQ(encode_error(R"({"encoder": "torchscript"})", video_batch(1, 5, 64, 32)),
            "<test>:/params/path [VaeEncode]: required with encoder \"torchscript\": the "
            "TorchScript file written by torch.jit.save");
  EXPECT_EQ(encode_error(R"({"encoder": "torchscript", "path": "/nonexistent/vae.pt"})",
                         video_batch(1, 5, 64, 32)),
            "<test>:/params/path [VaeEncode]: TorchScript file /nonexistent/vae.pt: no such file");
  const std::string directory = std::filesystem::temp_directory_path().string();
  EXPECT_EQ(encode_error(R"({"encoder": "torchscript", "path": ")" + directory + R"("})",
                         video_batch(1, 5, 64, 32)),
            "<test>:/params/path [VaeEncode]: TorchScript file " + directory +
                ": not a regular file (a directory)");
}

// Encoder "aoti" (scripts/export_encoder.py; tests/scripts/export_encoder_test.sh loads real
// packages where LibTorch can).
TEST(VaeEncodeTest, AotiPackagesAreRefusedAtValidateWhereLibTorchCannotLoadThem) {
  if (kAotiPackagesSupported) GTEST_SKIP() << "this LibTorch loads AOTInductor packages";
  EXPECT_EQ(
      encode_error(R"({"encoder": "aoti", "path": "/tmp/vae.pt2"})", video_batch(1, 5, 64, 32)),
      "<test>:/params/encoder [VaeEncode]: \"aoti\" needs a LibTorch with AOTInductor's "
      "package loader (2.6 or later), and this build's has none: export the module with "
      "torch.jit.save and use encoder \"torchscript\", or build against a newer LibTorch");
}

TEST(VaeEncodeTest, AotiNeedsAnExistingPackage) {
  if (!kAotiPackagesSupported) GTEST_SKIP() << "this LibTorch cannot load AOTInductor packages";
  EXPECT_EQ(encode_error(R"({"encoder": "aoti"})", video_batch(1, 5, 64, 32)),
            "<test>:/params/path [VaeEncode]: required with encoder \"aoti\": the AOTInductor "
            "package from scripts/export_encoder.py");
  EXPECT_EQ(encode_error(R"({"encoder": "aoti", "path": "/nonexistent/vae.pt2"})",
                         video_batch(1, 5, 64, 32)),
            "<test>:/params/path [VaeEncode]: AOTInductor package /nonexistent/vae.pt2: no such "
            "file");
}

// `weights` replaces the built-in stand-in's seeded weights by name: the seed-0 stand-in with the
// seed-1 one's weights file encodes as the seed-1 stand-in does.
TEST(VaeEncodeTest, AWeightsFileReplacesTheSeededWeightsByName) {
  const std::string path = temp_file("seed1.safetensors");
  models::save_safetensors(path, models::make_builtin_vae(4, {1, ""}, {})->named_weights(), {});
  const Sample input = video_batch(2, 5, 64, 32);
  const at::Tensor seed0 = encode(kBuiltin, input).tensor("video_latents");
  const at::Tensor seed1 =
      encode(R"({"width": 4, "device": "cpu", "seed": 1})", input).tensor("video_latents");
  const at::Tensor loaded =
      encode(R"({"width": 4, "device": "cpu", "weights": ")" + path + R"("})", input)
          .tensor("video_latents");
  EXPECT_FALSE(torch::equal(seed0, seed1));
  EXPECT_TRUE(torch::equal(loaded, seed1));
  std::filesystem::remove(path);
}

TEST(VaeEncodeTest, AWeightsFileThatDoesNotFitNamesEveryMisfit) {
  const std::string path = temp_file("misfit.safetensors");
  auto tensors = models::make_builtin_vae(4, {}, {})->named_weights();
  ASSERT_EQ(tensors[0].first, "stem.conv.weight");
  ASSERT_EQ(tensors[1].first, "stem.conv.bias");
  tensors[0].second = torch::zeros({4, 12, 3, 3, 1});
  tensors.erase(tensors.begin() + 1);
  tensors.emplace_back("stem.norm.weight", torch::ones({4}));
  models::save_safetensors(path, tensors, {});
  EXPECT_EQ(encode_error(R"({"width": 4, "device": "cpu", "weights": ")" + path + R"("})",
                         video_batch(1, 5, 64, 32)),
            path +
                ": the weights do not fit the model: missing 1: stem.conv.bias; unexpected 1: "
                "stem.norm.weight; mis-shaped 1: stem.conv.weight (file [4, 12, 3, 3, 1], model "
                "[4, 12, 3, 3, 3])");
  std::filesystem::remove(path);
}

TEST(VaeEncodeTest, OnlyTheBuiltinStandInTakesAWeightsFile) {
  const std::string module = temp_file("any.pt");
  std::ofstream(module) << "a module";
  EXPECT_EQ(
      encode_error(R"({"encoder": "torchscript", "path": ")" + module + R"(", "weights": "w"})",
                   video_batch(1, 5, 64, 32)),
      "<test>:/params/weights [VaeEncode]: a weights file initialises the built-in "
      "stand-in; an exported module (encoder \"torchscript\") carries its own weights: drop "
      "`weights`");
  std::filesystem::remove(module);
}

TEST(VaeEncodeTest, AMissingWeightsFileIsRefusedAtValidate) {
  EXPECT_EQ(
      encode_error(R"({"width": 4, "device": "cpu", "weights": "/nonexistent/w.safetensors"})",
                   video_batch(1, 5, 64, 32)),
      "<test>:/params/weights [VaeEncode]: weights file /nonexistent/w.safetensors: no such "
      "file");
}

}  // namespace
}  // namespace wam::testing
