#include "train/speed_meter.h"

#include <cmath>
#include <cstdio>

namespace wam::train {

void SpeedMeter::record(int64_t step, double seconds) {
  history_.emplace_back(step, seconds);
  while (history_.size() > 11) history_.pop_front();
}

double SpeedMeter::steps_per_second() const {
  if (history_.size() < 2) return 0;
  const double elapsed = history_.back().second - history_.front().second;
  if (elapsed <= 0) return 0;
  return static_cast<double>(history_.back().first - history_.front().first) / elapsed;
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  char text[32];
  std::snprintf(text, sizeof(text), "%02lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return text;
}

}  // namespace wam::train
