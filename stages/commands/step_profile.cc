#include "commands/step_profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "wam/atomic_file.h"
#include "wam/error.h"

namespace wam::cli {
namespace {

double duration_ms(const torch::autograd::profiler::KinetoEvent& event) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<double>(event.durationNs()) / 1e6;
#else
  return static_cast<double>(event.durationUs()) / 1e3;
#endif
}

}  // namespace

StepProfile profile_steps(const std::function<void()>& body, bool cuda,
                          const std::string& trace_path) {
  namespace profiler = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  // Input shapes and dtypes recorded: a trace then tells a mixed-dtype kernel from its neighbours.
  const profiler::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                        /*report_input_shapes=*/true);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  try {
    body();
  } catch (...) {
    profiler::disableProfiler();
    throw;
  }
  const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();

  std::map<std::string, KernelTime> kernels, cpu_ops;
  for (const profiler::KinetoEvent& event : result->events()) {
    auto& table = event.deviceType() == c10::DeviceType::CPU ? cpu_ops : kernels;
    KernelTime& entry = table[event.name()];
    entry.name = event.name();
    entry.total_ms += duration_ms(event);
    ++entry.calls;
  }
  StepProfile profile;
  profile.kernels = !kernels.empty();
  for (const auto& [name, entry] : profile.kernels ? kernels : cpu_ops) {
    profile.longest.push_back(entry);
  }
  std::sort(profile.longest.begin(), profile.longest.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.total_ms > b.total_ms; });

  if (!trace_path.empty()) {
    try {
      AtomicFile trace(trace_path);
      result->save(trace.temporary());
      trace.publish();
    } catch (const c10::Error& e) {
      // E.g. Debian's LibTorch, built without Kineto, which alone writes traces. The kernel table
      // is still printed.
      profile.trace_note =
          std::string("no trace written to ") + trace_path + ": " + e.what_without_backtrace();
    } catch (const Error& e) {
      profile.trace_note = std::string("no trace written to ") + trace_path + ": " + e.what();
    }
  }
  return profile;
}

std::vector<KernelTime> time_beyond(const StepProfile& whole, int64_t whole_steps,
                                    const StepProfile& part, int64_t part_steps) {
  std::map<std::string, KernelTime> per_step;
  for (const KernelTime& kernel : whole.longest) {
    KernelTime& entry = per_step[kernel.name];
    entry.name = kernel.name;
    entry.total_ms += kernel.total_ms / static_cast<double>(whole_steps);
    entry.calls += kernel.calls;
  }
  std::map<std::string, long long> part_calls;
  for (const KernelTime& kernel : part.longest) {
    const auto found = per_step.find(kernel.name);
    if (found == per_step.end()) continue;
    found->second.total_ms -= kernel.total_ms / static_cast<double>(part_steps);
    part_calls[kernel.name] = kernel.calls;
  }
  std::vector<KernelTime> beyond;
  for (auto& [name, entry] : per_step) {
    if (entry.total_ms <= 0) continue;
    // Calls per step, rounded: the whole graph's and the part's windows hold different step counts.
    entry.calls =
        std::llround(static_cast<double>(entry.calls) / static_cast<double>(whole_steps) -
                     static_cast<double>(part_calls[name]) / static_cast<double>(part_steps));
    beyond.push_back(entry);
  }
  std::sort(beyond.begin(), beyond.end(), [](const KernelTime& a, const KernelTime& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  return beyond;
}

}  // namespace wam::cli
