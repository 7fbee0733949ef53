// Writing the latent store: one artifact built shard by shard under <root>/.tmp/<build_id>/,
// resumable, and published atomically (docs/CACHE_FORMAT.md, "Publishing and resuming").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/latent_store.h"

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

  // The shard file exists and its SHA-256 equals the one recorded when it was written.
  bool shard_complete(int64_t shard_index) const;
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
  PublishResult publish_staged(bool overwrite);

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
