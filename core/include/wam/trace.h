// A Chrome trace-event recorder for runs (`wam-pipeline run --trace-out`): the file opens in
// Perfetto (ui.perfetto.dev) and chrome://tracing.
//
// Each node is a process track ("source: EpisodeSampler") with one thread track per worker that
// ran it, holding its work slices (on a terminal node, named "step N"), and counter tracks for its
// queue depth, items in flight and items/s. A stage may add slices of its own on named tracks
// under its node (Context::trace_span), e.g. the training step's CUDA-event time on "device".
// Bounded on long runs: a node keeps at most max_slices_per_node slices, each of its at most
// kMaxStageTracks stage tracks as many, and the run at most max_counter_points counter samples;
// past that, every 2nd, then 4th... is kept, so the slices still cover the whole run evenly.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/metrics.h"

namespace wam {

struct TraceOptions {
  size_t max_slices_per_node = 10000;
  size_t max_counter_points = 2000;
};

class TraceRecorder {
 public:
  // Upper bound of one event's JSON text, used for the documented size bound.
  static constexpr size_t kMaxEventBytes = 256;
  // Stage tracks per node; slices on further track names are dropped (and counted).
  static constexpr size_t kMaxStageTracks = 4;
  // Stage track and slice names are cut to this many bytes, so that an event stays within
  // kMaxEventBytes.
  static constexpr size_t kMaxNameBytes = 48;

  TraceRecorder(std::vector<std::string> node_ids, std::vector<std::string> node_types,
                Clock::time_point start, TraceOptions options = {});

  // A worker processed item `seq` of node `node` (thread-safe). `step` > 0 names the slice
  // "step N" (a terminal node's items); otherwise it is named after the node's type.
  void slice(size_t node, Clock::time_point begin, Clock::time_point end, uint64_t seq,
             int64_t step = 0);
  // A slice a stage put on its own track `track` under node `node` (thread-safe). Names are cut to
  // kMaxNameBytes, and bytes outside printable ASCII become '?'.
  void stage_slice(size_t node, const std::string& track, const std::string& name,
                   Clock::time_point begin, Clock::duration duration);
  // Counter samples from a snapshot: queue depth, in flight, items/s since the previous one.
  void counters(const RunSnapshot& now);

  // The trace-event JSON object ({"traceEvents": [...], "displayTimeUnit": "ms", ...}).
  nlohmann::json to_json() const;
  // Most bytes to_json().dump() can take for a run of `nodes` nodes with these options.
  static size_t size_bound(size_t nodes, const TraceOptions& options);
  size_t slices_seen(size_t node) const;

 private:
  struct Slice {
    int64_t begin_us, dur_us;
    uint32_t thread;
    uint64_t seq;
    int64_t step;
  };
  struct NamedSlice {
    int64_t begin_us, dur_us;
    std::string name;
  };
  struct StageTrack {
    std::string name;
    std::vector<NamedSlice> slices;
    uint64_t seen = 0, stride = 1;
  };
  struct NodeTrack {
    mutable std::mutex mutex;
    std::vector<Slice> slices;
    uint64_t seen = 0, stride = 1;
    std::vector<StageTrack> stage_tracks;  // at most kMaxStageTracks
    uint64_t stage_slices_dropped = 0;     // on track names past kMaxStageTracks
  };
  struct CounterPoint {
    double t_us;
    std::vector<int64_t> queued, active;
    std::vector<double> rate;
  };

  std::vector<std::string> ids_, types_;
  Clock::time_point start_;
  TraceOptions options_;
  std::vector<std::unique_ptr<NodeTrack>> tracks_;
  std::vector<CounterPoint> points_;
  uint64_t points_seen_ = 0, point_stride_ = 1;
  std::vector<int64_t> last_out_;
  double last_t_ = 0;
};

}  // namespace wam
