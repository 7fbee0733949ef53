// ArtifactBuilder: staging, resumable shard writes and atomic publishing of one artifact build.
//
// <root>/.tmp/<build_id>/artifacts/<id>/   the build as it will be published (shards, then index
//                                           and manifest); renamed into artifacts/<id>/builds/
// <root>/.tmp/<build_id>/state/<id>/       contract.json and shard%06d.json, the checksum record
//                                           of each finished shard; what a rerun resumes from
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "common/io/hdf5.h"
#include "common/io/sha256.h"
#include "formats/latent_store/artifact_builder.h"
#include "formats/latent_store/latent_store.h"
#include "formats/latent_store/store_files.h"
#include "wam/atomic_file.h"
#include "wam/limits.h"

namespace wam::cache {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using hdf5::check;
using hdf5::Handle;
using hdf5::write_int_attribute;
using hdf5::write_string_attribute;

std::string record_name(int64_t shard_index) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard%06lld.json", static_cast<long long>(shard_index));
  return name;
}

// The shard index of a record file "shard<digits>.json" (at least 6 digits: an index past 999999,
// e.g. a shard's first sample id in a large dataset, takes more).
std::optional<int64_t> record_index(const std::string& name) {
  if (name.size() < 16 || name.rfind("shard", 0) != 0 ||
      name.compare(name.size() - 5, 5, ".json") != 0) {
    return std::nullopt;
  }
  return parse_integer<int64_t>(std::string_view(name).substr(5, name.size() - 10));
}

// What a shard record says of its shard's per-row checksums (values/<name>.__crc32c).
constexpr const char* kRowChecksums = "crc32c";

bool valid_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// A contiguous, uncompressed dataset with its storage allocated at creation, so that readers can
// take its file offset and pread rows.
void write_dataset(hid_t parent, const std::string& name, hid_t file_type, hid_t memory_type,
                   const std::vector<hsize_t>& dims, const void* data, const std::string& path) {
  Handle space(check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                     "create dataspace", path, name),
               H5Sclose);
  Handle properties(check(H5Pcreate(H5P_DATASET_CREATE), "create properties", path, name),
                    H5Pclose);
  check(H5Pset_layout(properties.get(), H5D_CONTIGUOUS), "set layout", path, name);
  check(H5Pset_alloc_time(properties.get(), H5D_ALLOC_TIME_EARLY), "set alloc time", path, name);
  // No modification times in the object headers: a shard's bytes depend on its rows only, so a
  // build written by several ranks equals one written by a single process.
  check(H5Pset_obj_track_times(properties.get(), false), "set track times", path, name);
  Handle dataset(check(H5Dcreate2(parent, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                  properties.get(), H5P_DEFAULT),
                       "create dataset", path, name),
                 H5Dclose);
  const hsize_t elements =
      std::accumulate(dims.begin(), dims.end(), hsize_t{1}, std::multiplies<hsize_t>());
  if (elements > 0) {
    check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "write", path,
          name);
  }
}

void write_value_dataset(hid_t parent, const ValueSchema& value, const std::vector<hsize_t>& dims,
                         const void* data, const std::string& path) {
  const std::string name = value.name;
  switch (value.dtype) {
    case DType::kFloat32:
      write_dataset(parent, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims, data, path);
      return;
    case DType::kBFloat16:
    case DType::kFloat16:
      write_dataset(parent, name, H5T_STD_U16LE, H5T_NATIVE_UINT16, dims, data, path);
      break;
    case DType::kBool:
      write_dataset(parent, name, H5T_STD_U8LE, H5T_NATIVE_UINT8, dims, data, path);
      break;
  }
  // Raw 16-bit words and bytes: the attribute says how to interpret them.
  Handle dataset(check(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), "open", path, name), H5Dclose);
  write_string_attribute(dataset.get(), "dtype", std::string(dtype_name(value.dtype)), path);
}

}  // namespace

int64_t shard_rows_within(HostMemoryBudget* budget, int64_t shard_size, int64_t row_bytes) {
  if (!budget) return shard_size;
  return budget->claim("cache shard rows", 2 * row_bytes, shard_size, 1);
}

BuildLock::BuildLock(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  lock_ = std::make_unique<internal::FileLock>(root + "/.build.lock", 0.0);
  if (!lock_->held()) {
    throw CacheError("another cache build is running on " + root + " (lock " + lock_->path() +
                     ", held by " + lock_->holder() +
                     "); wait for it to finish, or build into another cache root");
  }
}

BuildLock::~BuildLock() = default;

ArtifactBuilder::ArtifactBuilder(std::string root, json contract, std::string build_id)
    : root_(std::move(root)), contract_(std::move(contract)), build_id_(std::move(build_id)) {
  if (!contract_.is_object() || !contract_.contains("artifact_id") ||
      !contract_["artifact_id"].is_string() ||
      !valid_name(contract_["artifact_id"].get<std::string>())) {
    throw CacheError("cache contract needs an artifact_id that is a plain name: " +
                     contract_.dump());
  }
  artifact_id_ = contract_["artifact_id"].get<std::string>();
  if (!valid_name(build_id_)) {
    throw CacheError(artifact_id_ + " build id \"" + build_id_ + "\" is not a plain name");
  }
  if (!contract_.contains("sample_count") || !contract_["sample_count"].is_number_integer() ||
      contract_["sample_count"].get<int64_t>() < 0) {
    throw CacheError(artifact_id_ + " contract needs a sample_count >= 0");
  }
  if (contract_.value("key_codec", json()) != std::string(kKeyCodec)) {
    throw CacheError(artifact_id_ + " contract needs key_codec \"" + std::string(kKeyCodec) +
                     "\", got " + contract_.value("key_codec", json()).dump());
  }
  if (contract_.value("value_codec", json()) != std::string(kValueCodec)) {
    throw CacheError("Artifact caches require value_codec=raw to preserve encoder values.");
  }
  values_ = value_schemas(contract_);

  const std::string build_root = root_ + "/.tmp/" + build_id_;
  staging_dir_ = build_root + "/artifacts/" + artifact_id_;
  state_dir_ = build_root + "/state/" + artifact_id_;
  const std::string contract_path = state_dir_ + "/contract.json";
  std::error_code ec;
  if (fs::exists(contract_path)) {
    json staged;
    try {
      staged = json::parse(internal::read_file(contract_path, "staged contract"));
    } catch (const std::exception&) {
    }
    if (staged != contract_) {
      fs::remove_all(staging_dir_, ec);
      fs::remove_all(state_dir_, ec);
    }
  }
  fs::create_directories(staging_dir_ + "/shards", ec);
  if (ec) throw CacheError("cannot create " + staging_dir_ + "/shards: " + ec.message());
  if (!fs::exists(contract_path)) write_json_atomically(contract_path, contract_);
}

std::optional<std::vector<int64_t>> ArtifactBuilder::complete_shard(int64_t shard_index) const {
  try {
    const json record =
        json::parse(internal::read_file(state_dir_ + "/" + record_name(shard_index), "record"));
    const std::string path = staging_dir_ + "/" + internal::shard_file(shard_index);
    struct stat info {};
    // Shards staged before rows carried checksums are written again.
    if (record.at("file") == internal::shard_file(shard_index) &&
        record.value("row_checksums", "") == kRowChecksums && ::stat(path.c_str(), &info) == 0 &&
        S_ISREG(info.st_mode) && info.st_size == record.at("bytes").get<int64_t>() &&
        sha256_file_hex(path) == record.at("sha256").get<std::string>()) {
      return record.at("sample_ids").get<std::vector<int64_t>>();
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

void ArtifactBuilder::discard_shards(int64_t first_sample, int64_t end_sample) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_dir_)) {
    const std::optional<int64_t> shard_index = record_index(entry.path().filename().string());
    if (!shard_index) continue;
    // A record that does not read as one holds nothing a rerun could keep.
    bool overlaps = true;
    try {
      const json ids =
          json::parse(internal::read_file(entry.path().string(), "shard record")).at("sample_ids");
      overlaps = std::any_of(ids.begin(), ids.end(), [&](const json& id) {
        return !id.is_number_integer() ||
               (id.get<int64_t>() >= first_sample && id.get<int64_t>() < end_sample);
      });
    } catch (const std::exception&) {
    }
    if (!overlaps) continue;
    fs::remove(entry.path(), ec);
    fs::remove(staging_dir_ + "/" + internal::shard_file(*shard_index), ec);
  }
}

std::map<int64_t, json> ArtifactBuilder::read_records() const {
  std::map<int64_t, json> records;
  for (const auto& entry : fs::directory_iterator(state_dir_)) {
    if (const auto shard_index = record_index(entry.path().filename().string())) {
      records[*shard_index] = internal::parse_json(
          internal::read_file(entry.path().string(), "shard record"), entry.path().string());
    }
  }
  return records;
}

std::vector<const ValueRows*> ArtifactBuilder::check_shard_rows(
    int64_t shard_index, const std::vector<int64_t>& sample_ids,
    const std::vector<ValueRows>& values) const {
  const std::string where = artifact_id_ + " shard " + std::to_string(shard_index) + ": ";
  const int64_t rows = static_cast<int64_t>(sample_ids.size());
  const int64_t sample_count = contract_["sample_count"].get<int64_t>();
  if (shard_index < 0 || rows == 0) {
    throw CacheError(where + "needs a shard index >= 0 and at least one sample");
  }
  for (int64_t sample_id : sample_ids) {
    if (sample_id < 0 || sample_id >= sample_count) {
      throw CacheError(where + sample_key(sample_id) + " is outside the keyspace [0, " +
                       std::to_string(sample_count) + ")");
    }
  }
  if (values.size() != values_.size()) {
    throw CacheError(where + "got " + std::to_string(values.size()) + " values, the contract has " +
                     std::to_string(values_.size()));
  }
  std::vector<const ValueRows*> rows_by_value(values_.size(), nullptr);
  for (const ValueRows& given : values) {
    size_t v = 0;
    while (v < values_.size() && values_[v].name != given.name) ++v;
    if (v == values_.size() || rows_by_value[v]) {
      throw CacheError(where + "value \"" + given.name + "\" is unknown or given twice");
    }
    rows_by_value[v] = &given;
    const ValueSchema& value = values_[v];
    int64_t units = rows;
    if (value.ragged()) {
      if (static_cast<int64_t>(given.lengths.size()) != rows) {
        throw CacheError(where + value.name + " needs one length per row");
      }
      units = 0;
      for (int64_t length : given.lengths) {
        if (length < 0) throw CacheError(where + value.name + " has a negative row length");
        units += length;
      }
    }
    if (given.bytes != static_cast<size_t>(units) * value.unit_bytes() ||
        (given.bytes > 0 && !given.data)) {
      throw CacheError(where + value.name + " holds " + std::to_string(given.bytes) +
                       " bytes, its rows need " +
                       std::to_string(static_cast<size_t>(units) * value.unit_bytes()));
    }
  }
  return rows_by_value;
}

void ArtifactBuilder::write_shard_file(const std::string& path,
                                       const std::vector<int64_t>& sample_ids,
                                       const std::vector<const ValueRows*>& rows_by_value) const {
  const int64_t rows = static_cast<int64_t>(sample_ids.size());
  // Thread-safe HDF5 keeps an error stack, and its printing setting, per thread.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Handle h5(check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "create", path),
            H5Fclose);
  write_int_attribute(h5.get(), "schema_version", kSchemaVersion, path);
  write_string_attribute(h5.get(), "artifact_id", artifact_id_, path);
  write_string_attribute(h5.get(), "build_id", build_id_, path);
  write_string_attribute(h5.get(), "key_codec", std::string(kKeyCodec), path);
  write_dataset(h5.get(), "sample_ids", H5T_STD_I64LE, H5T_NATIVE_INT64,
                {static_cast<hsize_t>(rows)}, sample_ids.data(), path);
  Handle group(check(H5Gcreate2(h5.get(), "values", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "create group", path, "values"),
               H5Gclose);
  for (size_t v = 0; v < values_.size(); ++v) {
    const ValueSchema& value = values_[v];
    const ValueRows& given = *rows_by_value[v];
    std::vector<hsize_t> dims{static_cast<hsize_t>(rows)};
    if (value.ragged()) {
      std::vector<int64_t> offsets{0};
      for (int64_t length : given.lengths) offsets.push_back(offsets.back() + length);
      dims[0] = static_cast<hsize_t>(offsets.back());
      write_dataset(group.get(), value.name + ".__offsets", H5T_STD_I64LE, H5T_NATIVE_INT64,
                    {static_cast<hsize_t>(rows + 1)}, offsets.data(), path);
    }
    for (size_t d = value.ragged() ? 1 : 0; d < value.shape.size(); ++d) {
      dims.push_back(static_cast<hsize_t>(value.shape[d]));
    }
    write_value_dataset(group.get(), value, dims, given.data, path);
    std::vector<uint32_t> checksums;
    const auto* bytes = static_cast<const char*>(given.data);
    for (int64_t row = 0; row < rows; ++row) {
      const size_t row_bytes =
          value.unit_bytes() * static_cast<size_t>(value.ragged() ? given.lengths[row] : 1);
      checksums.push_back(row_checksum(sample_ids[row], bytes, row_bytes));
      bytes += row_bytes;
    }
    write_dataset(group.get(), value.name + ".__crc32c", H5T_STD_U32LE, H5T_NATIVE_UINT32,
                  {static_cast<hsize_t>(rows)}, checksums.data(), path);
  }
}

void ArtifactBuilder::write_shard(int64_t shard_index, const std::vector<int64_t>& sample_ids,
                                  const std::vector<ValueRows>& values) {
  const std::vector<const ValueRows*> rows_by_value =
      check_shard_rows(shard_index, sample_ids, values);
  const std::string file = internal::shard_file(shard_index);
  std::error_code ec;
  fs::remove(state_dir_ + "/" + record_name(shard_index), ec);
  AtomicFile shard_file(staging_dir_ + "/" + file);
  const std::string& temporary = shard_file.temporary();
  write_shard_file(temporary, sample_ids, rows_by_value);
  const std::string sha256 = sha256_file_hex(temporary);
  const int64_t bytes = static_cast<int64_t>(fs::file_size(temporary));
  shard_file.publish();
  write_json_atomically(state_dir_ + "/" + record_name(shard_index),
                        {{"file", file},
                         {"rows", static_cast<int64_t>(sample_ids.size())},
                         {"bytes", bytes},
                         {"sha256", sha256},
                         {"row_checksums", kRowChecksums},
                         {"sample_ids", sample_ids}});
  ++shards_written_;
}

PublishResult ArtifactBuilder::publish(bool overwrite) {
  try {
    return publish_staged(overwrite);
  } catch (const fs::filesystem_error& e) {
    throw CacheError(artifact_id_ + " cannot publish build " + build_id_ + " under " + root_ +
                     ": " + e.what());
  } catch (const json::exception& e) {
    throw CacheError(artifact_id_ + " has a malformed shard record in " + state_dir_ + ": " +
                     e.what());
  }
}

PublishResult ArtifactBuilder::publish_staged(bool overwrite) {
  check_write_target(root_, {artifact_id_}, overwrite);
  // Shards by index, from their records; a shard file without a record never finished.
  const std::map<int64_t, json> records = read_records();
  std::set<std::string> recorded_files;
  for (const auto& [shard_index, record] : records) {
    recorded_files.insert(staging_dir_ + "/" + record.at("file").get<std::string>());
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(staging_dir_ + "/shards")) {
    if (!recorded_files.count(entry.path().string())) fs::remove(entry.path(), ec);
  }
  const StagedBuild build = write_index_and_manifest(records);
  const std::string build_dir = move_into_catalog(build.manifest_text, overwrite);
  remove_staging_leftovers();
  return {artifact_id_, build_id_,  build_dir, contract_["sample_count"].get<int64_t>(),
          build.shards, build.bytes};
}

ArtifactBuilder::StagedBuild ArtifactBuilder::write_index_and_manifest(
    const std::map<int64_t, json>& records) const {
  const std::string& id = artifact_id_;
  json entries = json::object();
  json shards = json::array();
  std::vector<int64_t> ids;
  for (const auto& [shard_index, record] : records) {
    const int64_t position = static_cast<int64_t>(shards.size());
    const std::vector<int64_t> shard_ids = record.at("sample_ids").get<std::vector<int64_t>>();
    for (size_t row = 0; row < shard_ids.size(); ++row) {
      entries[sample_key(shard_ids[row])] = {{"shard", position},
                                             {"row", static_cast<int64_t>(row)}};
      ids.push_back(shard_ids[row]);
    }
    shards.push_back({{"file", record.at("file")},
                      {"rows", record.at("rows")},
                      {"bytes", record.at("bytes")},
                      {"sha256", record.at("sha256")}});
  }
  const int64_t sample_count = contract_["sample_count"].get<int64_t>();
  internal::check_key_coverage(id, ids, sample_count);

  const json index = {{"schema_version", kSchemaVersion},
                      {"artifact_id", id},
                      {"build_id", build_id_},
                      {"sample_count", sample_count},
                      {"entries", std::move(entries)}};
  const std::string index_text = write_json_atomically(staging_dir_ + "/index.json", index);
  const json manifest = {{"schema_version", kSchemaVersion},
                         {"cache_type", kArtifactType},
                         {"complete", true},
                         {"artifact_id", id},
                         {"backend", kBackend},
                         {"build_id", build_id_},
                         {"contract", contract_},
                         {"index_file", "index.json"},
                         {"index_sha256", sha256_hex(index_text)},
                         {"shards", shards}};
  const std::string manifest_path = staging_dir_ + "/manifest.json";
  StagedBuild staged{write_json_atomically(manifest_path, manifest)};
  const internal::CheckedBuild build = internal::check_build(
      staging_dir_, manifest_path, manifest, id, &contract_, {ValidationMode::kFull, false});
  staged.shards = static_cast<int64_t>(build.shards.size());
  for (const internal::ShardRecord& shard : build.shards) staged.bytes += shard.bytes;
  return staged;
}

std::string ArtifactBuilder::move_into_catalog(const std::string& manifest_text, bool overwrite) {
  const std::string& id = artifact_id_;
  const std::string relative_dir = "artifacts/" + id + "/builds/" + build_id_;
  const std::string build_dir = root_ + "/" + relative_dir;
  const std::string replaced = root_ + "/.tmp/" + build_id_ + "/replaced/" + id;
  std::optional<internal::CatalogLock> lock;
  try {
    lock.emplace(root_);
  } catch (const CacheError& e) {
    throw CacheError(std::string(e.what()) + ". " + id + " stays staged in " + staging_dir_ +
                     ": the same command publishes it then, without encoding again");
  }
  // Another publisher may have got here first.
  check_write_target(root_, {id}, overwrite);
  // Past that check, a build directory of this id is either the published one being
  // overwritten or the orphan of a publish interrupted before its catalog update.
  std::error_code ec;
  if (fs::exists(build_dir)) {
    fs::create_directories(fs::path(replaced).parent_path());
    fs::remove_all(replaced, ec);
    fs::rename(build_dir, replaced);
  }
  fs::create_directories(fs::path(build_dir).parent_path());
  fs::rename(staging_dir_, build_dir);
  sync_path(fs::path(build_dir).parent_path().string());
  json catalog = internal::load_catalog_or_empty(root_);
  catalog["artifacts"][id] = {{"backend", kBackend},
                              {"build_id", build_id_},
                              {"manifest", relative_dir + "/manifest.json"},
                              {"manifest_sha256", sha256_hex(manifest_text)}};
  write_json_atomically(internal::catalog_path(root_), catalog);
  return build_dir;
}

void ArtifactBuilder::remove_staging_leftovers() {
  std::error_code ec;
  const std::string build_root = root_ + "/.tmp/" + build_id_;
  fs::remove_all(state_dir_, ec);
  fs::remove_all(build_root + "/replaced/" + artifact_id_, ec);
  // Other artifacts of the same build id may still be staging: remove only what is now empty.
  for (const std::string& directory : {build_root + "/replaced", build_root + "/state",
                                       build_root + "/artifacts", build_root, root_ + "/.tmp"}) {
    fs::remove(directory, ec);
  }
}

}  // namespace wam::cache
