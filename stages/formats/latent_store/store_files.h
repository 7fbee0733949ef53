// Internals shared by the latent store's reader and builder: file names, catalog access, shard
// inspection and build validation. Not part of the public API.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/latent_store/latent_store.h"

namespace wam::cache::internal {

std::string shard_file(int64_t shard_index);  // "shards/shard000003.h5"
std::string catalog_path(const std::string& root);
// Whether a relative path read from a cache file stays under the directory it is relative to.
bool stays_inside(const std::string& relative);
// Largest catalog, manifest, index or record read: an index takes about 70 bytes per sample.
inline constexpr uint64_t kMaxCacheJsonBytes = uint64_t{2} << 30;
// A regular file of at most kMaxCacheJsonBytes (a FIFO would block the read): "cannot read <what>
// <path>: not a regular file (a FIFO)".
std::string read_file(const std::string& path, const std::string& what);
nlohmann::json parse_json(const std::string& text, const std::string& path);

// Returns the catalog, or an empty one when `root` has none yet; throws on an incompatible one.
nlohmann::json load_catalog_or_empty(const std::string& root);

// An exclusive flock on `path` (created when absent; refused when not a regular file). Its holder
// writes "pid 12 on host h since 2026-12-02T01:02:03Z" into the file, so that a process waiting
// for it can say who holds it.
class FileLock {
 public:
  // Tries for up to `timeout_seconds` (0: once); held() says whether it got the lock.
  FileLock(const std::string& path, double timeout_seconds);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  bool held() const { return held_; }
  const std::string& path() const { return path_; }
  // What the holder wrote into the file, or "an unknown process" (one that writes nothing).
  std::string holder() const;

 private:
  std::string path_;
  int fd_ = -1;
  bool held_ = false;
};

// How long a publisher waits for the catalog lock: publishers hold it for a rename and a small
// file's rewrite, so a longer hold is a process that hangs.
inline constexpr double kCatalogLockTimeoutSeconds = 60;

// Holds an exclusive flock on <root>/.catalog.lock, serialising catalog rewrites of concurrent
// publishers. Throws CacheError naming the lock file and its holder when it is not free within
// `timeout_seconds`.
class CatalogLock {
 public:
  explicit CatalogLock(const std::string& root,
                       double timeout_seconds = kCatalogLockTimeoutSeconds);

 private:
  FileLock lock_;
};

struct ShardRecord {
  std::string file;  // relative to the build directory
  int64_t rows = 0;
  int64_t bytes = 0;
  std::string sha256;
  std::vector<int64_t> sample_ids;  // per row, from the index
};

// What a reader keeps of one shard: the sample id of each row and each value's layout.
struct ShardLayout {
  std::vector<int64_t> sample_ids;
  std::vector<ValueLayout> values;
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
  std::vector<ShardLayout> layouts;  // per shard, filled by full validation
};

// Validates the build in `build_dir` described by `manifest` (read from `manifest_path`). The
// stored contract is compared with `expected_contract` unless that is null.
CheckedBuild check_build(const std::string& build_dir, const std::string& manifest_path,
                         const nlohmann::json& manifest, const std::string& artifact_id,
                         const nlohmann::json* expected_contract, const OpenOptions& options);

// Opens a shard with HDF5 and returns its sample ids and each value's file layout and row
// checksums, after checking the attributes, dataset names, shapes, dtypes, contiguous layout and
// ragged offsets. With `expected_ids` (full validation) the sample_ids dataset must equal it and
// every row's bytes must match their checksum.
ShardLayout inspect_shard(const std::string& path, const std::string& artifact_id,
                          const std::string& build_id, const std::vector<ValueSchema>& values,
                          int64_t rows, const std::vector<int64_t>* expected_ids);

// "<id> index/shard key mismatch: <path> row 3 holds sample:4, the index says sample:3"
std::string key_mismatch(const std::string& artifact_id, const std::string& path, int64_t row,
                         int64_t stored, int64_t indexed);
// "<id> row checksum mismatch: <path> row 1 (sample:5) value latent: ..." (rebuild the cache)
std::string row_checksum_mismatch(const std::string& artifact_id, const std::string& path,
                                  int64_t row, int64_t sample_id, const std::string& value);

// "<id> key coverage mismatch: ..." when `ids` are not exactly [0, sample_count).
void check_key_coverage(const std::string& artifact_id, const std::vector<int64_t>& ids,
                        int64_t sample_count);

}  // namespace wam::cache::internal
