#include "common/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "wam/error.h"

namespace wam::safetensors {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies it as it is");

// The reference implementation's limit on the header (MAX_HEADER_SIZE).
constexpr int64_t kMaxHeaderBytes = 100'000'000;

struct DTypeSpec {
  DType dtype;
  std::string_view name;
  int64_t size;
};

constexpr std::array<DTypeSpec, 10> kDTypes = {{{DType::kBool, "BOOL", 1},
                                                {DType::kU8, "U8", 1},
                                                {DType::kI8, "I8", 1},
                                                {DType::kI16, "I16", 2},
                                                {DType::kI32, "I32", 4},
                                                {DType::kI64, "I64", 8},
                                                {DType::kF16, "F16", 2},
                                                {DType::kBF16, "BF16", 2},
                                                {DType::kF32, "F32", 4},
                                                {DType::kF64, "F64", 8}}};

const DTypeSpec& spec_of(DType dtype) {
  for (const DTypeSpec& spec : kDTypes) {
    if (spec.dtype == dtype) return spec;
  }
  throw Error("safetensors: unknown dtype value " + std::to_string(static_cast<int>(dtype)));
}

std::string known_dtypes() {
  std::string names;
  for (const DTypeSpec& spec : kDTypes)
    names += (names.empty() ? "" : ", ") + std::string(spec.name);
  return names;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Bytes of `shape` in `dtype`, or nullopt when the count overflows int64.
std::optional<int64_t> byte_count(const std::vector<int64_t>& shape, DType dtype) {
  int64_t bytes = dtype_size(dtype);
  for (int64_t extent : shape) {
    if (extent != 0 && bytes > INT64_MAX / extent) return std::nullopt;
    bytes *= extent;
  }
  return bytes;
}

void read_exactly(int fd, void* out, int64_t bytes, int64_t offset, const std::string& path) {
  auto* cursor = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, cursor, static_cast<size_t>(bytes), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      throw Error(path + ": cannot read " + std::to_string(bytes) + " bytes at offset " +
                  std::to_string(offset) + ": " + (got < 0 ? std::strerror(errno) : "end of file"));
    }
    cursor += got;
    bytes -= got;
    offset += got;
  }
}

// One header entry, checked against the data section's size.
TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, int64_t data_bytes) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    throw Error(where + "expected an object with \"dtype\", \"shape\" and \"data_offsets\"");
  }
  TensorInfo info;
  info.name = name;
  const nlohmann::json& dtype = entry.at("dtype");
  const std::optional<DType> known =
      dtype.is_string() ? dtype_from_name(dtype.get<std::string>()) : std::nullopt;
  if (!known) {
    throw Error(where + "unknown dtype " + dtype.dump() + "; known: " + known_dtypes());
  }
  info.dtype = *known;
  const nlohmann::json& shape = entry.at("shape");
  if (!shape.is_array()) throw Error(where + "\"shape\" must be an array of sizes");
  for (const nlohmann::json& extent : shape) {
    if (!extent.is_number_unsigned()) {
      throw Error(where + "\"shape\" must hold sizes (integers >= 0), got " + shape.dump());
    }
    const uint64_t value = extent.get<uint64_t>();
    if (value > static_cast<uint64_t>(INT64_MAX))
      throw Error(where + "size " + extent.dump() + " is too large");
    info.shape.push_back(static_cast<int64_t>(value));
  }
  const nlohmann::json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned() || offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>()) {
    throw Error(where + "\"data_offsets\" must be [begin, end] with 0 <= begin <= end, got " +
                offsets.dump());
  }
  if (offsets[1].get<uint64_t>() > static_cast<uint64_t>(data_bytes)) {
    throw Error(where + "data_offsets " + offsets.dump() + " run past the end of the data (" +
                std::to_string(data_bytes) + " bytes)");
  }
  info.begin = static_cast<int64_t>(offsets[0].get<uint64_t>());
  info.end = static_cast<int64_t>(offsets[1].get<uint64_t>());
  const std::optional<int64_t> needed = byte_count(info.shape, info.dtype);
  if (!needed || *needed != info.bytes()) {
    throw Error(where + "shape " + shape_text(info.shape) + " of " +
                std::string(dtype_name(info.dtype)) + " needs " +
                (needed ? std::to_string(*needed) : std::string("more than 2^63")) +
                " bytes, data_offsets give " + std::to_string(info.bytes()));
  }
  return info;
}

// The header's JSON, refusing a tensor named twice (a JSON object would keep only one of them).
nlohmann::json parse_header(const std::string& text) {
  std::set<std::string> names;
  std::string twice;
  const nlohmann::json::parser_callback_t callback =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
            !names.insert(parsed.get<std::string>()).second && twice.empty()) {
          twice = parsed.get<std::string>();
        }
        return true;
      };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("header is not valid JSON: ") + e.what());
  }
  if (!twice.empty()) throw Error("tensor \"" + twice + "\" is named twice");
  if (!header.is_object())
    throw Error(std::string("header must be a JSON object, got ") + header.type_name());
  return header;
}

}  // namespace

std::string_view dtype_name(DType dtype) { return spec_of(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeSpec& spec : kDTypes) {
    if (spec.name == name) return spec.dtype;
  }
  return std::nullopt;
}

int64_t dtype_size(DType dtype) { return spec_of(dtype).size; }

Reader::Reader(std::string path) : path_(std::move(path)) {
  struct stat status {};
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  if (::fstat(fd_, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw Error(path_ + ": not a regular file");
  }
  try {
    const int64_t file_bytes = status.st_size;
    if (file_bytes < 8) {
      throw Error("not a safetensors file: it is " + std::to_string(file_bytes) +
                  " bytes, shorter than the 8-byte header length");
    }
    uint64_t header_bytes = 0;
    read_exactly(fd_, &header_bytes, 8, 0, path_);
    if (header_bytes > static_cast<uint64_t>(kMaxHeaderBytes)) {
      throw Error("not a safetensors file: a header of " + std::to_string(header_bytes) +
                  " bytes is over the format's limit of " + std::to_string(kMaxHeaderBytes));
    }
    if (static_cast<int64_t>(header_bytes) > file_bytes - 8) {
      throw Error("not a safetensors file: its header length " + std::to_string(header_bytes) +
                  " runs past the end of the file (" + std::to_string(file_bytes) + " bytes)");
    }
    std::string text(header_bytes, '\0');
    read_exactly(fd_, text.data(), static_cast<int64_t>(header_bytes), 8, path_);
    data_start_ = 8 + static_cast<int64_t>(header_bytes);
    const int64_t data_bytes = file_bytes - data_start_;
    const nlohmann::json header = parse_header(text);
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object()) throw Error("\"__metadata__\" must map names to strings");
        for (const auto& [key, value] : entry.items()) {
          if (!value.is_string()) {
            throw Error("\"__metadata__\" value of \"" + key + "\" must be a string, got " +
                        value.dump());
          }
          metadata_[key] = value.get<std::string>();
        }
        continue;
      }
      tensors_.push_back(parse_entry(name, entry, data_bytes));
    }
    std::sort(tensors_.begin(), tensors_.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin; });
    // The reference implementation refuses gaps and overlaps: every data byte belongs to exactly
    // one tensor, so that no hidden bytes travel with the weights.
    int64_t covered = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorInfo& t = tensors_[i];
      if (t.begin < covered) {
        throw Error("tensors \"" + tensors_[i - 1].name + "\" and \"" + t.name + "\" overlap");
      }
      if (t.begin > covered) {
        throw Error("data bytes " + std::to_string(covered) + " to " + std::to_string(t.begin) +
                    " belong to no tensor");
      }
      covered = t.end;
    }
    if (covered != data_bytes) {
      throw Error("data bytes " + std::to_string(covered) + " to " + std::to_string(data_bytes) +
                  " belong to no tensor");
    }
  } catch (const Error& e) {
    ::close(fd_);
    fd_ = -1;
    const std::string message = e.what();
    throw Error(path_ + ": " +
                (message.rfind("not a safetensors", 0) == 0 || message.rfind(path_, 0) == 0
                     ? message
                     : "safetensors header: " + message));
  }
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorInfo* Reader::find(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void Reader::read(const TensorInfo& info, void* out) const {
  read_exactly(fd_, out, info.bytes(), data_start_ + info.begin, path_);
}

void write(const std::vector<TensorData>& tensors,
           const std::map<std::string, std::string>& metadata,
           const std::function<void(std::string_view)>& sink) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  for (const TensorData& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      throw Error("safetensors: a tensor may not be named \"" + t.name + "\"");
    }
    if (!names.insert(t.name).second) {
      throw Error("safetensors: tensor \"" + t.name + "\" is named twice");
    }
    const std::optional<int64_t> bytes = byte_count(t.shape, t.dtype);
    if (!bytes) throw Error("safetensors: tensor \"" + t.name + "\" is too large");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + *bytes}}};
    sizes.push_back(*bytes);
    offset += *bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  sink(std::string_view(reinterpret_cast<const char*>(&length), 8));
  sink(text);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] > 0) {
      sink(std::string_view(static_cast<const char*>(tensors[i].data),
                            static_cast<size_t>(sizes[i])));
    }
  }
}

}  // namespace wam::safetensors
