#include "wam/sample.h"

#include "wam/error.h"

namespace wam {

std::string_view field_type_name(FieldType type) {
  switch (type) {
    case FieldType::kTensor: return "Tensor";
    case FieldType::kString: return "String";
    case FieldType::kInt: return "Int";
    case FieldType::kDouble: return "Double";
    case FieldType::kBool: return "Bool";
    case FieldType::kJson: return "Json";
  }
  return "?";
}

FieldType type_of(const FieldValue& value) { return static_cast<FieldType>(value.index()); }

const FieldValue* Sample::find(std::string_view name) const {
  for (const auto& [field_name, value] : fields_) {
    if (field_name == name) return &value;
  }
  return nullptr;
}

FieldType Sample::type(std::string_view name) const {
  const FieldValue* value = find(name);
  if (!value) throw FieldError("field \"" + std::string(name) + "\" is missing");
  return type_of(*value);
}

void Sample::set(std::string name, FieldValue value) {
  for (auto& [field_name, existing] : fields_) {
    if (field_name == name) {
      existing = std::move(value);
      return;
    }
  }
  fields_.emplace_back(std::move(name), std::move(value));
}

void Sample::erase(std::string_view name) {
  for (auto it = fields_.begin(); it != fields_.end(); ++it) {
    if (it->first == name) {
      fields_.erase(it);
      return;
    }
  }
}

template <class T>
const T& Sample::get(std::string_view name, FieldType expected) const {
  const FieldValue* value = find(name);
  if (!value) {
    throw FieldError("field \"" + std::string(name) + "\" is missing (expected " +
                     std::string(field_type_name(expected)) + ")");
  }
  if (const T* typed = std::get_if<T>(value)) return *typed;
  throw FieldError("field \"" + std::string(name) + "\" is " +
                   std::string(field_type_name(type_of(*value))) + ", expected " +
                   std::string(field_type_name(expected)));
}

const std::string& Sample::get_string(std::string_view name) const {
  return get<std::string>(name, FieldType::kString);
}
int64_t Sample::get_int(std::string_view name) const { return get<int64_t>(name, FieldType::kInt); }
double Sample::get_double(std::string_view name) const {
  return get<double>(name, FieldType::kDouble);
}
bool Sample::get_bool(std::string_view name) const { return get<bool>(name, FieldType::kBool); }
const nlohmann::json& Sample::get_json(std::string_view name) const {
  return get<nlohmann::json>(name, FieldType::kJson);
}
const TensorPtr& Sample::get_tensor_ptr(std::string_view name) const {
  return get<TensorPtr>(name, FieldType::kTensor);
}

}  // namespace wam
