#include "wam/live_view.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace wam {
namespace {

std::string format(const char* pattern, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* pattern, ...) {
  char buffer[512];
  va_list args;
  va_start(args, pattern);
  std::vsnprintf(buffer, sizeof(buffer), pattern, args);
  va_end(args);
  return buffer;
}

}  // namespace

namespace {
// Function-local: a probe is installed during static initialisation of other files.
struct Probe {
  std::mutex mutex;
  DeviceMemoryProbe probe;
};
Probe& probe_slot() {
  static Probe slot;
  return slot;
}
}  // namespace

void set_device_memory_probe(DeviceMemoryProbe probe) {
  Probe& slot = probe_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.probe = std::move(probe);
}

std::optional<int64_t> device_memory_in_use() {
  Probe& slot = probe_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  return slot.probe ? slot.probe() : std::nullopt;
}

std::string LiveView::duration(double seconds) {
  const int64_t s = std::max<int64_t>(0, static_cast<int64_t>(std::llround(seconds)));
  if (s >= 3600) return format("%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  if (s >= 60) return format("%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  return format("%llds", (long long)s);
}

std::vector<std::string> LiveView::frame(const RunSnapshot& now,
                                         std::optional<int64_t> device_bytes) {
  RunSnapshot zero;
  zero.nodes.resize(now.nodes.size());
  const RunSnapshot& before = previous_ ? *previous_ : zero;
  const double interval = now.elapsed_s - before.elapsed_s;
  auto rate = [&](double delta) { return interval > 0 ? delta / interval : 0.0; };

  std::string header =
      pipeline_ + "  [" + duration(now.elapsed_s) + "]  step " + std::to_string(now.steps);
  if (now.steps_target > 0) header += "/" + std::to_string(now.steps_target);
  header += format(" (%.2f/s)", rate(double(now.steps - before.steps)));
  if (!now.nodes.empty()) {
    header += format("  %.1f samples/s", rate(double(now.nodes[0].out - before.nodes[0].out)));
  }
  header += now.loss ? format("  loss %.4f", *now.loss) : std::string("  loss -");
  if (now.steps_target > 0) {
    const double average = now.elapsed_s > 0 ? double(now.steps) / now.elapsed_s : 0.0;
    const int64_t left = std::max<int64_t>(0, now.steps_target - now.steps);
    header += "  ETA " + (average > 0 ? duration(double(left) / average) : std::string("-"));
  }
  if (device_bytes) header += format("  CUDA %.2f GiB", double(*device_bytes) / (1 << 30));

  std::vector<std::string> lines = {header};
  lines.push_back(format("%-16s %-18s %9s %6s %8s %6s %9s %5s %6s %6s", "node", "type", "items/s",
                         "busy%", "starved%", "queue", "in flight", "conc", "skips", "errors"));
  for (size_t i = 0; i < now.nodes.size(); ++i) {
    const NodeSnapshot& n = now.nodes[i];
    const NodeSnapshot& b = before.nodes[i];
    const double slots = double(std::max<int64_t>(1, n.concurrency));
    lines.push_back(format("%-16.16s %-18.18s %9.1f %6.0f %8.0f %6lld %9lld %5lld %6lld %6lld",
                           n.id.c_str(), n.type.c_str(), rate(double(n.out - b.out)),
                           // Busy time counts when an item finishes: cap a burst at 100%.
                           std::min(100.0, 100.0 * rate(n.busy_s - b.busy_s) / slots),
                           i == 0 ? 0.0 : 100.0 * rate(n.starved_s - b.starved_s),
                           (long long)n.queued, (long long)n.active, (long long)n.concurrency,
                           (long long)n.skips, (long long)n.errors));
  }
  previous_ = now;
  return lines;
}

std::string LiveView::redraw(const std::vector<std::string>& lines, size_t width) {
  // Back to the frame's first line, then each line overwritten and cleared to its end: no blank
  // screen between frames, so no flicker.
  std::string out = drawn_ > 0 ? "\r\x1b[" + std::to_string(drawn_) + "A" : "\r";
  for (const auto& line : lines) {
    out += line.size() > width ? line.substr(0, width) : line;
    out += "\x1b[K\n";
  }
  if (lines.size() < drawn_) out += "\x1b[J";  // a shorter frame: clear what is below it
  drawn_ = lines.size();
  return out;
}

std::string LiveView::erase() {
  if (drawn_ == 0) return "";
  std::string out = "\r\x1b[" + std::to_string(drawn_) + "A\x1b[J";
  drawn_ = 0;
  return out;
}

}  // namespace wam
