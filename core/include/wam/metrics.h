// Per-node runtime metrics: items in/out, busy time, time starved (nothing to do) or blocked
// (the source waiting for in-flight credit), queue depth, errors and skips, stage counters.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wam {

using Clock = std::chrono::steady_clock;

class NodeMetrics {
 public:
  NodeMetrics() : idle_since_(Clock::now()) {}

  // An item was handed to this node (queued until a worker starts it).
  void arrive();
  // A worker starts/finishes an item; between them the node is busy.
  void start();
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

 private:
  std::atomic<int64_t> in_{0}, out_{0}, errors_{0}, skips_{0}, busy_ns_{0}, blocked_ns_{0};
  mutable std::mutex mutex_;  // guards the occupancy fields below
  int64_t queued_ = 0, active_ = 0, max_queued_ = 0, queue_samples_ = 0, queue_sum_ = 0;
  Clock::duration starved_{0};
  Clock::time_point idle_since_;
};

struct NodeStats {
  std::string id, type, concurrency;
  int64_t in = 0, out = 0, errors = 0, skips = 0;
  double busy_s = 0, utilisation = 0, starved_s = 0, blocked_s = 0, queue_mean = 0;
  int64_t queue_max = 0;
  std::vector<std::pair<std::string, int64_t>> counters;
};

struct RunStats {
  std::string pipeline;
  double wall_s = 0;
  int64_t threads = 0;
  std::string stop_reason;  // "exhausted", "steps", "interrupted", "failed"
  std::vector<NodeStats> nodes;

  nlohmann::json to_json() const;
  std::string table() const;  // the human summary printed at the end of `run`
};

// Writes `text` to `path` atomically (temporary file, then rename). Throws wam::Error.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace wam
