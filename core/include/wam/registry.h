// Stage registry: a value mapping type names to factories. The built-in one is filled by
// WAM_REGISTER_STAGE; tests build their own with add<T>().
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/params.h"
#include "wam/stage.h"

namespace wam {

enum class StageKind { kSource, kStage };

struct StageInfo {
  std::string type;
  std::string summary;
  StageKind kind;
  std::function<std::vector<ParamDescription>()> describe;
  // Parses params (errors go to diagnostics at `pointer`) and constructs the stage; returns null
  // when the params are invalid. `effective` receives the params with defaults filled in.
  std::function<std::unique_ptr<StageBase>(const nlohmann::json& params, const std::string& pointer,
                                           Diagnostics& diagnostics, const std::string& label,
                                           nlohmann::json* effective)>
      create;
};

class StageRegistry {
 public:
  // T needs: static constexpr std::string_view kType, kSummary; using Params = ...;
  // explicit T(Params); and derives from Source or Stage.
  template <class T>
  void add() {
    static_assert(std::is_base_of_v<Source, T> || std::is_base_of_v<Stage, T>,
                  "a stage derives from wam::Source or wam::Stage");
    StageInfo info;
    info.type = std::string(T::kType);
    info.summary = std::string(T::kSummary);
    info.kind = std::is_base_of_v<Source, T> ? StageKind::kSource : StageKind::kStage;
    info.describe = [] { return describe_params<typename T::Params>(); };
    info.create = [](const nlohmann::json& params, const std::string& pointer,
                     Diagnostics& diagnostics, const std::string& label,
                     nlohmann::json* effective) -> std::unique_ptr<StageBase> {
      size_t before = diagnostics.size();
      auto parsed = parse_params<typename T::Params>(params, pointer, diagnostics, label);
      if (diagnostics.size() != before) return nullptr;
      if (effective) *effective = params_to_json(parsed);
      return std::make_unique<T>(std::move(parsed));
    };
    add(std::move(info));
  }
  void add(StageInfo info);  // throws wam::Error on a duplicate type

  const StageInfo* find(std::string_view type) const;
  std::vector<std::string> types() const;  // sorted

  // The process-wide registry of built-in stages (and any linked in by users).
  static StageRegistry& builtin();

 private:
  std::map<std::string, StageInfo, std::less<>> stages_;
};

}  // namespace wam

#define WAM_REGISTER_STAGE(Class)                                    \
  [[maybe_unused]] static const bool wam_stage_registered_##Class = \
      (::wam::StageRegistry::builtin().add<Class>(), true)
