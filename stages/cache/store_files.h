// Internals shared by the latent store's reader and builder: file names, catalog access, shard
// inspection and build validation. Not part of the public API.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/latent_store.h"

namespace wam::cache::internal {

std::string shard_file(int64_t shard_index);  // "shards/shard000003.h5"
std::string catalog_path(const std::string& root);
std::string read_file(const std::string& path, const std::string& what);
nlohmann::json parse_json(const std::string& text, const std::string& path);

// Returns the catalog, or an empty one when `root` has none yet; throws on an incompatible one.
nlohmann::json load_catalog_or_empty(const std::string& root);

// Holds an exclusive flock on <root>/.catalog.lock, serialising catalog rewrites of concurrent
// publishers.
class CatalogLock {
 public:
  explicit CatalogLock(const std::string& root);
  ~CatalogLock();
  CatalogLock(const CatalogLock&) = delete;
  CatalogLock& operator=(const CatalogLock&) = delete;

 private:
  int fd_ = -1;
};

struct ShardRecord {
  std::string file;  // relative to the build directory
  int64_t rows = 0;
  int64_t bytes = 0;
  std::string sha256;
  std::vector<int64_t> sample_ids;  // per row, from the index
};

// A build whose manifest, contract, index and key coverage were checked.
struct CheckedBuild {
  std::string artifact_id;
  std::string build_id;
  std::string build_dir;
  nlohmann::json contract;
  std::vector<ValueSchema> values;
  int64_t expected_samples = 0;
  int64_t cached_samples = 0;
  std::vector<ShardRecord> shards;
  std::vector<std::vector<ValueLayout>> layouts;  // per shard, filled by full validation
};

// Validates the build in `build_dir` described by `manifest` (read from `manifest_path`). The
// stored contract is compared with `expected_contract` unless that is null.
CheckedBuild check_build(const std::string& build_dir, const std::string& manifest_path,
                         const nlohmann::json& manifest, const std::string& artifact_id,
                         const nlohmann::json* expected_contract, const OpenOptions& options);

// Opens a shard with HDF5 and returns each value's file layout, after checking the attributes,
// dataset names, shapes, dtypes, contiguous layout and ragged offsets. With `expected_ids` the
// sample_ids dataset must equal it.
std::vector<ValueLayout> inspect_shard(const std::string& path, const std::string& artifact_id,
                                       const std::string& build_id,
                                       const std::vector<ValueSchema>& values, int64_t rows,
                                       const std::vector<int64_t>* expected_ids);

// "<id> key coverage mismatch: ..." when `ids` are not exactly [0, sample_count).
void check_key_coverage(const std::string& artifact_id, const std::vector<int64_t>& ids,
                        int64_t sample_count);

}  // namespace wam::cache::internal
