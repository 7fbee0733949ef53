// Runs one stage synchronously (no TBB): built from its type and a JSON params string through a
// registry, then open / process each input / close. Returns everything it emitted.
//
// Every emitted sample is checked against the constructed stage's declare(): it carries exactly
// the input's fields minus those removed (typed as a batch when the stage batches) plus the
// declared writes, each with its declared type. A violation is a test failure naming the stage,
// the sample key, the field and both types.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "wam/registry.h"

namespace wam::testing {

struct HarnessOptions {
  Settings settings;
  const StageRegistry* registry = &StageRegistry::builtin();
  std::string node_id = "test";  // names the node in log lines, as the runner's node id does
  // For a stage that passes some samples through unchanged (VideoDecode's decode_if, Augment's
  // augment_if): a sample whose fields and types equal its input's is accepted without the
  // declared writes. Any other sample is still checked in full.
  bool passes_some_through = false;
  // What the stage's Context::on_error() says (the harness itself applies no policy: what the
  // stage throws reaches the test).
  OnError on_error = OnError::kFail;
  // The run's host memory budget the stage claims its buffers from (none: sized by its params).
  HostMemoryBudget* host_memory = nullptr;
};

// Collects what a stage emits; emit() may be called from several threads.
class CollectingEmitter final : public Emitter {
 public:
  void emit(Sample sample) override;
  // Everything emitted since the last take(), in emission order.
  std::vector<Sample> take();

 private:
  std::mutex mutex_;
  std::vector<Sample> samples_;
};

// Checks emitted samples against a stage's declared contract; reports violations as test failures.
class ContractCheck {
 public:
  ContractCheck(std::string type, const StageBase& stage, bool passes_some_through);
  // A sample fed to the stage. A batching stage's output is checked against the inputs fed since
  // its previous output; any other stage's against the last input (none for a source).
  void fed(const Sample& input);
  void check(const Sample& output);
  // Each violation found in `output`, one message per field.
  std::vector<std::string> violations(const Sample& output) const;

 private:
  std::string type_;
  Contract contract_;
  bool passes_some_through_;
  std::vector<Sample> pending_;  // inputs since the last output (batching) or the last input
  bool output_since_input_ = false;
};

// A value a stage reported through Context::report_scalar.
struct ReportedScalar {
  std::string name;
  double value;
};

// What a stage emitted, the counters and scalars it reported and the lines it logged.
struct StageRun {
  std::vector<Sample> outputs;
  std::map<std::string, int64_t> counters;
  std::vector<ReportedScalar> scalars;  // in the order reported
  std::vector<std::string> log;
};

// A stage built and opened, fed one sample at a time: outputs and counters can be inspected after
// each step. Every output is contract-checked.
class SteppedStage {
 public:
  // Throws ConfigError for bad params (with the diagnostics), or what open() throws.
  SteppedStage(const std::string& type, const std::string& params_json,
               const HarnessOptions& options = {});

  // What the stage emitted for this input (seq is set to the number of samples fed before it).
  std::vector<Sample> process(Sample input);
  // Expects exactly one output and returns it.
  Sample process_one(Sample input);
  // End of input: what the stage still held.
  std::vector<Sample> close();

  int64_t counter(const std::string& name) const;
  bool has_counter(const std::string& name) const;
  std::map<std::string, int64_t> counters() const;
  // The stage's log lines, each prefixed with "[<node id>] ".
  const std::vector<std::string>& log() const { return log_; }
  // What it reported through Context::report_scalar, in order.
  std::vector<ReportedScalar> scalars() const;
  Stage& stage() { return *stage_; }

 private:
  std::vector<Sample> checked(std::vector<Sample> outputs);

  std::unique_ptr<StageBase> base_;
  Stage* stage_ = nullptr;
  Settings settings_;
  mutable std::mutex log_mutex_;  // stage() may be called from several threads; guards scalars_
  std::vector<std::string> log_;
  std::vector<ReportedScalar> scalars_;
  std::unique_ptr<Context> context_;
  ContractCheck check_;
  CollectingEmitter emitter_;
  uint64_t seq_ = 0;
};

// A source built and opened, pulled one sample at a time. Every sample is contract-checked.
class SteppedSource {
 public:
  // `restore`: a state() saved from an earlier run, restored before open() as the runner does.
  SteppedSource(const std::string& type, const std::string& params_json,
                const HarnessOptions& options = {}, const nlohmann::json& restore = nullptr);
  ~SteppedSource();

  // The next sample (seq is the number pulled before it), or nothing once exhausted.
  std::optional<Sample> next();
  nlohmann::json state() const { return source_->state(); }

 private:
  std::unique_ptr<StageBase> base_;
  Source* source_ = nullptr;
  Settings settings_;
  std::unique_ptr<Context> context_;
  ContractCheck check_;
  uint64_t seq_ = 0;
};

// Throws ConfigError for bad params (with the diagnostics), or what the stage throws.
StageRun run_stage_counted(const std::string& type, const std::string& params_json,
                           std::vector<Sample> inputs, const HarnessOptions& options = {});
std::vector<Sample> run_stage(const std::string& type, const std::string& params_json,
                              std::vector<Sample> inputs, const HarnessOptions& options = {});

// Pulls a source until it is exhausted (or `limit` samples); each must carry exactly its writes.
std::vector<Sample> drain_source(const std::string& type, const std::string& params_json,
                                 size_t limit = SIZE_MAX, const HarnessOptions& options = {});

// Builds a stage instance for tests that drive it themselves.
std::unique_ptr<StageBase> make_stage(const std::string& type, const std::string& params_json,
                                      const StageRegistry& registry = StageRegistry::builtin());

}  // namespace wam::testing
