#include "wam/registry.h"

namespace wam {

void StageRegistry::add(StageInfo info) {
  std::string type = info.type;
  if (!stages_.emplace(type, std::move(info)).second) {
    throw Error("stage type \"" + type + "\" is registered twice");
  }
}

const StageInfo* StageRegistry::find(std::string_view type) const {
  auto it = stages_.find(type);
  return it == stages_.end() ? nullptr : &it->second;
}

std::vector<std::string> StageRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& [type, info] : stages_) out.push_back(type);
  return out;
}

StageRegistry& StageRegistry::builtin() {
  static StageRegistry registry;  // function-local: safe from static-init order
  return registry;
}

}  // namespace wam
