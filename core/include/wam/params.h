// Parameter schemas. A stage declares its params once, in `template <class V> void visit(V& v)`:
//
//   v("canvas", canvas, "Camera layout on the 384x256 canvas.", OneOf{"vertical", "robotwin"});
//   v("brightness", brightness, "Colour jitter strength.", Min{0.0});
//
// That single declaration drives JSON parsing with range checks and did-you-mean for unknown keys
// (ParamReader), `wam-pipeline describe` (ParamDescriber) and the effective-config dump (ParamWriter).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/error.h"

namespace wam {

struct Min {
  double value;
};
struct Max {
  double value;
};
struct OneOf {
  OneOf(std::initializer_list<const char*> values) : values(values.begin(), values.end()) {}
  std::vector<std::string> values;
};
struct NonEmpty {};

// Type names shown in diagnostics and `describe`.
template <class T>
std::string_view param_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "number";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "string[]";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "int[]";
  else if constexpr (std::is_same_v<T, std::vector<double>>) return "number[]";
  else if constexpr (std::is_same_v<T, nlohmann::json>) return "json";
  else static_assert(sizeof(T) == 0, "unsupported param type");
}

namespace detail {

std::string json_type_name(const nlohmann::json& j);
std::string format_number(double value);

// Converts one JSON value; returns an error message, or nothing on success.
template <class T>
std::optional<std::string> convert(const nlohmann::json& j, T& out) {
  auto mismatch = [&] {
    return "expected " + std::string(param_type_name<T>()) + ", got " + json_type_name(j);
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) return mismatch();
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (j.is_number_integer()) {
      out = static_cast<T>(j.get<int64_t>());
    } else if (j.is_number_float() && j.get<double>() == static_cast<double>(
                                                            static_cast<int64_t>(j.get<double>()))) {
      out = static_cast<T>(j.get<double>());
    } else {
      return mismatch();
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) return mismatch();
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) return mismatch();
    out = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, nlohmann::json>) {
    out = j;
  } else {  // vectors
    if (!j.is_array()) return mismatch();
    T values;
    for (size_t i = 0; i < j.size(); ++i) {
      typename T::value_type element{};
      if (auto error = convert(j[i], element)) {
        return "element " + std::to_string(i) + ": " + *error;
      }
      values.push_back(std::move(element));
    }
    out = std::move(values);
  }
  return std::nullopt;
}

template <class T>
std::optional<std::string> check(const T& value, const Min& c) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (static_cast<double>(value) < c.value) {
      return "must be >= " + format_number(c.value) + ", got " + format_number(double(value));
    }
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                       std::is_same_v<T, std::vector<double>>) {
    for (const auto& v : value) {
      if (auto e = check(v, c)) return e;
    }
  } else {
    static_assert(sizeof(T) == 0, "Min applies to numbers");
  }
  return std::nullopt;
}

template <class T>
std::optional<std::string> check(const T& value, const Max& c) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (static_cast<double>(value) > c.value) {
      return "must be <= " + format_number(c.value) + ", got " + format_number(double(value));
    }
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                       std::is_same_v<T, std::vector<double>>) {
    for (const auto& v : value) {
      if (auto e = check(v, c)) return e;
    }
  } else {
    static_assert(sizeof(T) == 0, "Max applies to numbers");
  }
  return std::nullopt;
}

template <class T>
std::optional<std::string> check(const T& value, const OneOf& c) {
  auto check_one = [&](const std::string& s) -> std::optional<std::string> {
    for (const auto& allowed : c.values) {
      if (s == allowed) return std::nullopt;
    }
    return unknown_with_suggestion("value", s, c.values);
  };
  if constexpr (std::is_same_v<T, std::string>) {
    return check_one(value);
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    for (const auto& s : value) {
      if (auto e = check_one(s)) return e;
    }
    return std::nullopt;
  } else {
    static_assert(sizeof(T) == 0, "OneOf applies to strings");
  }
}

template <class T>
std::optional<std::string> check(const T& value, const NonEmpty&) {
  if (value.empty()) return std::string("must not be empty");
  return std::nullopt;
}

inline std::string describe_constraint(const Min& c) { return ">= " + format_number(c.value); }
inline std::string describe_constraint(const Max& c) { return "<= " + format_number(c.value); }
inline std::string describe_constraint(const OneOf& c) { return "one of " + join(c.values, "|"); }
inline std::string describe_constraint(const NonEmpty&) { return "non-empty"; }

}  // namespace detail

// Reads params from a JSON object, collecting every problem into `diagnostics` at the param's
// JSON pointer. Call finish() after visit() to report unknown keys.
class ParamReader {
 public:
  ParamReader(const nlohmann::json& object, std::string pointer, Diagnostics& diagnostics,
              std::string node_label = {})
      : object_(object), pointer_(std::move(pointer)), diagnostics_(diagnostics),
        node_label_(std::move(node_label)) {}

  template <class T, class... Constraints>
  void operator()(const char* name, T& value, const char* /*doc*/, const Constraints&... cs) {
    known_.emplace_back(name);
    std::string pointer = pointer_ + "/" + name;
    if (object_.is_object()) {
      auto it = object_.find(name);
      if (it != object_.end()) {
        if (auto error = detail::convert(*it, value)) {
          report(pointer, *error);
          return;
        }
      }
    }
    // Defaults are checked too: a constraint like NonEmpty makes a param required.
    (check_one(pointer, value, cs), ...);
  }

  void finish();

 private:
  template <class T, class C>
  void check_one(const std::string& pointer, const T& value, const C& c) {
    if (auto error = detail::check(value, c)) report(pointer, *error);
  }
  void report(const std::string& pointer, const std::string& message) {
    diagnostics_.error(pointer, message, node_label_);
  }

  const nlohmann::json& object_;
  std::string pointer_;
  Diagnostics& diagnostics_;
  std::string node_label_;
  std::vector<std::string> known_;
};

// Writes the current values as a JSON object (the effective config).
class ParamWriter {
 public:
  template <class T, class... Constraints>
  void operator()(const char* name, T& value, const char*, const Constraints&...) {
    object[name] = value;
  }
  nlohmann::json object = nlohmann::json::object();
};

struct ParamDescription {
  std::string name;
  std::string type;
  nlohmann::json default_value;
  std::string constraints;
  std::string doc;
};

// Lists the schema with the defaults of a default-constructed Params.
class ParamDescriber {
 public:
  template <class T, class... Constraints>
  void operator()(const char* name, T& value, const char* doc, const Constraints&... cs) {
    std::vector<std::string> parts = {detail::describe_constraint(cs)...};
    rows.push_back({name, std::string(param_type_name<T>()), nlohmann::json(value), join(parts, ", "),
                    doc});
  }
  std::vector<ParamDescription> rows;
};

template <class P>
P parse_params(const nlohmann::json& object, const std::string& pointer, Diagnostics& diagnostics,
               const std::string& node_label = {}) {
  P params;
  if (!object.is_null() && !object.is_object()) {
    diagnostics.error(pointer, "expected an object, got " + detail::json_type_name(object),
                      node_label);
    return params;
  }
  ParamReader reader(object, pointer, diagnostics, node_label);
  params.visit(reader);
  reader.finish();
  return params;
}

template <class P>
nlohmann::json params_to_json(const P& params) {
  P copy = params;
  ParamWriter writer;
  copy.visit(writer);
  return writer.object;
}

template <class P>
std::vector<ParamDescription> describe_params() {
  P params;
  ParamDescriber describer;
  params.visit(describer);
  return describer.rows;
}

}  // namespace wam
