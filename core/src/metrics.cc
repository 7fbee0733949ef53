#include "wam/metrics.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>

#include "wam/error.h"

namespace wam {

void NodeMetrics::arrive() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queued_ + active_ == 0) starved_ += Clock::now() - idle_since_;
  ++queued_;
  max_queued_ = std::max(max_queued_, queued_);
}

void NodeMetrics::start() { start_within(std::numeric_limits<int64_t>::max()); }

bool NodeMetrics::start_within(int64_t limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (active_ >= limit) return false;
  queue_sum_ += queued_;
  ++queue_samples_;
  if (queued_ > 0) {
    --queued_;
  } else if (active_ == 0) {
    starved_ += Clock::now() - idle_since_;  // an arrival that was not announced ends the idle span
  }
  ++active_;
  return true;
}

void NodeMetrics::finish(Clock::duration busy) {
  busy_ns_.fetch_add(busy.count(), std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  --active_;
  if (queued_ + active_ == 0) idle_since_ = Clock::now();
}

double NodeMetrics::starved_seconds(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Clock::duration total = starved_;
  if (queued_ + active_ == 0 && now > idle_since_) total += now - idle_since_;
  return std::chrono::duration<double>(total).count();
}

double NodeMetrics::mean_queue_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_samples_ ? double(queue_sum_) / double(queue_samples_) : 0.0;
}

int64_t NodeMetrics::max_queue_depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return max_queued_;
}

int64_t NodeMetrics::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_;
}

int64_t NodeMetrics::active() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_;
}

SeriesRecorder::SeriesRecorder(size_t nodes, double bucket_s, size_t max_buckets,
                               size_t max_loss_points)
    : max_buckets_(std::max<size_t>(2, max_buckets & ~size_t(1))),
      max_loss_points_(std::max<size_t>(2, max_loss_points)),
      bucket_end_(bucket_s),
      last_out_(nodes, 0),
      last_busy_(nodes, 0.0),
      last_starved_(nodes, 0.0),
      queue_sum_(nodes, 0.0) {
  series_.bucket_s = bucket_s;
  series_.nodes.resize(nodes);
}

void SeriesRecorder::sample(const RunSnapshot& now) {
  if (now.elapsed_s >= bucket_end_) close_bucket(now);
  for (size_t i = 0; i < queue_sum_.size() && i < now.nodes.size(); ++i) {
    queue_sum_[i] += double(now.nodes[i].queued);
  }
  ++queue_samples_;
}

void SeriesRecorder::close_bucket(const RunSnapshot& now) {
  series_.t.push_back(now.elapsed_s);
  for (size_t i = 0; i < series_.nodes.size(); ++i) {
    NodeSeries& node = series_.nodes[i];
    const NodeSnapshot& snap = now.nodes.at(i);
    node.items.push_back(snap.out - last_out_[i]);
    node.busy_s.push_back(snap.busy_s - last_busy_[i]);
    node.starved_s.push_back(snap.starved_s - last_starved_[i]);
    node.queue.push_back(queue_samples_ ? queue_sum_[i] / double(queue_samples_)
                                        : double(snap.queued));
    node.concurrency.push_back(snap.concurrency);
    last_out_[i] = snap.out;
    last_busy_[i] = snap.busy_s;
    last_starved_[i] = snap.starved_s;
    queue_sum_[i] = 0;
  }
  queue_samples_ = 0;
  if (series_.t.size() >= max_buckets_) {
    // Merge pairs: half as many buckets of twice the width, still summing to the totals.
    auto halve = [](auto& values, auto merge) {
      for (size_t k = 0; k < values.size() / 2; ++k) {
        values[k] = merge(values[2 * k], values[2 * k + 1]);
      }
      values.resize(values.size() / 2);
    };
    const auto sum = [](auto a, auto b) { return a + b; };
    const auto second = [](auto, auto b) { return b; };
    halve(series_.t, second);
    for (auto& node : series_.nodes) {
      halve(node.items, sum);
      halve(node.busy_s, sum);
      halve(node.starved_s, sum);
      halve(node.queue, [](double a, double b) { return (a + b) / 2; });
      halve(node.concurrency, second);
    }
    series_.bucket_s *= 2;
  }
  while (bucket_end_ <= now.elapsed_s) bucket_end_ += series_.bucket_s;
}

void SeriesRecorder::add_scalar(const std::string& name, double t, double value) {
  std::lock_guard<std::mutex> lock(scalars_mutex_);
  const bool loss = name == "loss";
  if (loss) latest_loss_ = value;
  Thinning& thinning = thinning_[name];
  const int64_t step = ++thinning.seen;
  if ((step - 1) % thinning.stride != 0) return;
  RunSeries::Scalar* other = loss ? nullptr : &series_.scalars[name];
  std::vector<int64_t>& steps = loss ? series_.loss_step : other->step;
  std::vector<double>& times = loss ? series_.loss_t : other->t;
  std::vector<double>& values = loss ? series_.loss : other->value;
  steps.push_back(step);
  times.push_back(t);
  values.push_back(value);
  if (values.size() >= max_loss_points_) {
    // Keep every other point: steps 1, 1 + 2k... with the stride doubled.
    auto keep_even = [](auto& kept) {
      for (size_t k = 0; 2 * k < kept.size(); ++k) kept[k] = kept[2 * k];
      kept.resize((kept.size() + 1) / 2);
    };
    keep_even(steps);
    keep_even(times);
    keep_even(values);
    thinning.stride *= 2;
  }
}

std::optional<double> SeriesRecorder::latest_loss() const {
  std::lock_guard<std::mutex> lock(scalars_mutex_);
  return latest_loss_;
}

RunSeries SeriesRecorder::finish(const RunSnapshot& end) {
  close_bucket(end);
  std::lock_guard<std::mutex> lock(scalars_mutex_);
  RunSeries series = series_;
  if (auto loss = thinning_.find("loss"); loss != thinning_.end()) {
    series.loss_count = loss->second.seen;
    series.loss_last = latest_loss_.value_or(0);
  }
  return series;
}

nlohmann::json RunSeries::to_json(const std::vector<std::string>& ids) const {
  nlohmann::json nodes_json = nlohmann::json::object();
  for (size_t i = 0; i < nodes.size() && i < ids.size(); ++i) {
    nodes_json[ids[i]] = {{"items", nodes[i].items},
                          {"busy_s", nodes[i].busy_s},
                          {"starved_s", nodes[i].starved_s},
                          {"queue", nodes[i].queue},
                          {"concurrency", nodes[i].concurrency}};
  }
  nlohmann::json json = {{"bucket_s", bucket_s},
                         {"t", t},
                         {"nodes", nodes_json},
                         {"loss", {{"step", loss_step}, {"t", loss_t}, {"value", loss}}}};
  for (const auto& [name, scalar] : scalars) {
    json["scalars"][name] = {{"step", scalar.step}, {"t", scalar.t}, {"value", scalar.value}};
  }
  return json;
}

nlohmann::json RunStats::to_json() const {
  nlohmann::json nodes_json = nlohmann::json::array();
  for (const auto& n : nodes) {
    nlohmann::json counters = nlohmann::json::object();
    for (const auto& [name, value] : n.counters) counters[name] = value;
    nodes_json.push_back({{"id", n.id},
                          {"type", n.type},
                          {"concurrency", n.concurrency},
                          {"inputs", n.inputs},
                          {"concurrency_now", n.concurrency_now},
                          {"concurrency_mean", n.concurrency_mean},
                          {"in", n.in},
                          {"out", n.out},
                          {"busy_s", n.busy_s},
                          {"utilisation", n.utilisation},
                          {"starved_s", n.starved_s},
                          {"blocked_s", n.blocked_s},
                          {"queue_mean", n.queue_mean},
                          {"queue_max", n.queue_max},
                          {"errors", n.errors},
                          {"skips", n.skips},
                          {"counters", counters}});
  }
  std::vector<std::string> ids;
  for (const auto& n : nodes) ids.push_back(n.id);
  return {{"pipeline", pipeline},
          {"wall_s", wall_s},
          {"threads", threads},
          {"stop_reason", stop_reason},
          {"peak_rss_bytes", peak_rss_bytes},
          {"nodes", nodes_json},
          {"series", series.to_json(ids)}};
}

std::string RunStats::table() const {
  std::ostringstream out;
  auto pct = [&](double seconds) { return wall_s > 0 ? 100.0 * seconds / wall_s : 0.0; };
  out << "pipeline " << pipeline << ": " << std::fixed << std::setprecision(2) << wall_s << " s, "
      << threads << " threads, stopped: " << stop_reason << ", peak memory "
      << static_cast<double>(peak_rss_bytes) / (1 << 30) << " GiB\n";
  // Thinning always keeps the first value; the last is kept apart.
  out << steps << (steps == 1 ? " step" : " steps");
  if (series.loss_count > 0) {
    out << std::setprecision(4) << "; loss first " << series.loss.front() << ", last "
        << series.loss_last;
  }
  out << "\n";
  out << std::left << std::setw(16) << "node" << std::setw(18) << "type" << std::right
      << std::setw(8) << "in" << std::setw(8) << "out" << std::setw(10) << "out/s" << std::setw(9)
      << "busy s" << std::setw(7) << "util%" << std::setw(9) << "starved%" << std::setw(9)
      << "blocked%" << std::setw(11) << "queue avg" << std::setw(5) << "max" << std::setw(7)
      << "errors" << std::setw(6) << "skips"
      << "\n";
  for (const auto& n : nodes) {
    out << std::left << std::setw(16) << n.id << std::setw(18) << n.type << std::right
        << std::setw(8) << n.in << std::setw(8) << n.out << std::setw(10) << std::setprecision(1)
        << (wall_s > 0 ? n.out / wall_s : 0.0) << std::setw(9) << std::setprecision(2) << n.busy_s
        << std::setw(7) << std::setprecision(0) << 100.0 * n.utilisation << std::setw(9)
        << pct(n.starved_s) << std::setw(9) << pct(n.blocked_s) << std::setw(11)
        << std::setprecision(1) << n.queue_mean << std::setw(5) << n.queue_max << std::setw(7)
        << n.errors << std::setw(6) << n.skips << "\n";
    for (const auto& [name, value] : n.counters) {
      out << "    " << name << " = " << value << "\n";
    }
  }
  return out.str();
}

}  // namespace wam
