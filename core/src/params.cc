#include "wam/params.h"

#include <cmath>
#include <sstream>

namespace wam {
namespace detail {

std::string json_type_name(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return "bool";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "int";
    case nlohmann::json::value_t::number_float: return "number";
    case nlohmann::json::value_t::string: return "string";
    case nlohmann::json::value_t::array: return "array";
    case nlohmann::json::value_t::object: return "object";
    default: return "value";
  }
}

std::string format_number(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace detail

void ParamReader::finish() {
  if (!object_.is_object()) return;
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    bool known = false;
    for (const auto& k : known_) known = known || k == it.key();
    if (!known) {
      report(pointer_ + "/" + it.key(), unknown_with_suggestion("param", it.key(), known_));
    }
  }
}

}  // namespace wam
