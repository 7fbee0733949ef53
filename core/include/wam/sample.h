// The packet that flows between stages: a sequence number, a stable key and named fields.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace at {
class Tensor;
}

namespace wam {

enum class FieldType { kTensor, kString, kInt, kDouble, kBool, kJson };

std::string_view field_type_name(FieldType type);

// Tensors are held behind a shared pointer so that this header (and everything that only routes
// samples: validation, the runner, the CLI) compiles without LibTorch. Use wam/tensor.h to read or
// write them. Copies of a Sample share tensors; received tensors are never modified in place.
using TensorPtr = std::shared_ptr<const at::Tensor>;
using FieldValue = std::variant<TensorPtr, std::string, int64_t, double, bool, nlohmann::json>;

FieldType type_of(const FieldValue& value);

class Sample {
 public:
  Sample() = default;
  explicit Sample(std::string key) : key_(std::move(key)) {}

  // Position in the source's output; set by the runner, used to restore order.
  uint64_t seq() const { return seq_; }
  void set_seq(uint64_t seq) { seq_ = seq; }
  // Stable identity, e.g. "sample:1234"; names the sample in errors and logs.
  const std::string& key() const { return key_; }
  void set_key(std::string key) { key_ = std::move(key); }

  bool has(std::string_view name) const { return find(name) != nullptr; }
  // Throws FieldError when the field is absent.
  FieldType type(std::string_view name) const;

  void set(std::string name, FieldValue value);
  void erase(std::string_view name);

  // Typed reads; each throws FieldError naming the field and both types on a mismatch.
  const std::string& get_string(std::string_view name) const;
  int64_t get_int(std::string_view name) const;
  double get_double(std::string_view name) const;
  bool get_bool(std::string_view name) const;
  const nlohmann::json& get_json(std::string_view name) const;
  const TensorPtr& get_tensor_ptr(std::string_view name) const;

  // Defined in wam/tensor.h's library (links LibTorch).
  const at::Tensor& tensor(std::string_view name) const;
  void set_tensor(std::string name, at::Tensor value);

  const std::vector<std::pair<std::string, FieldValue>>& fields() const { return fields_; }

 private:
  const FieldValue* find(std::string_view name) const;
  template <class T>
  const T& get(std::string_view name, FieldType expected) const;

  uint64_t seq_ = 0;
  std::string key_;
  std::vector<std::pair<std::string, FieldValue>> fields_;  // few fields: a vector beats a map
};

}  // namespace wam
