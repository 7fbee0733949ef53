#include "wam/metrics.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "wam/error.h"

namespace wam {

void NodeMetrics::arrive() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queued_ + active_ == 0) starved_ += Clock::now() - idle_since_;
  ++queued_;
  max_queued_ = std::max(max_queued_, queued_);
}

void NodeMetrics::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_sum_ += queued_;
  ++queue_samples_;
  if (queued_ > 0) {
    --queued_;
  } else if (active_ == 0) {
    starved_ += Clock::now() - idle_since_;  // an arrival that was not announced ends the idle span
  }
  ++active_;
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

nlohmann::json RunStats::to_json() const {
  nlohmann::json nodes_json = nlohmann::json::array();
  for (const auto& n : nodes) {
    nlohmann::json counters = nlohmann::json::object();
    for (const auto& [name, value] : n.counters) counters[name] = value;
    nodes_json.push_back({{"id", n.id},
                          {"type", n.type},
                          {"concurrency", n.concurrency},
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
  return {{"pipeline", pipeline},
          {"wall_s", wall_s},
          {"threads", threads},
          {"stop_reason", stop_reason},
          {"nodes", nodes_json}};
}

std::string RunStats::table() const {
  std::ostringstream out;
  auto pct = [&](double seconds) { return wall_s > 0 ? 100.0 * seconds / wall_s : 0.0; };
  out << "pipeline " << pipeline << ": " << std::fixed << std::setprecision(2) << wall_s << " s, "
      << threads << " threads, stopped: " << stop_reason << "\n";
  out << std::left << std::setw(16) << "node" << std::setw(18) << "type" << std::right
      << std::setw(8) << "in" << std::setw(8) << "out" << std::setw(10) << "out/s"
      << std::setw(9) << "busy s" << std::setw(7) << "util%" << std::setw(9) << "starved%"
      << std::setw(9) << "blocked%" << std::setw(11) << "queue avg" << std::setw(5) << "max"
      << std::setw(7) << "errors" << std::setw(6) << "skips" << "\n";
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

void write_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
  }
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      throw Error("cannot write " + temporary + ": check the directory exists and is writable");
    }
  }
  std::error_code ec;
  fs::rename(temporary, target, ec);
  if (ec) {
    fs::remove(temporary);
    throw Error("cannot rename " + temporary + " to " + path + ": " + ec.message());
  }
}

}  // namespace wam
