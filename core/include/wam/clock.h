// The clock of every run-time measurement: metrics, traces, a stage's own trace slices.
#pragma once

#include <chrono>

namespace wam {

using Clock = std::chrono::steady_clock;

}  // namespace wam
