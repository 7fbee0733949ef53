// `concurrency: "auto"`: the runner moves an auto node's worker limit during the run, one step per
// window, from what it measured over the window (tf.data's autotune is the point of reference,
// with plain hill climbing in place of its model). A node busy in nearly all its workers with work
// waiting gets one more; a node mostly idle gives one back. Within the thread budget: no node has
// more workers than threads, and the workers the auto nodes hold beyond one each together stay
// below the thread count, so one node alone can use every thread while the others, idle at one
// worker, cost nothing; when that is spent, a busy node takes a worker from an idler one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace wam {

struct TunedNode {
  int64_t limit = 1;       // workers it may use now
  double utilisation = 0;  // busy time over the window x limit
  double queue = 0;        // mean items waiting for a worker over the window
};

struct TuningRule {
  static constexpr double kGrowBusy = 0.85;   // at least this busy, with work waiting: +1
  static constexpr double kGrowQueue = 1.0;   // items waiting that count as work waiting
  static constexpr double kShrinkBusy = 0.5;  // less busy than this: -1
  static constexpr double kDonorBusy = 0.7;   // may give a worker to a busier node below this
};

// The first limit of each of `count` auto nodes: an even share of the budget, at least 1.
int64_t initial_auto_limit(int64_t budget, size_t count);

// One step: the new limits of the auto nodes, in the same order.
std::vector<int64_t> tune_concurrency(const std::vector<TunedNode>& nodes, int64_t budget);

}  // namespace wam
