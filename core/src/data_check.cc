#include "wam/data_check.h"

namespace wam {

void DataCheckRegistry::add(std::string name, DataCheck check) {
  if (checks_.count(name)) throw Error("data check \"" + name + "\" is registered twice");
  checks_.emplace(std::move(name), std::move(check));
}

DataCheckResult DataCheckRegistry::run(const ValidatedPipeline& pipeline) const {
  DataCheckResult result;
  result.diagnostics.set_file(pipeline.file());
  for (const auto& [name, check] : checks_) check(pipeline, result);
  return result;
}

DataCheckRegistry& DataCheckRegistry::builtin() {
  static DataCheckRegistry registry;  // function-local: safe from static-init order
  return registry;
}

}  // namespace wam
