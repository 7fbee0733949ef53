// What a latent cache is made of and checked against: the selectable fields (the reference's
// current, memory_anchor, memory_recent and vlm), the artifacts that hold them, and the contract
// every artifact carries, computed from the params that the LatentCacheLookup node declares (the
// data config's sampler and augment fragments, the VAE and VLM encoder params). `cache generate`
// writes these contracts and LatentCacheLookup expects them, so both sides compute them here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/augment_params.h"
#include "data/episode_sampler_params.h"
#include "encode/vae_encode_params.h"
#include "encode/vlm_encode_params.h"
#include "wam/stage.h"

namespace wam::cache {

// The Sample fields each cache field fills, and where it is stored.
struct FieldInfo {
  std::string name;         // current, memory_anchor, memory_recent, vlm
  std::string artifact_id;  // vae_latent.current, ..., vlm.current
  bool vae = true;          // a VAE latent, or the VLM's context rows
};

const std::vector<FieldInfo>& all_fields();  // in canonical order
const FieldInfo& field_info(const std::string& name);

// Parses a field selection: names, "all", or comma-separated names, in any mix. Returns the
// selected fields in canonical order, deduplicated. Throws wam::Error with the reference's words:
// "Unsupported video latent cache fields [x]; allowed: current, memory_anchor, memory_recent,
// vlm." or "video_latent_cache_fields must select at least one artifact."
std::vector<std::string> parse_field_selection(const std::vector<std::string>& names);

// The params the cache is computed from. Caches hold one encoding per sample, so they refuse
// augment params that make the images random (stages::first_random_augment_param).
struct CacheSpec {
  stages::EpisodeSamplerParams sampler;
  stages::AugmentParams augment;
  stages::VaeEncodeParams vae;
  stages::VlmEncodeParams vlm;
  std::string vae_dtype;  // the VAE's resolved precision: float32 | bfloat16
  std::string vlm_dtype;  // the VLM's
};

// "Offline encoder artifacts require deterministic images; <param> is enabled. Set ..." (the
// reference's words, and what to do about it).
std::string random_augment_message(const std::string& param);

// The dataset part of every contract: dataset directories, per-episode frame counts and an
// inventory (SHA-256 of meta/info.json and the episode/task meta files; size and mtime_ns of every
// file under data/, videos/ and images/). Reads only meta files and stat()s the rest.
struct DatasetFingerprint {
  nlohmann::json dependency;
  int64_t sample_count = 0;  // frames of the concatenated episodes: sample ids [0, sample_count)
};
DatasetFingerprint fingerprint_dataset(const std::vector<std::string>& dataset_dirs);

// The contract of `field`'s artifact over sample ids [0, sample_count). `dataset` comes from
// fingerprint_dataset of the same spec; `sample_count` is smaller than its count for a partial
// build (--max-samples).
nlohmann::json artifact_contract(const std::string& field, const CacheSpec& spec,
                                 const DatasetFingerprint& dataset, int64_t sample_count);

// The build id of a contract and shard size: the same build always stages into the same
// directory, so an interrupted build resumes (shards of another size are never mixed in).
std::string build_id_of(const nlohmann::json& contract, int64_t shard_size);

// Per-sample latent shape of a VAE field: [48, T', H/16, W/16] on the 384x256 canvas, T' = 3 for
// the 9-frame current window, 1 for a memory frame.
std::vector<int64_t> vae_latent_shape(const std::string& field, const CacheSpec& spec);

// The stage API of a node that reads the latent cache (LatentCacheLookup): `cache generate` and
// `cache validate` find it by this interface and build or check exactly what it will read.
class LatentCacheReader {
 public:
  virtual ~LatentCacheReader() = default;
  virtual const std::string& cache_root() const = 0;
  // The selected fields, parsed (throws wam::Error with the reference's message when invalid).
  virtual std::vector<std::string> cache_fields() const = 0;
  // The effective params the cache is made from; encoder precisions resolved for the pipeline's
  // settings (settings.device).
  virtual CacheSpec cache_spec(const Settings& settings) const = 0;
};

}  // namespace wam::cache
