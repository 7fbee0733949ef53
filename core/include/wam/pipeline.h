// Layer 2: the validated pipeline. Every stage type resolved, every param parsed and checked, every
// edge and every field read checked against what upstream writes, before any file is opened.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/config.h"
#include "wam/registry.h"
#include "wam/stage.h"

namespace wam {

struct ValidatedNode {
  std::string id;
  std::string type;
  std::string pointer;  // "/nodes/3" in the pipeline file
  StageKind kind = StageKind::kStage;
  std::unique_ptr<StageBase> stage;
  Contract contract;
  Concurrency concurrency;
  OnError on_error = OnError::kFail;
  std::vector<size_t> inputs;   // indices into ValidatedPipeline::nodes()
  std::vector<size_t> outputs;
  nlohmann::json params;        // effective params, defaults filled in

  std::string label() const { return id + ": " + type; }
  Source& source() const { return static_cast<Source&>(*stage); }
  Stage& transform() const { return static_cast<Stage&>(*stage); }
};

class ValidatedPipeline {
 public:
  // Throws ConfigError with every problem found; also when a node's params are incomplete (their
  // include's problem is among the diagnostics of load_pipeline_config).
  static ValidatedPipeline from_config(const PipelineConfig& config, const StageRegistry& registry);

  const std::string& file() const { return file_; }
  const std::string& name() const { return name_; }
  const Settings& settings() const { return settings_; }
  Settings& settings() { return settings_; }
  // Topological order; the source first.
  const std::vector<ValidatedNode>& nodes() const { return nodes_; }
  std::vector<ValidatedNode>& nodes() { return nodes_; }
  const ValidatedNode* find(const std::string& id) const;

  // Keeps `node_id` and everything upstream of it (for `run --stop-after`). Throws ConfigError
  // naming the known ids when there is no such node.
  void keep_upstream_of(const std::string& node_id);

  nlohmann::json effective_config() const;
  std::string to_dot() const;  // Graphviz

 private:
  std::string file_, name_;
  Settings settings_;
  std::vector<ValidatedNode> nodes_;
};

// load_pipeline_config + ValidatedPipeline::from_config; throws ConfigError.
ValidatedPipeline load_pipeline(const std::string& file, const LoadOptions& options = {},
                                const StageRegistry& registry = StageRegistry::builtin());

}  // namespace wam
