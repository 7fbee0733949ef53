#include "wam/autotune.h"

#include <algorithm>
#include <numeric>

namespace wam {

int64_t initial_auto_limit(int64_t budget, size_t count) {
  return count == 0 ? 1 : std::max<int64_t>(1, budget / static_cast<int64_t>(count));
}

std::vector<int64_t> tune_concurrency(const std::vector<TunedNode>& nodes, int64_t budget) {
  std::vector<int64_t> limits;
  for (const auto& n : nodes) limits.push_back(std::max<int64_t>(1, n.limit));
  budget = std::max<int64_t>(1, budget);
  // Each node keeps one worker; the workers above that share the budget less the one node's own.
  const int64_t cap = budget + static_cast<int64_t>(nodes.size()) - 1;
  std::vector<size_t> wanting;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].utilisation >= TuningRule::kGrowBusy && nodes[i].queue >= TuningRule::kGrowQueue) {
      wanting.push_back(i);
    } else if (nodes[i].utilisation < TuningRule::kShrinkBusy && limits[i] > 1) {
      --limits[i];
    }
  }
  // Over budget (e.g. a smaller thread count than the limits were set for): trim the idlest.
  int64_t used = std::accumulate(limits.begin(), limits.end(), int64_t(0));
  while (used > cap) {
    size_t idlest = nodes.size();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (limits[i] > 1 &&
          (idlest == nodes.size() || nodes[i].utilisation < nodes[idlest].utilisation)) {
        idlest = i;
      }
    }
    --limits[idlest];
    --used;
  }
  // The busiest first.
  std::stable_sort(wanting.begin(), wanting.end(), [&](size_t a, size_t b) {
    return nodes[a].utilisation * nodes[a].queue > nodes[b].utilisation * nodes[b].queue;
  });
  for (size_t i : wanting) {
    if (limits[i] >= budget) continue;
    if (used < cap) {
      ++limits[i];
      ++used;
      continue;
    }
    size_t donor = nodes.size();
    for (size_t d = 0; d < nodes.size(); ++d) {
      if (d == i || limits[d] <= 1 || nodes[d].utilisation >= TuningRule::kDonorBusy) continue;
      if (donor == nodes.size() || nodes[d].utilisation < nodes[donor].utilisation) donor = d;
    }
    if (donor == nodes.size()) continue;
    --limits[donor];
    ++limits[i];
  }
  return limits;
}

}  // namespace wam
