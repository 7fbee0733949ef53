// Training speed and time left, for TrainStep's [train] log line.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>

namespace wam::train {

// Steps/s and samples/s over the last 10 step intervals, as the reference's speed_history.
class SpeedMeter {
 public:
  void record(int64_t step, double seconds);
  // 0 until two steps were recorded.
  double steps_per_second() const;

 private:
  std::deque<std::pair<int64_t, double>> history_;  // (step, time): at most 11 entries
};

// "HH:MM:SS" (hours may exceed 24); "--:--:--" when unknown.
std::string format_eta(double seconds);

}  // namespace wam::train
