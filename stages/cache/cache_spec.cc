#include "cache/cache_spec.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "common/io/sha256.h"
#include "data/image_ops.h"
#include "formats/latent_store/latent_store.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "models/vae.h"
#include "wam/error.h"

namespace wam::cache {
namespace {

namespace fs = std::filesystem;

// Params that do not change the images an encoder sees: which frames a node emits and whether the
// video crosses as uint8 are the graph's business (generation quantises the same way as training
// when video_dtype says so, and that stays in the contract).
nlohmann::json without(nlohmann::json params, const std::vector<std::string>& keys) {
  for (const auto& key : keys) params.erase(key);
  return params;
}

int64_t window_frames(const CacheSpec& spec) {
  return (spec.sampler.num_frames - 1) / spec.sampler.action_video_freq_ratio + 1;
}

// The params of the reference-cost stand-ins (docs/ENCODERS.md). They came after the first caches,
// which were all built by the compact stand-ins: with architecture "compact" they change nothing
// and stay out of the contract, so those caches keep their contracts; with another architecture
// they are part of it (the stand-in's architecture as "stand_in": "architecture" is the
// reference's model family tag), and a cache of the compact encoders is refused.
const std::vector<std::string> kStandInStructureParams = {
    "width_multipliers", "res_blocks",      "language_width",
    "kv_heads",          "head_dim",        "mlp",
    "vision_layers",     "vision_width",    "vision_heads",
    "vision_mlp",        "spatial_merge",   "temporal_patch",
    "position_grid",     "deepstack_layers"};

// The encoder params that decide its weights and outputs (where it runs does not, its precision
// does), plus the SHA-256 of the file that holds the weights: an exported module's (TorchScript
// file or AOTInductor package) or a built-in stand-in's `weights` (safetensors). The files' paths
// stay out, so a moved file keeps its caches and a changed one does not.
nlohmann::json producer(const nlohmann::json& encoder, const std::string& dtype,
                        const std::string& architecture) {
  nlohmann::json part = without(encoder, {"device", "dtype", "reuse_metadata",
                                          "deduplicate_identical_anchor_batch", "path", "weights"});
  const std::string stand_in = part.value("architecture", "compact");
  if (stand_in == "compact") {
    part = without(part, kStandInStructureParams);
  } else {
    part["stand_in"] = stand_in;
  }
  part["architecture"] = architecture;
  part["dtype"] = dtype;
  if (encoder.value("encoder", "builtin") != "builtin") {  // torchscript or aoti: the file's bytes
    part["weights_sha256"] = sha256_file_hex(encoder.at("path").get<std::string>());
  } else if (!encoder.value("weights", "").empty()) {
    part["weights_sha256"] = sha256_file_hex(encoder.at("weights").get<std::string>());
  }
  return part;
}

int64_t mtime_ns(const struct stat& status) {
  return static_cast<int64_t>(status.st_mtim.tv_sec) * 1000000000LL + status.st_mtim.tv_nsec;
}

// Meta files that describe the samples (not the statistics, which caches do not depend on).
bool is_fingerprinted_meta(const std::string& name) {
  if (name.find("stats") != std::string::npos) return false;
  return name == "info.json" || name.find("episode") != std::string::npos ||
         name.find("tasks") != std::string::npos;
}

nlohmann::json inventory(const std::string& root) {
  nlohmann::json meta = nlohmann::json::object();
  const fs::path meta_dir = fs::path(root) / "meta";
  if (fs::is_directory(meta_dir)) {
    // v3.0 keeps episode metadata in meta/episodes/chunk-XXX/file-XXX.parquet.
    for (const auto& entry : fs::recursive_directory_iterator(meta_dir)) {
      const std::string name = fs::relative(entry.path(), meta_dir).string();
      if (entry.is_regular_file() && is_fingerprinted_meta(name)) {
        meta[name] = sha256_file_hex(entry.path().string());
      }
    }
  }
  nlohmann::json files = nlohmann::json::object();
  for (const char* folder : {"data", "videos", "images"}) {
    const fs::path dir = fs::path(root) / folder;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      struct stat status {};
      if (::stat(entry.path().c_str(), &status) != 0) continue;
      files[fs::relative(entry.path(), root).string()] = {
          {"bytes", static_cast<int64_t>(status.st_size)}, {"mtime_ns", mtime_ns(status)}};
    }
  }
  return {{"meta_sha256", meta}, {"files", files}};
}

}  // namespace

const std::vector<FieldInfo>& all_fields() {
  static const std::vector<FieldInfo> fields = {{"current", "vae_latent.current", true},
                                                {"memory_anchor", "vae_latent.memory_anchor", true},
                                                {"memory_recent", "vae_latent.memory_recent", true},
                                                {"vlm", "vlm.current", false}};
  return fields;
}

const FieldInfo& field_info(const std::string& name) {
  for (const FieldInfo& field : all_fields()) {
    if (field.name == name) return field;
  }
  throw Error("unknown latent cache field \"" + name + "\"");
}

std::vector<std::string> parse_field_selection(const std::vector<std::string>& names) {
  std::set<std::string> chosen;
  std::vector<std::string> unsupported;
  for (const std::string& entry : names) {
    size_t start = 0;
    while (start <= entry.size()) {
      const size_t comma = std::min(entry.find(',', start), entry.size());
      std::string name = entry.substr(start, comma - start);
      name.erase(0, name.find_first_not_of(" \t[]"));
      name.erase(name.find_last_not_of(" \t[]") + 1);
      start = comma + 1;
      if (name.empty()) continue;
      if (name == "all") {
        for (const FieldInfo& field : all_fields()) chosen.insert(field.name);
      } else if (std::any_of(all_fields().begin(), all_fields().end(),
                             [&](const FieldInfo& f) { return f.name == name; })) {
        chosen.insert(name);
      } else {
        unsupported.push_back(name);
      }
    }
  }
  if (!unsupported.empty()) {
    std::string listed;
    for (const auto& name : unsupported) listed += (listed.empty() ? "" : ", ") + name;
    throw Error("Unsupported video latent cache fields [" + listed +
                "]; allowed: current, memory_anchor, memory_recent, vlm.");
  }
  if (chosen.empty()) throw Error("video_latent_cache_fields must select at least one artifact.");
  std::vector<std::string> ordered;
  for (const FieldInfo& field : all_fields()) {
    if (chosen.count(field.name)) ordered.push_back(field.name);
  }
  return ordered;
}

std::string random_augment_message(const std::string& param) {
  return "Offline encoder artifacts require deterministic images; " + param +
         " is enabled. Set \"deterministic\": true (e.g. include "
         "configs/data/robotwin_deterministic.json)";
}

DatasetFingerprint fingerprint_dataset(const std::vector<std::string>& dataset_dirs) {
  DatasetFingerprint result;
  nlohmann::json datasets = nlohmann::json::array();
  for (const data::LeRobotDataset& dataset : data::open_datasets(dataset_dirs)) {
    nlohmann::json episodes = nlohmann::json::array();
    for (const data::EpisodeInfo& episode : dataset.episodes()) {
      episodes.push_back({episode.episode_index, episode.length});
      result.sample_count += episode.length;
    }
    datasets.push_back({{"root", fs::absolute(dataset.root()).lexically_normal().string()},
                        {"episodes", episodes},
                        {"inventory", inventory(dataset.root())}});
  }
  result.dependency = {{"datasets", datasets}, {"sample_count", result.sample_count}};
  return result;
}

std::vector<int64_t> vae_latent_shape(const std::string& field, const CacheSpec& spec) {
  const int64_t frames = field == "current" ? window_frames(spec) : 1;
  return {models::kVaeLatentChannels, (frames - 1) / models::kVaeTemporalFactor + 1,
          image_ops::kCanvasHeight / models::kVaeSpatialFactor,
          image_ops::kCanvasWidth / models::kVaeSpatialFactor};
}

nlohmann::json artifact_contract(const std::string& field, const CacheSpec& spec,
                                 const DatasetFingerprint& dataset, int64_t sample_count) {
  const FieldInfo& info = field_info(field);
  // The keyspace is which samples exist (datasets and their episode lengths), not file contents:
  // a changed file is reported as a dataset dependency mismatch, naming the file.
  nlohmann::json episodes = nlohmann::json::array();
  for (const auto& entry : dataset.dependency.at("datasets")) {
    episodes.push_back({entry.at("root"), entry.at("episodes")});
  }
  const nlohmann::json keyspace = {{"datasets", episodes},
                                   {"key_codec", kKeyCodec},
                                   {"indices", {{"range", {0, sample_count}}}}};
  nlohmann::json selection = {
      {"field", field},
      {"cameras", spec.sampler.cameras},
      {"num_frames", spec.sampler.num_frames},
      {"action_video_freq_ratio", spec.sampler.action_video_freq_ratio},
      {"memory_recent_frame_offset", spec.sampler.memory_recent_frame_offset},
      {"tiled", false}};
  nlohmann::json contract = {{"artifact_id", info.artifact_id},
                             {"sample_count", sample_count},
                             {"keyspace_fingerprint", fingerprint(keyspace)},
                             {"key_codec", kKeyCodec},
                             {"value_codec", kValueCodec}};
  // Where Augment runs, and whether it resizes the frames or VideoDecode does (planes_from_decode),
  // move the images by rounding only (data/augment_ops.h, data/pixel_kernels.h): not part of what
  // the cache holds.
  nlohmann::json preprocess =
      without(params_to_json(spec.augment), {"frames", "device", "planes_from_decode"});
  // resize and resize_fill came after the first caches, which were all stretched: they enter the
  // contract only when they change the images, so that those caches keep their contracts.
  if (spec.augment.resize != image_ops::ResizeMode::kFit) preprocess.erase("resize_fill");
  if (spec.augment.resize == image_ops::ResizeMode::kStretch) preprocess.erase("resize");
  if (info.vae) {
    contract["dependencies"] = {
        {"dataset", dataset.dependency},
        {"image_preprocess", preprocess},
        {"field_selection", selection},
        {"producer", producer(params_to_json(spec.vae), spec.vae_dtype, "wan22_vae")}};
    contract["values"] = {
        {"latent", {{"dtype", spec.vae_dtype}, {"shape", vae_latent_shape(field, spec)}}}};
  } else {
    contract["dependencies"] = {
        {"dataset", dataset.dependency},
        {"image_prompt_preprocess", preprocess},
        {"field_selection", selection},
        {"producer", producer(params_to_json(spec.vlm), spec.vlm_dtype, "qwen_vl")}};
    contract["values"] = {{"context", {{"dtype", spec.vlm_dtype}, {"shape", {-1, spec.vlm.width}}}},
                          {"mask", {{"dtype", "bool"}, {"shape", {-1}}}}};
  }
  return contract;
}

std::string build_id_of(const nlohmann::json& contract, int64_t shard_size) {
  return fingerprint({{"contract", contract}, {"shard_size", shard_size}}).substr(0, 16);
}

}  // namespace wam::cache
