// Per-node runtime metrics: items in/out, busy time, time starved (nothing to do) or blocked
// (the source waiting for in-flight credit), queue depth, errors and skips, stage counters.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/clock.h"

namespace wam {

class NodeMetrics {
 public:
  NodeMetrics() : idle_since_(Clock::now()) {}

  // An item was handed to this node (queued until a worker starts it).
  void arrive();
  // A worker starts/finishes an item; between them the node is busy.
  void start();
  // start() when fewer than `limit` items are being processed; else nothing. The admission of an
  // auto node's workers, under the lock that counts the items anyway.
  bool start_within(int64_t limit);
  void finish(Clock::duration busy);
  void add_in(int64_t n) { in_.fetch_add(n, std::memory_order_relaxed); }
  void add_out(int64_t n) { out_.fetch_add(n, std::memory_order_relaxed); }
  void add_error() { errors_.fetch_add(1, std::memory_order_relaxed); }
  void add_skip() { skips_.fetch_add(1, std::memory_order_relaxed); }
  void add_blocked(Clock::duration d) {
    blocked_ns_.fetch_add(d.count(), std::memory_order_relaxed);
  }
  void add_busy(Clock::duration d) { busy_ns_.fetch_add(d.count(), std::memory_order_relaxed); }

  int64_t in() const { return in_.load(); }
  int64_t out() const { return out_.load(); }
  int64_t errors() const { return errors_.load(); }
  int64_t skips() const { return skips_.load(); }
  double busy_seconds() const { return busy_ns_.load() * 1e-9; }
  double blocked_seconds() const { return blocked_ns_.load() * 1e-9; }
  double starved_seconds(Clock::time_point now) const;
  double mean_queue_depth() const;
  int64_t max_queue_depth() const;
  // Items waiting for a worker and items being processed, now.
  int64_t queued() const;
  int64_t active() const;

 private:
  std::atomic<int64_t> in_{0}, out_{0}, errors_{0}, skips_{0}, busy_ns_{0}, blocked_ns_{0};
  mutable std::mutex mutex_;  // guards the occupancy fields below
  int64_t queued_ = 0, active_ = 0, max_queued_ = 0, queue_samples_ = 0, queue_sum_ = 0;
  Clock::duration starved_{0};
  Clock::time_point idle_since_;
};

struct NodeStats {
  std::string id, type, concurrency;
  std::vector<std::string> inputs;  // the ids of the nodes it reads from
  int64_t in = 0, out = 0, errors = 0, skips = 0;
  double busy_s = 0, utilisation = 0, starved_s = 0, blocked_s = 0, queue_mean = 0;
  int64_t queue_max = 0;
  int64_t concurrency_now = 1;  // workers it could use at the end (auto: the limit reached)
  double concurrency_mean = 1;  // over the run (auto: the limit's time average)
  std::vector<std::pair<std::string, int64_t>> counters;
};

// One node's cumulative figures at one moment of a run (what live views and traces sample).
struct NodeSnapshot {
  std::string id, type;
  int64_t in = 0, out = 0, errors = 0, skips = 0;
  double busy_s = 0, starved_s = 0, blocked_s = 0;
  int64_t queued = 0, active = 0;  // waiting for a worker / being processed
  int64_t concurrency = 1;         // workers it may use now (unlimited: the thread count)
  bool terminal = false;
};

struct RunSnapshot {
  double elapsed_s = 0;
  int64_t threads = 1;
  int64_t steps = 0;           // items that left the terminal nodes
  int64_t steps_target = 0;    // settings.steps; 0: until the source is exhausted
  std::optional<double> loss;  // the last value of the scalar "loss" a stage reported
  std::vector<NodeSnapshot> nodes;
};

// Per-node time series in buckets of bucket_s seconds (1 s; doubled, merging pairs, whenever a
// long run would exceed kMaxBuckets), and the scalars that stages report (Context::report_scalar)
// one value per step (every 2nd, 4th... kept once a scalar has more than kMaxLossPoints steps).
struct NodeSeries {
  std::vector<int64_t> items;        // items the node emitted in the bucket
  std::vector<double> busy_s;        // busy time of its items finished in the bucket
  std::vector<double> starved_s;     // time it had nothing to do in the bucket
  std::vector<double> queue;         // mean queue depth over the bucket
  std::vector<int64_t> concurrency;  // workers it could use at the end of the bucket
};

struct RunSeries {
  static constexpr size_t kMaxBuckets = 4096;
  static constexpr size_t kMaxLossPoints = 8192;
  double bucket_s = 1.0;
  std::vector<double> t;  // end of each bucket, seconds since the start; the last may be partial
  std::vector<NodeSeries> nodes;  // as RunStats::nodes
  // The scalar "loss", which the progress line and the report show.
  std::vector<int64_t> loss_step;  // 1-based count of the values reported
  std::vector<double> loss_t, loss;
  // Every "loss" value reported and the last one, which thinning may have left out of `loss`.
  int64_t loss_count = 0;
  double loss_last = 0;
  // Every other reported scalar, by name; in the stats under series.scalars.<name>.
  struct Scalar {
    std::vector<int64_t> step;
    std::vector<double> t, value;
  };
  std::map<std::string, Scalar> scalars;

  nlohmann::json to_json(const std::vector<std::string>& ids) const;
};

// Builds a RunSeries from cumulative snapshots taken as the run goes. Not thread-safe except
// add_scalar, add_loss and latest_loss, which may be called from any thread.
class SeriesRecorder {
 public:
  explicit SeriesRecorder(size_t nodes, double bucket_s = 1.0,
                          size_t max_buckets = RunSeries::kMaxBuckets,
                          size_t max_loss_points = RunSeries::kMaxLossPoints);
  // A snapshot taken at any rate; closes the current bucket once its end has passed.
  void sample(const RunSnapshot& now);
  // A value of the scalar `name` reported `t` seconds into the run.
  void add_scalar(const std::string& name, double t, double value);
  void add_loss(double t, double loss) { add_scalar("loss", t, loss); }
  std::optional<double> latest_loss() const;
  // Closes the last (partial) bucket with the final figures: the series sum to the totals.
  RunSeries finish(const RunSnapshot& end);

 private:
  void close_bucket(const RunSnapshot& now);
  RunSeries series_;
  size_t max_buckets_, max_loss_points_;
  double bucket_end_;
  std::vector<int64_t> last_out_;
  std::vector<double> last_busy_, last_starved_, queue_sum_;
  int64_t queue_samples_ = 0;
  // Per scalar name: values reported so far, and every how many one is kept.
  struct Thinning {
    int64_t seen = 0, stride = 1;
  };
  mutable std::mutex scalars_mutex_;
  std::map<std::string, Thinning> thinning_;
  std::optional<double> latest_loss_;
};

struct RunStats {
  std::string pipeline;
  double wall_s = 0;
  int64_t threads = 0;
  std::string stop_reason;  // "exhausted", "steps", "interrupted", "failed"
  // The process's peak resident memory when the run ended (getrusage), loading and start-up
  // included: what a machine must hold to run this pipeline.
  int64_t peak_rss_bytes = 0;
  int64_t steps = 0;  // items that left the terminal nodes
  std::vector<NodeStats> nodes;
  RunSeries series;

  nlohmann::json to_json() const;  // the totals, and the series under "series"
  // The human summary printed at the end of `run`: a line with the wall time and the stop reason,
  // one with the steps done and the first and last reported "loss" (`3 steps; loss first
  // 1.2345, last 1.1000`), then the per-node table.
  std::string table() const;
};

}  // namespace wam
