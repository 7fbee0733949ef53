#include "formats/latent_store/latent_store.h"
#include "formats/latent_store/artifact_builder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <hdf5.h>

#include "common/io/sha256.h"
#include "formats/latent_store/store_files.h"
#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace wam::cache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using wam::testing::TempDir;

constexpr const char* kVae = "vae_latent.current";
constexpr const char* kVlm = "vlm.current";

json vae_contract(int64_t sample_count, const std::string& weights = "sha256:aaa") {
  json contract = {{"artifact_id", kVae},
                   {"sample_count", sample_count},
                   {"key_codec", "sample_int_v1"},
                   {"dependencies",
                    {{"dataset", {{"files", {{{"path", "videos/ep0.mp4"}, {"size", 1000}}}}}},
                     {"image_preprocess", {{"canvas", "robotwin"}, {"brightness", 0.0}}},
                     {"producer", {{"encoder", "wan_video_vae"}, {"weights", weights}}}}},
                   {"values",
                    {{"latent", {{"dtype", "bfloat16"}, {"shape", {4, 2, 3}}}},
                     {"scale", {{"dtype", "float32"}, {"shape", {2}}}},
                     {"valid", {{"dtype", "bool"}, {"shape", {3}}}}}},
                   {"value_codec", "raw"}};
  contract["keyspace_fingerprint"] =
      fingerprint({contract["dependencies"]["dataset"], "sample_int_v1", sample_count});
  return contract;
}

json vlm_contract(int64_t sample_count) {
  json contract = vae_contract(sample_count);
  contract["artifact_id"] = kVlm;
  contract["dependencies"]["producer"] = {{"encoder", "qwen_vl"}, {"weights", "sha256:bbb"}};
  contract["values"] = {{"context", {{"dtype", "bfloat16"}, {"shape", {-1, 8}}}},
                        {"mask", {{"dtype", "bool"}, {"shape", {-1}}}}};
  return contract;
}

// Deterministic, sample-specific contents: every row differs from every other.
uint16_t latent_word(int64_t sample, size_t i) {
  return static_cast<uint16_t>(0x3f00 + sample * 131 + i * 7);
}
float scale_value(int64_t sample, size_t i) { return 0.5f * sample - 3.25f * i; }
uint8_t valid_value(int64_t sample, size_t i) { return (sample + i) % 2; }
int64_t context_length(int64_t sample) { return 1 + sample % 4; }

struct FixedRows {
  std::vector<uint16_t> latent;
  std::vector<float> scale;
  std::vector<uint8_t> valid;
  std::vector<ValueRows> rows() const {
    return {{"latent", latent.data(), latent.size() * 2, {}},
            {"scale", scale.data(), scale.size() * 4, {}},
            {"valid", valid.data(), valid.size(), {}}};
  }
};

FixedRows fixed_rows(const std::vector<int64_t>& ids) {
  FixedRows rows;
  for (int64_t id : ids) {
    for (size_t i = 0; i < 24; ++i) rows.latent.push_back(latent_word(id, i));
    for (size_t i = 0; i < 2; ++i) rows.scale.push_back(scale_value(id, i));
    for (size_t i = 0; i < 3; ++i) rows.valid.push_back(valid_value(id, i));
  }
  return rows;
}

struct RaggedRows {
  std::vector<uint16_t> context;
  std::vector<uint8_t> mask;
  std::vector<int64_t> lengths;
  std::vector<ValueRows> rows() const {
    return {{"context", context.data(), context.size() * 2, lengths},
            {"mask", mask.data(), mask.size(), lengths}};
  }
};

RaggedRows ragged_rows(const std::vector<int64_t>& ids) {
  RaggedRows rows;
  for (int64_t id : ids) {
    rows.lengths.push_back(context_length(id));
    for (int64_t t = 0; t < context_length(id); ++t) {
      for (size_t i = 0; i < 8; ++i) rows.context.push_back(latent_word(id, t * 8 + i));
      rows.mask.push_back(t % 3 != 2);
    }
  }
  return rows;
}

std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> ids;
  for (int64_t id = begin; id < end; ++id) ids.push_back(id);
  return ids;
}

// Writes shards of `shard_rows` samples covering [0, count) and publishes.
PublishResult publish_vae(const std::string& root, const json& contract,
                          const std::string& build_id, int64_t count, int64_t shard_rows = 4,
                          bool overwrite = false) {
  ArtifactBuilder builder(root, contract, build_id);
  for (int64_t shard = 0; shard * shard_rows < count; ++shard) {
    const auto ids = range(shard * shard_rows, std::min(count, (shard + 1) * shard_rows));
    builder.write_shard(shard, ids, fixed_rows(ids).rows());
  }
  return builder.publish(overwrite);
}

PublishResult publish_vlm(const std::string& root, const json& contract,
                          const std::string& build_id, int64_t count) {
  ArtifactBuilder builder(root, contract, build_id);
  for (int64_t shard = 0; shard * 3 < count; ++shard) {
    const auto ids = range(shard * 3, std::min(count, shard * 3 + 3));
    builder.write_shard(shard, ids, ragged_rows(ids).rows());
  }
  return builder.publish(false);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string error_of(const std::function<void()>& action) {
  const auto error = testing::caught<CacheError>(action);
  return error ? error->what() : "<no CacheError>";
}

std::string shard_path(const std::string& root, const std::string& id, const std::string& build,
                       int shard) {
  char name[64];
  std::snprintf(name, sizeof(name), "/shards/shard%06d.h5", shard);
  return root + "/artifacts/" + id + "/builds/" + build + name;
}

void expect_fixed_sample(const ArtifactReader& reader, int64_t id) {
  std::vector<uint16_t> latent(24);
  std::vector<float> scale(2);
  std::vector<uint8_t> valid(3);
  reader.read_fixed(id, reader.value_index("latent"), latent.data());
  reader.read_fixed(id, reader.value_index("scale"), scale.data());
  reader.read_fixed(id, reader.value_index("valid"), valid.data());
  const FixedRows expected = fixed_rows({id});
  EXPECT_EQ(latent, expected.latent) << "sample " << id;
  EXPECT_EQ(scale, expected.scale) << "sample " << id;
  EXPECT_EQ(valid, expected.valid) << "sample " << id;
}

// The bitwise CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, inverted start and end), as
// its definition reads: what the row checksum must equal, whatever code ISA-L picks.
uint32_t bitwise_crc32c(const std::vector<unsigned char>& bytes) {
  uint32_t crc = ~uint32_t{0};
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

TEST(LatentStore, RowChecksumIsTheCrc32cOfTheSampleIdThenTheRow) {
  const std::string check = "123456789";
  EXPECT_EQ(bitwise_crc32c({check.begin(), check.end()}), 0xE3069283u);  // CRC-32C's check value
  for (const size_t size : {0, 1, 63, 64, 257, 4096, 110592}) {
    std::vector<unsigned char> row(size);
    for (size_t i = 0; i < size; ++i) row[i] = static_cast<unsigned char>(i * 131 + 7);
    for (const int64_t sample_id : {int64_t{0}, int64_t{5}, int64_t{0x0102030405060708}}) {
      std::vector<unsigned char> message;
      for (int i = 0; i < 8; ++i)
        message.push_back(static_cast<unsigned char>(sample_id >> (8 * i)));
      message.insert(message.end(), row.begin(), row.end());
      EXPECT_EQ(wam::cache::row_checksum(sample_id, row.data(), row.size()),
                bitwise_crc32c(message))
          << size << " bytes, sample " << sample_id;
    }
  }
}

TEST(LatentStore, FixedValuesReadBackBitForBit) {
  TempDir dir;
  const std::string root = dir.file("cache");
  const PublishResult result = publish_vae(root, vae_contract(10), "build1", 10);
  EXPECT_EQ(result.artifact_id, kVae);
  EXPECT_EQ(result.build_dir, root + "/artifacts/vae_latent.current/builds/build1");
  EXPECT_EQ(result.samples, 10);
  EXPECT_EQ(result.shards, 3);
  EXPECT_FALSE(fs::exists(root + "/.tmp"));

  const auto reader = open_artifact(root, vae_contract(10), {ValidationMode::kFull, false});
  EXPECT_EQ(reader->build_id(), "build1");
  EXPECT_EQ(reader->coverage(), 1.0);
  ASSERT_EQ(reader->values().size(), 3u);
  EXPECT_EQ(reader->values()[0].name, "latent");
  EXPECT_EQ(reader->values()[0].unit_bytes(), 48u);
  for (int64_t id = 0; id < 10; ++id) {
    EXPECT_TRUE(reader->contains(id));
    expect_fixed_sample(*reader, id);
  }
  EXPECT_FALSE(reader->contains(10));
  EXPECT_FALSE(reader->contains(-1));
  EXPECT_EQ(reader->rows_read(), 30u);
  EXPECT_EQ(reader->bytes_read(), 10u * (48 + 8 + 3));
  std::vector<uint16_t> buffer(24);
  EXPECT_EQ(error_of([&] { reader->read_fixed(12, 0, buffer.data()); }),
            "vae_latent.current cache is missing requested keys; examples=[sample:12]");
}

TEST(LatentStore, CatalogManifestAndIndexFollowTheFormat) {
  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vae(root, vae_contract(6), "b1", 6);
  const json catalog = json::parse(read_bytes(root + "/catalog.json"));
  const std::string manifest_text =
      read_bytes(root + "/artifacts/vae_latent.current/builds/b1/manifest.json");
  EXPECT_EQ(catalog, json::parse(R"({"schema_version": 3, "cache_type": "wam_artifact_cache",
      "artifacts": {"vae_latent.current": {"backend": "hdf5_shard_v1", "build_id": "b1",
      "manifest": "artifacts/vae_latent.current/builds/b1/manifest.json",
      "manifest_sha256": ")" + sha256_hex(manifest_text) +
                                 R"("}}})"));
  const json manifest = json::parse(manifest_text);
  EXPECT_EQ(manifest["complete"], true);
  EXPECT_EQ(manifest["cache_type"], "wam_artifact");
  EXPECT_EQ(manifest["contract"], vae_contract(6));
  ASSERT_EQ(manifest["shards"].size(), 2u);
  EXPECT_EQ(manifest["shards"][1]["file"], "shards/shard000001.h5");
  EXPECT_EQ(manifest["shards"][1]["rows"], 2);
  const std::string shard = shard_path(root, kVae, "b1", 1);
  EXPECT_EQ(manifest["shards"][1]["bytes"], fs::file_size(shard));
  EXPECT_EQ(manifest["shards"][1]["sha256"], sha256_file_hex(shard));
  const std::string index_text =
      read_bytes(root + "/artifacts/vae_latent.current/builds/b1/index.json");
  EXPECT_EQ(manifest["index_sha256"], sha256_hex(index_text));
  const json index = json::parse(index_text);
  EXPECT_EQ(index["sample_count"], 6);
  EXPECT_EQ(index["entries"]["sample:5"], json::parse(R"({"shard": 1, "row": 1})"));
  EXPECT_EQ(index_text.substr(0, 20), "{\n  \"artifact_id\": \"");
}

TEST(LatentStore, RaggedRowsReadBackBitForBit) {
  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vlm(root, vlm_contract(7), "v1", 7);
  const auto reader = open_artifact(root, vlm_contract(7), {ValidationMode::kFull, false});
  const int context = reader->value_index("context");
  const int mask = reader->value_index("mask");
  for (int64_t id = 0; id < 7; ++id) {
    const RaggedRows expected = ragged_rows({id});
    ASSERT_EQ(reader->ragged_length(id, context), context_length(id));
    ASSERT_EQ(reader->ragged_length(id, mask), context_length(id));
    std::vector<uint16_t> words(static_cast<size_t>(context_length(id)) * 8);
    std::vector<uint8_t> flags(static_cast<size_t>(context_length(id)));
    reader->read_ragged(id, context, words.data());
    reader->read_ragged(id, mask, flags.data());
    EXPECT_EQ(words, expected.context) << "sample " << id;
    EXPECT_EQ(flags, expected.mask) << "sample " << id;
  }
}

TEST(LatentStore, ResumeFindsWrittenShardsAndRejectsACorruptOne) {
  TempDir dir;
  const std::string root = dir.file("cache");
  {
    ArtifactBuilder builder(root, vae_contract(12), "b1");
    builder.write_shard(0, range(0, 4), fixed_rows(range(0, 4)).rows());
    builder.write_shard(1, range(4, 8), fixed_rows(range(4, 8)).rows());
    EXPECT_EQ(builder.shards_written(), 2);
  }
  ArtifactBuilder resumed(root, vae_contract(12), "b1");
  EXPECT_TRUE(resumed.shard_complete(0));
  EXPECT_TRUE(resumed.shard_complete(1));
  EXPECT_FALSE(resumed.shard_complete(2));
  const std::string shard1 = resumed.staging_dir() + "/shards/shard000001.h5";
  std::string bytes = read_bytes(shard1);
  bytes[bytes.size() / 2] ^= 0x01;
  write_bytes(shard1, bytes);
  EXPECT_FALSE(resumed.shard_complete(1));

  // A staging build of another contract is not resumed.
  ArtifactBuilder other(root, vae_contract(12, "sha256:changed"), "b1");
  EXPECT_FALSE(other.shard_complete(0));
}

// `cache generate` names a shard by its first sample id and closes shards on time as well as size:
// shards of 3, 1 and 5 rows (one index past 6 digits), a rerun keeping the first two and
// discarding the rest, which an earlier layout wrote, before writing its own.
TEST(LatentStore, ShardsOfVaryingSizesNamedByTheirFirstSampleResumeAndPublish) {
  TempDir dir;
  const std::string root = dir.file("cache");
  const int64_t far = 1234567;  // a first sample id of 7 digits
  {
    ArtifactBuilder builder(root, vae_contract(far + 2), "b1");
    builder.write_shard(0, range(0, 3), fixed_rows(range(0, 3)).rows());
    builder.write_shard(3, range(3, 4), fixed_rows(range(3, 4)).rows());
    builder.write_shard(4, range(4, 9), fixed_rows(range(4, 9)).rows());
    builder.write_shard(far, range(far, far + 2), fixed_rows(range(far, far + 2)).rows());
  }
  ArtifactBuilder resumed(root, vae_contract(far + 2), "b1");
  EXPECT_EQ(resumed.complete_shard(0), range(0, 3));
  EXPECT_EQ(resumed.complete_shard(3), range(3, 4));
  EXPECT_EQ(resumed.complete_shard(far), range(far, far + 2));
  EXPECT_FALSE(resumed.complete_shard(1).has_value());
  resumed.discard_shards(4, 8);  // shard 4 holds samples 4..8: discarded whole
  EXPECT_FALSE(resumed.shard_complete(4));
  EXPECT_FALSE(fs::exists(resumed.staging_dir() + "/shards/shard000004.h5"));
  EXPECT_TRUE(resumed.shard_complete(3));
  EXPECT_TRUE(resumed.shard_complete(far));
  resumed.write_shard(4, range(4, 6), fixed_rows(range(4, 6)).rows());
  resumed.discard_shards(far, far + 2);
  EXPECT_FALSE(fs::exists(resumed.staging_dir() + "/shards/shard1234567.h5"));
  resumed.discard_shards(6, far);
  EXPECT_EQ(resumed.complete_shard(4), range(4, 6));

  // Sample ids [0, 6): three shards of 3, 1 and 2 rows.
  ArtifactBuilder small(root, vae_contract(6), "b2");
  small.write_shard(0, range(0, 3), fixed_rows(range(0, 3)).rows());
  small.write_shard(3, range(3, 4), fixed_rows(range(3, 4)).rows());
  small.write_shard(4, range(4, 6), fixed_rows(range(4, 6)).rows());
  const PublishResult published = small.publish(false);
  EXPECT_EQ(published.shards, 3);
  const json manifest = json::parse(read_bytes(published.build_dir + "/manifest.json"));
  EXPECT_EQ(manifest["shards"][1]["file"], "shards/shard000003.h5");
  EXPECT_EQ(manifest["shards"][1]["rows"], 1);
  EXPECT_EQ(manifest["shards"][2]["file"], "shards/shard000004.h5");
  const json index = json::parse(read_bytes(published.build_dir + "/index.json"));
  EXPECT_EQ(index["entries"]["sample:5"], json::parse(R"({"shard": 2, "row": 1})"));
  const auto reader = open_artifact(root, vae_contract(6), {ValidationMode::kFull, false});
  for (int64_t id = 0; id < 6; ++id) expect_fixed_sample(*reader, id);
}

TEST(LatentStore, PublishingASecondArtifactKeepsTheFirst) {
  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vae(root, vae_contract(5), "vae-build", 5);
  publish_vlm(root, vlm_contract(5), "vlm-build", 5);
  const json catalog = json::parse(read_bytes(root + "/catalog.json"));
  EXPECT_EQ(catalog["artifacts"][kVae]["build_id"], "vae-build");
  EXPECT_EQ(catalog["artifacts"][kVlm]["build_id"], "vlm-build");
  expect_fixed_sample(*open_artifact(root, vae_contract(5)), 4);
  EXPECT_EQ(open_artifact(root, vlm_contract(5))->ragged_length(3, 0), context_length(3));

  const std::vector<ArtifactInfo> infos = validate_cache(root, ValidationMode::kFull);
  ASSERT_EQ(infos.size(), 2u);
  EXPECT_EQ(infos[0].artifact_id, kVae);
  EXPECT_EQ(infos[0].samples, 5);
  EXPECT_EQ(infos[0].shards, 2);
  EXPECT_EQ(infos[0].bytes,
            static_cast<int64_t>(fs::file_size(shard_path(root, kVae, "vae-build", 0)) +
                                 fs::file_size(shard_path(root, kVae, "vae-build", 1))));
  EXPECT_EQ(infos[0].coverage, 1.0);
  EXPECT_EQ(infos[0].builds, std::vector<std::string>{"vae-build"});
  EXPECT_EQ(infos[1].artifact_id, kVlm);
  EXPECT_EQ(infos[1].contract_summary["values"], vlm_contract(5)["values"]);
  EXPECT_EQ(infos[1].contract_summary["dependencies"]["producer"],
            fingerprint(vlm_contract(5)["dependencies"]["producer"]).substr(0, 16));
}

TEST(LatentStore, ExistingArtifactsAreReplacedOnlyWithOverwrite) {
  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vae(root, vae_contract(5), "b1", 5);
  const std::string refusal = "Cache artifacts already exist at " + root +
                              ": [vae_latent.current]. Pass --overwrite to publish replacement "
                              "builds.";
  EXPECT_EQ(error_of([&] { check_write_target(root, {kVlm, kVae}, false); }), refusal);
  check_write_target(root, {kVlm}, false);
  check_write_target(root, {kVae}, true);
  EXPECT_EQ(error_of([&] { publish_vae(root, vae_contract(5, "sha256:new"), "b2", 5); }), refusal);

  publish_vae(root, vae_contract(5, "sha256:new"), "b2", 5, 4, /*overwrite=*/true);
  EXPECT_EQ(json::parse(read_bytes(root + "/catalog.json"))["artifacts"][kVae]["build_id"], "b2");
  expect_fixed_sample(*open_artifact(root, vae_contract(5, "sha256:new")), 2);
  // The same build id published again replaces its directory.
  publish_vae(root, vae_contract(5, "sha256:new"), "b2", 5, 2, /*overwrite=*/true);
  EXPECT_EQ(open_artifact(root, vae_contract(5, "sha256:new"))->contract(),
            vae_contract(5, "sha256:new"));
  EXPECT_EQ(cache_info(root)[0].shards, 3);
}

TEST(LatentStore, ContractMismatchesNameTheFirstDifferingPart) {
  const json cached = vae_contract(10);
  const auto mismatch = [&](const json& expected, bool partial = false) {
    return error_of([&] { compare_contracts(cached, expected, kVae, partial); });
  };
  compare_contracts(cached, vae_contract(10), kVae, false);

  EXPECT_EQ(mismatch(vae_contract(12)),
            "vae_latent.current sample_count mismatch: cache=10 expected=12");
  json expected = cached;
  expected["keyspace_fingerprint"] = "other";
  EXPECT_EQ(mismatch(expected), "vae_latent.current keyspace fingerprint mismatch.");
  // Where the contracts carry the datasets' roots and episode lengths, the first that differs is
  // named (issue 25).
  json with_datasets = cached;
  with_datasets["dependencies"]["dataset"]["datasets"] = {
      {{"root", "/data/a"}, {"episodes", {{0, 5}, {1, 5}}}, {"inventory", "x"}}};
  expected = with_datasets;
  expected["keyspace_fingerprint"] = "other";
  expected["dependencies"]["dataset"]["datasets"][0]["episodes"][1] = {1, 4};
  EXPECT_EQ(error_of([&] { compare_contracts(with_datasets, expected, kVae, false); }),
            "vae_latent.current keyspace fingerprint mismatch: the datasets' samples differ at "
            "/datasets/0/episodes/1/1 (episodes are [episode_index, length]): cache=5 expected=4; "
            "generate the cache for these datasets with `wam-pipeline cache generate PIPELINE "
            "--overwrite`");
  expected = cached;
  expected["key_codec"] = "sample_str_v2";
  EXPECT_EQ(mismatch(expected),
            "vae_latent.current key codec mismatch: cache=\"sample_int_v1\" "
            "expected=\"sample_str_v2\"");
  expected = cached;
  expected["dependencies"]["dataset"]["files"][0]["size"] = 1001;
  expected["dependencies"]["producer"]["weights"] = "sha256:zzz";
  EXPECT_EQ(mismatch(expected),
            "vae_latent.current dependency 'dataset' mismatch at /files/0/size: cache=1000 "
            "expected=1001");
  expected = cached;
  expected["dependencies"]["image_preprocess"]["brightness"] = 0.2;
  EXPECT_EQ(mismatch(expected),
            "vae_latent.current dependency 'image_preprocess' mismatch at /brightness: cache=0.0 "
            "expected=0.2");
  expected = cached;
  expected["dependencies"]["image_preprocess"]["jitter"] = true;
  EXPECT_EQ(mismatch(expected),
            "vae_latent.current dependency 'image_preprocess' mismatch at /jitter: "
            "cache=<absent> expected=true");
  expected = cached;
  expected["values"]["latent"]["dtype"] = "float32";
  EXPECT_EQ(mismatch(expected),
            "vae_latent.current tensor schema mismatch at /latent/dtype: cache=\"bfloat16\" "
            "expected=\"float32\"");
  expected = cached;
  expected["value_codec"] = "zstd";
  EXPECT_EQ(mismatch(expected),
            "vae_latent.current value codec mismatch: cache=\"raw\" expected=\"zstd\"");
}

TEST(LatentStore, PartialContractsMayCoverAPrefixOnly) {
  const json cached = vlm_contract(4);
  compare_contracts(cached, vlm_contract(10), kVlm, true);
  EXPECT_EQ(error_of([&] { compare_contracts(cached, vlm_contract(3), kVlm, true); }),
            "vlm.current partial cache sample_count exceeds the expected one: cache=4 "
            "expected=3");
  json expected = vlm_contract(10);
  expected["dependencies"]["producer"]["weights"] = "sha256:ccc";
  expected["value_codec"] = "zstd";
  EXPECT_EQ(error_of([&] { compare_contracts(cached, expected, kVlm, true); }),
            "vlm.current partial cache contract mismatch: fields=[dependencies, value_codec]");

  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vlm(root, vlm_contract(4), "v1", 4);
  const auto reader = open_artifact(root, vlm_contract(10), {ValidationMode::kFull, true});
  EXPECT_EQ(reader->coverage(), 0.4);
  EXPECT_EQ(reader->cached_samples(), 4);
  EXPECT_EQ(reader->expected_samples(), 10);
  EXPECT_TRUE(reader->contains(3));
  EXPECT_FALSE(reader->contains(4));
  // Without partial_allowed the same cache is a sample_count mismatch.
  EXPECT_EQ(error_of([&] { open_artifact(root, vlm_contract(10)); }),
            "vlm.current sample_count mismatch: cache=4 expected=10");
  std::vector<uint16_t> words(8);
  EXPECT_EQ(error_of([&] { reader->read_fixed(0, 0, words.data()); }),
            "vlm.current value context is ragged: read it with read_ragged");

  const std::string empty_root = dir.file("empty");
  ArtifactBuilder(empty_root, vlm_contract(0), "v0").publish(false);
  EXPECT_EQ(error_of([&] {
              open_artifact(empty_root, vlm_contract(10), {ValidationMode::kFull, true});
            }),
            "vlm.current partial cache is empty: " + empty_root +
                "/artifacts/vlm.current/builds/v0/manifest.json");
}

class PublishedVae : public ::testing::Test {
 protected:
  void SetUp() override { publish_vae(root_, vae_contract(10), "b1", 10); }
  std::string open_error(ValidationMode mode) {
    return error_of([&] { open_artifact(root_, vae_contract(10), {mode, false}); });
  }
  TempDir dir_;
  std::string root_ = dir_.file("cache");
  std::string shard1_ = shard_path(root_, kVae, "b1", 1);
};

TEST_F(PublishedVae, TruncatedShardFailsMetaOnlyValidation) {
  const std::string bytes = read_bytes(shard1_);
  write_bytes(shard1_, bytes.substr(0, bytes.size() - 10));
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "vae_latent.current shard size mismatch: " + shard1_ + " has " +
                std::to_string(bytes.size() - 10) + " bytes, the manifest says " +
                std::to_string(bytes.size()));
}

// Meta-only validation (the default on read) does not hash the shards; the read of the damaged
// row does not serve it, since every row's checksum is compared (issue 25: flipped latent bytes
// once trained silently).
TEST_F(PublishedVae, FlippedByteFailsTheReadAndFullValidation) {
  // Sample 5 is row 1 of shard 1; flip a bit of its latent.
  const FixedRows row = fixed_rows({5});
  const std::string pattern(reinterpret_cast<const char*>(row.latent.data()), 48);
  std::string bytes = read_bytes(shard1_);
  const size_t at = bytes.find(pattern);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 10] ^= 0x04;
  write_bytes(shard1_, bytes);

  const auto reader = open_artifact(root_, vae_contract(10), {ValidationMode::kMetaOnly, false});
  std::vector<uint16_t> latent(24);
  EXPECT_EQ(error_of([&] { reader->read_fixed(5, 0, latent.data()); }),
            "vae_latent.current row checksum mismatch: " + shard1_ +
                " row 1 (sample:5) value latent: its bytes are not those written; the shard is "
                "damaged: rebuild the cache with `wam-pipeline cache generate PIPELINE "
                "--overwrite`");
  reader->read_fixed(4, 0, latent.data());  // the row beside it is whole
  EXPECT_EQ(latent, fixed_rows({4}).latent);
  EXPECT_EQ(open_error(ValidationMode::kFull),
            "vae_latent.current shard checksum mismatch: " + shard1_);
  EXPECT_EQ(error_of([&] { validate_cache(root_, ValidationMode::kFull); }),
            "vae_latent.current shard checksum mismatch: " + shard1_);
  validate_cache(root_, ValidationMode::kMetaOnly);
}

TEST_F(PublishedVae, ShortReadNamesTheShard) {
  const auto reader = open_artifact(root_, vae_contract(10));
  fs::resize_file(shard1_, 100);
  std::vector<uint16_t> latent(24);
  const std::string error = error_of([&] { reader->read_fixed(5, 0, latent.data()); });
  const std::string prefix = "vae_latent.current cannot read 48 bytes at ";
  const std::string suffix = " of " + shard1_ + ": the file ends early";
  ASSERT_GT(error.size(), prefix.size() + suffix.size());
  EXPECT_EQ(error.substr(0, prefix.size()), prefix);
  EXPECT_EQ(error.substr(error.size() - suffix.size()), suffix);
  EXPECT_EQ(reader->rows_read(), 0u);
}

TEST_F(PublishedVae, MissingShardIsNamed) {
  fs::remove(shard1_);
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly), "Missing vae_latent.current shard " + shard1_);
}

TEST_F(PublishedVae, MissingCatalogTellsHowToGenerate) {
  fs::remove(root_ + "/catalog.json");
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "Cache catalog not found: " + root_ +
                "/catalog.json. Run `wam-pipeline cache generate PIPELINE` first.");
}

TEST_F(PublishedVae, EditedManifestFailsTheCatalogChecksum) {
  const std::string manifest = root_ + "/artifacts/vae_latent.current/builds/b1/manifest.json";
  write_bytes(manifest, read_bytes(manifest) + " ");
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "Catalog manifest checksum mismatch: " + manifest + " does not match the checksum in " +
                root_ + "/catalog.json");
}

TEST_F(PublishedVae, IncompatibleCatalogAndUnknownArtifact) {
  EXPECT_EQ(error_of([&] { open_artifact(root_, vlm_contract(10)); }),
            "Selected cache artifact 'vlm.current' is missing from catalog.");
  json catalog = json::parse(read_bytes(root_ + "/catalog.json"));
  catalog["schema_version"] = 2;
  write_bytes(root_ + "/catalog.json", catalog.dump());
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "Cache storage format is incompatible: root=" + root_ +
                ". Existing cache data is not migrated automatically; generate the cache in an "
                "empty/new root.");
}

// Rewrites index.json and re-signs it in the manifest and the manifest in the catalog, so that
// only the checks after the checksums can catch the edit.
void edit_index(const std::string& root, const std::function<void(json&)>& edit) {
  const std::string build = root + "/artifacts/vae_latent.current/builds/b1";
  json index = json::parse(read_bytes(build + "/index.json"));
  edit(index);
  const std::string index_text = index.dump(2);
  write_bytes(build + "/index.json", index_text);
  json manifest = json::parse(read_bytes(build + "/manifest.json"));
  manifest["index_sha256"] = sha256_hex(index_text);
  const std::string manifest_text = manifest.dump(2);
  write_bytes(build + "/manifest.json", manifest_text);
  json catalog = json::parse(read_bytes(root + "/catalog.json"));
  catalog["artifacts"][kVae]["manifest_sha256"] = sha256_hex(manifest_text);
  write_bytes(root + "/catalog.json", catalog.dump(2));
}

// Rewrites manifest.json and re-signs it in the catalog.
void edit_manifest(const std::string& root, const std::function<void(json&)>& edit) {
  const std::string build = root + "/artifacts/vae_latent.current/builds/b1";
  json manifest = json::parse(read_bytes(build + "/manifest.json"));
  edit(manifest);
  const std::string manifest_text = manifest.dump(2);
  write_bytes(build + "/manifest.json", manifest_text);
  json catalog = json::parse(read_bytes(root + "/catalog.json"));
  catalog["artifacts"][kVae]["manifest_sha256"] = sha256_hex(manifest_text);
  write_bytes(root + "/catalog.json", catalog.dump(2));
}

// Counts and paths read from a damaged manifest once ended in std::bad_alloc, a vector length
// error, or a shard read from outside the cache root (issue 25).
TEST_F(PublishedVae, ManifestCountsAndPathsAreBoundedAndNamed) {
  const std::string manifest = root_ + "/artifacts/vae_latent.current/builds/b1/manifest.json";
  const std::string build = root_ + "/artifacts/vae_latent.current/builds/b1";
  const std::string fix =
      "; rebuild the cache with `wam-pipeline cache generate PIPELINE --overwrite`";
  const std::string original = read_bytes(manifest);
  for (const int64_t rows : {int64_t{1} << 40, int64_t{-1}}) {
    write_bytes(manifest, original);
    edit_manifest(root_, [&](json& m) { m["shards"][1]["rows"] = rows; });
    EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
              "vae_latent.current manifest " + manifest + ": /shards/1/rows is " +
                  std::to_string(rows) + ", outside 1 .. 10 (the samples " + build +
                  "/index.json lists)" + fix);
  }
  write_bytes(manifest, original);
  edit_manifest(root_, [&](json& m) { m["shards"][0]["file"] = "../../../../../../etc/passwd"; });
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "vae_latent.current manifest " + manifest +
                ": /shards/0/file \"../../../../../../etc/passwd\" leaves the build directory " +
                build + fix);
  json catalog = json::parse(read_bytes(root_ + "/catalog.json"));
  catalog["artifacts"][kVae]["manifest"] = "../outside/manifest.json";
  write_bytes(root_ + "/catalog.json", catalog.dump());
  const std::string outside =
      "vae_latent.current manifest path leaves the cache root: "
      "\"../outside/manifest.json\" in " +
      root_ + "/catalog.json";
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly), outside);
  EXPECT_EQ(error_of([&] { cache_info(root_); }), outside);
  catalog["artifacts"][kVae]["manifest"] = "artifacts/vae_latent.current/builds/b1/manifest.json";
  write_bytes(root_ + "/catalog.json", catalog.dump());
  write_bytes(manifest, original);
  edit_manifest(root_, [&](json& m) { m["index_file"] = "/etc/hostname"; });
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "vae_latent.current manifest " + manifest +
                ": /index_file \"/etc/hostname\" leaves the build directory " + build + fix);
  EXPECT_EQ(error_of([&] { cache_info(root_); }),
            "vae_latent.current manifest " + manifest +
                ": /index_file \"/etc/hostname\" leaves the build directory");
}

// `cache info` once converted a manifest's huge floating-point count to int64 unchecked
// (undefined behaviour, found by fuzz_cache_json).
TEST_F(PublishedVae, CacheInfoNamesCountsThatAreNotIntegers) {
  const std::string manifest = root_ + "/artifacts/vae_latent.current/builds/b1/manifest.json";
  const std::string original = read_bytes(manifest);
  edit_manifest(root_, [](json& m) { m["contract"]["sample_count"] = 3.3e107; });
  EXPECT_EQ(error_of([&] { cache_info(root_); }),
            "vae_latent.current manifest " + manifest +
                ": /contract/sample_count is 3.3e+107, not an integer");
  write_bytes(manifest, original);
  edit_manifest(root_, [](json& m) { m["shards"][1]["bytes"] = "many"; });
  EXPECT_EQ(
      error_of([&] { cache_info(root_); }),
      "vae_latent.current manifest " + manifest + ": /shards/1/bytes is \"many\", not an integer");
}

// A catalog entry of the wrong type once surfaced as a raw [json.exception.type_error.306].
TEST_F(PublishedVae, CatalogEntriesOfTheWrongTypeNameTheCatalog) {
  const std::string catalog_path = root_ + "/catalog.json";
  const std::string fix =
      "; the catalog is damaged: rebuild the cache with `wam-pipeline cache generate PIPELINE "
      "--overwrite`";
  json catalog = json::parse(read_bytes(catalog_path));
  catalog["artifacts"][kVae]["build_id"] = 7;
  write_bytes(catalog_path, catalog.dump());
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            catalog_path +
                ": /artifacts/vae_latent.current/build_id is a number, expected a "
                "string" +
                fix);
  catalog["artifacts"][kVae] = json::array({1, 2});
  write_bytes(catalog_path, catalog.dump());
  const std::string refusal = catalog_path +
                              ": /artifacts/vae_latent.current is an array, expected an object "
                              "{backend, build_id, manifest, manifest_sha256}" +
                              fix;
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly), refusal);
  EXPECT_EQ(error_of([&] { cache_info(root_); }), refusal);
  EXPECT_EQ(error_of([&] { check_write_target(root_, {kVlm}, false); }), refusal);
}

TEST(LatentStore, KeyCoverageOfAHugeClaimedKeyspaceIsCheap) {
  EXPECT_EQ(error_of([&] {
              internal::check_key_coverage(kVae, {0, 2, 2, -4}, int64_t{1} << 40);
            }),
            "vae_latent.current key coverage mismatch: missing=[sample:1, sample:3, sample:4, "
            "sample:5, sample:6, sample:7, sample:8, sample:9, ...] extra=[sample:2, sample:-4] "
            "(1099511627774 missing, 2 extra or duplicate, 1099511627776 expected)");
  internal::check_key_coverage(kVae, {2, 0, 1}, 3);
}

TEST_F(PublishedVae, IndexWithoutAKeyFailsCoverage) {
  edit_index(root_, [](json& index) { index["entries"].erase("sample:3"); });
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "vae_latent.current key coverage mismatch: missing=[sample:3] extra=[] (1 missing, 0 "
            "extra or duplicate, 10 expected)");
}

TEST_F(PublishedVae, SwappedIndexEntriesFailOnlyFullValidation) {
  edit_index(root_, [](json& index) {
    std::swap(index["entries"]["sample:1"], index["entries"]["sample:2"]);
  });
  const auto reader = open_artifact(root_, vae_contract(10), {ValidationMode::kMetaOnly, false});
  EXPECT_EQ(open_error(ValidationMode::kFull),
            "vae_latent.current index/shard key mismatch: " + shard_path(root_, kVae, "b1", 0) +
                " row 1 holds sample:1, the index says sample:2");
  // Reads compare each row's stored sample id with the one asked for (issue 25: swapped rows
  // once trained silently).
  std::vector<uint16_t> latent(24);
  EXPECT_EQ(error_of([&] { reader->read_fixed(1, 0, latent.data()); }),
            "vae_latent.current index/shard key mismatch: " + shard_path(root_, kVae, "b1", 0) +
                " row 2 holds sample:2, the index says sample:1");
  reader->read_fixed(3, 0, latent.data());
  EXPECT_EQ(latent, fixed_rows({3}).latent);
}

// Rewrites each shard's bytes and SHA-256 in the manifest and the manifest's in the catalog, so
// that only the checks of the shards' contents can catch an edit of a shard.
void resign_shards(const std::string& root) {
  const std::string build = root + "/artifacts/vae_latent.current/builds/b1";
  json manifest = json::parse(read_bytes(build + "/manifest.json"));
  for (json& shard : manifest["shards"]) {
    const std::string path = build + "/" + shard["file"].get<std::string>();
    shard["bytes"] = fs::file_size(path);
    shard["sha256"] = sha256_file_hex(path);
  }
  const std::string manifest_text = manifest.dump(2);
  write_bytes(build + "/manifest.json", manifest_text);
  json catalog = json::parse(read_bytes(root + "/catalog.json"));
  catalog["artifacts"][kVae]["manifest_sha256"] = sha256_hex(manifest_text);
  write_bytes(root + "/catalog.json", catalog.dump(2));
}

// Two rows' bytes swapped in a shard, every SHA-256 recomputed: each row's checksum covers its
// sample id, so neither row passes for the other.
TEST_F(PublishedVae, SwappedRowsFailTheReadAndFullValidation) {
  const std::string a(reinterpret_cast<const char*>(fixed_rows({4}).latent.data()), 48);
  const std::string b(reinterpret_cast<const char*>(fixed_rows({5}).latent.data()), 48);
  std::string bytes = read_bytes(shard1_);
  const size_t at_a = bytes.find(a), at_b = bytes.find(b);
  ASSERT_NE(at_a, std::string::npos);
  ASSERT_NE(at_b, std::string::npos);
  bytes.replace(at_a, 48, b);
  bytes.replace(at_b, 48, a);
  write_bytes(shard1_, bytes);
  resign_shards(root_);
  EXPECT_EQ(open_error(ValidationMode::kFull),
            "vae_latent.current row checksum mismatch: " + shard1_ +
                " row 0 (sample:4) value latent: its bytes are not those written; the shard is "
                "damaged: rebuild the cache with `wam-pipeline cache generate PIPELINE "
                "--overwrite`");
  const auto reader = open_artifact(root_, vae_contract(10));
  std::vector<uint16_t> latent(24);
  EXPECT_NE(error_of([&] {
              reader->read_fixed(5, 0, latent.data());
            }).find("row checksum mismatch: " + shard1_ + " row 1 (sample:5) value latent"),
            std::string::npos);
  reader->read_fixed(5, 1, std::vector<float>(2).data());  // its other values are whole
}

// Shards built before rows carried CRC-32C checksums (none, or XXH3 ones) are refused on open,
// with what to do.
TEST_F(PublishedVae, ShardsWithoutRowChecksumsAreRefused) {
  {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    const hid_t file = H5Fopen(shard1_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    ASSERT_GE(H5Ldelete(file, "values/scale.__crc32c", H5P_DEFAULT), 0);
    H5Fclose(file);
  }
  resign_shards(root_);
  EXPECT_EQ(open_error(ValidationMode::kMetaOnly),
            "vae_latent.current shard " + shard1_ +
                " has no row checksums (values/scale.__crc32c): it was built by an earlier "
                "wam-pipeline; rebuild the cache with `wam-pipeline cache generate PIPELINE "
                "--overwrite`");
}

TEST(LatentStore, PublishChecksExactKeyCoverage) {
  TempDir dir;
  const std::string root = dir.file("cache");
  ArtifactBuilder builder(root, vae_contract(12), "b1");
  builder.write_shard(0, range(0, 4), fixed_rows(range(0, 4)).rows());
  builder.write_shard(1, {2, 3, 5}, fixed_rows({2, 3, 5}).rows());
  EXPECT_EQ(error_of([&] { builder.publish(false); }),
            "vae_latent.current key coverage mismatch: missing=[sample:4, sample:6, sample:7, "
            "sample:8, sample:9, sample:10, sample:11] extra=[sample:2, sample:3] (7 missing, 2 "
            "extra or duplicate, 12 expected)");
  EXPECT_FALSE(fs::exists(root + "/catalog.json"));
  EXPECT_EQ(error_of([&] { builder.write_shard(2, {12}, fixed_rows({12}).rows()); }),
            "vae_latent.current shard 2: sample:12 is outside the keyspace [0, 12)");
  EXPECT_EQ(error_of([&] {
              FixedRows rows = fixed_rows({8});
              rows.latent.pop_back();
              builder.write_shard(2, {8}, rows.rows());
            }),
            "vae_latent.current shard 2: latent holds 46 bytes, its rows need 48");
}

TEST(LatentStore, ConcurrentReadsReturnTheRightBytes) {
  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vae(root, vae_contract(64), "b1", 64, 8);
  const auto reader = open_artifact(root, vae_contract(64));
  constexpr int kThreads = 4;
  constexpr int kReads = 2000;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint16_t> latent(24);
      for (int i = 0; i < kReads; ++i) {
        const int64_t id = (i * 37 + t * 11) % 64;
        reader->read_fixed(id, 0, latent.data());
        if (latent != fixed_rows({id}).latent) ++wrong[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(kThreads, 0));
  EXPECT_EQ(reader->rows_read(), static_cast<uint64_t>(kThreads * kReads));
  EXPECT_EQ(reader->bytes_read(), static_cast<uint64_t>(kThreads * kReads * 48));
}

TEST(LatentStore, ShardsMayBeWrittenFromSeveralThreads) {
  TempDir dir;
  const std::string root = dir.file("cache");
  ArtifactBuilder builder(root, vae_contract(24), "b1");
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      for (int64_t shard = t; shard < 6; shard += 3) {
        const auto ids = range(shard * 4, shard * 4 + 4);
        builder.write_shard(shard, ids, fixed_rows(ids).rows());
      }
    });
  }
  for (auto& writer : writers) writer.join();
  EXPECT_EQ(builder.shards_written(), 6);
  EXPECT_EQ(builder.publish(false).shards, 6);
  const auto reader = open_artifact(root, vae_contract(24), {ValidationMode::kFull, false});
  for (int64_t id = 0; id < 24; ++id) expect_fixed_sample(*reader, id);
}

TEST(LatentStore, BuildKilledMidwayLeavesTheCatalogAndResumes) {
  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vae(root, vae_contract(12), "old", 12);
  const std::string catalog_before = read_bytes(root + "/catalog.json");
  const json new_contract = vae_contract(12, "sha256:retrained");

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ArtifactBuilder builder(root, new_contract, "new");
    builder.write_shard(0, range(0, 4), fixed_rows(range(0, 4)).rows());
    builder.write_shard(1, range(4, 8), fixed_rows(range(4, 8)).rows());
    raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  EXPECT_EQ(read_bytes(root + "/catalog.json"), catalog_before);
  const auto old_reader = open_artifact(root, vae_contract(12), {ValidationMode::kFull, false});
  EXPECT_EQ(old_reader->build_id(), "old");
  expect_fixed_sample(*old_reader, 7);
  EXPECT_EQ(error_of([&] { open_artifact(root, new_contract); }),
            "vae_latent.current dependency 'producer' mismatch at /weights: cache=\"sha256:aaa\" "
            "expected=\"sha256:retrained\"");

  ArtifactBuilder resumed(root, new_contract, "new");
  const std::string shard0 = resumed.staging_dir() + "/shards/shard000000.h5";
  struct stat before {};
  ASSERT_EQ(stat(shard0.c_str(), &before), 0);
  for (int64_t shard = 0; shard < 3; ++shard) {
    if (resumed.shard_complete(shard)) continue;
    const auto ids = range(shard * 4, shard * 4 + 4);
    resumed.write_shard(shard, ids, fixed_rows(ids).rows());
  }
  EXPECT_EQ(resumed.shards_written(), 1);
  struct stat after {};
  ASSERT_EQ(stat(shard0.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);

  EXPECT_EQ(error_of([&] { resumed.publish(false); }),
            "Cache artifacts already exist at " + root +
                ": [vae_latent.current]. Pass --overwrite to publish replacement builds.");
  EXPECT_EQ(read_bytes(root + "/catalog.json"), catalog_before);
  resumed.publish(true);
  const auto new_reader = open_artifact(root, new_contract, {ValidationMode::kFull, false});
  EXPECT_EQ(new_reader->build_id(), "new");
  for (int64_t id = 0; id < 12; ++id) expect_fixed_sample(*new_reader, id);
  EXPECT_FALSE(fs::exists(root + "/.tmp"));
}

// A FIFO as catalog.json once blocked every reader and builder in open() (issue 25).
TEST(LatentStore, ACatalogThatIsNotARegularFileIsRefused) {
  TempDir dir;
  const std::string root = dir.file("cache");
  fs::create_directories(root);
  const std::string catalog = root + "/catalog.json";
  ASSERT_EQ(::mkfifo(catalog.c_str(), 0600), 0);
  const std::string refusal =
      "cannot read cache catalog " + catalog + ": not a regular file (a FIFO)";
  EXPECT_EQ(error_of([&] { open_artifact(root, vae_contract(4)); }), refusal);
  EXPECT_EQ(error_of([&] { check_write_target(root, {kVae}, false); }), refusal);
  fs::remove(catalog);
  write_bytes(catalog, std::string(300, '[') + std::string(300, ']'));
  EXPECT_EQ(error_of([&] { open_artifact(root, vae_contract(4)); }),
            catalog + ":1:257: JSON nested deeper than 256 levels");
}

// Waiting for a held lock is bounded, and the error names the lock file and its holder.
TEST(LatentStore, CatalogLockWaitsABoundedTimeAndNamesTheHolder) {
  TempDir dir;
  const std::string root = dir.file("cache");
  const std::string lock_file = root + "/.catalog.lock";
  const auto timed_out = [&](double seconds) {
    return error_of([&] { internal::CatalogLock lock(root, seconds); });
  };
  {
    internal::CatalogLock first(root);
    // flock locks belong to open file descriptions: a second open conflicts, as another
    // process's would.
    const std::string error = timed_out(0.1);
    const std::string prefix = "cannot take the cache catalog lock " + lock_file +
                               " within 0.1 s: it is held by pid " + std::to_string(::getpid()) +
                               " on host ";
    EXPECT_EQ(error.substr(0, prefix.size()), prefix) << error;
    EXPECT_NE(error.find(" since 20"), std::string::npos) << error;
    EXPECT_NE(error.find("Z. A publish holds it for a moment only: that process hangs; stop it, "
                         "or remove the lock file if no process holds it any more"),
              std::string::npos)
        << error;
  }
  internal::CatalogLock free_again(root, 0);
}

TEST(LatentStore, AForeignLockHolderIsAnUnknownProcess) {
  TempDir dir;
  const std::string root = dir.file("cache");
  fs::create_directories(root);
  const int fd = ::open((root + "/.catalog.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  EXPECT_EQ(error_of([&] { internal::CatalogLock lock(root, 0); }),
            "cannot take the cache catalog lock " + root +
                "/.catalog.lock within 0 s: it is held by an unknown process. A publish holds it "
                "for a moment only: that process hangs; stop it, or remove the lock file if no "
                "process holds it any more");
  ::close(fd);
}

// A second `cache generate` into the same root once failed late with a raw HDF5 error about a
// staging file the first had moved away; it now fails at once.
TEST(LatentStore, ASecondBuildIntoOneRootFailsAtOnce) {
  TempDir dir;
  const std::string root = dir.file("cache");
  {
    BuildLock first(root);
    const std::string error = error_of([&] { BuildLock second(root); });
    const std::string prefix = "another cache build is running on " + root + " (lock " + root +
                               "/.build.lock, held by pid " + std::to_string(::getpid()) +
                               " on host ";
    const std::string suffix = "); wait for it to finish, or build into another cache root";
    ASSERT_GT(error.size(), prefix.size() + suffix.size()) << error;
    EXPECT_EQ(error.substr(0, prefix.size()), prefix);
    EXPECT_EQ(error.substr(error.size() - suffix.size()), suffix);
  }
  BuildLock after_the_first(root);
  fs::remove(root + "/.build.lock");
  ASSERT_EQ(::mkfifo((root + "/.x.lock").c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { internal::FileLock lock(root + "/.x.lock", 0); }),
            "cannot use " + root + "/.x.lock as a lock file: not a regular file (a FIFO)");
}

// Runs `command` and returns its standard output.
std::string run(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  pclose(pipe);
  return output;
}

float bf16_to_float(uint16_t word) {
  const uint32_t bits = static_cast<uint32_t>(word) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// cache generate's shard rows come from the run's host memory budget (docs/RELIABILITY.md, "Host
// memory"): a shard closes at the rows the budget holds, each row counted twice (the rows and the
// shard's contiguous copy), and at least one row when nothing is left.
TEST(LatentStore, ShardRowsAreBoundedByTheHostMemoryBudget) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  constexpr int64_t kRow = 110592;  // the RoboTwin current latent, bf16 [48,3,24,16]
  EXPECT_EQ(shard_rows_within(nullptr, 64, kRow), 64);  // no budget: the shard size

  // Half of 16 MiB unclaimed holds 37 rows of 2 x 108 KiB, under the shard size of 64.
  HostMemoryBudget small(16 * kMiB, "settings.host_memory_gib", 6, 20, 2);
  EXPECT_EQ(shard_rows_within(&small, 64, kRow), 37);
  EXPECT_EQ(small.start_line(),
            "host memory budget 16.0 MiB (settings.host_memory_gib): up to 6 samples in flight, "
            "37 cache shard rows (7.80 MiB)");

  // A larger budget holds the whole shard.
  HostMemoryBudget large(1024 * kMiB, "settings.host_memory_gib", 6, 20, 2);
  EXPECT_EQ(shard_rows_within(&large, 64, kRow), 64);

  // Claimed over the budget already (a decoder needs its sessions): one row per shard.
  HostMemoryBudget spent(kMiB, "settings.host_memory_gib", 6, 20, 2);
  spent.claim("decoder sessions", 2 * kMiB, 2, 1);
  EXPECT_EQ(shard_rows_within(&spent, 64, kRow), 1);
}

TEST(LatentStore, H5pyReadsAShard) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no h5py (scripts/setup.sh installs python3-h5py)";
  }
  TempDir dir;
  const std::string root = dir.file("cache");
  publish_vae(root, vae_contract(6), "b1", 6);
  publish_vlm(root, vlm_contract(6), "v1", 6);
  const std::string script =
      std::string(WAM_SOURCE_DIR) + "/tests/stages/formats/latent_store/read_shard.py";

  const json latent = json::parse(
      run("/usr/bin/python3 " + script + " " + shard_path(root, kVae, "b1", 1) + " latent"));
  EXPECT_EQ(latent["artifact_id"], kVae);
  EXPECT_EQ(latent["build_id"], "b1");
  EXPECT_EQ(latent["key_codec"], "sample_int_v1");
  EXPECT_EQ(latent["schema_version"], 3);
  EXPECT_EQ(latent["sample_ids"], json({4, 5}));
  EXPECT_EQ(latent["shape"], json({2, 4, 2, 3}));
  EXPECT_EQ(latent["dtype"], "bfloat16");
  EXPECT_EQ(latent["numpy_dtype"], "uint16");
  const json expected_latent = {bf16_to_float(latent_word(5, 0)), bf16_to_float(latent_word(5, 1)),
                                bf16_to_float(latent_word(5, 2)), bf16_to_float(latent_word(5, 3))};
  EXPECT_EQ(latent["last_row_first_values"], expected_latent);

  const json scale = json::parse(
      run("/usr/bin/python3 " + script + " " + shard_path(root, kVae, "b1", 1) + " scale"));
  EXPECT_EQ(scale["numpy_dtype"], "float32");
  EXPECT_EQ(scale["last_row_first_values"], json({scale_value(5, 0), scale_value(5, 1)}));

  const json context = json::parse(
      run("/usr/bin/python3 " + script + " " + shard_path(root, kVlm, "v1", 1) + " context"));
  EXPECT_EQ(context["sample_ids"], json({3, 4, 5}));
  // Rows of 4, 1 and 2 tokens (1 + id % 4), flat along dim 0.
  EXPECT_EQ(context["offsets"], json({0, 4, 5, 7}));
  EXPECT_EQ(context["shape"], json({7, 8}));
  EXPECT_EQ(context["last_row_first_values"][0], bf16_to_float(latent_word(5, 0)));
}

}  // namespace
}  // namespace wam::cache
