// The cache profile on a small synthetic RoboTwin dataset: `cache generate` then LatentCacheLookup
// gives the encoders' outputs bit for bit; a changed Augment param, dataset file or encoder weight
// is refused naming the part and both values; random augmentation and existing artifacts are
// refused before encoding; a partial vlm cache mixes cached and online rows in order; with full
// coverage no frame is decoded.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "cache/cache_generate.h"
#include "data/synth_dataset.h"
#include "formats/latent_store/latent_store.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"
#include "wam/pipeline.h"
#include "wam/runner.h"
#include "wam/tensor.h"

namespace wam {
namespace {

namespace fs = std::filesystem;

const std::string kSource = WAM_SOURCE_DIR;
const std::string kCachePipeline = kSource + "/pipelines/robotwin_cache.json";
constexpr int64_t kSamples = 20;  // 2 episodes of 10 frames

class LatentCache : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dataset_ = new testing::TempDir();
    data::SynthOptions options;
    options.preset = "robotwin";
    options.out = dataset_->file("robotwin");
    options.episodes = 2;
    options.frames_per_episode = kSamples / 2;
    options.codec = "h264";
    options.width = 64;
    options.height = 48;
    options.seed = 3;
    data::synthesize_dataset(options);
  }
  static void TearDownTestSuite() { delete dataset_; }

  void SetUp() override { setenv("ROBOTWIN_DATA_ROOT", dataset_->file("robotwin").c_str(), 1); }

  std::string root() const { return cache_.file("latents"); }

  std::vector<std::string> overrides(std::vector<std::string> extra = {}) const {
    std::vector<std::string> all = {"include.model=" + kSource + "/configs/model/tiny.json",
                                    "nodes.cache.params.root=" + root(), "settings.device=cpu",
                                    "settings.batch_size=4"};
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  }

  cache::GenerateOptions generate_options(std::vector<std::string> fields,
                                          std::vector<std::string> extra = {}) const {
    cache::GenerateOptions options;
    options.pipeline = kCachePipeline;
    options.overrides = overrides(std::move(extra));
    options.fields = std::move(fields);
    options.shard_size = 8;
    return options;
  }

  cache::GenerateResult generate(std::vector<std::string> fields, int64_t max_samples = 0,
                                 std::vector<std::string> extra = {},
                                 bool overwrite = false) const {
    cache::GenerateOptions options = generate_options(std::move(fields), std::move(extra));
    options.max_samples = max_samples;
    options.overwrite = overwrite;
    return cache::generate_cache(options);
  }

  // The published build of `artifact` under `cache_root`: file name -> bytes.
  static std::map<std::string, std::string> build_files(const std::string& cache_root,
                                                        const std::string& artifact) {
    const nlohmann::json catalog =
        nlohmann::json::parse(std::ifstream(cache_root + "/catalog.json"));
    const fs::path dir =
        fs::path(cache_root) /
        fs::path(catalog["artifacts"][artifact]["manifest"].get<std::string>()).parent_path();
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      files[fs::relative(entry.path(), dir).string()] =
          std::string(std::istreambuf_iterator<char>(in), {});
    }
    return files;
  }

  // A graph written beside the cache: the deterministic data config, the tiny model's widths.
  std::string write_graph(const std::string& name, const nlohmann::json& nodes) const {
    const nlohmann::json pipeline = {
        {"version", 1},
        {"name", name},
        {"include",
         {{"data", kSource + "/configs/data/robotwin_deterministic.json"},
          {"model", kSource + "/configs/model/tiny.json"}}},
        {"settings", {{"batch_size", 4}, {"device", "cpu"}, {"ordered", true}}},
        {"nodes", nodes}};
    return cache_.write(name + ".json", pipeline.dump(2));
  }

  static nlohmann::json sampler_node() {
    return {{"id", "sampler"},
            {"type", "EpisodeSampler"},
            {"params", {{"$ref", "data/sampler"}, {"shuffle", false}}}};
  }

  nlohmann::json lookup_node(const std::string& input) const {
    return {{"id", "cache"},
            {"type", "LatentCacheLookup"},
            {"inputs", {input}},
            {"params",
             {{"root", root()},
              {"sampler", {{"$ref", "data/sampler"}}},
              {"augment", {{"$ref", "data/augment"}}},
              {"vlm", {{"width", {{"$ref", "model/vlm_dim"}}}}}}}};
  }

  struct Run {
    std::vector<Sample> batches;
    RunStats stats;
  };

  static Run run(const std::string& file, std::vector<std::string> overrides = {}) {
    ValidatedPipeline pipeline = load_pipeline(file, {std::move(overrides)});
    Run out;
    RunOptions options;
    options.log = [](const std::string&) {};
    options.on_output = [&](const Sample& batch) { out.batches.push_back(batch); };
    RunResult result = run_pipeline(pipeline, options);
    if (result.error) throw *result.error;
    out.stats = result.stats;
    return out;
  }

  static int64_t counter(const RunStats& stats, const std::string& node, const std::string& name) {
    for (const NodeStats& n : stats.nodes) {
      if (n.id != node) continue;
      for (const auto& [counter_name, value] : n.counters) {
        if (counter_name == name) return value;
      }
    }
    return -1;
  }

  static testing::TempDir* dataset_;
  testing::TempDir cache_;
};

testing::TempDir* LatentCache::dataset_ = nullptr;

TEST_F(LatentCache, GenerateThenLookupGivesTheEncodersOutputBitForBit) {
  const cache::GenerateResult result = generate({"all"});
  EXPECT_EQ(result.samples, kSamples);
  EXPECT_EQ(result.samples_encoded, kSamples);
  ASSERT_EQ(result.published.size(), 4u);
  EXPECT_EQ(result.published[0].artifact_id, "vae_latent.current");
  EXPECT_EQ(result.published[3].artifact_id, "vlm.current");
  for (const auto& published : result.published) {
    EXPECT_EQ(published.samples, kSamples);
    EXPECT_EQ(published.shards, 3);  // 8 + 8 + 4
  }

  const Run online = run(
      write_graph("online", {sampler_node(),
                             {{"id", "decode"}, {"type", "VideoDecode"}, {"inputs", {"sampler"}}},
                             {{"id", "augment"},
                              {"type", "Augment"},
                              {"inputs", {"decode"}},
                              {"params", {{"$ref", "data/augment"}}}},
                             {{"id", "collate"}, {"type", "Collate"}, {"inputs", {"augment"}}},
                             {{"id", "vae"}, {"type", "VaeEncode"}, {"inputs", {"collate"}}},
                             {{"id", "vlm"},
                              {"type", "VlmEncode"},
                              {"inputs", {"vae"}},
                              {"params", {{"width", {{"$ref", "model/vlm_dim"}}}}}}}));
  const Run cached =
      run(write_graph("cached", {sampler_node(),
                                 lookup_node("sampler"),
                                 {{"id", "collate"}, {"type", "Collate"}, {"inputs", {"cache"}}}}));
  ASSERT_EQ(online.batches.size(), 5u);
  ASSERT_EQ(cached.batches.size(), 5u);
  for (size_t b = 0; b < online.batches.size(); ++b) {
    const Sample& expected = online.batches[b];
    const Sample& got = cached.batches[b];
    EXPECT_EQ(got.get_json("sample_keys"), expected.get_json("sample_keys"));
    for (const char* field :
         {"video_latents", "memory_video_anchor_latents", "memory_video_recent_latents"}) {
      EXPECT_EQ(got.tensor(field).sizes(), expected.tensor(field).sizes()) << field;
      EXPECT_TRUE(torch::equal(got.tensor(field), expected.tensor(field)))
          << "batch " << b << " " << field;
    }
    EXPECT_EQ(got.tensor("video_latents").sizes(), (std::vector<int64_t>{4, 48, 3, 24, 16}));
    // VLM rows: the valid tokens (a prefix: image tokens, then the prompt), zero-padded after.
    const at::Tensor& mask = expected.tensor("vlm_mask");
    const at::Tensor& cached_mask = got.tensor("vlm_cached_mask");
    for (int64_t r = 0; r < mask.size(0); ++r) {
      const int64_t valid = mask[r].sum().item<int64_t>();
      EXPECT_TRUE(torch::equal(got.tensor("vlm_cached_context")[r].narrow(0, 0, valid),
                               expected.tensor("vlm_context")[r].narrow(0, 0, valid)))
          << "batch " << b << " row " << r;
      EXPECT_EQ(cached_mask[r].sum().item<int64_t>(), valid);
      EXPECT_TRUE(cached_mask[r].narrow(0, 0, valid).all().item<bool>());
      EXPECT_EQ(got.tensor("vlm_cached_context")[r]
                    .narrow(0, valid, cached_mask.size(1) - valid)
                    .abs()
                    .sum()
                    .item<double>(),
                0.0);
    }
    EXPECT_TRUE(got.tensor("vlm_cache_hit").all().item<bool>());
  }
  EXPECT_EQ(counter(cached.stats, "cache", "hits"), kSamples);
  EXPECT_EQ(counter(cached.stats, "cache", "misses"), 0);
}

TEST_F(LatentCache, ChangedAugmentParamIsRefusedNamingThePart) {
  generate({"current"});
  const std::string error = testing::error_of([&] {
    cache::validate_pipeline_cache(kCachePipeline,
                                   overrides({"nodes.cache.params.augment.camera_size=[200,300]"}),
                                   cache::ValidationMode::kMetaOnly, nullptr);
  });
  EXPECT_NE(error.find("vae_latent.current dependency 'image_preprocess' mismatch"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("mismatch at /camera_size/0: cache=240 expected=200"), std::string::npos)
      << error;
}

TEST_F(LatentCache, ChangedEncoderWeightIsRefusedNamingTheProducer) {
  generate({"current"});
  const std::string error = testing::error_of([&] {
    cache::validate_pipeline_cache(kCachePipeline, overrides({"nodes.cache.params.vae.seed=7"}),
                                   cache::ValidationMode::kMetaOnly, nullptr);
  });
  EXPECT_NE(error.find("vae_latent.current dependency 'producer' mismatch"), std::string::npos)
      << error;
  EXPECT_NE(error.find("/seed"), std::string::npos) << error;
  EXPECT_NE(error.find("expected=7"), std::string::npos) << error;
}

TEST_F(LatentCache, ChangedDatasetFileIsRefusedNamingTheFile) {
  // A copy of the dataset, so that the shared one keeps its mtimes.
  testing::TempDir copy;
  fs::copy(dataset_->file("robotwin"), copy.file("robotwin"), fs::copy_options::recursive);
  setenv("ROBOTWIN_DATA_ROOT", copy.file("robotwin").c_str(), 1);
  generate({"current"});
  const fs::path video =
      copy.path() / "robotwin/videos/chunk-000" / "observation.images.cam_high/episode_000001.mp4";
  ASSERT_TRUE(fs::exists(video));
  fs::last_write_time(video, fs::last_write_time(video) + std::chrono::seconds(5));
  const std::string error = testing::error_of([&] {
    cache::validate_pipeline_cache(kCachePipeline, overrides(), cache::ValidationMode::kMetaOnly,
                                   nullptr);
  });
  EXPECT_NE(error.find("vae_latent.current dependency 'dataset' mismatch"), std::string::npos)
      << error;
  EXPECT_NE(error.find("episode_000001.mp4"), std::string::npos) << error;
  EXPECT_NE(error.find("mtime_ns"), std::string::npos) << error;
}

TEST_F(LatentCache, RandomAugmentationIsRefusedBeforeEncoding) {
  const std::string error = testing::error_of([&] {
    generate({"current"}, 0, {"include.data=" + kSource + "/configs/data/robotwin.json"});
  });
  EXPECT_NE(error.find("robotwin_cache.json:/nodes/1/params/augment/camera_jitter_prob "
                       "[cache: LatentCacheLookup]: Offline encoder artifacts require "
                       "deterministic images; camera_jitter_prob is enabled."),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(root() + "/catalog.json"));
}

TEST_F(LatentCache, ExistingArtifactsNeedOverwrite) {
  generate({"current"});
  const std::string error = testing::error_of([&] { generate({"current"}); });
  EXPECT_EQ(error, "Cache artifacts already exist at " + root() +
                       ": [vae_latent.current]. Pass --overwrite to publish replacement builds.");
}

TEST_F(LatentCache, InvalidFieldNamesAreRefused) {
  EXPECT_EQ(testing::error_of([&] { generate({"curent,vlm"}); }),
            "Unsupported video latent cache fields [curent]; allowed: current, memory_anchor, "
            "memory_recent, vlm.");
}

TEST_F(LatentCache, PartialVlmMixesCachedAndOnlineRowsInOrder) {
  generate({"current,memory_anchor,memory_recent"});
  const cache::GenerateResult partial = generate({"vlm"}, 6);
  ASSERT_EQ(partial.published.size(), 1u);
  EXPECT_EQ(partial.published[0].samples, 6);

  const nlohmann::json current_frames_nodes = {
      {{"id", "decode"},
       {"type", "VideoDecode"},
       {"inputs", {"cache"}},
       {"params", {{"frames", "current"}, {"decode_if", "vlm_images_needed"}}}},
      {{"id", "augment"},
       {"type", "Augment"},
       {"inputs", {"decode"}},
       {"params",
        {{"$ref", "data/augment"}, {"frames", "current"}, {"augment_if", "vlm_images_needed"}}}},
      {{"id", "collate"}, {"type", "Collate"}, {"inputs", {"augment"}}},
      {{"id", "vlm"},
       {"type", "VlmEncode"},
       {"inputs", {"collate"}},
       {"params", {{"width", {{"$ref", "model/vlm_dim"}}}, {"merge_cached", true}}}}};
  nlohmann::json mixed_nodes = {sampler_node(), lookup_node("sampler")};
  for (const auto& node : current_frames_nodes) mixed_nodes.push_back(node);
  const Run mixed = run(write_graph("mixed", mixed_nodes));

  const Run online = run(
      write_graph("online_vlm", {sampler_node(),
                                 {{"id", "decode"},
                                  {"type", "VideoDecode"},
                                  {"inputs", {"sampler"}},
                                  {"params", {{"frames", "current"}}}},
                                 {{"id", "augment"},
                                  {"type", "Augment"},
                                  {"inputs", {"decode"}},
                                  {"params", {{"$ref", "data/augment"}, {"frames", "current"}}}},
                                 {{"id", "collate"}, {"type", "Collate"}, {"inputs", {"augment"}}},
                                 {{"id", "vlm"},
                                  {"type", "VlmEncode"},
                                  {"inputs", {"collate"}},
                                  {"params", {{"width", {{"$ref", "model/vlm_dim"}}}}}}}));
  ASSERT_EQ(mixed.batches.size(), online.batches.size());
  int64_t sample = 0;
  for (size_t b = 0; b < mixed.batches.size(); ++b) {
    const at::Tensor& got = mixed.batches[b].tensor("vlm_context");
    const at::Tensor& got_mask = mixed.batches[b].tensor("vlm_mask");
    const at::Tensor& want = online.batches[b].tensor("vlm_context");
    const at::Tensor& want_mask = online.batches[b].tensor("vlm_mask");
    for (int64_t r = 0; r < got.size(0); ++r, ++sample) {
      EXPECT_EQ(mixed.batches[b].tensor("vlm_cache_hit")[r].item<bool>(), sample < 6);
      const int64_t valid = want_mask[r].sum().item<int64_t>();
      ASSERT_EQ(got_mask[r].sum().item<int64_t>(), valid) << "sample " << sample;
      // Equal up to float32 rounding, not bit for bit: the rows were encoded in batches of other
      // sizes (the build's last batch holds 2 rows, the online run's 4), and the BLAS of some CPUs
      // (OpenBLAS on AVX2) rounds a row's products differently with the batch's row count. A row
      // out of order differs by far more.
      const at::Tensor got_row = got[r].narrow(0, 0, valid), want_row = want[r].narrow(0, 0, valid);
      EXPECT_TRUE(at::allclose(got_row, want_row, 1e-5, 1e-5))
          << "sample " << sample << (sample < 6 ? " (cached)" : " (encoded online)")
          << ", max difference " << (got_row - want_row).abs().max().item<float>();
    }
  }
  EXPECT_EQ(counter(mixed.stats, "vlm", "rows_encoded"), kSamples - 6);
  EXPECT_EQ(counter(mixed.stats, "vlm", "rows_from_cache"), 6);
  EXPECT_EQ(counter(mixed.stats, "decode", "passed_through"), 0);

  // Fully covered, the same graph decodes no frame and encodes no row (LATENT_ONLY).
  generate({"vlm"}, 0, {}, /*overwrite=*/true);
  const Run latent_only = run(write_graph("mixed", mixed_nodes));
  EXPECT_EQ(counter(latent_only.stats, "decode", "passed_through"), kSamples);
  EXPECT_EQ(counter(latent_only.stats, "decode", "frames_decoded"), 0);
  EXPECT_EQ(counter(latent_only.stats, "vlm", "rows_encoded"), 0);
  EXPECT_EQ(counter(latent_only.stats, "vlm", "rows_from_cache"), kSamples);
  EXPECT_FALSE(latent_only.batches[0].has("vlm_current_images"));
}

}  // namespace
}  // namespace wam

namespace wam {
namespace {

// An interrupted build keeps its whole shards; the rerun resumes right after them, at the sample
// the interrupted run reported, and publishes the shards an uninterrupted build writes.
TEST_F(LatentCache, InterruptedBuildResumesAfterItsWholeShards) {
  std::atomic<bool> stop{false};
  cache::GenerateOptions options = generate_options({"current"});
  options.shard_seconds = 1e9;  // shards of 8 samples, whatever the machine's speed
  options.interrupt = &stop;
  options.on_progress = [&](int64_t done, int64_t) { stop = stop || done >= 12; };
  const cache::GenerateResult interrupted = cache::generate_cache(options);
  ASSERT_TRUE(interrupted.interrupted);
  EXPECT_TRUE(interrupted.published.empty());
  EXPECT_FALSE(fs::exists(root() + "/catalog.json"));
  // Batches of 4: the stop comes at sample 12, in the second shard, which is dropped unless the
  // batch in flight completes it.
  const int64_t kept = interrupted.samples_kept;
  EXPECT_TRUE(kept == 8 || kept == 16) << kept;
  EXPECT_EQ(interrupted.samples_encoded, kept);

  stop = false;
  options.on_progress = nullptr;
  std::vector<std::pair<int64_t, int64_t>> resumed;
  options.on_resume = [&](int64_t first, int64_t shards) { resumed.emplace_back(first, shards); };
  const cache::GenerateResult rerun = cache::generate_cache(options);
  EXPECT_EQ(resumed, (std::vector<std::pair<int64_t, int64_t>>{{kept, kept / 8}}));
  EXPECT_EQ(rerun.shards_resumed, kept / 8);
  EXPECT_EQ(rerun.samples_encoded, kSamples - kept);
  ASSERT_EQ(rerun.published.size(), 1u);
  EXPECT_EQ(rerun.published[0].shards, 3);

  // The same build, uninterrupted, in another root: the same files (build ids aside: both
  // builds have the same one, named by the contract).
  testing::TempDir other;
  cache::GenerateOptions fresh =
      generate_options({"current"}, {"nodes.cache.params.root=" + other.file("latents")});
  fresh.shard_seconds = 1e9;
  cache::generate_cache(fresh);
  EXPECT_EQ(build_files(root(), "vae_latent.current"),
            build_files(other.file("latents"), "vae_latent.current"));
}

// Shards also close on time: with shard_seconds 0 every batch of 4 closes one, under the shard
// size of 8; the cache is whole and valid, its shards named by their first sample.
TEST_F(LatentCache, TimeClosesShardsSmallerThanTheShardSize) {
  cache::GenerateOptions options = generate_options({"current"});
  options.shard_seconds = 0;
  const cache::GenerateResult result = cache::generate_cache(options);
  ASSERT_EQ(result.published.size(), 1u);
  EXPECT_EQ(result.published[0].samples, kSamples);
  EXPECT_EQ(result.published[0].shards, 5);
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(result.published[0].build_dir + "/manifest.json"));
  for (int64_t s = 0; s < 5; ++s) {
    char name[32];
    std::snprintf(name, sizeof(name), "shards/shard%06lld.h5", static_cast<long long>(4 * s));
    EXPECT_EQ(manifest["shards"][s]["file"], name);
    EXPECT_EQ(manifest["shards"][s]["rows"], 4);
    EXPECT_TRUE(fs::is_regular_file(result.published[0].build_dir + "/" + name)) << name;
  }
}

// The shard rows waiting to be written come from the run's host memory budget: a budget too small
// for any (settings.host_memory_gib of about 1 KiB) closes a shard at every row, under the shard
// size of 8; the cache is whole and valid.
TEST_F(LatentCache, AHostMemoryBudgetTooSmallForTheShardClosesItEarly) {
  cache::GenerateOptions options =
      generate_options({"current"}, {"settings.host_memory_gib=0.000001"});
  options.shard_seconds = 1e9;
  const cache::GenerateResult result = cache::generate_cache(options);
  ASSERT_EQ(result.published.size(), 1u);
  EXPECT_EQ(result.published[0].samples, kSamples);
  EXPECT_EQ(result.published[0].shards, kSamples);
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(result.published[0].build_dir + "/manifest.json"));
  ASSERT_EQ(manifest["shards"].size(), static_cast<size_t>(kSamples));
  for (int64_t s = 0; s < kSamples; ++s) {
    char name[32];
    std::snprintf(name, sizeof(name), "shards/shard%06lld.h5", static_cast<long long>(s));
    EXPECT_EQ(manifest["shards"][s]["file"], name);
    EXPECT_EQ(manifest["shards"][s]["rows"], 1);
  }
}

}  // namespace
}  // namespace wam
