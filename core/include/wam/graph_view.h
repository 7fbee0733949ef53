// Where a run's time went, from its stats (`run --stats-out`): per-node figures, the bottleneck, a
// plain verdict, and the graph drawn with them (Graphviz DOT; `graph --stats`, `report`).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/pipeline.h"

namespace wam {

// A node of the graph to draw; the figures are set when stats are known.
struct GraphNode {
  std::string id, type, concurrency;
  std::vector<std::string> inputs;
  bool source = false, terminal = false;
  bool measured = false;
  double utilisation = 0;  // busy time over wall time x the workers it could use
  double starved = 0;      // share of the run it had nothing to do
  double items_per_s = 0;  // items it emitted per second
  double queue_mean = 0;
  int64_t errors = 0, skips = 0;
};

struct GraphAnalysis {
  std::string pipeline;
  double wall_s = 0;
  int64_t threads = 0;
  std::vector<GraphNode> nodes;
  // The run's first seconds that the nodes' figures leave out: up to the end of the stats bucket
  // in which the step emitted its first item (the first step's graph capture, the first batch's
  // way through the data path). 0: the figures cover the whole run.
  double warmup_s = 0;
  std::optional<size_t> bottleneck;  // the busiest node (highest utilisation), when measured
  std::string verdict;               // one sentence, e.g. "decode (VideoDecode) is the bottleneck:
                                     // 97% busy at concurrency 4; step waits on input 35% ..."
};

// The pipeline's shape, without figures.
GraphAnalysis graph_of(const ValidatedPipeline& pipeline);
// The figures of a stats JSON (RunStats::to_json) laid over `shape` (nodes matched by id), or,
// with no shape, the graph the stats describe; those of the run after its warm-up when the stats'
// series tell when that ended (see warmup_s). Throws wam::Error on stats that are not a run's.
GraphAnalysis analyse_stats(const nlohmann::json& stats,
                            const std::optional<GraphAnalysis>& shape = std::nullopt);

// Graphviz DOT: nodes coloured by utilisation (green idle to red saturated) and labelled with
// concurrency, busy % and items/s; edges with items/s and the receiver's mean queue depth; the
// bottleneck drawn thick and red, with "BOTTLENECK" in its label.
std::string annotated_dot(const GraphAnalysis& graph);

// Runs Graphviz's `dot -T<format>` over `dot_text` and returns its output (format: svg, png...).
// Throws wam::Error naming the problem when `dot` is missing or fails.
std::string render_dot(const std::string& dot_text, const std::string& format);

}  // namespace wam
