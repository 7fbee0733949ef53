#include "testing/stage_harness.h"

#include <iostream>
#include <utility>

#include <gtest/gtest.h>

namespace wam::testing {
namespace {

struct ExpectedField {
  FieldType type;
  const char* origin;
};

// The type a field has after a batching stage: see Contract::batches().
FieldType batched(FieldType type) {
  switch (type) {
    case FieldType::kTensor:
    case FieldType::kInt:
    case FieldType::kDouble:
    case FieldType::kBool: return FieldType::kTensor;
    case FieldType::kString:
    case FieldType::kJson: return FieldType::kJson;
  }
  return type;
}

std::string type_name(FieldType type) { return std::string(field_type_name(type)); }

bool same_fields(const Sample& a, const Sample& b) {
  if (a.fields().size() != b.fields().size()) return false;
  for (const auto& [name, value] : a.fields()) {
    if (!b.has(name) || b.type(name) != type_of(value)) return false;
  }
  return true;
}

}  // namespace

void CollectingEmitter::emit(Sample sample) {
  std::lock_guard<std::mutex> lock(mutex_);
  samples_.push_back(std::move(sample));
}

std::vector<Sample> CollectingEmitter::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(samples_, {});
}

ContractCheck::ContractCheck(std::string type, const StageBase& stage, bool passes_some_through)
    : type_(std::move(type)), passes_some_through_(passes_some_through) {
  stage.declare(contract_);
}

void ContractCheck::fed(const Sample& input) {
  if (!contract_.is_batching() || output_since_input_) pending_.clear();
  pending_.push_back(input);
  output_since_input_ = false;
}

void ContractCheck::check(const Sample& output) {
  for (const std::string& violation : violations(output)) ADD_FAILURE() << violation;
  output_since_input_ = true;
}

std::vector<std::string> ContractCheck::violations(const Sample& output) const {
  if (passes_some_through_ && pending_.size() == 1 && same_fields(output, pending_.front())) {
    return {};
  }
  std::map<std::string, ExpectedField> expected;
  const char* input_origin = contract_.is_batching() ? "a batched input field" : "an input field";
  for (const Sample& input : pending_) {
    for (const auto& [name, value] : input.fields()) {
      const FieldType type = type_of(value);
      expected.try_emplace(
          name, ExpectedField{contract_.is_batching() ? batched(type) : type, input_origin});
    }
  }
  for (const std::string& removed : contract_.removed_fields()) expected.erase(removed);
  for (const FieldSpec& written : contract_.written_fields()) {
    expected.insert_or_assign(written.name, ExpectedField{written.type, "a declared write"});
  }

  const std::string prefix = type_ + " emitted sample \"" + output.key() + "\" ";
  std::vector<std::string> violations;
  for (const auto& [name, value] : output.fields()) {
    const FieldType actual = type_of(value);
    auto it = expected.find(name);
    if (it == expected.end()) {
      violations.push_back(prefix + "with field \"" + name + "\" (" + type_name(actual) +
                           "), which is neither an input field nor a declared write");
    } else if (it->second.type != actual) {
      violations.push_back(prefix + "with field \"" + name + "\" as " + type_name(actual) +
                           ", but it is " + type_name(it->second.type) + " (" + it->second.origin +
                           ")");
    }
  }
  for (const auto& [name, field] : expected) {
    if (!output.has(name)) {
      violations.push_back(prefix + "without field \"" + name + "\" (" + type_name(field.type) +
                           ", " + field.origin + ")");
    }
  }
  return violations;
}

std::unique_ptr<StageBase> make_stage(const std::string& type, const std::string& params_json,
                                      const StageRegistry& registry) {
  const StageInfo* info = registry.find(type);
  if (!info) throw Error("no stage type " + type);
  Diagnostics diagnostics("<test>");
  auto stage =
      info->create(nlohmann::json::parse(params_json), "/params", diagnostics, type, nullptr);
  if (!stage) throw ConfigError(std::move(diagnostics));
  return stage;
}

SteppedStage::SteppedStage(const std::string& type, const std::string& params_json,
                           const HarnessOptions& options)
    : base_(make_stage(type, params_json, *options.registry)),
      settings_(options.settings),
      check_(type, *base_, options.passes_some_through) {
  stage_ = dynamic_cast<Stage*>(base_.get());
  if (!stage_) throw Error(type + " is a source; use drain_source");
  context_ = std::make_unique<Context>(
      options.node_id, type, settings_,
      [this](const std::string& line) {
        std::lock_guard<std::mutex> lock(log_mutex_);
        std::cerr << line << "\n";
        log_.push_back(line);
      },
      nullptr,
      [this](const std::string& name, double value) {
        std::lock_guard<std::mutex> lock(log_mutex_);
        scalars_.push_back({name, value});
      },
      options.on_error, options.host_memory);
  stage_->open(*context_);
}

std::vector<Sample> SteppedStage::process(Sample input) {
  input.set_seq(seq_++);
  check_.fed(input);
  stage_->process(std::move(input), emitter_);
  return checked(emitter_.take());
}

Sample SteppedStage::process_one(Sample input) {
  std::vector<Sample> outputs = process(std::move(input));
  if (outputs.size() != 1) {
    throw Error("expected one output, the stage emitted " + std::to_string(outputs.size()));
  }
  return std::move(outputs.front());
}

std::vector<Sample> SteppedStage::close() {
  stage_->close(emitter_);
  return checked(emitter_.take());
}

std::vector<Sample> SteppedStage::checked(std::vector<Sample> outputs) {
  for (const Sample& output : outputs) check_.check(output);
  return outputs;
}

int64_t SteppedStage::counter(const std::string& name) const {
  const auto all = counters();
  auto it = all.find(name);
  return it == all.end() ? 0 : it->second;
}

bool SteppedStage::has_counter(const std::string& name) const { return counters().count(name); }

std::map<std::string, int64_t> SteppedStage::counters() const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, value] : context_->counters()) out[name] = value;
  return out;
}

std::vector<ReportedScalar> SteppedStage::scalars() const {
  std::lock_guard<std::mutex> lock(log_mutex_);
  return scalars_;
}

StageRun run_stage_counted(const std::string& type, const std::string& params_json,
                           std::vector<Sample> inputs, const HarnessOptions& options) {
  SteppedStage stage(type, params_json, options);
  StageRun run;
  for (auto& sample : inputs) {
    for (auto& output : stage.process(std::move(sample))) run.outputs.push_back(std::move(output));
  }
  for (auto& output : stage.close()) run.outputs.push_back(std::move(output));
  run.counters = stage.counters();
  run.scalars = stage.scalars();
  run.log = stage.log();
  return run;
}

std::vector<Sample> run_stage(const std::string& type, const std::string& params_json,
                              std::vector<Sample> inputs, const HarnessOptions& options) {
  return run_stage_counted(type, params_json, std::move(inputs), options).outputs;
}

SteppedSource::SteppedSource(const std::string& type, const std::string& params_json,
                             const HarnessOptions& options, const nlohmann::json& restore)
    : base_(make_stage(type, params_json, *options.registry)),
      settings_(options.settings),
      check_(type, *base_, /*passes_some_through=*/false) {
  source_ = dynamic_cast<Source*>(base_.get());
  if (!source_) throw Error(type + " is not a source");
  if (!restore.is_null()) source_->restore(restore);
  context_ = std::make_unique<Context>(
      options.node_id, type, settings_, [](const std::string& m) { std::cerr << m << "\n"; },
      nullptr, nullptr, options.on_error);
  source_->open(*context_);
}

SteppedSource::~SteppedSource() { source_->close(); }

std::optional<Sample> SteppedSource::next() {
  std::optional<Sample> sample = source_->next();
  if (sample) {
    sample->set_seq(seq_++);
    check_.check(*sample);
  }
  return sample;
}

std::vector<Sample> drain_source(const std::string& type, const std::string& params_json,
                                 size_t limit, const HarnessOptions& options) {
  SteppedSource source(type, params_json, options);
  std::vector<Sample> out;
  while (out.size() < limit) {
    std::optional<Sample> sample = source.next();
    if (!sample) break;
    out.push_back(std::move(*sample));
  }
  return out;
}

}  // namespace wam::testing
