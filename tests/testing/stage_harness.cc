#include "testing/stage_harness.h"

#include <iostream>

namespace wam::testing {
namespace {

class VectorEmitter final : public Emitter {
 public:
  explicit VectorEmitter(std::vector<Sample>& out) : out_(out) {}
  void emit(Sample sample) override { out_.push_back(std::move(sample)); }

 private:
  std::vector<Sample>& out_;
};

}  // namespace

std::unique_ptr<StageBase> make_stage(const std::string& type, const std::string& params_json,
                                      const StageRegistry& registry) {
  const StageInfo* info = registry.find(type);
  if (!info) throw Error("no stage type " + type);
  Diagnostics diagnostics("<test>");
  auto stage = info->create(nlohmann::json::parse(params_json), "/params", diagnostics, type,
                            nullptr);
  if (!stage) throw ConfigError(std::move(diagnostics));
  return stage;
}

StageRun run_stage_counted(const std::string& type, const std::string& params_json,
                           std::vector<Sample> inputs, const HarnessOptions& options) {
  auto base = make_stage(type, params_json, *options.registry);
  auto* stage = dynamic_cast<Stage*>(base.get());
  if (!stage) throw Error(type + " is a source; use drain_source");
  Context context("test", type, options.settings,
                  [](const std::string& m) { std::cerr << m << "\n"; });
  stage->open(context);
  StageRun run;
  VectorEmitter emitter(run.outputs);
  uint64_t seq = 0;
  for (auto& sample : inputs) {
    sample.set_seq(seq++);
    stage->process(std::move(sample), emitter);
  }
  stage->close(emitter);
  for (const auto& [name, value] : context.counters()) run.counters[name] = value;
  return run;
}

std::vector<Sample> run_stage(const std::string& type, const std::string& params_json,
                              std::vector<Sample> inputs, const HarnessOptions& options) {
  return run_stage_counted(type, params_json, std::move(inputs), options).outputs;
}

std::vector<Sample> drain_source(const std::string& type, const std::string& params_json,
                                 size_t limit, const HarnessOptions& options) {
  auto base = make_stage(type, params_json, *options.registry);
  auto* source = dynamic_cast<Source*>(base.get());
  if (!source) throw Error(type + " is not a source");
  Context context("test", type, options.settings,
                  [](const std::string& m) { std::cerr << m << "\n"; });
  source->open(context);
  std::vector<Sample> out;
  uint64_t seq = 0;
  while (out.size() < limit) {
    auto sample = source->next();
    if (!sample) break;
    sample->set_seq(seq++);
    out.push_back(std::move(*sample));
  }
  source->close();
  return out;
}

}  // namespace wam::testing
