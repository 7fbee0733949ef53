// The latent store: published encoder outputs (VAE latents, VLM context rows) in plain HDF5 shards
// under a cache root, with a catalog, per-build manifests and indexes, a contract checked on read,
// atomic publishing with resumable builds, and lock-free row reads with pread. Torch-free: values
// are bytes with a dtype and a per-sample shape. The layout is documented in docs/CACHE_FORMAT.md.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "wam/error.h"

namespace wam::cache {

// Every cache problem: a missing or corrupt file, a contract or coverage mismatch.
class CacheError : public Error {
 public:
  using Error::Error;
};

inline constexpr int kSchemaVersion = 3;
inline constexpr std::string_view kCatalogType = "wam_artifact_cache";
inline constexpr std::string_view kArtifactType = "wam_artifact";
inline constexpr std::string_view kBackend = "hdf5_shard_v1";
inline constexpr std::string_view kKeyCodec = "sample_int_v1";
inline constexpr std::string_view kValueCodec = "raw";

enum class DType { kFloat32, kBFloat16, kFloat16, kBool };

// "float32" | "bfloat16" | "float16" | "bool"; throws CacheError on anything else.
DType parse_dtype(std::string_view name);
std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);

// One value of an artifact, e.g. latent bfloat16 [48,3,24,16], or the ragged context
// bfloat16 [-1,2048] whose rows have their own length along dim 0.
struct ValueSchema {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;

  bool ragged() const { return !shape.empty() && shape[0] == -1; }
  // Bytes of one row of a fixed value, or of one element along dim 0 of a ragged value.
  size_t unit_bytes() const;
};

// The contract's `values` object ({name: {dtype, shape}}) in name order, which is the order of
// value indices in readers and builders.
std::vector<ValueSchema> value_schemas(const nlohmann::json& contract);

// CRC-32C of the sample id's 8 little-endian bytes, then the row's bytes: stored per row and value
// at build time (values/<name>.__crc32c) and compared on every read, so that a row whose bytes
// changed, or that answers for another sample, is never served. CRC-32C through ISA-L because it
// was the fastest check measured (faster than XXH3 where AVX-512 is there, docs/CACHE_FORMAT.md):
// a checked read costs little more than the pread itself.
uint32_t row_checksum(int64_t sample_id, const void* data, size_t bytes);

// SHA-256 of the canonical JSON text (sorted keys, no spaces, ASCII), as the reference computes it.
std::string fingerprint(const nlohmann::json& value);
std::string sample_key(int64_t sample_id);  // "sample:<id>"

// Writes `value.dump(2)` to `path` through wam::write_file_atomically. Returns the text written.
std::string write_json_atomically(const std::string& path, const nlohmann::json& value);

// Throws CacheError naming the first part of `cached` that differs from `expected`: sample_count,
// keyspace fingerprint, key codec, a dependency (with the JSON pointer of the first differing leaf
// and both values), the tensor schema, the value codec. With `partial_allowed` the cache may hold
// a prefix of the keyspace: every part but sample_count and keyspace_fingerprint must match, and
// the cached sample_count must not exceed the expected one.
void compare_contracts(const nlohmann::json& cached, const nlohmann::json& expected,
                       const std::string& artifact_id, bool partial_allowed);

// Refuses, before any encoding, to publish over artifacts that the catalog already holds.
void check_write_target(const std::string& root, const std::vector<std::string>& artifact_ids,
                        bool overwrite);

enum class ValidationMode {
  kMetaOnly,  // catalog, manifest, contract, index, key coverage, shard existence and sizes
  kFull,      // plus every shard's checksum and contents (names, shapes, dtypes, offsets, keys)
};

// Where one value's rows lie in one shard file.
struct ValueLayout {
  int64_t data_offset = 0;              // file offset of the dataset's first byte
  std::vector<int64_t> offsets;         // ragged: row bounds along dim 0, rows + 1 entries
  std::vector<uint32_t> row_checksums;  // per row, as built (values/<name>.__crc32c)
};

struct OpenOptions {
  ValidationMode mode = ValidationMode::kMetaOnly;
  // The cache may cover a prefix of the expected keyspace (vlm.current built with --max-samples).
  bool partial_allowed = false;
};

// A published artifact, opened after validation. Reads are pread calls on file descriptors held
// open for the reader's lifetime: thread-safe, lock-free, no HDF5 call per row.
class ArtifactReader {
 public:
  ~ArtifactReader();
  ArtifactReader(const ArtifactReader&) = delete;
  ArtifactReader& operator=(const ArtifactReader&) = delete;

  const std::string& artifact_id() const { return artifact_id_; }
  const std::string& build_id() const { return build_id_; }
  const nlohmann::json& contract() const { return contract_; }
  const std::vector<ValueSchema>& values() const { return values_; }
  // Index of the value named `name` in values(); throws CacheError if there is none.
  int value_index(std::string_view name) const;

  int64_t expected_samples() const { return expected_samples_; }
  int64_t cached_samples() const { return cached_samples_; }
  double coverage() const;  // cached / expected samples
  bool contains(int64_t sample_id) const;

  // Copies the fixed value's row (values()[value_index].unit_bytes() bytes) into `dst`.
  void read_fixed(int64_t sample_id, int value_index, void* dst) const;
  // Length along dim 0 of the sample's ragged row.
  int64_t ragged_length(int64_t sample_id, int value_index) const;
  // Copies the ragged row (ragged_length * unit_bytes bytes) into `dst`.
  void read_ragged(int64_t sample_id, int value_index, void* dst) const;

  // Rows and bytes read so far, by every thread.
  uint64_t rows_read() const;
  uint64_t bytes_read() const;

 private:
  friend class ReaderLoader;
  ArtifactReader() = default;

  struct Location {
    int32_t shard = -1;
    int32_t row = 0;
  };
  struct Shard {
    std::string path;
    int fd = -1;
    std::vector<int64_t> sample_ids;   // per row, as stored in the shard
    std::vector<ValueLayout> layouts;  // per value
  };
  // The sample's shard and row, after checking that the row holds that sample.
  const Location& locate(int64_t sample_id) const;
  void pread_exactly(const Shard& shard, void* dst, size_t bytes, int64_t offset) const;
  // Throws unless the bytes read for the sample's row of the value are the bytes built.
  void check_row(const Shard& shard, int32_t row, int64_t sample_id, int value_index,
                 const void* data, size_t bytes) const;

  std::string artifact_id_;
  std::string build_id_;
  nlohmann::json contract_;
  std::vector<ValueSchema> values_;
  int64_t expected_samples_ = 0;
  int64_t cached_samples_ = 0;
  std::vector<Location> locations_;  // by sample id, [0, expected_samples)
  std::vector<Shard> shards_;
  // One slot per reading thread (modulo the count), each on its own cache line: a single pair of
  // counters was the one write that parallel readers shared (docs/BENCHMARKS.md, "Checked cache
  // reads on the H200 host").
  struct alignas(64) ReadCounts {
    std::atomic<uint64_t> rows{0};
    std::atomic<uint64_t> bytes{0};
  };
  static constexpr size_t kReadCountSlots = 16;
  mutable std::array<ReadCounts, kReadCountSlots> read_counts_;
};

// Opens contract["artifact_id"] through <root>/catalog.json, compares the stored contract with
// `expected_contract` and validates the build in `options.mode`.
std::unique_ptr<ArtifactReader> open_artifact(const std::string& root,
                                              const nlohmann::json& expected_contract,
                                              const OpenOptions& options = {});
// Opens an artifact against its own stored contract (cache validate, cache info, tools).
std::unique_ptr<ArtifactReader> open_stored_artifact(const std::string& root,
                                                     const std::string& artifact_id,
                                                     ValidationMode mode);

struct ArtifactInfo {
  std::string artifact_id;
  std::string build_id;
  std::string manifest;  // relative to the root
  int64_t samples = 0;
  int64_t shards = 0;
  int64_t bytes = 0;
  double coverage = 0;              // indexed samples / contract sample_count
  std::vector<std::string> builds;  // every build directory on disk, published or not
  // sample_count, key_codec, value_codec, values, and a fingerprint per dependency.
  nlohmann::json contract_summary;
};

// Summaries of every artifact in the catalog, from the catalog, manifests and indexes only.
std::vector<ArtifactInfo> cache_info(const std::string& root);

// Validates every artifact of the catalog against its stored contract; throws the first problem.
std::vector<ArtifactInfo> validate_cache(const std::string& root, ValidationMode mode);

}  // namespace wam::cache
