#include "wam/stage.h"

#include "wam/limits.h"

namespace wam {

void Settings::check(ParamChecker& c) const {
  if (std::string error = check_thread_count(threads); !error.empty()) c.error("threads", error);
}

int64_t Settings::in_flight_limit(int64_t worker_threads) const {
  if (max_in_flight > 0) return max_in_flight;
  // Auto, by Little's law: the device side holds up to four batches at once (one being collated,
  // encoded, transferred and stepped), and the data path keeps every worker busy with one sample in
  // hand and one queued. A fixed 256 let a short run on 2 cores decode six times the samples it
  // trained on, each holding its frames in host memory.
  return 4 * batch_size + 2 * std::max<int64_t>(1, worker_threads);
}

std::string Concurrency::to_string() const {
  if (limit == kUnlimited) return "unlimited";
  if (limit == kAuto) return "auto";
  if (limit == 1) return "serial";
  return std::to_string(limit);
}

Context::Context(std::string node_id, std::string type, const Settings& settings,
                 std::function<void(const std::string&)> log, TraceSink trace, ScalarSink scalars,
                 OnError on_error, HostMemoryBudget* host_memory, WaitingRunner waiting)
    : node_id_(std::move(node_id)),
      type_(std::move(type)),
      settings_(settings),
      log_(std::move(log)),
      trace_(std::move(trace)),
      scalars_(std::move(scalars)),
      on_error_(on_error),
      host_memory_(host_memory),
      waiting_(std::move(waiting)) {}

void Context::run_waiting(const std::function<void()>& work) const {
  if (waiting_) {
    waiting_(work);
  } else {
    work();
  }
}

Counter& Context::counter(const std::string& name) {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  for (auto& [counter_name, counter] : counters_) {
    if (counter_name == name) return counter;
  }
  counters_.emplace_back(std::piecewise_construct, std::forward_as_tuple(name),
                         std::forward_as_tuple());
  return counters_.back().second;
}

std::vector<std::pair<std::string, int64_t>> Context::counters() const {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, counter] : counters_) out.emplace_back(name, counter.value());
  return out;
}

void Context::log(const std::string& message) const {
  if (log_) log_("[" + node_id_ + "] " + message);
}

void Context::trace_span(const std::string& track, const std::string& name, Clock::time_point begin,
                         Clock::duration duration) const {
  if (trace_) trace_(track, name, begin, duration);
}

void Context::report_scalar(const std::string& name, double value) const {
  if (scalars_) scalars_(name, value);
}

}  // namespace wam
