// Safetensors files, the format model weights are published in (Hugging Face's `safetensors`): an
// 8-byte little-endian header length, a JSON header giving each tensor's dtype, shape and byte
// range, then the tensors' raw little-endian bytes, back to back. Hand-written because Debian 12
// packages no C++ reader or writer of it. No LibTorch here (models/weights_file.h moves tensors).
//
// Reading checks the whole header against the file before any data is read: sizes, offsets,
// dtypes, duplicate names, and that the tensors tile the data section exactly (as the reference
// implementation requires). Every error names the file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wam::safetensors {

enum class DType { kBool, kU8, kI8, kI16, kI32, kI64, kF16, kBF16, kF32, kF64 };

std::string_view dtype_name(DType dtype);  // as the header spells it: "BF16", "F32", ...
std::optional<DType> dtype_from_name(std::string_view name);
int64_t dtype_size(DType dtype);  // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range within the data section
  int64_t bytes() const { return end - begin; }
};

// An open file: its header, checked, and the data read on demand.
class Reader {
 public:
  // Throws wam::Error "<path>: ..." when the file cannot be read or is not a valid safetensors
  // file.
  explicit Reader(std::string path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order
  const TensorInfo* find(std::string_view name) const;                 // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Reads the tensor's info.bytes() bytes into `out`.
  void read(const TensorInfo& info, void* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `data` holds its bytes, little-endian, row-major.
struct TensorData {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// The file for `tensors` (in that order) and `metadata`, handed to `sink` in pieces (the header,
// then each tensor's bytes), so that large files are never held in memory twice. The header is
// padded with spaces to a multiple of 8 bytes, as the reference writer does. Throws wam::Error on
// duplicate or empty names.
void write(const std::vector<TensorData>& tensors,
           const std::map<std::string, std::string>& metadata,
           const std::function<void(std::string_view)>& sink);

}  // namespace wam::safetensors
