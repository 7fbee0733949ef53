// Parameter schemas. A stage declares its params once, in `template <class V> void visit(V& v)`:
//
//   v("canvas", canvas, "Camera layout on the 384x256 canvas.");  // an enum class Canvas
//   v("brightness", brightness, "Colour jitter strength.", Min{0.0});
//   v("model", model, "The model preset.");  // a struct with its own visit()
//
// That single declaration drives JSON parsing with range checks and did-you-mean for unknown keys
// (ParamReader), `wam-pipeline describe` (ParamDescriber) and the effective-config dump
// (ParamWriter).
// Rules between fields go in an optional `void check(ParamChecker& c) const`, run once every field
// parsed cleanly, so `wam-pipeline validate` reports them with the rest.
//
// A param may be an `enum class` that declares its JSON strings through a function found by ADL:
//
//   enum class Canvas { kVertical, kRobotwin };
//   constexpr auto enum_names(Canvas) {
//     return std::array{EnumName{Canvas::kVertical, "vertical"},
//                       EnumName{Canvas::kRobotwin, "robotwin"}};
//   }
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/error.h"

namespace wam {

// One value of an enum param and its JSON string.
template <class E>
struct EnumName {
  E value;
  const char* name;
};
template <class E>
EnumName(E, const char*) -> EnumName<E>;

template <class E>
concept ParamEnum = std::is_enum_v<E> && requires { enum_names(E{}); };

// The JSON string of an enum value.
template <ParamEnum E>
std::string_view enum_name(E value) {
  for (const auto& entry : enum_names(E{})) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

template <ParamEnum E>
std::vector<std::string> enum_strings() {
  std::vector<std::string> names;
  for (const auto& entry : enum_names(E{})) names.emplace_back(entry.name);
  return names;
}

// Parses an enum from its JSON string; returns an error message naming `what`, or nothing.
template <ParamEnum E>
std::optional<std::string> enum_from_json(const nlohmann::json& j, E& out,
                                          std::string_view what = "value");

class ParamChecker;

namespace detail {
// Calls nothing: only lets ParamStruct ask whether `visit` accepts a visitor.
struct AnyVisitor {
  template <class T, class... Constraints>
  void operator()(const char*, T&, const char*, const Constraints&...) {}
};
}  // namespace detail

// A params struct: its own `visit()` declares its fields. As a param it is a nested object.
template <class T>
concept ParamStruct = requires(T& t, detail::AnyVisitor& v) { t.visit(v); };

template <class T>
concept HasParamCheck = requires(const T& t, ParamChecker& c) { t.check(c); };

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
// Marks a number param that draws randomness unless it equals `off` (a jitter's chance or
// strength). It constrains nothing and `describe` does not show it; what must be deterministic (a
// latent cache) asks first_random_param() instead of keeping its own list of such params.
struct RandomUnless {
  double off;
};

// Type names shown in diagnostics and `describe`.
template <class T>
std::string_view param_type_name() {
  if constexpr (ParamEnum<T>) return "string";
  else if constexpr (ParamStruct<T>) return "object";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "number";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "string[]";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "int[]";
  else if constexpr (std::is_same_v<T, std::vector<std::vector<int64_t>>>) return "int[][]";
  else if constexpr (std::is_same_v<T, std::vector<double>>) return "number[]";
  else if constexpr (std::is_same_v<T, nlohmann::json>) return "json";
  else static_assert(sizeof(T) == 0, "unsupported param type");
}

namespace detail {

std::string json_type_name(const nlohmann::json& j);
std::string format_number(double value);

template <class T>
nlohmann::json param_to_json(const T& value);

// Converts one JSON value; returns an error message, or nothing on success.
template <class T>
std::optional<std::string> convert(const nlohmann::json& j, T& out) {
  auto mismatch = [&] {
    return "expected " + std::string(param_type_name<T>()) + ", got " + json_type_name(j);
  };
  if constexpr (ParamEnum<T>) {
    return enum_from_json(j, out);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) return mismatch();
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    // Checked: a value that does not fit is reported, never wrapped or truncated.
    auto out_of_range = [&] {
      return "out of range: " + j.dump() + " does not fit in a " + std::to_string(8 * sizeof(T)) +
             "-bit integer";
    };
    if (j.is_number_unsigned()) {
      if (!std::in_range<T>(j.get<uint64_t>())) return out_of_range();
      out = static_cast<T>(j.get<uint64_t>());
    } else if (j.is_number_integer()) {
      if (!std::in_range<T>(j.get<int64_t>())) return out_of_range();
      out = static_cast<T>(j.get<int64_t>());
    } else if (j.is_number_float()) {
      const double d = j.get<double>();
      if (d != std::trunc(d)) return mismatch();  // 1.5, NaN
      // [-2^63, 2^63): beyond it the cast to int64 is undefined.
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) ||
          !std::in_range<T>(static_cast<int64_t>(d))) {
        return out_of_range();
      }
      out = static_cast<T>(static_cast<int64_t>(d));
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

template <class T>
std::optional<std::string> check(const T&, const RandomUnless&) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>,
                "RandomUnless applies to numbers");
  return std::nullopt;
}

inline std::string describe_constraint(const Min& c) { return ">= " + format_number(c.value); }
inline std::string describe_constraint(const Max& c) { return "<= " + format_number(c.value); }
inline std::string describe_constraint(const OneOf& c) { return "one of " + join(c.values, "|"); }
inline std::string describe_constraint(const NonEmpty&) { return "non-empty"; }

template <class C>
void add_constraint_description(std::vector<std::string>& parts, const C& c) {
  if constexpr (!std::is_same_v<C, RandomUnless>) parts.push_back(describe_constraint(c));
}

template <class... Constraints>
constexpr bool has_non_empty() {
  return (std::is_same_v<Constraints, NonEmpty> || ...);
}

}  // namespace detail

template <ParamEnum E>
std::optional<std::string> enum_from_json(const nlohmann::json& j, E& out, std::string_view what) {
  if (!j.is_string()) return "expected string, got " + detail::json_type_name(j);
  const auto& text = j.get_ref<const std::string&>();
  for (const auto& entry : enum_names(E{})) {
    if (text == entry.name) {
      out = entry.value;
      return std::nullopt;
    }
  }
  return unknown_with_suggestion(what, text, enum_strings<E>());
}

// What a params struct's check() reports to: each problem at the JSON pointer of the field it
// concerns, collected with every other diagnostic.
class ParamChecker {
 public:
  ParamChecker(std::string pointer, Diagnostics& diagnostics, std::string node_label)
      : pointer_(std::move(pointer)), diagnostics_(diagnostics),
        node_label_(std::move(node_label)) {}

  // Reports `message` at the param `field` of this struct ("name", or "name/3" for an element).
  void error(std::string_view field, const std::string& message) {
    diagnostics_.error(pointer_ + "/" + std::string(field), message, node_label_);
  }
  void require(bool ok, std::string_view field, const std::string& message) {
    if (!ok) error(field, message);
  }

 private:
  std::string pointer_;
  Diagnostics& diagnostics_;
  std::string node_label_;
};

template <class P>
P parse_params(const nlohmann::json& object, const std::string& pointer, Diagnostics& diagnostics,
               const std::string& node_label = {});

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
    const nlohmann::json* given = nullptr;
    if (object_.is_object()) {
      auto it = object_.find(name);
      if (it != object_.end()) given = &*it;
    }
    if constexpr (ParamStruct<T>) {
      static_assert(((std::is_same_v<Constraints, NonEmpty>) && ...),
                    "a nested params struct takes no constraint but NonEmpty (required)");
      if (detail::has_non_empty<Constraints...>() && (!given || given->empty())) {
        report(pointer, "must not be empty");
        return;
      }
      value = parse_params<T>(given ? *given : nlohmann::json(), pointer, diagnostics_,
                              node_label_);
    } else {
      if (given) {
        if (auto error = detail::convert(*given, value)) {
          report(pointer, *error);
          return;
        }
      }
      // Defaults are checked too: a constraint like NonEmpty makes a param required.
      (check_one(pointer, value, cs), ...);
    }
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
    object[name] = detail::param_to_json(value);
  }
  nlohmann::json object = nlohmann::json::object();
};

struct ParamDescription {
  std::string name;  // a nested struct's fields are "outer.inner"
  std::string type;
  nlohmann::json default_value;
  std::string constraints;
  std::string doc;
};

// Lists the schema with the defaults of a default-constructed Params.
class ParamDescriber {
 public:
  explicit ParamDescriber(std::string prefix = {}) : prefix_(std::move(prefix)) {}

  template <class T, class... Constraints>
  void operator()(const char* name, T& value, const char* doc, const Constraints&... cs) {
    std::vector<std::string> parts;
    if constexpr (ParamEnum<T>) parts.push_back("one of " + join(enum_strings<T>(), "|"));
    (detail::add_constraint_description(parts, cs), ...);
    const std::string full_name = prefix_ + name;
    if constexpr (ParamStruct<T>) {
      rows.push_back({full_name, "object", nullptr, join(parts, ", "), doc});
      ParamDescriber nested(full_name + ".");
      value.visit(nested);
      rows.insert(rows.end(), nested.rows.begin(), nested.rows.end());
    } else {
      rows.push_back({full_name, std::string(param_type_name<T>()), detail::param_to_json(value),
                      join(parts, ", "), doc});
    }
  }
  std::vector<ParamDescription> rows;

 private:
  std::string prefix_;
};

// Finds the first param tagged RandomUnless whose value is not its `off` value, in visit() order;
// a nested struct's params are named "outer/inner".
class RandomParamFinder {
 public:
  explicit RandomParamFinder(std::string prefix = {}) : prefix_(std::move(prefix)) {}

  template <class T, class... Constraints>
  void operator()(const char* name, T& value, const char*, const Constraints&... cs) {
    if (!found.empty()) return;
    if constexpr (ParamStruct<T>) {
      RandomParamFinder nested(prefix_ + name + "/");
      value.visit(nested);
      found = nested.found;
    } else {
      (consider(name, value, cs), ...);
    }
  }
  std::string found;

 private:
  template <class T, class C>
  void consider(const char* name, const T& value, const C& c) {
    if constexpr (std::is_same_v<C, RandomUnless>) {
      if (found.empty() && static_cast<double>(value) != c.off) found = prefix_ + name;
    }
  }
  std::string prefix_;
};

// The first param of `params` that draws randomness with its current value (see RandomUnless), or
// "" when none does.
template <class P>
std::string first_random_param(const P& params) {
  P copy = params;
  RandomParamFinder finder;
  copy.visit(finder);
  return finder.found;
}

// Parses params and, once every field (nested ones included) is valid, runs the struct's check()
// rules, which may then read any field. A null `object` leaves every default.
template <class P>
P parse_params(const nlohmann::json& object, const std::string& pointer, Diagnostics& diagnostics,
               const std::string& node_label) {
  P params;
  if (!object.is_null() && !object.is_object()) {
    diagnostics.error(pointer, "expected an object, got " + detail::json_type_name(object),
                      node_label);
    return params;
  }
  const size_t before = diagnostics.size();
  ParamReader reader(object, pointer, diagnostics, node_label);
  params.visit(reader);
  reader.finish();
  if constexpr (HasParamCheck<P>) {
    if (diagnostics.size() == before) {
      ParamChecker checker(pointer, diagnostics, node_label);
      params.check(checker);
    }
  }
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

template <class T>
nlohmann::json detail::param_to_json(const T& value) {
  if constexpr (ParamEnum<T>) {
    return std::string(enum_name(value));
  } else if constexpr (ParamStruct<T>) {
    return params_to_json(value);
  } else {
    return nlohmann::json(value);
  }
}

}  // namespace wam
