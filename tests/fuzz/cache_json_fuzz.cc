// Fuzz target: the latent store (stages/cache/latent_store) on arbitrary catalog, manifest and
// index text. One input is up to three parts separated by NUL bytes (which JSON text never holds):
//
//   catalog.json \0 manifest.json \0 index.json
//
// written over a scratch cache root holding one published build (vae_latent.current, 6 samples in
// shards of 4 and 2); a part that is absent keeps the build's own file, and so does every part of
// an empty input. Where a part parses as an
// object, the harness re-signs it (the manifest's index_sha256, the catalog entry's
// manifest_sha256), so that inputs reach the checks behind the checksums. Then cache info runs,
// the build is opened in meta-only and full mode, and every sample is read.
//
// The oracle: each step succeeds or throws wam::Error. Anything else escaping (std::bad_alloc from
// a count read from a file, a JSON library exception) or any sanitizer report is a finding.
// Seeds: tests/fuzz/seeds/cache_json.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/io/sha256.h"
#include "formats/latent_store/artifact_builder.h"
#include "formats/latent_store/latent_store.h"
#include "fuzz/fuzz_files.h"
#include "wam/error.h"
#include "wam/limits.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kId = "vae_latent.current";

struct Scratch {
  fs::path root, build;
  std::string files[3];  // the build's own catalog, manifest and index text
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const Scratch& scratch() {
  static const Scratch made = [] {
    Scratch s;
    s.root = wam::fuzz::make_scratch_dir("wam-fuzz-cache");
    json contract = {{"artifact_id", kId},
                     {"sample_count", 6},
                     {"key_codec", "sample_int_v1"},
                     {"dependencies", {{"dataset", {{"files", json::array()}}}}},
                     {"values", {{"latent", {{"dtype", "bfloat16"}, {"shape", {2}}}}}},
                     {"value_codec", "raw"}};
    contract["keyspace_fingerprint"] = wam::cache::fingerprint(contract["dependencies"]);
    wam::cache::ArtifactBuilder builder(s.root.string(), contract, "b1");
    for (int64_t shard = 0; shard < 2; ++shard) {
      std::vector<int64_t> ids;
      std::vector<uint16_t> words;
      for (int64_t id = shard * 4; id < std::min<int64_t>(6, shard * 4 + 4); ++id) {
        ids.push_back(id);
        words.push_back(static_cast<uint16_t>(0x3f00 + id));
        words.push_back(static_cast<uint16_t>(0x4000 + id));
      }
      builder.write_shard(shard, ids, {{"latent", words.data(), words.size() * 2, {}}});
    }
    builder.publish(false);
    s.build = s.root / "artifacts" / kId / "builds" / "b1";
    s.files[0] = read_text(s.root / "catalog.json");
    s.files[1] = read_text(s.build / "manifest.json");
    s.files[2] = read_text(s.build / "index.json");
    return s;
  }();
  return made;
}

// The text as a JSON object, or nothing.
std::optional<json> object_of(const std::string& text) {
  wam::JsonTextError error;
  std::optional<json> value = wam::parse_json_text(text, error);
  if (!value || !value->is_object()) return std::nullopt;
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> parts = wam::fuzz::split_at_nul(input, 3);
  const Scratch& s = scratch();
  std::string text[3];
  for (size_t i = 0; i < 3; ++i) {
    text[i] = i < parts.size() && !(i == 0 && parts[0].empty() && parts.size() == 1)
                  ? std::string(parts[i])
                  : s.files[i];
  }
  if (auto manifest = object_of(text[1])) {
    (*manifest)["index_sha256"] = wam::sha256_hex(text[2]);
    text[1] = manifest->dump(2, ' ', false, json::error_handler_t::replace);
  }
  if (auto catalog = object_of(text[0])) {
    json& artifacts = (*catalog)["artifacts"];
    if (artifacts.is_object() && artifacts.contains(kId) && artifacts[kId].is_object()) {
      artifacts[kId]["manifest_sha256"] = wam::sha256_hex(text[1]);
    }
    text[0] = catalog->dump(2, ' ', false, json::error_handler_t::replace);
  }
  const std::string_view views[3] = {text[0], text[1], text[2]};
  wam::fuzz::write_or_remove(s.root / "catalog.json", &views[0]);
  wam::fuzz::write_or_remove(s.build / "manifest.json", &views[1]);
  wam::fuzz::write_or_remove(s.build / "index.json", &views[2]);
  try {
    (void)wam::cache::cache_info(s.root.string());
  } catch (const wam::Error&) {
  }
  for (const auto mode :
       {wam::cache::ValidationMode::kMetaOnly, wam::cache::ValidationMode::kFull}) {
    try {
      const auto reader = wam::cache::open_stored_artifact(s.root.string(), kId, mode);
      for (size_t v = 0; v < reader->values().size(); ++v) {
        if (reader->values()[v].ragged()) continue;
        std::vector<char> row(reader->values()[v].unit_bytes());
        for (int64_t id = 0; id < reader->expected_samples(); ++id) {
          if (!reader->contains(id)) continue;
          try {
            reader->read_fixed(id, static_cast<int>(v), row.data());
          } catch (const wam::Error&) {
          }
        }
      }
    } catch (const wam::Error&) {
    }
  }
  return 0;
}
