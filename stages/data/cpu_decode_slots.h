// VideoDecode's cpu_first choice between the CPU and NVDEC (data/video_decode.cc,
// docs/DESIGN.md section 4). A sample decodes on the CPU unless `limit` samples are decoding there
// and have been for most of the last moments: a moving average of the time all were taken, with
// time constant `window_seconds`, at least kSaturatedShare. A burst, as when the step frees a
// batch's worth of in-flight samples at once, stays on the CPU, taking slots beyond the limit;
// only a CPU that stays saturated, one that falls behind its consumer, sends samples to NVDEC.
// The time is passed in, so that the tests can step it.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>

namespace wam::data {

class CpuDecodeSlots {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kSaturatedShare = 0.75;

  // The limit when none is given: a quarter of the run's worker threads, at least one. NVDEC takes
  // the spilled samples faster than the CPU decodes them, and beside the step the CPU still keeps
  // up alone; half the threads gave the data path alone about a fifth less (docs/BENCHMARKS.md,
  // "cpu_first's share of the CPU").
  static int64_t default_limit(int64_t worker_threads) {
    return worker_threads / 4 > 1 ? worker_threads / 4 : 1;
  }

  void reset(int64_t limit, double window_seconds, Clock::time_point now) {
    const std::lock_guard<std::mutex> lock(mutex_);
    limit_ = limit;
    window_seconds_ = window_seconds;
    taken_ = 0;
    saturated_share_ = 0;
    since_ = now;
  }

  // Whether this sample goes to NVDEC; if not, it holds a slot until release().
  bool spill(Clock::time_point now) {
    const std::lock_guard<std::mutex> lock(mutex_);
    advance(now);
    if (taken_ >= limit_ && saturated_share_ >= kSaturatedShare) return true;
    ++taken_;
    return false;
  }

  void release(Clock::time_point now) {
    const std::lock_guard<std::mutex> lock(mutex_);
    advance(now);
    --taken_;
  }

 private:
  // The average up to `now`: the state since the last change held all that time.
  void advance(Clock::time_point now) {
    const double elapsed = std::chrono::duration<double>(now - since_).count();
    const double decay = window_seconds_ > 0 ? std::exp(-elapsed / window_seconds_) : 0.0;
    saturated_share_ = saturated_share_ * decay + (taken_ >= limit_ ? 1 - decay : 0);
    since_ = now;
  }

  std::mutex mutex_;
  int64_t limit_ = 1, taken_ = 0;
  double window_seconds_ = 0, saturated_share_ = 0;
  Clock::time_point since_;
};

}  // namespace wam::data
