// `wam-pipeline bench PIPELINE`: is the data path keeping the training device busy?
//
// Runs a training pipeline twice: first its device part alone (every node after HostToDevice, which
// must be a chain ending in TrainStep) fed one device-resident batch over and over, then the whole
// graph. Both are timed over the same steps after a warm-up (capture, GEMM tuning, pipeline fill),
// and their ratio is the pipeline efficiency: 1.0 means the host side never made the step wait.
#include "cli/command.h"

#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <optional>

#include <torch/torch.h>

#include "common/device.h"
#include "device/transfer_timing.h"
#include "train/step_overrides.h"
#include "train/step_profile.h"
#include "train/training_step.h"
#include "cli/validators.h"
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

// The nodes the device-resident phase runs: the chain after HostToDevice, ending in TrainStep.
struct DevicePart {
  std::string feed_id;            // the node feeding HostToDevice: host batches
  std::string transfer_id;        // the HostToDevice node
  std::vector<std::string> chain;  // node ids after it, in flow order; the last is TrainStep
};

DevicePart find_device_part(const ValidatedPipeline& pipeline) {
  const auto& nodes = pipeline.nodes();
  std::optional<size_t> transfer;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!dynamic_cast<const stages::TimedTransfer*>(nodes[i].stage.get())) continue;
    if (transfer) {
      throw Error("bench: " + pipeline.file() + " has more than one host-to-device node (" +
                  nodes[*transfer].id + ", " + nodes[i].id + "); bench measures one device part");
    }
    transfer = i;
  }
  if (!transfer) {
    throw Error("bench: " + pipeline.file() +
                " has no host-to-device node (HostToDevice); bench measures training pipelines "
                "(for data graphs use `run --stats-out`)");
  }
  if (nodes[*transfer].inputs.size() != 1) {
    throw Error("bench: " + nodes[*transfer].id + " in " + pipeline.file() +
                " must have one input (the host batches it moves)");
  }
  DevicePart part{nodes[nodes[*transfer].inputs[0]].id, nodes[*transfer].id, {}};
  size_t at = *transfer;
  while (!nodes[at].outputs.empty()) {
    if (nodes[at].outputs.size() != 1 || nodes[nodes[at].outputs[0]].inputs.size() != 1) {
      throw Error("bench: the nodes after " + part.transfer_id + " in " + pipeline.file() +
                  " must form a chain (one input, one output each); " + nodes[at].id +
                  " branches or joins");
    }
    at = nodes[at].outputs[0];
    part.chain.push_back(nodes[at].id);
  }
  if (part.chain.empty() || !dynamic_cast<const stages::TrainingStep*>(nodes[at].stage.get())) {
    throw Error("bench: the chain after " + part.transfer_id + " in " + pipeline.file() +
                " must end in a training step node (TrainStep)");
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
  double samples_per_s = 0;
  double transfer_ms_per_batch = 0;  // the transfer node alone, nothing else on the device
  int64_t peak_bytes = -1;
  std::vector<std::pair<std::string, double>> node_ms_per_batch;  // chain order
  std::optional<StepProfile> profile;
};

// Captures one host batch where it enters HostToDevice, times that node alone on it, then replays
// the device batch through the device chain.
// With `profile`, kProfileSteps more steps run under the profiler (traced to `trace_path` unless
// it is empty).
DeviceResult run_device_part(const std::string& file, const LoadOptions& options,
                             const DevicePart& part, int64_t warmup, int64_t total, bool profile,
                             const std::string& trace_path) {
  std::optional<Sample> batch;
  {
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
  }

  LoadOptions step_options = options;
  const int64_t extra_steps = profile ? 2 * kProfileSteps : kProfileSteps;
  step_options.overrides.push_back("settings.steps=" + std::to_string(total + extra_steps));
  ValidatedPipeline pipeline = load_pipeline(file, step_options);
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
  const double transfer_ms =
      1e3 * std::chrono::duration<double>(Clock::now() - transfers_start).count() /
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
  std::vector<Clock::time_point> step_ends;
  for (int64_t step = 0; step < total; ++step) {
    run_step(nullptr);
    step_ends.push_back(Clock::now());
  }
  DeviceResult result{steady_rate(step_ends, warmup, pipeline.settings().batch_size),
                      transfer_ms, peak_device_bytes(cuda), {}, std::nullopt};
  // Then a few more steps with a synchronisation after each node, so its kernels count for it.
  std::vector<double> node_seconds(chain.size(), 0.0);
  for (int64_t step = 0; step < kProfileSteps; ++step) run_step(&node_seconds);
  for (size_t i = 0; i < chain.size(); ++i) {
    result.node_ms_per_batch.emplace_back(part.chain[i], 1e3 * node_seconds[i] / kProfileSteps);
  }
  if (profile) {
    result.profile = profile_steps(
        [&] {
          for (int64_t step = 0; step < kProfileSteps; ++step) run_step(nullptr);
        },
        cuda, trace_path);
  }
  return result;
}

struct GraphResult {
  double samples_per_s = 0;        // the lower of the two below
  double step_samples_per_s = 0;   // batches the step finished in the timed window
  double delivered_samples_per_s = 0;  // batches that reached the transfer in that window
  RunStats stats;
  stages::TransferTiming transfer_timing;  // the transfer node's totals over the run
};

// The graph's rate over the timed steps. Batches the data path finished while the warm-up steps
// were slow wait in the graph and would let the step run ahead of its data for a while; counting
// only batches that reached the transfer node inside the window keeps them out.
GraphResult run_whole_graph(const std::string& file, const LoadOptions& options,
                            const DevicePart& part, int64_t warmup, int64_t total) {
  LoadOptions graph_options = options;
  graph_options.overrides.push_back("settings.steps=" + std::to_string(total));
  ValidatedPipeline pipeline = load_pipeline(file, graph_options);
  const std::vector<ValidatedNode>& nodes = pipeline.nodes();
  size_t feed = 0;  // the node feeding the transfer: one item per batch
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].id == part.transfer_id) feed = nodes[i].inputs.at(0);
  }
  std::vector<Clock::time_point> step_ends;
  std::vector<int64_t> fed;  // batches out of the feed node at each step's end
  RunOptions run_options;
  run_options.on_output_counted = [&](const Sample&, const std::vector<int64_t>& node_outputs) {
    step_ends.push_back(Clock::now());
    fed.push_back(node_outputs[feed]);
  };
  RunResult result = run_pipeline(pipeline, run_options);
  if (result.error) throw *result.error;
  if (static_cast<int64_t>(step_ends.size()) < total) {
    throw Error("bench: " + file + " ran out of data after " + std::to_string(step_ends.size()) +
                " of " + std::to_string(total) +
                " steps; use a larger dataset, more settings.epochs or fewer --steps");
  }
  GraphResult graph;
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
void print_whole_graph(const GraphResult& graph, const DeviceResult& device, const DevicePart& part,
                       bool cuda, nlohmann::json& out) {
  const double efficiency =
      device.samples_per_s > 0 ? graph.samples_per_s / device.samples_per_s : 0.0;
  const NodeStats* busiest = nullptr;
  const NodeStats* transfer = nullptr;
  for (const NodeStats& node : graph.stats.nodes) {
    if (node.id == part.transfer_id) transfer = &node;
    bool in_device_part = node.id == part.transfer_id;
    for (const std::string& id : part.chain) in_device_part = in_device_part || node.id == id;
    if (!in_device_part && (!busiest || node.utilisation > busiest->utilisation)) busiest = &node;
  }
  // On CUDA the transfer is the host staging plus the copies' CUDA-event time (waits for a free
  // buffer or for the GPU's earlier work are flow control, not transfer); on the CPU, the node's
  // busy time less any buffer waits.
  double transfer_ms = 0.0, transfer_wait_ms = 0.0, busy_ms = 0.0, staging_ms = 0.0, copy_ms = 0.0;
  const stages::TransferTiming& timing = graph.transfer_timing;
  const bool event_timed = timing.event_timed;
  if (transfer && transfer->out > 0) {
    const double batches = static_cast<double>(transfer->out);
    auto ms_per_batch = [&](int64_t us) { return 1e-3 * static_cast<double>(us) / batches; };
    transfer_wait_ms = ms_per_batch(timing.pool_wait_us);
    staging_ms = ms_per_batch(timing.staging_us);
    copy_ms = ms_per_batch(timing.copy_us);
    busy_ms = 1e3 * transfer->busy_s / batches;
    transfer_ms = event_timed ? staging_ms + copy_ms : busy_ms - transfer_wait_ms;
  }

  char line[256];
  std::snprintf(line, sizeof(line),
                "  whole graph:          %9.2f samples/s (the lower of: steps %.2f, batches "
                "reaching %s %.2f)\n",
                graph.samples_per_s, graph.step_samples_per_s, part.transfer_id.c_str(),
                graph.delivered_samples_per_s);
  std::cout << line;
  std::snprintf(line, sizeof(line), "  pipeline efficiency:  %9.3f\n", efficiency);
  std::cout << line;
  if (graph.delivered_samples_per_s == 0) {
    std::cout << "  (no batch reached " << part.transfer_id
              << " while timed: the steps used batches made during warm-up; time more --steps)\n";
  }
  if (event_timed) {
    std::snprintf(line, sizeof(line),
                  "  %s: %.2f ms per batch transferring (%.2f staging on the host + %.2f copying, "
                  "CUDA-event timed); busy %.2f ms, %.2f of it waiting for a free buffer\n",
                  part.transfer_id.c_str(), transfer_ms, staging_ms, copy_ms, busy_ms,
                  transfer_wait_ms);
  } else {
    std::snprintf(line, sizeof(line), "  %s: %.2f ms per batch busy (%s)\n",
                  part.transfer_id.c_str(), transfer_ms,
                  cuda ? "blocking copies: they wait for the kernels queued before them"
                       : "no device copies");
  }
  std::cout << line;
  if (busiest) {
    std::snprintf(line, sizeof(line), "  busiest host node:    %s %.0f%%\n", busiest->id.c_str(),
                  100 * busiest->utilisation);
    std::cout << line;
  }
  out["graph_samples_per_s"] = graph.samples_per_s;
  out["graph_step_samples_per_s"] = graph.step_samples_per_s;
  out["graph_delivered_samples_per_s"] = graph.delivered_samples_per_s;
  out["pipeline_efficiency"] = efficiency;
  out["transfer_ms_per_batch"] = transfer_ms;
  out["transfer_staging_ms_per_batch"] = staging_ms;
  out["transfer_copy_ms_per_batch"] = copy_ms;
  out["transfer_busy_ms_per_batch"] = busy_ms;
  out["transfer_wait_ms_per_batch"] = transfer_wait_ms;
  out["graph_stats"] = graph.stats.to_json();
}

// The longest kernels (or CPU operators) of the profiled steps, per step, with their share.
void print_profile(const StepProfile& profile, const std::string& trace_path, nlohmann::json& out) {
  double total_ms = 0;
  for (const KernelTime& kernel : profile.longest) total_ms += kernel.total_ms;
  const double steps = static_cast<double>(kProfileSteps);
  const char* what = profile.kernels ? "kernels" : "CPU operators (nested: shares overlap)";
  char line[256];
  std::snprintf(line, sizeof(line), "  profile of %lld steps: %.2f ms of %s per step; longest:\n",
                static_cast<long long>(kProfileSteps), total_ms / steps, what);
  std::cout << line;
  nlohmann::json listed = nlohmann::json::array();
  for (size_t i = 0; i < std::min(profile.longest.size(), kListedKernels); ++i) {
    const KernelTime& kernel = profile.longest[i];
    std::snprintf(line, sizeof(line), "    %8.2f ms %5.1f%% %6lld calls  %.100s\n",
                  kernel.total_ms / steps, total_ms > 0 ? 100 * kernel.total_ms / total_ms : 0.0,
                  kernel.calls / kProfileSteps, kernel.name.c_str());
    std::cout << line;
    listed.push_back({{"name", kernel.name},
                      {"ms_per_step", kernel.total_ms / steps},
                      {"calls_per_step", kernel.calls / kProfileSteps}});
  }
  if (!trace_path.empty()) {
    std::cout << "  trace: "
              << (profile.trace_note.empty() ? trace_path + " (open in ui.perfetto.dev)"
                                             : profile.trace_note)
              << "\n";
  }
  out["profile"] = {{"device_kernels", profile.kernels},
                    {"ms_per_step", total_ms / steps},
                    {"longest", listed}};
}

std::string gib(int64_t bytes) {
  if (bytes < 0) return "n/a (no CUDA)";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

class BenchCommand final : public Command {
 public:
  static constexpr std::string_view kName = "bench";
  explicit BenchCommand(CLI::App& app);
  bool selected() const override;
  int run() override;

 private:
  CLI::App* bench_ = nullptr;
  std::string file_;
  std::vector<std::string> overrides_;
  int64_t steps_ = 20;
  int64_t warmup_ = 5;
  int64_t threads_ = -1;
  std::string json_out_;
  bool profile_ = false;
  std::string trace_out_;
  bool device_only_ = false;
};

BenchCommand::BenchCommand(CLI::App& app) {
  bench_ = app.add_subcommand(
      "bench",
      "Pipeline efficiency: samples/s of the whole training graph divided by samples/s of its "
      "device part (the nodes after HostToDevice) fed one device-resident batch");
  bench_->add_option("pipeline", file_, "Training pipeline JSON file")->required();
  bench_->add_option("--set", overrides_, "Override a value (path.to.key=VALUE)");
  bench_->add_option("--steps", steps_, "Timed steps in each phase")
      ->capture_default_str()
      ->check(at_least(1));
  bench_->add_option("--warmup", warmup_,
                     "Untimed steps first (graph capture, GEMM tuning, pipeline fill)")
      ->capture_default_str()
      ->check(at_least(1));
  bench_->add_option("--threads", threads_, "Worker threads (overrides settings.threads)")
      ->check(at_least(0));
  bench_->add_option("--json", json_out_, "Also write the figures and the graph's stats as JSON")
      ->check(in_existing_directory());
  bench_->add_flag("--profile", profile_,
                   "Also profile 3 steps of the device part and list its longest kernels");
  bench_->add_option("--trace", trace_out_,
                     "With --profile: write the Chrome trace of those steps (ui.perfetto.dev)")
      ->needs("--profile")
      ->check(in_existing_directory());
  bench_->add_flag("--device-only", device_only_,
                   "Measure only the device part (step speed and peak memory, e.g. for sweeps)");
}

bool BenchCommand::selected() const { return bench_->parsed(); }

int BenchCommand::run() {
  LoadOptions options{overrides_};
  if (threads_ >= 0) options.overrides.push_back("settings.threads=" + std::to_string(threads_));
  const ValidatedPipeline probe = load_pipeline(file_, options);
  DevicePart part;
  try {
    part = find_device_part(probe);
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return kExitInvalid;
  }
  const std::string step_id = part.chain.back();
  // A benchmark leaves no training-state files behind and starts from fresh weights.
  add_no_training_state_overrides(step_id, options.overrides);
  const int64_t total = warmup_ + steps_;

  std::cerr << "bench: " << probe.name() << ": device part (" << part.transfer_id << " -> ";
  for (size_t i = 0; i < part.chain.size(); ++i) std::cerr << (i ? ", " : "") << part.chain[i];
  std::cerr << ") on one device-resident batch, " << warmup_ << " + " << steps_ << " steps\n";
  const DeviceResult device =
      run_device_part(file_, options, part, warmup_, total, profile_, trace_out_);
  char line[256];
  std::cout << probe.name() << " (" << steps_ << " timed steps after " << warmup_
            << " warm-up, batch " << probe.settings().batch_size << ")\n";
  std::snprintf(line, sizeof(line),
                "  device part alone:    %9.2f samples/s, peak device memory %s\n",
                device.samples_per_s, gib(device.peak_bytes).c_str());
  std::cout << line;
  std::snprintf(line, sizeof(line), "    %-20s %9.2f ms per batch, timed alone (not in the rate)\n",
                (part.transfer_id + ":").c_str(), device.transfer_ms_per_batch);
  std::cout << line;
  for (const auto& [id, ms] : device.node_ms_per_batch) {
    std::snprintf(line, sizeof(line), "    %-20s %9.2f ms per batch\n", (id + ":").c_str(), ms);
    std::cout << line;
  }
  nlohmann::json out = {{"pipeline", probe.name()},
                        {"warmup_steps", warmup_},
                        {"timed_steps", steps_},
                        {"batch_size", probe.settings().batch_size},
                        {"device_part_samples_per_s", device.samples_per_s},
                        {"device_part_peak_bytes", device.peak_bytes},
                        {"transfer_alone_ms_per_batch", device.transfer_ms_per_batch},
                        {"device_part_ms_per_batch", device.node_ms_per_batch}};
  if (device.profile) print_profile(*device.profile, trace_out_, out);
  if (!device_only_) {
    std::cerr << "bench: " << probe.name() << ": whole graph, " << warmup_ << " + " << steps_
              << " steps\n";
    const GraphResult graph = run_whole_graph(file_, options, part, warmup_, total);
    print_whole_graph(graph, device, part, trains_on_cuda(probe.settings()), out);
  }
  if (!json_out_.empty()) write_file_atomically(json_out_, out.dump(2) + "\n");
  return 0;
}

WAM_REGISTER_COMMAND(BenchCommand);

}  // namespace wam::cli
