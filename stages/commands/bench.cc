#include "commands/bench.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <iostream>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "commands/step_profile.h"
#include "common/device.h"
#include "device/transfer_timing.h"
#include "train/training_step.h"
#include "wam/pipeline.h"
#include "wam/runner.h"

#if WAM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#endif

namespace wam::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Steps of the device part timed node by node after the timed run, and profiled with --profile.
constexpr int64_t kProfileSteps = 3;
// Kernels listed from a --profile trace.
constexpr size_t kListedKernels = 15;
// Steps of the whole graph profiled with --profile-graph, after its timed ones: more than the
// device part's, since the data path's kernels run at their own pace across the steps' edges.
constexpr int64_t kGraphProfileSteps = 6;

// The nodes the device-resident phase runs: the chain after HostToDevice, ending in TrainStep.
struct DevicePart {
  std::string feed_id;             // the node feeding HostToDevice: host batches
  std::string transfer_id;         // the HostToDevice node
  std::vector<std::string> chain;  // node ids after it, in flow order; the last is TrainStep
};

DevicePart find_device_part(const ValidatedPipeline& pipeline) {
  const auto& nodes = pipeline.nodes();
  std::optional<size_t> transfer;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!dynamic_cast<const stages::TimedTransfer*>(nodes[i].stage.get())) continue;
    if (transfer) {
      throw NoDevicePartError("bench: " + pipeline.file() +
                              " has more than one host-to-device node (" + nodes[*transfer].id +
                              ", " + nodes[i].id + "); bench measures one device part");
    }
    transfer = i;
  }
  if (!transfer) {
    throw NoDevicePartError(
        "bench: " + pipeline.file() +
        " has no host-to-device node (HostToDevice); bench measures training pipelines "
        "(for data graphs use `run --stats-out`)");
  }
  if (nodes[*transfer].inputs.size() != 1) {
    throw NoDevicePartError("bench: " + nodes[*transfer].id + " in " + pipeline.file() +
                            " must have one input (the host batches it moves)");
  }
  DevicePart part{nodes[nodes[*transfer].inputs[0]].id, nodes[*transfer].id, {}};
  size_t at = *transfer;
  while (!nodes[at].outputs.empty()) {
    if (nodes[at].outputs.size() != 1 || nodes[nodes[at].outputs[0]].inputs.size() != 1) {
      throw NoDevicePartError("bench: the nodes after " + part.transfer_id + " in " +
                              pipeline.file() +
                              " must form a chain (one input, one output each); " + nodes[at].id +
                              " branches or joins");
    }
    at = nodes[at].outputs[0];
    part.chain.push_back(nodes[at].id);
  }
  if (part.chain.empty() || !dynamic_cast<const stages::TrainingStep*>(nodes[at].stage.get())) {
    throw NoDevicePartError("bench: the chain after " + part.transfer_id + " in " +
                            pipeline.file() + " must end in a training step node (TrainStep)");
  }
  return part;
}

class CollectingEmitter final : public Emitter {
 public:
  void emit(Sample sample) override { samples.push_back(std::move(sample)); }
  std::vector<Sample> samples;
};

// Whether the pipeline trains on CUDA: a CPU run on a GPU machine must not touch the CUDA
// allocator (its statistics throw before CUDA is initialised).
bool trains_on_cuda(const Settings& settings) {
  return resolve_device("auto", settings, "bench").is_cuda();
}

void synchronize_device(bool cuda) {
#if WAM_WITH_CUDA
  if (cuda) torch::cuda::synchronize();
#else
  (void)cuda;
#endif
}

// Peak bytes the CUDA caching allocator handed out since the last reset; -1 without CUDA.
int64_t peak_device_bytes(bool cuda) {
#if WAM_WITH_CUDA
  if (cuda) {
    synchronize_device(cuda);
    return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device())
        .allocated_bytes[0]
        .peak;
  }
#else
  (void)cuda;
#endif
  return -1;
}

void reset_peak_device_bytes(bool cuda) {
#if WAM_WITH_CUDA
  if (cuda) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#else
  (void)cuda;
#endif
}

// samples/s between the end of step `warmup` and the last step.
double steady_rate(const std::vector<Clock::time_point>& step_ends, int64_t warmup,
                   int64_t batch_size) {
  const double seconds =
      std::chrono::duration<double>(step_ends.back() - step_ends[warmup - 1]).count();
  const auto steps = static_cast<double>(step_ends.size()) - static_cast<double>(warmup);
  return seconds > 0 ? steps * static_cast<double>(batch_size) / seconds : 0.0;
}

// Transfers of one host batch timed alone, after one that sizes a pinned pool.
constexpr int64_t kTransferRepeats = 5;

struct DeviceResult {
  DevicePartFigures figures;
  std::optional<StepProfile> profile;
  int64_t profiled_steps = 0;
};

// The first host batch where it enters the transfer node: the data path alone, run once.
Sample capture_host_batch(const std::string& file, const LoadOptions& options,
                          const DevicePart& part) {
  std::optional<Sample> batch;
  LoadOptions capture_options = options;
  capture_options.overrides.push_back("settings.steps=1");
  ValidatedPipeline capture = load_pipeline(file, capture_options);
  capture.keep_upstream_of(part.feed_id);
  RunOptions run_options;
  run_options.on_output = [&](const Sample& sample) {
    if (!batch) batch = sample;
  };
  RunResult result = run_pipeline(capture, run_options);
  if (result.error) throw *result.error;
  if (!batch) throw Error("bench: the data path of " + file + " produced no batch");
  return std::move(*batch);
}

// Captures one host batch where it enters HostToDevice, times that node alone on it, then replays
// the device batch through the device chain.
// With `options.profile`, kProfileSteps more steps run under the profiler (traced to its
// trace_path unless that is empty), or with `profile_first` the first step does.
DeviceResult run_device_part(const std::string& file, const LoadOptions& options,
                             const DevicePart& part, const BenchOptions& bench, int64_t total) {
  const bool profile = bench.profile, profile_first = bench.profile && bench.profile_first;
  std::optional<Sample> batch = capture_host_batch(file, options, part);

  LoadOptions step_options = options;
  const int64_t extra_steps = profile && !profile_first ? 2 * kProfileSteps : kProfileSteps;
  step_options.overrides.push_back("settings.steps=" + std::to_string(total + extra_steps));
  ValidatedPipeline pipeline = load_pipeline(file, step_options);
  stages::disable_training_state(pipeline);
  std::deque<Context> contexts;  // deque: stable addresses, stages keep pointers to them
  std::vector<Stage*> chain;
  const bool cuda = trains_on_cuda(pipeline.settings());
  auto open_stage = [&](const std::string& id) -> Stage& {
    const ValidatedNode& node = *pipeline.find(id);
    contexts.emplace_back(node.id, node.type, pipeline.settings(),
                          [](const std::string& line) { std::cerr << line << "\n"; });
    node.stage->open(contexts.back());
    return node.transform();
  };
  Stage& transfer = open_stage(part.transfer_id);
  for (const std::string& id : part.chain) chain.push_back(&open_stage(id));

  // The transfer's own cost per batch in its mode: the device is otherwise idle, so no wait for a
  // free buffer or for queued kernels is in it. Dropped outputs return pinned buffers to the pool.
  const Sample host_batch = std::move(*batch);
  auto transfer_once = [&] {
    CollectingEmitter out;
    transfer.process(Sample(host_batch), out);
    synchronize_device(cuda);
    if (out.samples.size() != 1) {
      throw Error("bench: " + part.transfer_id + " emitted " + std::to_string(out.samples.size()) +
                  " batches for one");
    }
    return std::move(out.samples[0]);
  };
  batch = transfer_once();
  const Clock::time_point transfers_start = Clock::now();
  for (int64_t i = 0; i < kTransferRepeats; ++i) transfer_once();
  const double transfer_ms = 1e3 *
                             std::chrono::duration<double>(Clock::now() - transfers_start).count() /
                             static_cast<double>(kTransferRepeats);
  // After the transfers: CUDA is initialised (its statistics throw before) and the pinned pool,
  // allocated by now, still counts in the peak.
  reset_peak_device_bytes(cuda);

  auto run_step = [&](std::vector<double>* node_seconds) {
    std::vector<Sample> flowing{*batch};
    for (size_t i = 0; i < chain.size(); ++i) {
      const Clock::time_point start = Clock::now();
      CollectingEmitter out;
      for (Sample& sample : flowing) chain[i]->process(std::move(sample), out);
      flowing = std::move(out.samples);
      if (node_seconds) {
        synchronize_device(cuda);
        (*node_seconds)[i] += std::chrono::duration<double>(Clock::now() - start).count();
      }
    }
    synchronize_device(cuda);
  };
  // The rate: nodes overlap as in the graph (one synchronisation per step).
  DeviceResult result;
  std::vector<Clock::time_point> step_ends;
  for (int64_t step = 0; step < total; ++step) {
    if (step == 0 && profile_first) {
      result.profile = profile_steps([&] { run_step(nullptr); }, cuda, bench.trace_path);
      result.profiled_steps = 1;
    } else {
      run_step(nullptr);
    }
    step_ends.push_back(Clock::now());
  }
  result.figures.samples_per_s =
      steady_rate(step_ends, bench.warmup, pipeline.settings().batch_size);
  result.figures.transfer_ms_per_batch = transfer_ms;
  result.figures.peak_bytes = peak_device_bytes(cuda);
  // Then a few more steps with a synchronisation after each node, so its kernels count for it.
  std::vector<double> node_seconds(chain.size(), 0.0);
  for (int64_t step = 0; step < kProfileSteps; ++step) run_step(&node_seconds);
  for (size_t i = 0; i < chain.size(); ++i) {
    result.figures.node_ms_per_batch.emplace_back(part.chain[i],
                                                  1e3 * node_seconds[i] / kProfileSteps);
  }
  if (profile && !profile_first) {
    result.profile = profile_steps(
        [&] {
          for (int64_t step = 0; step < kProfileSteps; ++step) run_step(nullptr);
        },
        cuda, bench.trace_path);
    result.profiled_steps = kProfileSteps;
  }
  return result;
}

struct GraphResult {
  double samples_per_s = 0;            // the lower of the two below
  double step_samples_per_s = 0;       // batches the step finished in the timed window
  double delivered_samples_per_s = 0;  // batches that reached the transfer in that window
  RunStats stats;
  stages::TransferTiming transfer_timing;  // the transfer node's totals over the run
  std::optional<StepProfile> profile;      // with --profile-graph
  int64_t profiled_steps = 0;              // the steps that ended while it recorded
};

// The graph's rate over the timed steps. Batches the data path finished while the warm-up steps
// were slow wait in the graph and would let the step run ahead of its data for a while; counting
// only batches that reached the transfer node inside the window keeps them out.
// With `profile`, kGraphProfileSteps more steps run under the profiler after the timed ones.
GraphResult run_whole_graph(const std::string& file, const LoadOptions& options,
                            const DevicePart& part, int64_t warmup, int64_t total, bool profile) {
  const int64_t steps = total + (profile ? kGraphProfileSteps : 0);
  LoadOptions graph_options = options;
  graph_options.overrides.push_back("settings.steps=" + std::to_string(steps));
  ValidatedPipeline pipeline = load_pipeline(file, graph_options);
  stages::disable_training_state(pipeline);
  const std::vector<ValidatedNode>& nodes = pipeline.nodes();
  size_t feed = 0;  // the node feeding the transfer: one item per batch
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].id == part.transfer_id) feed = nodes[i].inputs.at(0);
  }
  std::vector<Clock::time_point> step_ends;
  std::vector<int64_t> fed;  // batches out of the feed node at each step's end
  std::mutex mutex;          // guards the two above and run_over
  std::condition_variable step_ended;
  bool run_over = false;
  RunOptions run_options;
  run_options.on_output_counted = [&](const Sample&, const std::vector<int64_t>& node_outputs) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      step_ends.push_back(Clock::now());
      fed.push_back(node_outputs[feed]);
    }
    step_ended.notify_all();
  };
  GraphResult graph;
  // The profiler records from a thread of its own, started and stopped there at step ends: it is
  // enabled per thread, and the steps end on whichever worker runs the last node. Device kernels
  // it records from every thread.
  std::thread profiler;
  std::exception_ptr profiler_error;
  if (profile) {
    profiler = std::thread([&] {
      try {
        std::unique_lock<std::mutex> lock(mutex);
        step_ended.wait(lock, [&] { return run_over || std::ssize(step_ends) >= total; });
        if (run_over) return;
        lock.unlock();
        int64_t first = 0, last = 0;
        StepProfile recorded = profile_steps(
            [&] {
              std::unique_lock<std::mutex> window(mutex);
              first = std::ssize(step_ends);
              step_ended.wait(window, [&] {
                return run_over || std::ssize(step_ends) >= first + kGraphProfileSteps;
              });
              last = std::ssize(step_ends);
            },
            /*cuda=*/true, "");
        if (last > first) {
          graph.profile = std::move(recorded);
          graph.profiled_steps = last - first;
        }
      } catch (...) {
        profiler_error = std::current_exception();
      }
    });
  }
  const auto stop_profiler = [&] {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      run_over = true;
    }
    step_ended.notify_all();
    if (profiler.joinable()) profiler.join();
  };
  RunResult result;
  try {
    result = run_pipeline(pipeline, run_options);
  } catch (...) {
    stop_profiler();
    throw;
  }
  stop_profiler();
  if (result.error) throw *result.error;
  if (profiler_error) std::rethrow_exception(profiler_error);
  if (std::ssize(step_ends) < steps) {
    throw Error("bench: " + file + " ran out of data after " + std::to_string(step_ends.size()) +
                " of " + std::to_string(steps) +
                " steps; use a larger dataset, more settings.epochs or fewer --steps");
  }
  // The timed window: the profiled steps after it are left out.
  step_ends.resize(total);
  fed.resize(total);
  const int64_t batch_size = pipeline.settings().batch_size;
  graph.step_samples_per_s = steady_rate(step_ends, warmup, batch_size);
  const double seconds =
      std::chrono::duration<double>(step_ends.back() - step_ends[warmup - 1]).count();
  const auto delivered = static_cast<double>(fed.back() - fed[warmup - 1]);
  graph.delivered_samples_per_s =
      seconds > 0 ? delivered * static_cast<double>(batch_size) / seconds : 0.0;
  graph.samples_per_s = std::min(graph.step_samples_per_s, graph.delivered_samples_per_s);
  graph.stats = result.stats;
  graph.transfer_timing =
      dynamic_cast<const stages::TimedTransfer&>(*pipeline.find(part.transfer_id)->stage)
          .transfer_timing();
  return graph;
}

// The whole-graph figures, their ratio to the device part, and the host side at a glance (the
// transfer and the busiest node before the device part).
GraphFigures graph_figures(const GraphResult& graph, double device_samples_per_s,
                           const DevicePart& part) {
  GraphFigures figures;
  figures.samples_per_s = graph.samples_per_s;
  figures.step_samples_per_s = graph.step_samples_per_s;
  figures.delivered_samples_per_s = graph.delivered_samples_per_s;
  figures.pipeline_efficiency =
      device_samples_per_s > 0 ? graph.samples_per_s / device_samples_per_s : 0.0;
  figures.stats = graph.stats;
  const NodeStats* transfer = nullptr;
  for (const NodeStats& node : graph.stats.nodes) {
    if (node.id == part.transfer_id) transfer = &node;
    bool in_device_part = node.id == part.transfer_id;
    for (const std::string& id : part.chain) in_device_part = in_device_part || node.id == id;
    if (!in_device_part &&
        (!figures.busiest_host_node || node.utilisation > figures.busiest_host_node->utilisation)) {
      figures.busiest_host_node = node;
    }
  }
  const stages::TransferTiming& timing = graph.transfer_timing;
  TransferFigures& figure = figures.transfer;
  figure.event_timed = timing.event_timed;
  if (transfer && transfer->out > 0) {
    const double batches = static_cast<double>(transfer->out);
    auto ms_per_batch = [&](int64_t us) { return 1e-3 * static_cast<double>(us) / batches; };
    figure.wait_ms_per_batch = ms_per_batch(timing.pool_wait_us);
    figure.device_wait_ms_per_batch = ms_per_batch(timing.device_wait_us);
    figure.staging_ms_per_batch = ms_per_batch(timing.staging_us);
    figure.copy_ms_per_batch = ms_per_batch(timing.copy_us);
    figure.busy_ms_per_batch = 1e3 * transfer->busy_s / batches;
    figure.ms_per_batch = figure.event_timed
                              ? figure.staging_ms_per_batch + figure.copy_ms_per_batch
                              : figure.busy_ms_per_batch - figure.wait_ms_per_batch;
  }
  return figures;
}

// The profiled steps' longest kernels (or CPU operators), per step, with their share.
BenchProfile profile_figures(const StepProfile& profile, int64_t profiled_steps,
                             const std::string& trace_path) {
  BenchProfile figures;
  figures.steps = profiled_steps;
  figures.device_kernels = profile.kernels;
  double total_ms = 0;
  for (const KernelTime& kernel : profile.longest) total_ms += kernel.total_ms;
  const double steps = static_cast<double>(profiled_steps);
  figures.ms_per_step = total_ms / steps;
  for (size_t i = 0; i < std::min(profile.longest.size(), kListedKernels); ++i) {
    const KernelTime& kernel = profile.longest[i];
    figures.longest.push_back({kernel.name, kernel.total_ms / steps,
                               total_ms > 0 ? 100 * kernel.total_ms / total_ms : 0.0,
                               kernel.calls / profiled_steps});
  }
  figures.trace_path = trace_path;
  figures.trace_note = profile.trace_note;
  return figures;
}

std::string gib(int64_t bytes) {
  if (bytes < 0) return "n/a (no CUDA)";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

BenchReport run_bench(const BenchOptions& options) {
  auto progress = [&](const std::string& line) {
    if (options.on_progress) options.on_progress(line);
  };
  LoadOptions load_options{options.overrides};
  if (options.threads >= 0) {
    load_options.overrides.push_back("settings.threads=" + std::to_string(options.threads));
  }
  const std::string& file = options.pipeline_file;
  const ValidatedPipeline probe = load_pipeline(file, load_options);
  // The runs below leave no training-state files behind and start from fresh weights: each turns
  // its training step's state off (stages::disable_training_state).
  const DevicePart part = find_device_part(probe);
  const int64_t total = options.warmup + options.steps;
  if (options.profile_graph && !trains_on_cuda(probe.settings())) {
    throw Error("bench: " + file +
                " trains on the CPU; --profile-graph lists the device's kernels while the whole "
                "graph runs (on the CPU, --profile lists the device part's operators)");
  }

  BenchReport report;
  report.pipeline = probe.name();
  report.warmup_steps = options.warmup;
  report.timed_steps = options.steps;
  report.batch_size = probe.settings().batch_size;
  report.cuda = trains_on_cuda(probe.settings());
  report.transfer_id = part.transfer_id;

  std::string chain;
  for (size_t i = 0; i < part.chain.size(); ++i) chain += (i ? ", " : "") + part.chain[i];
  progress("bench: " + probe.name() + ": device part (" + part.transfer_id + " -> " + chain +
           ") on one device-resident batch, " + std::to_string(options.warmup) + " + " +
           std::to_string(options.steps) + " steps");
  DeviceResult device = run_device_part(file, load_options, part, options, total);
  report.device_part = std::move(device.figures);
  if (device.profile) {
    report.profile = profile_figures(*device.profile, device.profiled_steps, options.trace_path);
  }
  if (!options.device_only) {
    progress("bench: " + probe.name() + ": whole graph, " + std::to_string(options.warmup) + " + " +
             std::to_string(options.steps) + " steps");
    const GraphResult graph =
        run_whole_graph(file, load_options, part, options.warmup, total, options.profile_graph);
    report.graph = graph_figures(graph, report.device_part.samples_per_s, part);
    if (graph.profile) {
      report.graph_profile = profile_figures(*graph.profile, graph.profiled_steps, "");
      if (device.profile) {
        const std::vector<KernelTime> beyond = time_beyond(*graph.profile, graph.profiled_steps,
                                                           *device.profile, device.profiled_steps);
        double added_ms = 0;
        for (const KernelTime& kernel : beyond) added_ms += kernel.total_ms;
        for (size_t i = 0; i < std::min(beyond.size(), kListedKernels); ++i) {
          report.beyond_device_part.push_back({beyond[i].name, beyond[i].total_ms,
                                               100 * beyond[i].total_ms / added_ms,
                                               beyond[i].calls});
        }
      }
    }
  }
  return report;
}

namespace {

void print_kernels(const std::vector<ProfiledKernel>& kernels, std::ostream& out) {
  char line[256];
  for (const ProfiledKernel& kernel : kernels) {
    std::snprintf(line, sizeof(line), "    %8.2f ms %5.1f%% %6lld calls  %.100s\n",
                  kernel.ms_per_step, kernel.percent, kernel.calls_per_step, kernel.name.c_str());
    out << line;
  }
}

}  // namespace

void print_bench(const BenchReport& report, std::ostream& out) {
  const DevicePartFigures& device = report.device_part;
  char line[256];
  out << report.pipeline << " (" << report.timed_steps << " timed steps after "
      << report.warmup_steps << " warm-up, batch " << report.batch_size << ")\n";
  std::snprintf(line, sizeof(line),
                "  device part alone:    %9.2f samples/s, peak device memory %s\n",
                device.samples_per_s, gib(device.peak_bytes).c_str());
  out << line;
  std::snprintf(line, sizeof(line), "    %-20s %9.2f ms per batch, timed alone (not in the rate)\n",
                (report.transfer_id + ":").c_str(), device.transfer_ms_per_batch);
  out << line;
  for (const auto& [id, ms] : device.node_ms_per_batch) {
    std::snprintf(line, sizeof(line), "    %-20s %9.2f ms per batch\n", (id + ":").c_str(), ms);
    out << line;
  }
  if (report.profile) {
    const BenchProfile& profile = *report.profile;
    const char* what =
        profile.device_kernels ? "kernels" : "CPU operators (nested: shares overlap)";
    std::snprintf(line, sizeof(line), "  profile of %lld steps: %.2f ms of %s per step; longest:\n",
                  static_cast<long long>(profile.steps), profile.ms_per_step, what);
    out << line;
    print_kernels(profile.longest, out);
    if (!profile.trace_path.empty()) {
      out << "  trace: "
          << (profile.trace_note.empty() ? profile.trace_path + " (open in ui.perfetto.dev)"
                                         : profile.trace_note)
          << "\n";
    }
  }
  if (!report.graph) return;
  const GraphFigures& graph = *report.graph;
  const TransferFigures& transfer = graph.transfer;
  std::snprintf(line, sizeof(line),
                "  whole graph:          %9.2f samples/s (the lower of: steps %.2f, batches "
                "reaching %s %.2f)\n",
                graph.samples_per_s, graph.step_samples_per_s, report.transfer_id.c_str(),
                graph.delivered_samples_per_s);
  out << line;
  std::snprintf(line, sizeof(line), "  pipeline efficiency:  %9.3f\n", graph.pipeline_efficiency);
  out << line;
  if (graph.delivered_samples_per_s == 0) {
    out << "  (no batch reached " << report.transfer_id
        << " while timed: the steps used batches made during warm-up; time more --steps)\n";
  }
  if (transfer.event_timed) {
    std::snprintf(line, sizeof(line),
                  "  %s: %.2f ms per batch transferring (%.2f staging on the host + %.2f copying, "
                  "CUDA-event timed); busy %.2f ms, %.2f of it waiting for a free buffer, %.2f for "
                  "the device to release one\n",
                  report.transfer_id.c_str(), transfer.ms_per_batch, transfer.staging_ms_per_batch,
                  transfer.copy_ms_per_batch, transfer.busy_ms_per_batch,
                  transfer.wait_ms_per_batch, transfer.device_wait_ms_per_batch);
  } else {
    std::snprintf(line, sizeof(line), "  %s: %.2f ms per batch busy (%s)\n",
                  report.transfer_id.c_str(), transfer.ms_per_batch,
                  report.cuda ? "blocking copies: they wait for the kernels queued before them"
                              : "no device copies");
  }
  out << line;
  if (graph.busiest_host_node) {
    std::snprintf(line, sizeof(line), "  busiest host node:    %s %.0f%%\n",
                  graph.busiest_host_node->id.c_str(), 100 * graph.busiest_host_node->utilisation);
    out << line;
  }
  if (report.graph_profile) {
    const BenchProfile& profile = *report.graph_profile;
    std::snprintf(line, sizeof(line),
                  "  whole-graph profile of %lld steps: %.2f ms of kernels per step; longest:\n",
                  static_cast<long long>(profile.steps), profile.ms_per_step);
    out << line;
    print_kernels(profile.longest, out);
    if (!report.beyond_device_part.empty()) {
      double added_ms = 0;
      for (const ProfiledKernel& kernel : report.beyond_device_part) added_ms += kernel.ms_per_step;
      std::snprintf(line, sizeof(line),
                    "  beyond the device part alone: %.2f ms of kernels per step (the whole "
                    "graph's %.2f less the profile's %.2f); most:\n",
                    profile.ms_per_step - report.profile->ms_per_step, profile.ms_per_step,
                    report.profile->ms_per_step);
      out << line;
      print_kernels(report.beyond_device_part, out);
    }
  }
}

namespace {

nlohmann::json kernels_json(const std::vector<ProfiledKernel>& kernels) {
  nlohmann::json listed = nlohmann::json::array();
  for (const ProfiledKernel& kernel : kernels) {
    listed.push_back({{"name", kernel.name},
                      {"ms_per_step", kernel.ms_per_step},
                      {"calls_per_step", kernel.calls_per_step}});
  }
  return listed;
}

}  // namespace

nlohmann::json bench_json(const BenchReport& report) {
  const DevicePartFigures& device = report.device_part;
  nlohmann::json out = {{"pipeline", report.pipeline},
                        {"warmup_steps", report.warmup_steps},
                        {"timed_steps", report.timed_steps},
                        {"batch_size", report.batch_size},
                        {"device_part_samples_per_s", device.samples_per_s},
                        {"device_part_peak_bytes", device.peak_bytes},
                        {"transfer_alone_ms_per_batch", device.transfer_ms_per_batch},
                        {"device_part_ms_per_batch", device.node_ms_per_batch}};
  if (report.profile) {
    const BenchProfile& profile = *report.profile;
    out["profile"] = {{"device_kernels", profile.device_kernels},
                      {"ms_per_step", profile.ms_per_step},
                      {"longest", kernels_json(profile.longest)}};
  }
  if (report.graph) {
    const GraphFigures& graph = *report.graph;
    const TransferFigures& transfer = graph.transfer;
    out["graph_samples_per_s"] = graph.samples_per_s;
    out["graph_step_samples_per_s"] = graph.step_samples_per_s;
    out["graph_delivered_samples_per_s"] = graph.delivered_samples_per_s;
    out["pipeline_efficiency"] = graph.pipeline_efficiency;
    out["transfer_ms_per_batch"] = transfer.ms_per_batch;
    out["transfer_staging_ms_per_batch"] = transfer.staging_ms_per_batch;
    out["transfer_copy_ms_per_batch"] = transfer.copy_ms_per_batch;
    out["transfer_busy_ms_per_batch"] = transfer.busy_ms_per_batch;
    out["transfer_wait_ms_per_batch"] = transfer.wait_ms_per_batch;
    out["transfer_device_wait_ms_per_batch"] = transfer.device_wait_ms_per_batch;
    out["graph_stats"] = graph.stats.to_json();
  }
  if (report.graph_profile) {
    out["graph_profile"] = {{"ms_per_step", report.graph_profile->ms_per_step},
                            {"steps", report.graph_profile->steps},
                            {"longest", kernels_json(report.graph_profile->longest)},
                            {"beyond_device_part", kernels_json(report.beyond_device_part)}};
  }
  return out;
}

}  // namespace wam::cli
