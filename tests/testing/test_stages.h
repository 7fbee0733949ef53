// Test-only stages and a registry holding them: sources that count and fail, stages that delay
// (to reorder under parallelism), fail at N, fan out, batch in order, and probe contracts.
#pragma once

#include <atomic>

#include "wam/registry.h"

namespace wam::testing {

// Registry with the test stages: Count, Increment, Delay, FailAt, Expand, Batch, Tag, Probe,
// InFlightExit, Loss.
const StageRegistry& test_registry();
// Adds the test stages to `registry` (the CLI test binary adds them to the built-in one).
void add_test_stages(StageRegistry& registry);

// Items between Count (with track_in_flight) and InFlightExit; the max observed value.
struct InFlightProbe {
  static std::atomic<int64_t> live;
  static std::atomic<int64_t> max_live;
  static void reset() {
    live = 0;
    max_live = 0;
  }
};

}  // namespace wam::testing
