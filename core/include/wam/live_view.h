// The live view of a run in a terminal: a header (step, samples/s, loss, ETA, device memory) and
// one line per node (items/s, busy % of its concurrency, starved %, queue, in flight, concurrency,
// skips, errors), redrawn in place with ANSI escapes (no ncurses).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "wam/metrics.h"

namespace wam {

// Device memory in use (bytes), from a probe a device-aware library installs at start-up (the
// CUDA stages do); nullopt without one or without a device.
using DeviceMemoryProbe = std::function<std::optional<int64_t>()>;
void set_device_memory_probe(DeviceMemoryProbe probe);
std::optional<int64_t> device_memory_in_use();

class LiveView {
 public:
  explicit LiveView(std::string pipeline) : pipeline_(std::move(pipeline)) {}

  // The frame for `now`; rates are over the time since the previous call (since the start on the
  // first). `device_bytes`: device memory in use, shown when known.
  std::vector<std::string> frame(const RunSnapshot& now,
                                 std::optional<int64_t> device_bytes = std::nullopt);
  // Escapes that replace the frame drawn last with `lines` (each cut to `width` columns, so that
  // no line wraps and the cursor arithmetic holds).
  std::string redraw(const std::vector<std::string>& lines, size_t width = 200);
  // Escapes that erase the frame drawn last (before a log line, or at the end of the run).
  std::string erase();

  static std::string duration(double seconds);  // "1h02m", "3m05s", "42s"

 private:
  std::string pipeline_;
  std::optional<RunSnapshot> previous_;
  size_t drawn_ = 0;  // lines of the frame on screen
};

}  // namespace wam
