// Runs one stage synchronously (no TBB): built from its type and a JSON params string through a
// registry, then open / process each input / close. Returns everything it emitted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "wam/registry.h"

namespace wam::testing {

struct HarnessOptions {
  Settings settings;
  const StageRegistry* registry = &StageRegistry::builtin();
};

// What a stage emitted and the counters it reported.
struct StageRun {
  std::vector<Sample> outputs;
  std::map<std::string, int64_t> counters;
};

// Throws ConfigError for bad params (with the diagnostics), or what the stage throws.
StageRun run_stage_counted(const std::string& type, const std::string& params_json,
                           std::vector<Sample> inputs, const HarnessOptions& options = {});
std::vector<Sample> run_stage(const std::string& type, const std::string& params_json,
                              std::vector<Sample> inputs, const HarnessOptions& options = {});

// Pulls a source until it is exhausted (or `limit` samples).
std::vector<Sample> drain_source(const std::string& type, const std::string& params_json,
                                 size_t limit = SIZE_MAX, const HarnessOptions& options = {});

// Builds a stage instance and its context for step-by-step tests.
std::unique_ptr<StageBase> make_stage(const std::string& type, const std::string& params_json,
                                      const StageRegistry& registry = StageRegistry::builtin());

}  // namespace wam::testing
