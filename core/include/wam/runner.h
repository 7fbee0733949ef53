// Layer 3: runs a validated pipeline as a oneTBB flow graph. Only runner.cc includes TBB.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "wam/error.h"
#include "wam/host_memory.h"
#include "wam/metrics.h"
#include "wam/pipeline.h"
#include "wam/trace.h"

namespace wam {

struct RunOptions {
  // Seconds between live progress lines (who is busy, who is starved); 0 disables them.
  double report_every_s = 0;
  // Set asynchronously (e.g. by a SIGINT handler) to stop cleanly; the summary is still produced.
  const std::atomic<bool>* interrupt = nullptr;
  // Log sink for progress and skipped samples; stderr when empty.
  std::function<void(const std::string&)> log;
  // Called for every item leaving a terminal node (after the `steps` cut), in the order they leave.
  std::function<void(const Sample&)> on_output;
  // Like on_output, with how many items each node had emitted by then, in pipeline node order
  // (bench separates batches the graph buffered before its timed window from those made in it).
  std::function<void(const Sample&, const std::vector<int64_t>& node_outputs)> on_output_counted;
  // Called once before the graph starts, with the run's host memory budget (wam/host_memory.h):
  // a caller whose on_output keeps buffers of its own (cache generate's shard rows) claims them
  // from it, so that the samples in flight make room for them.
  std::function<void(HostMemoryBudget&)> on_host_memory;
  // Called about every tick_every_s with the run's figures so far (the live view); and once more
  // at the end.
  std::function<void(const RunSnapshot&)> on_tick;
  double tick_every_s = 1.0;
  // Seconds between steps of auto concurrency (wam/autotune.h).
  double autotune_every_s = 1.0;
  // Record a Chrome trace (RunResult::trace) within these bounds.
  std::optional<TraceOptions> trace;
};

struct RunResult {
  RunStats stats;
  std::optional<StageError> error;  // set when a stage failed and the run stopped
  nlohmann::json source_state;      // the source's state() when the run ended
  nlohmann::json trace;             // with RunOptions::trace: the trace-event JSON
};

// Runs the pipeline once (stages are stateful: a pipeline is run at most once).
RunResult run_pipeline(ValidatedPipeline& pipeline, const RunOptions& options = {});

}  // namespace wam
