// The cache contract (stages/cache/cache_spec.h) asks Augment's params which of them make the
// images random, and the contracts of the shipped cache pipelines stay those that existing caches
// were built with.
#include "cache/cache_spec.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/io/sha256.h"
#include "formats/latent_store/latent_store.h"
#include "testing/temp_dir.h"
#include "wam/pipeline.h"

namespace wam::cache {
namespace {

// A copy of Augment's params with one more jitter, declared as a new Augment param would be.
struct AugmentWithMotionBlur : stages::AugmentParams {
  double motion_blur_prob = 0.0;

  template <class V>
  void visit(V& v) {
    stages::AugmentParams::visit(v);
    v("motion_blur_prob", motion_blur_prob, "Chance of a motion blur.", Min{0.0}, Max{1.0},
      RandomUnless{0.0});
  }
};

// The params of a struct that carry a RandomUnless tag, in visit() order.
struct RandomTags {
  std::vector<std::string> names;
  template <class T, class... Constraints>
  void operator()(const char* name, T&, const char*, const Constraints&...) {
    if ((std::is_same_v<Constraints, RandomUnless> || ...)) names.push_back(name);
  }
};

TEST(CacheContract, AsksAugmentWhichParamsAreRandom) {
  AugmentWithMotionBlur params;  // every jitter off by default
  EXPECT_EQ(stages::first_random_augment_param(params), "");
  params.motion_blur_prob = 0.5;
  EXPECT_EQ(stages::first_random_augment_param(params), "motion_blur_prob");
  params.deterministic = true;
  EXPECT_EQ(stages::first_random_augment_param(params), "");
  params.deterministic = false;
  params.color_jitter_gamma = 0.1;  // the first random param in visit() order is named
  EXPECT_EQ(stages::first_random_augment_param(params), "color_jitter_gamma");
}

TEST(CacheContract, AugmentsRandomParamsAreItsJittersAndNoises) {
  stages::AugmentParams params;
  RandomTags tags;
  params.visit(tags);
  EXPECT_EQ(tags.names,
            (std::vector<std::string>{"camera_jitter_prob", "color_jitter_brightness",
                                      "color_jitter_contrast", "color_jitter_saturation",
                                      "color_jitter_gamma", "domain_jitter_rgb_prob",
                                      "domain_jitter_shadow_prob", "sensor_noise_gaussian_prob",
                                      "sensor_noise_blur_prob", "sensor_noise_downsample_prob"}));
  for (const std::string& name : tags.names) {
    Diagnostics diagnostics;
    const auto parsed = parse_params<stages::AugmentParams>({{name, 0.5}}, "/augment", diagnostics);
    ASSERT_TRUE(diagnostics.empty()) << diagnostics.render();
    EXPECT_EQ(stages::first_random_augment_param(parsed), name);
  }
  // Strengths and ranges of a transform whose chance is 0 draw nothing.
  params.sensor_noise_gaussian_std = 0.5;
  params.camera_jitter_scale = {0.5, 0.9};
  EXPECT_EQ(stages::first_random_augment_param(params), "");
}

DatasetFingerprint fixed_dataset() {
  return {{{"datasets",
            {{{"root", "/data/task"},
              {"episodes", {{0, 60}, {1, 40}}},
              {"inventory",
               {{"meta_sha256", {{"info.json", "ab"}}},
                {"files",
                 {{"data/chunk-000/episode_000000.parquet", {{"bytes", 1}, {"mtime_ns", 2}}}}}}}}}},
           {"sample_count", 100}},
          100};
}

// The contract of every field of the shipped cache pipelines, over a fixed dataset, as caches
// built before typed params were computed: a change here turns every existing cache away.
TEST(CacheContract, ShippedPipelinesKeepTheirContracts) {
  const DatasetFingerprint dataset = fixed_dataset();
  // Computed by the cache contract code before typed params (main at 1a6c67b).
  const std::map<std::string, std::string> expected = {
      {"libero_cache current", "7cfbebe8ece1c5e93c9ff2d6e059142998146fa35ba7341673b8ba1962719d33"},
      {"libero_cache memory_anchor",
       "fdee609192271e50fc18b25d0d808c3a0c90e63c8a3e9a3068f27806c43209d3"},
      {"libero_cache memory_recent",
       "e42d4a3ce2e79174c930b794d9407cd2f6e1927bda194308ed4870ca4a52e5a1"},
      {"libero_cache vlm", "1b1df668e84a49fe653f19e2451a4d51693546ef31d8d3561ad70e0736dea262"},
      {"robotwin_cache current",
       "577c83551916e38c64a8f6b7f211f498476cd294373cf0262e753f1c622a4774"},
      {"robotwin_cache memory_anchor",
       "94af11e703dbf128de0b071171c55b07c58b471f4079026cf9dfe07f6719db73"},
      {"robotwin_cache memory_recent",
       "daf586ea4a833c8da06b9231daa1f808559ec31eada87f8e6e69ce35e154bde3"},
      {"robotwin_cache vlm", "0944344fc52aae76999c91c7339f2bffd081d8f9c38677b685b335a24d7acc20"}};
  std::map<std::string, std::string> actual;
  for (const char* name : {"libero_cache", "robotwin_cache"}) {
    const ValidatedPipeline pipeline = load_pipeline(
        std::string(WAM_SOURCE_DIR) + "/pipelines/" + name + ".json", {{"settings.device=cpu"}});
    const LatentCacheReader* reader = nullptr;
    for (const ValidatedNode& node : pipeline.nodes()) {
      if (auto* found = dynamic_cast<const LatentCacheReader*>(node.stage.get())) reader = found;
    }
    ASSERT_NE(reader, nullptr) << name;
    const CacheSpec spec = reader->cache_spec(pipeline.settings());
    for (const FieldInfo& field : all_fields()) {
      actual[std::string(name) + " " + field.name] =
          fingerprint(artifact_contract(field.name, spec, dataset, 100));
    }
  }
  EXPECT_EQ(actual, expected);
}

// The contract dependencies of libero_cache.json's `field` latents, with `overrides`.
nlohmann::json dependencies_of(const std::string& field, std::vector<std::string> overrides) {
  overrides.push_back("settings.device=cpu");
  const ValidatedPipeline pipeline =
      load_pipeline(std::string(WAM_SOURCE_DIR) + "/pipelines/libero_cache.json", {overrides});
  const LatentCacheReader* reader = nullptr;
  for (const ValidatedNode& node : pipeline.nodes()) {
    if (auto* found = dynamic_cast<const LatentCacheReader*>(node.stage.get())) reader = found;
  }
  const CacheSpec spec = reader->cache_spec(pipeline.settings());
  return artifact_contract(field, spec, fixed_dataset(), 100).at("dependencies");
}

nlohmann::json producer_of(const std::string& field, std::vector<std::string> overrides) {
  return dependencies_of(field, std::move(overrides)).at("producer");
}

// Augment's resize came after the first caches (all stretched): it enters the contract only when
// it changes the images, and resize_fill only with fit, whose bars it fills.
TEST(CacheContract, ResizeEntersTheContractOnlyWhereItChangesTheImages) {
  auto preprocess_with = [](std::vector<std::string> overrides) {
    return dependencies_of("current", std::move(overrides)).at("image_preprocess");
  };
  const nlohmann::json stretch = preprocess_with({});
  EXPECT_FALSE(stretch.contains("resize"));
  EXPECT_FALSE(stretch.contains("resize_fill"));
  EXPECT_EQ(preprocess_with({"nodes.cache.params.augment.resize_fill=9"}), stretch);
  const nlohmann::json fit = preprocess_with(
      {"nodes.cache.params.augment.resize=fit", "nodes.cache.params.augment.resize_fill=9"});
  EXPECT_EQ(fit.at("resize"), "fit");
  EXPECT_EQ(fit.at("resize_fill"), 9);
  const nlohmann::json fill = preprocess_with(
      {"nodes.cache.params.augment.resize=fill", "nodes.cache.params.augment.resize_fill=9"});
  EXPECT_EQ(fill.at("resize"), "fill");
  EXPECT_FALSE(fill.contains("resize_fill"));
}

// Where Augment runs (its `device`) moves the images by rounding only: not part of the contract.
TEST(CacheContract, WhereAugmentRunsStaysOutOfTheContract) {
  const nlohmann::json preprocess = dependencies_of("current", {}).at("image_preprocess");
  EXPECT_TRUE(preprocess.contains("camera_size"));
  EXPECT_FALSE(preprocess.contains("device"));
  EXPECT_FALSE(dependencies_of("vlm", {}).at("image_prompt_preprocess").contains("device"));
}

// The reference-cost stand-ins' structure params (configs/encoders/reference.json) enter the
// producer, so a cache of the default encoders is refused under the preset; with the default
// compact stand-ins they stay out, as ShippedPipelinesKeepTheirContracts checks.
TEST(CacheContract, ReferenceEncoderStructureEntersTheProducerCompactDoesNot) {
  const std::string preset =
      "include.encoders=" + std::string(WAM_SOURCE_DIR) + "/configs/encoders/reference.json";
  const nlohmann::json compact_vae = producer_of("current", {});
  EXPECT_FALSE(compact_vae.contains("stand_in"));
  EXPECT_FALSE(compact_vae.contains("width_multipliers"));
  EXPECT_FALSE(compact_vae.contains("res_blocks"));
  const nlohmann::json reference_vae = producer_of("current", {preset});
  EXPECT_EQ(reference_vae.at("architecture"), "wan22_vae");
  EXPECT_EQ(reference_vae.at("stand_in"), "wan22");
  EXPECT_EQ(reference_vae.at("width"), 160);
  EXPECT_EQ(reference_vae.at("width_multipliers"), nlohmann::json({1, 2, 4, 4}));
  EXPECT_EQ(reference_vae.at("res_blocks"), 2);

  const nlohmann::json compact_vlm = producer_of("vlm", {});
  EXPECT_FALSE(compact_vlm.contains("vision_layers"));
  EXPECT_FALSE(compact_vlm.contains("stand_in"));
  const nlohmann::json reference_vlm = producer_of("vlm", {preset});
  EXPECT_EQ(reference_vlm.at("architecture"), "qwen_vl");
  EXPECT_EQ(reference_vlm.at("stand_in"), "qwen3_vl");
  EXPECT_EQ(reference_vlm.at("layers"), 28);
  EXPECT_EQ(reference_vlm.at("vision_layers"), 24);
  EXPECT_EQ(reference_vlm.at("deepstack_layers"), nlohmann::json({5, 11, 17}));
}

// A built-in stand-in's weights file enters the producer by its bytes, not its path: a copy
// elsewhere keeps the contract, other bytes change it.
TEST(CacheContract, AWeightsFileEntersTheProducerByItsBytes) {
  wam::testing::TempDir dir;
  const auto with_weights = [&](const std::string& weights) {
    const std::string encoders = dir.write(
        "encoders.json", R"({"vae": {"weights": ")" + weights + R"("}, "vlm": {}, "text": {}})");
    return producer_of("current", {"include.encoders=" + encoders});
  };
  const nlohmann::json seeded = producer_of("current", {});
  EXPECT_FALSE(seeded.contains("weights_sha256"));
  const nlohmann::json first = with_weights(dir.write("a/vae.safetensors", "first bytes"));
  EXPECT_EQ(first.at("weights_sha256"), sha256_hex("first bytes"));
  EXPECT_FALSE(first.contains("weights"));
  EXPECT_EQ(with_weights(dir.write("b/copy.safetensors", "first bytes")), first);
  EXPECT_EQ(with_weights(dir.write("a/vae.safetensors", "other bytes")).at("weights_sha256"),
            sha256_hex("other bytes"));
}

}  // namespace
}  // namespace wam::cache
