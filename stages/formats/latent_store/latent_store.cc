#include "formats/latent_store/latent_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
// ISA-L (Debian's libisal) picks its widest CRC code at run time: VPCLMULQDQ folding on AVX-512
// machines (56 GB/s on the 2-core machine's Zen 4), the SSE4.2 crc32 instruction elsewhere.
#include <isa-l/crc.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "common/io/hdf5.h"
#include "common/io/sha256.h"
#include "formats/latent_store/store_files.h"
#include "wam/atomic_file.h"
#include "wam/limits.h"

namespace wam::cache {

namespace fs = std::filesystem;
using nlohmann::json;

DType parse_dtype(std::string_view name) {
  if (name == "float32") return DType::kFloat32;
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float16") return DType::kFloat16;
  if (name == "bool") return DType::kBool;
  throw CacheError("unsupported cache dtype \"" + std::string(name) +
                   "\" (allowed: float32, bfloat16, float16, bool)");
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kBool: return "bool";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16:
    case DType::kFloat16: return 2;
    case DType::kBool: return 1;
  }
  return 0;
}

size_t ValueSchema::unit_bytes() const {
  size_t bytes = dtype_size(dtype);
  for (size_t d = ragged() ? 1 : 0; d < shape.size(); ++d) bytes *= static_cast<size_t>(shape[d]);
  return bytes;
}

std::vector<ValueSchema> value_schemas(const json& contract) {
  const std::string id = contract.value("artifact_id", std::string("artifact"));
  const auto malformed = [&](const std::string& why) {
    return CacheError(id + " contract values are malformed: " + why);
  };
  if (!contract.contains("values") || !contract["values"].is_object() ||
      contract["values"].empty()) {
    throw malformed("expected a non-empty object {name: {dtype, shape}}");
  }
  std::vector<ValueSchema> values;
  for (const auto& [name, spec] : contract["values"].items()) {
    if (!spec.is_object() || !spec.contains("dtype") || !spec["dtype"].is_string() ||
        !spec.contains("shape") || !spec["shape"].is_array()) {
      throw malformed(name + " needs a dtype string and a shape array");
    }
    ValueSchema value{name, parse_dtype(spec["dtype"].get<std::string>()), {}};
    for (size_t d = 0; d < spec["shape"].size(); ++d) {
      const json& extent = spec["shape"][d];
      if (!extent.is_number_integer() || (extent.get<int64_t>() < 1 && !(d == 0 && extent == -1))) {
        throw malformed(name + " shape " + spec["shape"].dump() +
                        ": extents are positive, only the first may be -1 (ragged)");
      }
      value.shape.push_back(extent.get<int64_t>());
    }
    values.push_back(std::move(value));
  }
  return values;
}

namespace {

std::string errno_text() { return std::strerror(errno); }

// A small number per thread, handed out in the order threads first read: picks the thread's slot
// of a reader's counters.
size_t reader_thread_slot() {
  static std::atomic<size_t> next_slot{0};
  thread_local const size_t slot = next_slot.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

}  // namespace

uint32_t row_checksum(int64_t sample_id, const void* data, size_t bytes) {
  // ISA-L's crc32_iscsi neither inverts its start value nor its result; the standard CRC-32C
  // does both, which the two ~ below supply. Its length is an int: a row longer than that
  // (over 2 GiB) is taken in parts.
  unsigned char id_bytes[8];
  for (int i = 0; i < 8; ++i)
    id_bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(sample_id) >> (8 * i));
  uint32_t crc = crc32_iscsi(id_bytes, 8, ~uint32_t{0});
  auto* next = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L only reads it
  constexpr size_t kMaxPart = size_t{1} << 30;
  for (size_t left = bytes; left > 0;) {
    const size_t part = std::min(left, kMaxPart);
    crc = crc32_iscsi(next, static_cast<int>(part), crc);
    next += part;
    left -= part;
  }
  return ~crc;
}

std::string fingerprint(const json& value) { return sha256_hex(value.dump(-1, ' ', true)); }

std::string sample_key(int64_t sample_id) { return "sample:" + std::to_string(sample_id); }

std::string write_json_atomically(const std::string& path, const json& value) {
  const std::string text = value.dump(2) + "\n";
  write_file_atomically(path, text);
  return text;
}

namespace {

using Path = std::vector<std::string>;

std::string pointer_text(Path::const_iterator begin, Path::const_iterator end) {
  std::string text;
  for (auto token = begin; token != end; ++token) {
    text += '/';
    for (char c : *token) text += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  }
  return text;
}
std::string pointer_text(const Path& path) { return pointer_text(path.begin(), path.end()); }

// Path of the first leaf where `a` and `b` differ, in sorted-key document order.
bool first_difference(const json& a, const json& b, Path* path) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [key, unused] : a.items()) keys.insert(key);
    for (const auto& [key, unused] : b.items()) keys.insert(key);
    for (const std::string& key : keys) {
      path->push_back(key);
      if (!a.contains(key) || !b.contains(key) || first_difference(a[key], b[key], path)) {
        return true;
      }
      path->pop_back();
    }
    return false;
  }
  if (a.is_array() && b.is_array()) {
    const size_t common = std::min(a.size(), b.size());
    for (size_t i = 0; i < common; ++i) {
      path->push_back(std::to_string(i));
      if (first_difference(a[i], b[i], path)) return true;
      path->pop_back();
    }
    if (a.size() != b.size()) {
      path->push_back(std::to_string(common));
      return true;
    }
    return false;
  }
  return a != b;
}

std::string value_at(const json& document, const Path& path) {
  const json::json_pointer pointer(pointer_text(path));
  return document.contains(pointer) ? document.at(pointer).dump() : "<absent>";
}

json part(const json& contract, const std::string& key) {
  return contract.contains(key) ? contract[key] : json();
}

}  // namespace

void compare_contracts(const json& cached, const json& expected, const std::string& artifact_id,
                       bool partial_allowed) {
  const std::string& id = artifact_id;
  const auto differs = [&](const std::string& key) {
    return part(cached, key) != part(expected, key);
  };
  if (differs("artifact_id")) {
    throw CacheError(id + " artifact id mismatch: cache=" + part(cached, "artifact_id").dump() +
                     " expected=" + part(expected, "artifact_id").dump());
  }
  if (partial_allowed) {
    std::vector<std::string> fields;
    std::set<std::string> keys;
    for (const auto& [key, unused] : cached.items()) keys.insert(key);
    for (const auto& [key, unused] : expected.items()) keys.insert(key);
    for (const std::string& key : keys) {
      if (key != "sample_count" && key != "keyspace_fingerprint" && differs(key)) {
        fields.push_back(key);
      }
    }
    if (!fields.empty()) {
      throw CacheError(id + " partial cache contract mismatch: fields=[" + join(fields, ", ") +
                       "]");
    }
    const json cached_count = part(cached, "sample_count");
    const json expected_count = part(expected, "sample_count");
    if (!cached_count.is_number_integer() || !expected_count.is_number_integer() ||
        cached_count.get<int64_t>() > expected_count.get<int64_t>()) {
      throw CacheError(id + " partial cache sample_count exceeds the expected one: cache=" +
                       part(cached, "sample_count").dump() +
                       " expected=" + part(expected, "sample_count").dump());
    }
    return;
  }
  if (differs("sample_count")) {
    throw CacheError(id + " sample_count mismatch: cache=" + part(cached, "sample_count").dump() +
                     " expected=" + part(expected, "sample_count").dump());
  }
  if (differs("keyspace_fingerprint")) {
    // The keyspace is the datasets' roots and episode lengths (stages/cache/cache_spec.cc): name
    // the first that differs where the contracts carry them.
    const auto samples = [](const json& contract) {
      json datasets = json::array();
      const json::json_pointer at("/dependencies/dataset/datasets");
      if (contract.contains(at) && contract.at(at).is_array()) {
        for (const json& dataset : contract.at(at)) {
          if (!dataset.is_object()) continue;
          datasets.push_back({{"root", dataset.value("root", json())},
                              {"episodes", dataset.value("episodes", json())}});
        }
      }
      return json{{"datasets", datasets}};
    };
    const json cached_samples = samples(cached), expected_samples = samples(expected);
    Path at;
    if (!first_difference(cached_samples, expected_samples, &at)) {
      throw CacheError(id + " keyspace fingerprint mismatch.");
    }
    throw CacheError(id + " keyspace fingerprint mismatch: the datasets' samples differ at " +
                     pointer_text(at) + " (episodes are [episode_index, length]): cache=" +
                     value_at(cached_samples, at) + " expected=" + value_at(expected_samples, at) +
                     "; generate the cache for these datasets with `wam-pipeline cache generate "
                     "PIPELINE --overwrite`");
  }
  if (differs("key_codec")) {
    throw CacheError(id + " key codec mismatch: cache=" + part(cached, "key_codec").dump() +
                     " expected=" + part(expected, "key_codec").dump());
  }
  const json cached_dependencies = part(cached, "dependencies");
  const json expected_dependencies = part(expected, "dependencies");
  Path at;
  if (first_difference(cached_dependencies, expected_dependencies, &at)) {
    if (at.empty()) {
      throw CacheError(id + " dependencies mismatch: cache=" + cached_dependencies.dump() +
                       " expected=" + expected_dependencies.dump());
    }
    const std::string inner = pointer_text(at.begin() + 1, at.end());
    throw CacheError(id + " dependency '" + at[0] + "' mismatch at " +
                     (inner.empty() ? "/" : inner) +
                     ": cache=" + value_at(cached_dependencies, at) +
                     " expected=" + value_at(expected_dependencies, at));
  }
  if (first_difference(part(cached, "values"), part(expected, "values"), &at)) {
    throw CacheError(id + " tensor schema mismatch at " + (at.empty() ? "/" : pointer_text(at)) +
                     ": cache=" + value_at(part(cached, "values"), at) +
                     " expected=" + value_at(part(expected, "values"), at));
  }
  if (differs("value_codec")) {
    throw CacheError(id + " value codec mismatch: cache=" + part(cached, "value_codec").dump() +
                     " expected=" + part(expected, "value_codec").dump());
  }
  if (first_difference(cached, expected, &at)) {
    throw CacheError(id + " contract mismatch at " + pointer_text(at) +
                     ": cache=" + value_at(cached, at) + " expected=" + value_at(expected, at));
  }
}

namespace internal {

std::string shard_file(int64_t shard_index) {
  char name[32];
  std::snprintf(name, sizeof(name), "shards/shard%06lld.h5", static_cast<long long>(shard_index));
  return name;
}

std::string catalog_path(const std::string& root) { return root + "/catalog.json"; }

bool stays_inside(const std::string& relative) {
  const fs::path normal = fs::path(relative).lexically_normal();
  return !relative.empty() && !normal.is_absolute() && !normal.empty() && *normal.begin() != "..";
}

std::string read_file(const std::string& path, const std::string& what) {
  std::string error;
  std::optional<std::string> text = read_regular_file(path, kMaxCacheJsonBytes, error);
  if (!text) throw CacheError("cannot read " + what + " " + path + ": " + error);
  return std::move(*text);
}

json parse_json(const std::string& text, const std::string& path) {
  JsonTextError error;
  std::optional<json> value = parse_json_text(text, error);
  if (!value) throw CacheError(path + ":" + error.location + ": " + error.message);
  return std::move(*value);
}

namespace {

json checked_catalog(const std::string& root, const std::string& text) {
  const std::string path = catalog_path(root);
  json catalog = parse_json(text, path);
  if (!catalog.is_object() || catalog.value("schema_version", json()) != kSchemaVersion ||
      catalog.value("cache_type", json()) != kCatalogType) {
    throw CacheError("Cache storage format is incompatible: root=" + root +
                     ". Existing cache data is not migrated automatically; generate the cache in "
                     "an empty/new root.");
  }
  if (!catalog.contains("artifacts") || !catalog["artifacts"].is_object()) {
    throw CacheError(path + ": catalog has no artifacts object");
  }
  const auto kind = [](const json& value) -> std::string {
    if (value.is_object()) return "an object";
    if (value.is_array()) return "an array";
    if (value.is_null()) return "null";
    return std::string("a ") + value.type_name();
  };
  for (const auto& [id, entry] : catalog["artifacts"].items()) {
    const std::string pointer = "/artifacts/" + id;
    const std::string fix =
        "; the catalog is damaged: rebuild the cache with `wam-pipeline cache "
        "generate PIPELINE --overwrite`";
    if (!entry.is_object()) {
      throw CacheError(path + ": " + pointer + " is " + kind(entry) +
                       ", expected an object {backend, build_id, manifest, manifest_sha256}" + fix);
    }
    for (const char* key : {"backend", "build_id", "manifest", "manifest_sha256"}) {
      if (entry.contains(key) && !entry[key].is_string()) {
        throw CacheError(path + ": " + pointer + "/" + key + " is " + kind(entry[key]) +
                         ", expected a string" + fix);
      }
    }
  }
  return catalog;
}

json load_catalog(const std::string& root) {
  const std::string path = catalog_path(root);
  if (!fs::exists(path)) {
    throw CacheError("Cache catalog not found: " + path +
                     ". Run `wam-pipeline cache generate PIPELINE` first.");
  }
  return checked_catalog(root, read_file(path, "cache catalog"));
}

}  // namespace

json load_catalog_or_empty(const std::string& root) {
  if (!fs::exists(catalog_path(root))) {
    return {{"schema_version", kSchemaVersion},
            {"cache_type", kCatalogType},
            {"artifacts", json::object()}};
  }
  return load_catalog(root);
}

FileLock::FileLock(const std::string& path, double timeout_seconds) : path_(path) {
  // O_NONBLOCK: a FIFO planted as the lock file must not block the open.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CacheError("cannot open " + path + ": " + errno_text());
  struct stat info {};
  std::string problem =
      ::fstat(fd_, &info) != 0 ? errno_text() : not_regular_file_reason(info.st_mode);
  if (!problem.empty()) {
    ::close(fd_);
    throw CacheError("cannot use " + path + " as a lock file: " + problem);
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(std::max(timeout_seconds, 0.0));
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      const std::string why = errno_text();
      ::close(fd_);
      throw CacheError("cannot lock " + path + ": " + why);
    }
    if (std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  held_ = true;
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char since[32];
  std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &utc);
  const std::string text =
      "pid " + std::to_string(::getpid()) + " on host " + host + " since " + since + "\n";
  // Best effort: the lock is held whether or not the note is written.
  [[maybe_unused]] const bool noted =
      ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, text.data(), text.size(), 0) > 0;
}

FileLock::~FileLock() {
  // Cleared, so that a later holder writing no note is not taken for this process.
  [[maybe_unused]] const bool cleared = held_ && ::ftruncate(fd_, 0) == 0;
  ::close(fd_);
}

std::string FileLock::holder() const {
  char text[512];
  const ssize_t n = ::pread(fd_, text, sizeof(text) - 1, 0);
  std::string note = n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string();
  while (!note.empty() && (note.back() == '\n' || note.back() == '\0')) note.pop_back();
  return note.empty() ? "an unknown process" : note;
}

namespace {

// <root>/.<name>, creating the root first.
std::string lock_file_under(const std::string& root, const std::string& name) {
  std::error_code ec;
  fs::create_directories(root, ec);
  return root + "/" + name;
}

}  // namespace

CatalogLock::CatalogLock(const std::string& root, double timeout_seconds)
    : lock_(lock_file_under(root, ".catalog.lock"), timeout_seconds) {
  if (!lock_.held()) {
    std::ostringstream seconds;
    seconds << timeout_seconds;
    throw CacheError("cannot take the cache catalog lock " + lock_.path() + " within " +
                     seconds.str() + " s: it is held by " + lock_.holder() +
                     ". A publish holds it for a moment only: that process hangs; stop it, or "
                     "remove the lock file if no process holds it any more");
  }
}

void check_key_coverage(const std::string& artifact_id, const std::vector<int64_t>& ids,
                        int64_t sample_count) {
  constexpr size_t kExamples = 8;
  // Memory and time follow the ids listed, not the sample_count a damaged file may claim (2^40).
  std::unordered_set<int64_t> seen;
  seen.reserve(ids.size());
  std::vector<std::string> extra;
  size_t extra_count = 0;
  for (int64_t id : ids) {
    if (id >= 0 && id < sample_count && seen.insert(id).second) continue;
    if (extra_count++ < kExamples) extra.push_back(sample_key(id));
  }
  std::vector<int64_t> present(seen.begin(), seen.end());
  std::sort(present.begin(), present.end());
  const int64_t missing_count =
      std::max<int64_t>(sample_count, 0) - static_cast<int64_t>(present.size());
  std::vector<std::string> missing;
  int64_t next = 0;  // the smallest id not yet known to be present or reported
  for (size_t i = 0; i <= present.size() && missing.size() < kExamples; ++i) {
    const int64_t until = i < present.size() ? present[i] : std::max<int64_t>(sample_count, 0);
    for (; next < until && missing.size() < kExamples; ++next) missing.push_back(sample_key(next));
    next = until + 1;
  }
  if (missing_count == 0 && extra_count == 0) return;
  if (missing_count > static_cast<int64_t>(kExamples)) missing.push_back("...");
  if (extra_count > kExamples) extra.push_back("...");
  throw CacheError(artifact_id + " key coverage mismatch: missing=[" + join(missing, ", ") +
                   "] extra=[" + join(extra, ", ") + "] (" + std::to_string(missing_count) +
                   " missing, " + std::to_string(extra_count) + " extra or duplicate, " +
                   std::to_string(sample_count) + " expected)");
}

std::string key_mismatch(const std::string& artifact_id, const std::string& path, int64_t row,
                         int64_t stored, int64_t indexed) {
  return artifact_id + " index/shard key mismatch: " + path + " row " + std::to_string(row) +
         " holds " + sample_key(stored) + ", the index says " + sample_key(indexed);
}

std::string row_checksum_mismatch(const std::string& artifact_id, const std::string& path,
                                  int64_t row, int64_t sample_id, const std::string& value) {
  return artifact_id + " row checksum mismatch: " + path + " row " + std::to_string(row) + " (" +
         sample_key(sample_id) + ") value " + value +
         ": its bytes are not those written; the shard is damaged: rebuild the cache with "
         "`wam-pipeline cache generate PIPELINE --overwrite`";
}

namespace {

using hdf5::check;
using hdf5::Handle;

// A missing attribute reads as "<absent>" in the shard mismatch message.
std::string shard_attribute(hid_t object, const char* name, const std::string& path) {
  return hdf5::read_string_attribute(object, name, path).value_or("<absent>");
}

// Reads every row of every value with pread and compares it with its stored checksum.
void check_row_checksums(const std::string& path, const std::string& artifact_id,
                         const std::vector<ValueSchema>& values, const ShardLayout& shard) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CacheError("cannot open " + path + ": " + errno_text());
  std::vector<char> row_bytes;
  try {
    for (size_t v = 0; v < values.size(); ++v) {
      const ValueLayout& layout = shard.values[v];
      const int64_t unit = static_cast<int64_t>(values[v].unit_bytes());
      for (size_t row = 0; row < shard.sample_ids.size(); ++row) {
        const int64_t begin =
            layout.offsets.empty() ? static_cast<int64_t>(row) * unit : layout.offsets[row] * unit;
        const int64_t bytes =
            layout.offsets.empty() ? unit : (layout.offsets[row + 1] - layout.offsets[row]) * unit;
        row_bytes.resize(static_cast<size_t>(bytes));
        for (int64_t done = 0; done < bytes;) {
          const ssize_t n = ::pread(fd, row_bytes.data() + done, static_cast<size_t>(bytes - done),
                                    layout.data_offset + begin + done);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            throw CacheError(artifact_id + " cannot read row " + std::to_string(row) + " of " +
                             path + ": " + (n == 0 ? "the file ends early" : errno_text()));
          }
          done += n;
        }
        if (row_checksum(shard.sample_ids[row], row_bytes.data(), row_bytes.size()) !=
            layout.row_checksums[row]) {
          throw CacheError(row_checksum_mismatch(artifact_id, path, static_cast<int64_t>(row),
                                                 shard.sample_ids[row], values[v].name));
        }
      }
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? "," : "") + std::to_string(dims[i]);
  return text + "]";
}

// A shard file open for reading, with the checks of its datasets against the contract; a
// difference is a "shard shape/dtype mismatch" naming the artifact and the file.
class ShardFile {
 public:
  ShardFile(const std::string& path, const std::string& artifact_id)
      : path_(path),
        id_(artifact_id),
        file_(check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open", path), H5Fclose) {}

  hid_t get() const { return file_.get(); }
  const std::string& path() const { return path_; }
  const std::string& id() const { return id_; }

  CacheError mismatch(const std::string& what) const {
    return CacheError(id_ + " shard shape/dtype mismatch: " + path_ + ": " + what);
  }

  // Whether the link `name` exists, each group on its path looked up first.
  bool exists(const std::string& name) const {
    for (size_t slash = name.find('/');; slash = name.find('/', slash + 1)) {
      const std::string prefix = name.substr(0, slash);
      if (check(H5Lexists(file_.get(), prefix.c_str(), H5P_DEFAULT), "look up", path_, prefix) <=
          0) {
        return false;
      }
      if (slash == std::string::npos) return true;
    }
  }

  hid_t open_dataset(const std::string& name) const {
    if (!exists(name)) throw mismatch("dataset " + name + " is missing");
    return check(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), "open", path_, name);
  }

  // Checks the dataset's dims, element type and contiguous layout; returns its file offset.
  int64_t check_dataset(hid_t dataset, const std::string& name, const std::vector<hsize_t>& dims,
                        H5T_class_t type_class, size_t type_size, bool is_signed) const {
    Handle space(check(H5Dget_space(dataset), "read dataspace", path_, name), H5Sclose);
    std::vector<hsize_t> actual(static_cast<size_t>(H5Sget_simple_extent_ndims(space.get())));
    H5Sget_simple_extent_dims(space.get(), actual.data(), nullptr);
    if (actual != dims) {
      throw mismatch(name + " has dims " + dims_text(actual) + ", expected " + dims_text(dims));
    }
    Handle type(check(H5Dget_type(dataset), "read type", path_, name), H5Tclose);
    const bool type_ok =
        H5Tget_class(type.get()) == type_class && H5Tget_size(type.get()) == type_size &&
        (type_class != H5T_INTEGER || (H5Tget_sign(type.get()) == H5T_SGN_2) == is_signed) &&
        H5Tget_order(type.get()) == H5T_ORDER_LE;
    if (!type_ok) throw mismatch(name + " has another element type than the contract's");
    Handle plist(check(H5Dget_create_plist(dataset), "read layout", path_, name), H5Pclose);
    if (H5Pget_layout(plist.get()) != H5D_CONTIGUOUS) {
      throw mismatch(name + " is not a contiguous dataset");
    }
    hsize_t elements = 1;
    for (hsize_t d : dims) elements *= d;
    if (elements == 0) return 0;
    const haddr_t offset = H5Dget_offset(dataset);
    if (offset == HADDR_UNDEF) throw mismatch(name + " has no allocated storage");
    return static_cast<int64_t>(offset);
  }

 private:
  std::string path_;
  std::string id_;
  Handle file_;
};

// The file's attributes name this artifact, this build, the key codec and the schema version.
void check_shard_attributes(const ShardFile& file, const std::string& build_id) {
  const std::string& path = file.path();
  const std::string attr_artifact = shard_attribute(file.get(), "artifact_id", path);
  const std::string attr_build = shard_attribute(file.get(), "build_id", path);
  const std::string attr_codec = shard_attribute(file.get(), "key_codec", path);
  const int64_t attr_version =
      hdf5::read_int_attribute(file.get(), "schema_version", path).value_or(-1);
  if (attr_artifact != file.id() || attr_build != build_id || attr_codec != kKeyCodec ||
      attr_version != kSchemaVersion) {
    throw CacheError(
        file.id() + " shard attribute mismatch: " + path + ": artifact_id=" + attr_artifact +
        " build_id=" + attr_build + " key_codec=" + attr_codec +
        " schema_version=" + std::to_string(attr_version) + ", expected " + file.id() + " " +
        build_id + " " + std::string(kKeyCodec) + " " + std::to_string(kSchemaVersion));
  }
}

// One value's datasets checked against its schema: the row offsets when ragged, the data (its
// file offset kept for pread) and the row checksums.
ValueLayout read_value_layout(const ShardFile& file, const ValueSchema& value, int64_t rows) {
  const std::string& path = file.path();
  const std::string name = "values/" + value.name;
  const bool is_float32 = value.dtype == DType::kFloat32;
  const H5T_class_t type_class = is_float32 ? H5T_FLOAT : H5T_INTEGER;
  ValueLayout layout;
  int64_t total_rows = rows;
  if (value.ragged()) {
    Handle offsets_dataset(file.open_dataset(name + ".__offsets"), H5Dclose);
    file.check_dataset(offsets_dataset.get(), name + ".__offsets", {static_cast<hsize_t>(rows + 1)},
                       H5T_INTEGER, 8, true);
    layout.offsets.resize(static_cast<size_t>(rows + 1));
    check(H5Dread(offsets_dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                  layout.offsets.data()),
          "read", path, name + ".__offsets");
    bool valid = layout.offsets[0] == 0;
    for (int64_t row = 0; row < rows && valid; ++row) {
      valid = layout.offsets[row + 1] >= layout.offsets[row];
    }
    if (!valid) throw file.mismatch(name + ".__offsets are not non-decreasing from 0");
    total_rows = layout.offsets.back();
  }
  std::vector<hsize_t> dims{static_cast<hsize_t>(total_rows)};
  for (size_t d = value.ragged() ? 1 : 0; d < value.shape.size(); ++d) {
    dims.push_back(static_cast<hsize_t>(value.shape[d]));
  }
  Handle dataset(file.open_dataset(name), H5Dclose);
  layout.data_offset =
      file.check_dataset(dataset.get(), name, dims, type_class, dtype_size(value.dtype), false);
  if (!is_float32) {
    const std::string dtype = shard_attribute(dataset.get(), "dtype", path);
    if (dtype != dtype_name(value.dtype)) {
      throw file.mismatch(name + " has dtype attribute \"" + dtype + "\", expected \"" +
                          std::string(dtype_name(value.dtype)) + "\"");
    }
  }
  const std::string checksums = name + ".__crc32c";
  if (!file.exists(checksums)) {
    throw CacheError(file.id() + " shard " + path + " has no row checksums (" + checksums +
                     "): it was built by an earlier wam-pipeline; rebuild the cache with "
                     "`wam-pipeline cache generate PIPELINE --overwrite`");
  }
  Handle checksums_dataset(file.open_dataset(checksums), H5Dclose);
  file.check_dataset(checksums_dataset.get(), checksums, {static_cast<hsize_t>(rows)}, H5T_INTEGER,
                     4, false);
  layout.row_checksums.resize(static_cast<size_t>(rows));
  check(H5Dread(checksums_dataset.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                layout.row_checksums.data()),
        "read", path, checksums);
  return layout;
}

}  // namespace

ShardLayout inspect_shard(const std::string& path, const std::string& artifact_id,
                          const std::string& build_id, const std::vector<ValueSchema>& values,
                          int64_t rows, const std::vector<int64_t>* expected_ids) {
  // Thread-safe HDF5 keeps an error stack, and its printing setting, per thread.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string& id = artifact_id;
  const ShardFile file(path, artifact_id);
  check_shard_attributes(file, build_id);

  Handle ids_dataset(file.open_dataset("sample_ids"), H5Dclose);
  file.check_dataset(ids_dataset.get(), "sample_ids", {static_cast<hsize_t>(rows)}, H5T_INTEGER, 8,
                     true);
  ShardLayout shard;
  std::vector<int64_t>& ids = shard.sample_ids;
  ids.resize(static_cast<size_t>(rows));
  check(H5Dread(ids_dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data()),
        "read", path, "sample_ids");
  if (expected_ids) {
    for (int64_t row = 0; row < rows; ++row) {
      if (ids[row] != (*expected_ids)[row]) {
        throw CacheError(key_mismatch(id, path, row, ids[row], (*expected_ids)[row]));
      }
    }
  }

  for (const ValueSchema& value : values)
    shard.values.push_back(read_value_layout(file, value, rows));
  if (expected_ids) check_row_checksums(path, id, values, shard);
  return shard;
}

namespace {

const json& required(const json& manifest, const char* key, const std::string& id,
                     const std::string& path) {
  if (!manifest.contains(key)) {
    throw CacheError(id + " manifest is incomplete: " + path + " has no '" + key + "'");
  }
  return manifest[key];
}

// Runs `check(i)` for i in [0, count) on min(hardware threads, count) threads; rethrows the error
// of the lowest i that failed, so that the report does not depend on scheduling.
template <class Check>
void parallel_check(size_t count, Check check) {
  std::vector<std::exception_ptr> errors(count);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < count; i = next++) {
      try {
        check(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace

namespace {

// `key` of a manifest's object, `fallback` where absent. Anything but an integer in
// int64's range is named: nlohmann converts a double to int64 without a range check (undefined
// behaviour past it; tests/fuzz/regressions/cache_json/manifest_sample_count_huge_float).
int64_t manifest_integer(const json& object, const char* key, int64_t fallback,
                         const std::string& what, const std::string& pointer) {
  if (!object.is_object() || !object.contains(key)) return fallback;
  const json& value = object[key];
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() &&
       value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    throw CacheError(what + ": " + pointer + " is " +
                     value.dump(-1, ' ', false, json::error_handler_t::replace) +
                     ", not an integer");
  }
  return value.get<int64_t>();
}

// Fills each shard's sample_ids from the index: every row indexed exactly once, and the index's
// keys the samples the build holds.
void index_shard_rows(CheckedBuild& build, const json& entries, const std::string& index_path) {
  const std::string& id = build.artifact_id;
  std::vector<int64_t> ids;
  ids.reserve(entries.size());
  for (const auto& [key, entry] : entries.items()) {
    std::optional<int64_t> parsed;
    if (key.rfind("sample:", 0) == 0)
      parsed = parse_integer<int64_t>(std::string_view(key).substr(7));
    if (!parsed || *parsed < 0) {
      throw CacheError(id + " index has a malformed key '" + key + "': " + index_path);
    }
    const int64_t sample_id = *parsed;
    const std::string what = id + " index " + index_path;
    const int64_t shard = manifest_integer(entry, "shard", -1, what, "/entries/" + key + "/shard");
    const int64_t row = manifest_integer(entry, "row", -1, what, "/entries/" + key + "/row");
    if (shard < 0 || shard >= static_cast<int64_t>(build.shards.size()) || row < 0 ||
        row >= build.shards[shard].rows) {
      throw CacheError(id + " index entry " + key + " points outside the shards: " + index_path);
    }
    int64_t& slot = build.shards[shard].sample_ids[row];
    if (slot != -1) {
      throw CacheError(id + " index/shard key mismatch: " + build.shards[shard].file + " row " +
                       std::to_string(row) + " is indexed by " + sample_key(slot) + " and " + key);
    }
    slot = sample_id;
    ids.push_back(sample_id);
  }
  check_key_coverage(id, ids, build.cached_samples);
  for (const ShardRecord& shard : build.shards) {
    const auto row = std::find(shard.sample_ids.begin(), shard.sample_ids.end(), -1);
    if (row != shard.sample_ids.end()) {
      throw CacheError(id + " index/shard key mismatch: " + shard.file + " row " +
                       std::to_string(row - shard.sample_ids.begin()) + " is not indexed");
    }
  }
}

// Each shard is a regular file of the manifest's size; full validation also checks its sha256 and
// its datasets (inspect_shard, keeping the layouts), shards on parallel threads.
void check_shard_files(CheckedBuild& build, const OpenOptions& options) {
  const std::string& id = build.artifact_id;
  for (const ShardRecord& shard : build.shards) {
    const std::string path = build.build_dir + "/" + shard.file;
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      throw CacheError("Missing " + id + " shard " + path);
    }
    if (info.st_size != shard.bytes) {
      throw CacheError(id + " shard size mismatch: " + path + " has " +
                       std::to_string(info.st_size) + " bytes, the manifest says " +
                       std::to_string(shard.bytes));
    }
  }
  if (options.mode == ValidationMode::kFull) {
    build.layouts.resize(build.shards.size());
    parallel_check(build.shards.size(), [&](size_t i) {
      const ShardRecord& shard = build.shards[i];
      const std::string path = build.build_dir + "/" + shard.file;
      if (sha256_file_hex(path) != shard.sha256) {
        throw CacheError(id + " shard checksum mismatch: " + path);
      }
      build.layouts[i] =
          inspect_shard(path, id, build.build_id, build.values, shard.rows, &shard.sample_ids);
    });
  }
}

CheckedBuild check_build_json(const std::string& build_dir, const std::string& manifest_path,
                              const json& manifest, const std::string& artifact_id,
                              const json* expected_contract, const OpenOptions& options) {
  const std::string& id = artifact_id;
  CheckedBuild build;
  build.artifact_id = id;
  build.build_dir = build_dir;
  if (!manifest.is_object() || required(manifest, "complete", id, manifest_path) != true ||
      required(manifest, "cache_type", id, manifest_path) != kArtifactType ||
      required(manifest, "artifact_id", id, manifest_path) != id ||
      required(manifest, "backend", id, manifest_path) != kBackend ||
      required(manifest, "schema_version", id, manifest_path) != kSchemaVersion) {
    throw CacheError(id + " manifest is incomplete or not a " + std::string(kBackend) + " " + id +
                     " build: " + manifest_path);
  }
  build.build_id = required(manifest, "build_id", id, manifest_path).get<std::string>();
  build.contract = required(manifest, "contract", id, manifest_path);
  if (expected_contract) {
    compare_contracts(build.contract, *expected_contract, id, options.partial_allowed);
  }
  build.values = value_schemas(build.contract);
  const std::string manifest_what = id + " manifest " + manifest_path;
  build.cached_samples =
      manifest_integer(build.contract, "sample_count", -1, manifest_what, "/contract/sample_count");
  build.expected_samples = expected_contract
                               ? manifest_integer(*expected_contract, "sample_count", -1,
                                                  id + " expected contract", "/sample_count")
                               : build.cached_samples;
  if (options.partial_allowed && build.cached_samples == 0) {
    throw CacheError(id + " partial cache is empty: " + manifest_path);
  }

  // What a damaged or hand-edited manifest says is refused naming the file and the JSON pointer.
  const auto damaged = [&](const std::string& pointer, const std::string& what) {
    return CacheError(id + " manifest " + manifest_path + ": " + pointer + " " + what +
                      "; rebuild the cache with `wam-pipeline cache generate PIPELINE "
                      "--overwrite`");
  };
  const auto inside_build = [&](const json& value, const std::string& pointer) {
    const std::string relative = value.get<std::string>();
    if (!stays_inside(relative)) {
      throw damaged(pointer, "\"" + relative + "\" leaves the build directory " + build_dir);
    }
    return build_dir + "/" + relative;
  };
  const std::string index_path =
      inside_build(required(manifest, "index_file", id, manifest_path), "/index_file");
  const std::string index_text = read_file(index_path, id + " index");
  if (sha256_hex(index_text) !=
      required(manifest, "index_sha256", id, manifest_path).get<std::string>()) {
    throw CacheError(id + " index checksum mismatch: " + index_path);
  }
  const json index = parse_json(index_text, index_path);
  if (manifest_integer(index, "sample_count", -1, id + " index " + index_path, "/sample_count") !=
      build.cached_samples) {
    throw CacheError(id + " index sample_count mismatch: " + index_path +
                     " index=" + index.value("sample_count", json()).dump() +
                     " manifest=" + std::to_string(build.cached_samples));
  }

  const json& entries = index.at("entries");
  // Every row of a shard is indexed: no shard holds more rows than the index lists samples.
  const int64_t indexed = static_cast<int64_t>(entries.size());
  const json& shards = required(manifest, "shards", id, manifest_path);
  for (size_t s = 0; s < shards.size(); ++s) {
    const json& shard = shards[s];
    const std::string pointer = "/shards/" + std::to_string(s);
    ShardRecord record{shard.at("file").get<std::string>(),
                       manifest_integer(shard, "rows", 0, manifest_what, pointer + "/rows"),
                       manifest_integer(shard, "bytes", -1, manifest_what, pointer + "/bytes"),
                       shard.at("sha256").get<std::string>(),
                       {}};
    inside_build(shard.at("file"), pointer + "/file");
    if (record.rows < 1 || record.rows > indexed) {
      throw damaged(pointer + "/rows", "is " + std::to_string(record.rows) + ", outside 1 .. " +
                                           std::to_string(indexed) + " (the samples " + index_path +
                                           " lists)");
    }
    if (record.bytes < 0) throw damaged(pointer + "/bytes", "is negative");
    record.sample_ids.assign(static_cast<size_t>(record.rows), -1);
    build.shards.push_back(std::move(record));
  }
  index_shard_rows(build, entries, index_path);
  check_shard_files(build, options);
  return build;
}

}  // namespace

CheckedBuild check_build(const std::string& build_dir, const std::string& manifest_path,
                         const json& manifest, const std::string& artifact_id,
                         const json* expected_contract, const OpenOptions& options) {
  try {
    return check_build_json(build_dir, manifest_path, manifest, artifact_id, expected_contract,
                            options);
  } catch (const json::exception& e) {
    throw CacheError(artifact_id + " manifest or index is malformed: " + manifest_path + ": " +
                     e.what());
  }
}

}  // namespace internal

void check_write_target(const std::string& root, const std::vector<std::string>& artifact_ids,
                        bool overwrite) {
  if (overwrite) return;
  const json catalog = internal::load_catalog_or_empty(root);
  std::vector<std::string> existing;
  for (const std::string& id : artifact_ids) {
    if (catalog["artifacts"].contains(id)) existing.push_back(id);
  }
  if (!existing.empty()) {
    throw CacheError("Cache artifacts already exist at " + root + ": [" + join(existing, ", ") +
                     "]. Pass --overwrite to publish replacement builds.");
  }
}

// Builds readers; the only code that fills ArtifactReader's members.
class ReaderLoader {
 public:
  static std::unique_ptr<ArtifactReader> load(const std::string& root,
                                              const std::string& artifact_id,
                                              const json* expected_contract,
                                              const OpenOptions& options) {
    const std::string& id = artifact_id;
    const json catalog = internal::load_catalog(root);
    if (!catalog["artifacts"].contains(id)) {
      throw CacheError("Selected cache artifact '" + id + "' is missing from catalog.");
    }
    const json& entry = catalog["artifacts"][id];
    const std::string catalog_file = internal::catalog_path(root);
    if (entry.value("backend", json()) != kBackend) {
      throw CacheError(id + " backend mismatch in " + catalog_file +
                       ": cache=" + entry.value("backend", json()).dump() + " expected=\"" +
                       std::string(kBackend) + "\"");
    }
    const std::string relative = entry.value("manifest", std::string());
    const fs::path manifest_relative = fs::path(relative).lexically_normal();
    if (!internal::stays_inside(relative)) {
      throw CacheError(id + " manifest path leaves the cache root: \"" + relative + "\" in " +
                       catalog_file);
    }
    const std::string manifest_path = root + "/" + manifest_relative.string();
    const std::string manifest_text = internal::read_file(manifest_path, id + " manifest");
    if (sha256_hex(manifest_text) != entry.value("manifest_sha256", std::string())) {
      throw CacheError("Catalog manifest checksum mismatch: " + manifest_path +
                       " does not match the checksum in " + catalog_file);
    }
    const json manifest = internal::parse_json(manifest_text, manifest_path);
    internal::CheckedBuild build =
        internal::check_build(manifest_relative.parent_path().empty()
                                  ? root
                                  : root + "/" + manifest_relative.parent_path().string(),
                              manifest_path, manifest, id, expected_contract, options);
    if (build.build_id != entry.value("build_id", std::string())) {
      throw CacheError(id + " build id mismatch: " + manifest_path + " holds " + build.build_id +
                       ", " + catalog_file + " says " + entry.value("build_id", std::string()));
    }

    std::unique_ptr<ArtifactReader> reader(new ArtifactReader());
    reader->artifact_id_ = id;
    reader->build_id_ = build.build_id;
    reader->contract_ = build.contract;
    reader->values_ = build.values;
    reader->expected_samples_ = build.expected_samples;
    reader->cached_samples_ = build.cached_samples;
    reader->locations_.resize(static_cast<size_t>(build.expected_samples));
    raise_open_file_limit(build.shards.size());
    for (size_t s = 0; s < build.shards.size(); ++s) {
      const internal::ShardRecord& record = build.shards[s];
      ArtifactReader::Shard shard;
      shard.path = build.build_dir + "/" + record.file;
      internal::ShardLayout layout =
          build.layouts.empty() ? internal::inspect_shard(shard.path, id, build.build_id,
                                                          build.values, record.rows, nullptr)
                                : std::move(build.layouts[s]);
      shard.sample_ids = std::move(layout.sample_ids);
      shard.layouts = std::move(layout.values);
      shard.fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (shard.fd < 0) throw CacheError("cannot open " + shard.path + ": " + errno_text());
      reader->shards_.push_back(std::move(shard));
      for (int64_t row = 0; row < record.rows; ++row) {
        reader->locations_[record.sample_ids[row]] = {static_cast<int32_t>(s),
                                                      static_cast<int32_t>(row)};
      }
    }
    return reader;
  }

 private:
  // One descriptor per shard stays open; lift the soft limit towards the hard one if needed.
  static void raise_open_file_limit(size_t shards) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
    const rlim_t wanted = static_cast<rlim_t>(shards) + 256;
    if (limit.rlim_cur >= wanted) return;
    limit.rlim_cur = std::min(wanted, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
};

ArtifactReader::~ArtifactReader() {
  for (const Shard& shard : shards_) {
    if (shard.fd >= 0) ::close(shard.fd);
  }
}

int ArtifactReader::value_index(std::string_view name) const {
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].name == name) return static_cast<int>(i);
  }
  throw CacheError(artifact_id_ + " has no value \"" + std::string(name) + "\"");
}

double ArtifactReader::coverage() const {
  return expected_samples_ > 0 ? static_cast<double>(cached_samples_) / expected_samples_ : 0.0;
}

bool ArtifactReader::contains(int64_t sample_id) const {
  return sample_id >= 0 && sample_id < static_cast<int64_t>(locations_.size()) &&
         locations_[sample_id].shard >= 0;
}

const ArtifactReader::Location& ArtifactReader::locate(int64_t sample_id) const {
  if (!contains(sample_id)) {
    throw CacheError(artifact_id_ + " cache is missing requested keys; examples=[" +
                     sample_key(sample_id) + "]");
  }
  const Location& location = locations_[sample_id];
  const Shard& shard = shards_[location.shard];
  // The index may send a sample to another's row (full validation compares them all at once).
  if (shard.sample_ids[location.row] != sample_id) {
    throw CacheError(internal::key_mismatch(artifact_id_, shard.path, location.row,
                                            shard.sample_ids[location.row], sample_id));
  }
  return location;
}

void ArtifactReader::pread_exactly(const Shard& shard, void* dst, size_t bytes,
                                   int64_t offset) const {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(shard.fd, out + done, bytes - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw CacheError(artifact_id_ + " cannot read " + std::to_string(bytes) + " bytes at " +
                       std::to_string(offset) + " of " + shard.path + ": " +
                       (n == 0 ? "the file ends early" : errno_text()));
    }
    done += static_cast<size_t>(n);
  }
  ReadCounts& counts = read_counts_[reader_thread_slot() % kReadCountSlots];
  counts.rows.fetch_add(1, std::memory_order_relaxed);
  counts.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

uint64_t ArtifactReader::rows_read() const {
  uint64_t rows = 0;
  for (const ReadCounts& counts : read_counts_) rows += counts.rows.load(std::memory_order_relaxed);
  return rows;
}

uint64_t ArtifactReader::bytes_read() const {
  uint64_t bytes = 0;
  for (const ReadCounts& counts : read_counts_) {
    bytes += counts.bytes.load(std::memory_order_relaxed);
  }
  return bytes;
}

void ArtifactReader::check_row(const Shard& shard, int32_t row, int64_t sample_id, int value_index,
                               const void* data, size_t bytes) const {
  if (row_checksum(sample_id, data, bytes) != shard.layouts[value_index].row_checksums[row]) {
    throw CacheError(internal::row_checksum_mismatch(artifact_id_, shard.path, row, sample_id,
                                                     values_[value_index].name));
  }
}

void ArtifactReader::read_fixed(int64_t sample_id, int value_index, void* dst) const {
  const Location& location = locate(sample_id);
  const Shard& shard = shards_[location.shard];
  if (values_.at(value_index).ragged()) {
    throw CacheError(artifact_id_ + " value " + values_[value_index].name +
                     " is ragged: read it with read_ragged");
  }
  const size_t row_bytes = values_[value_index].unit_bytes();
  pread_exactly(
      shard, dst, row_bytes,
      shard.layouts[value_index].data_offset + static_cast<int64_t>(row_bytes) * location.row);
  check_row(shard, location.row, sample_id, value_index, dst, row_bytes);
}

int64_t ArtifactReader::ragged_length(int64_t sample_id, int value_index) const {
  const Location& location = locate(sample_id);
  const std::vector<int64_t>& offsets = shards_[location.shard].layouts.at(value_index).offsets;
  if (offsets.empty()) {
    throw CacheError(artifact_id_ + " value " + values_.at(value_index).name + " is not ragged");
  }
  return offsets[location.row + 1] - offsets[location.row];
}

void ArtifactReader::read_ragged(int64_t sample_id, int value_index, void* dst) const {
  const Location& location = locate(sample_id);
  const Shard& shard = shards_[location.shard];
  const ValueLayout& layout = shard.layouts.at(value_index);
  if (layout.offsets.empty()) {
    throw CacheError(artifact_id_ + " value " + values_.at(value_index).name + " is not ragged");
  }
  const int64_t unit = static_cast<int64_t>(values_[value_index].unit_bytes());
  const int64_t begin = layout.offsets[location.row];
  const int64_t length = layout.offsets[location.row + 1] - begin;
  if (length > 0) {
    pread_exactly(shard, dst, static_cast<size_t>(length * unit),
                  layout.data_offset + begin * unit);
  }
  check_row(shard, location.row, sample_id, value_index, dst, static_cast<size_t>(length * unit));
}

std::unique_ptr<ArtifactReader> open_artifact(const std::string& root,
                                              const json& expected_contract,
                                              const OpenOptions& options) {
  if (!expected_contract.contains("artifact_id") || !expected_contract["artifact_id"].is_string()) {
    throw CacheError("expected cache contract has no artifact_id");
  }
  return ReaderLoader::load(root, expected_contract["artifact_id"].get<std::string>(),
                            &expected_contract, options);
}

std::unique_ptr<ArtifactReader> open_stored_artifact(const std::string& root,
                                                     const std::string& artifact_id,
                                                     ValidationMode mode) {
  return ReaderLoader::load(root, artifact_id, nullptr, OpenOptions{mode, false});
}

namespace {

ArtifactInfo summarize(const std::string& root, const std::string& id, const json& entry) {
  ArtifactInfo info;
  info.artifact_id = id;
  info.build_id = entry.value("build_id", std::string());
  info.manifest = entry.value("manifest", std::string());
  if (!internal::stays_inside(info.manifest)) {
    throw CacheError(id + " manifest path leaves the cache root: \"" + info.manifest + "\" in " +
                     internal::catalog_path(root));
  }
  const std::string manifest_path = root + "/" + info.manifest;
  const json manifest =
      internal::parse_json(internal::read_file(manifest_path, id + " manifest"), manifest_path);
  const json shards = manifest.value("shards", json::array());
  const std::string what = id + " manifest " + manifest_path;
  for (const json& shard : shards) {
    info.bytes += internal::manifest_integer(shard, "bytes", 0, what,
                                             "/shards/" + std::to_string(info.shards) + "/bytes");
    ++info.shards;
  }
  const std::string index_file = manifest.value("index_file", std::string("index.json"));
  if (!internal::stays_inside(index_file)) {
    throw CacheError(id + " manifest " + manifest_path + ": /index_file \"" + index_file +
                     "\" leaves the build directory");
  }
  const std::string index_path = fs::path(manifest_path).parent_path().string() + "/" + index_file;
  const json index =
      internal::parse_json(internal::read_file(index_path, id + " index"), index_path);
  info.samples = static_cast<int64_t>(index.value("entries", json::object()).size());
  const json contract = manifest.value("contract", json::object());
  const int64_t sample_count =
      internal::manifest_integer(contract, "sample_count", 0, what, "/contract/sample_count");
  info.coverage = sample_count > 0 ? static_cast<double>(info.samples) / sample_count : 0.0;
  json dependencies = json::object();
  const json contract_dependencies = contract.value("dependencies", json::object());
  for (const auto& [name, dependency] : contract_dependencies.items()) {
    dependencies[name] = fingerprint(dependency).substr(0, 16);
  }
  info.contract_summary = {{"sample_count", sample_count},
                           {"key_codec", contract.value("key_codec", json())},
                           {"value_codec", contract.value("value_codec", json())},
                           {"values", contract.value("values", json::object())},
                           {"dependencies", dependencies}};
  std::error_code ec;
  for (const auto& build : fs::directory_iterator(root + "/artifacts/" + id + "/builds", ec)) {
    info.builds.push_back(build.path().filename().string());
  }
  std::sort(info.builds.begin(), info.builds.end());
  return info;
}

}  // namespace

std::vector<ArtifactInfo> cache_info(const std::string& root) {
  const json catalog = internal::load_catalog(root);
  std::vector<ArtifactInfo> infos;
  for (const auto& [id, entry] : catalog["artifacts"].items()) {
    try {
      infos.push_back(summarize(root, id, entry));
    } catch (const json::exception& e) {
      throw CacheError(id + " catalog entry, manifest or index is malformed under " + root + ": " +
                       e.what());
    }
  }
  return infos;
}

std::vector<ArtifactInfo> validate_cache(const std::string& root, ValidationMode mode) {
  const json catalog = internal::load_catalog(root);
  std::vector<ArtifactInfo> infos;
  for (const auto& [id, entry] : catalog["artifacts"].items()) open_stored_artifact(root, id, mode);
  return cache_info(root);
}

}  // namespace wam::cache
