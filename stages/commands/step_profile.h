// Kernel-level profiles of training steps, for `wam-pipeline bench --profile`: LibTorch's profiler
// records the steps, their events are summarised as time per kernel, and (in LibTorch builds with
// Kineto, as the CUDA wheels are) the trace is written as Chrome trace JSON for ui.perfetto.dev.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace wam::cli {

struct KernelTime {
  std::string name;
  double total_ms = 0;
  long long calls = 0;
};

struct StepProfile {
  // Device kernels by total time, longest first; the CPU operators instead when no kernel ran (a
  // CPU device). CPU operators nest (aten::linear holds aten::addmm), so their times overlap.
  std::vector<KernelTime> longest;
  bool kernels = false;    // whether `longest` lists device kernels
  std::string trace_note;  // why no trace was written, or "" when it was
};

// Runs `body` under the profiler (CPU operators, and CUDA kernels with `cuda`). When
// `trace_path` is not empty, writes the Chrome trace there (through wam::AtomicFile).
StepProfile profile_steps(const std::function<void()>& body, bool cuda,
                          const std::string& trace_path);

// The time per step that `whole` (a profile of `whole_steps` steps of the whole graph) spends in
// each kernel beyond `part` (one of `part_steps` steps of the device part alone), most first, as
// total_ms and calls per step: what the rest of the graph adds on the device. Kernels the whole
// graph spends no more time in are left out.
std::vector<KernelTime> time_beyond(const StepProfile& whole, int64_t whole_steps,
                                    const StepProfile& part, int64_t part_steps);

}  // namespace wam::cli
