// Writing the latent store: one artifact built shard by shard under <root>/.tmp/<build_id>/,
// resumable, and published atomically (docs/CACHE_FORMAT.md, "Publishing and resuming").
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/latent_store/latent_store.h"
#include "wam/host_memory.h"

namespace wam::cache {
namespace internal {
class FileLock;
}

// The rows of one value for the samples of a shard, in sample order. Fixed values: `data` holds
// rows * row bytes. Ragged values: `data` holds the rows back to back and `lengths` each row's
// length along dim 0.
struct ValueRows {
  std::string name;
  const void* data = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> lengths;
};

// Held by a process building into a cache root (`cache generate`, rank 0) for its whole run:
// <root>/.build.lock. A second build into the same root fails at once, before it encodes anything,
// with "another cache build is running on <root> (lock <root>/.build.lock, held by pid 12 on host
// h since ...); wait for it to finish, or build into another cache root".
class BuildLock {
 public:
  explicit BuildLock(const std::string& root);
  ~BuildLock();
  BuildLock(const BuildLock&) = delete;
  BuildLock& operator=(const BuildLock&) = delete;

 private:
  std::unique_ptr<internal::FileLock> lock_;
};

// The rows a shard of `cache generate` may hold: `shard_size`, or fewer when the run's host
// memory budget cannot hold them (docs/RELIABILITY.md, "Host memory"). A row of `row_bytes` (every
// artifact's value bytes of one sample) is held twice at the shard's end: the rows, and the
// shard's contiguous copy that is written. Claimed from `budget` as "cache shard rows" (at least
// one row); without a budget, `shard_size`.
int64_t shard_rows_within(HostMemoryBudget* budget, int64_t shard_size, int64_t row_bytes);

struct PublishResult {
  std::string artifact_id;
  std::string build_id;
  std::string build_dir;  // <root>/artifacts/<id>/builds/<build_id>
  int64_t samples = 0;
  int64_t shards = 0;
  int64_t bytes = 0;
};

// Builds one artifact under <root>/.tmp/<build_id>/ and publishes it. The contract is the
// caller's; its keyspace is sample ids [0, sample_count). A builder for the same root, build id
// and contract finds the shards that an interrupted run wrote and checksummed, and skips them.
class ArtifactBuilder {
 public:
  // Creates the staging directories; a staging build of another contract is discarded.
  ArtifactBuilder(std::string root, nlohmann::json contract, std::string build_id);

  const std::string& artifact_id() const { return artifact_id_; }
  const std::vector<ValueSchema>& values() const { return values_; }
  const std::string& staging_dir() const { return staging_dir_; }

  // The sample ids its record lists, when shard `shard_index` is complete: its file exists and
  // its SHA-256 equals the one recorded when it was written.
  std::optional<std::vector<int64_t>> complete_shard(int64_t shard_index) const;
  bool shard_complete(int64_t shard_index) const { return complete_shard(shard_index).has_value(); }
  // Removes the staged shards (record and file) holding a sample id in [first_sample,
  // end_sample): what an earlier run wrote past the point where a rerun resumes, whose bounds
  // need not be the rerun's (`cache generate` also closes shards on time).
  void discard_shards(int64_t first_sample, int64_t end_sample);
  // Writes shards/shard<index>.h5 (through wam::AtomicFile), then its checksum record. May be
  // called from several threads at once for different shard indices.
  void write_shard(int64_t shard_index, const std::vector<int64_t>& sample_ids,
                   const std::vector<ValueRows>& values);
  // Shards written by this builder (resumed ones excluded).
  int64_t shards_written() const { return shards_written_.load(); }

  // Merges the shards, checks exact key coverage, writes index.json and manifest.json, validates
  // the build fully, moves it to artifacts/<id>/builds/<build_id> and points catalog.json at it.
  PublishResult publish(bool overwrite);

 private:
  // Each staged shard's record, by shard index.
  std::map<int64_t, nlohmann::json> read_records() const;
  // The rows given for each value of the contract, in its order, after checking them.
  std::vector<const ValueRows*> check_shard_rows(int64_t shard_index,
                                                 const std::vector<int64_t>& sample_ids,
                                                 const std::vector<ValueRows>& values) const;
  void write_shard_file(const std::string& path, const std::vector<int64_t>& sample_ids,
                        const std::vector<const ValueRows*>& rows_by_value) const;
  PublishResult publish_staged(bool overwrite);
  struct StagedBuild {
    std::string manifest_text;
    int64_t shards = 0, bytes = 0;
  };
  // index.json and manifest.json of the recorded shards, then the staged build checked in full.
  StagedBuild write_index_and_manifest(const std::map<int64_t, nlohmann::json>& records) const;
  // Under the catalog lock: the staged build renamed to artifacts/<id>/builds/<build_id> (a
  // published one of that id set aside) and catalog.json pointed at it. Returns the build's
  // directory.
  std::string move_into_catalog(const std::string& manifest_text, bool overwrite);
  void remove_staging_leftovers();

  std::string root_;
  nlohmann::json contract_;
  std::string build_id_;
  std::string artifact_id_;
  std::vector<ValueSchema> values_;
  std::string staging_dir_;  // becomes the published build directory
  std::string state_dir_;    // contract and per-shard checksum records; never published
  std::atomic<int64_t> shards_written_{0};
};

}  // namespace wam::cache
