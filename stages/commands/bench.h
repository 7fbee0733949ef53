// `wam-pipeline bench` as a function: is the data path keeping the training device busy?
//
// run_bench runs a training pipeline twice: first its device part alone (every node after
// HostToDevice, which must be a chain ending in TrainStep) fed one device-resident batch over and
// over, then the whole graph. Both are timed over the same steps after a warm-up (capture, GEMM
// tuning, pipeline fill), and their ratio is the pipeline efficiency: 1.0 means the host side never
// made the step wait. It returns every figure in a BenchReport and prints nothing; print_bench and
// bench_json only format the report.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/error.h"
#include "wam/metrics.h"

namespace wam::cli {

struct BenchOptions {
  std::string pipeline_file;
  std::vector<std::string> overrides;  // path.to.key=VALUE, as --set
  int64_t steps = 20;                  // timed steps in each phase
  int64_t warmup = 5;        // untimed steps first (graph capture, GEMM tuning, pipeline fill)
  int64_t threads = -1;      // worker threads; below 0, settings.threads
  bool device_only = false;  // measure only the device part (no whole-graph phase)
  bool profile = false;      // also profile a few steps of the device part
  std::string trace_path;    // with `profile`: where to write their Chrome trace ("" for none)
  // With `profile`: the first step instead of steps after the timed ones. For a captured step that
  // is the eager warm-up and the capture, whose trace links each kernel to the operator (and the
  // autograd node) that launched it; replays of a CUDA graph show kernels alone.
  bool profile_first = false;
  // Also profile a few steps of the whole graph after its timed ones (CUDA only): every kernel on
  // the device, the data path's (NVDEC's colour conversion, Augment on the GPU) beside the step's.
  bool profile_graph = false;
  // Receives a line as each phase starts; unset, progress goes nowhere.
  std::function<void(const std::string&)> on_progress;
};

// The pipeline has no device part bench can measure (a data graph, or nodes after HostToDevice that
// are not one chain ending in TrainStep): a usage error, unlike a failure while measuring.
class NoDevicePartError : public Error {
 public:
  using Error::Error;
};

// The device part fed one device-resident batch over and over.
struct DevicePartFigures {
  double samples_per_s = 0;
  double transfer_ms_per_batch = 0;  // the transfer node alone, nothing else on the device
  int64_t peak_bytes = -1;           // peak CUDA memory allocated; -1 without CUDA
  std::vector<std::pair<std::string, double>> node_ms_per_batch;  // chain order
};

struct ProfiledKernel {
  std::string name;
  double ms_per_step = 0;
  double percent = 0;  // share of the listed kernels' time
  long long calls_per_step = 0;
};

// The longest kernels (or CPU operators) of the profiled device-part steps.
struct BenchProfile {
  int64_t steps = 0;
  bool device_kernels = false;          // false: CPU operators, which nest, so their shares overlap
  double ms_per_step = 0;               // of the listed kernels
  std::vector<ProfiledKernel> longest;  // longest first
  std::string trace_path;               // where the trace was asked for ("" when it was not)
  std::string trace_note;               // why no trace was written, or "" when it was
};

// The transfer node's figures over the whole-graph run, per batch. On CUDA the transfer is the
// host staging plus the copies' CUDA-event time (waits for a free buffer or for the GPU's earlier
// work are flow control, not transfer); on the CPU, the node's busy time less any buffer waits.
struct TransferFigures {
  bool event_timed = false;  // whether the copies were timed by CUDA events
  double ms_per_batch = 0;
  double staging_ms_per_batch = 0;
  double copy_ms_per_batch = 0;
  double busy_ms_per_batch = 0;
  double wait_ms_per_batch = 0;         // waiting for a free pinned buffer
  double device_wait_ms_per_batch = 0;  // waiting for the device to release one
};

struct GraphFigures {
  double samples_per_s = 0;            // the lower of the two below
  double step_samples_per_s = 0;       // batches the step finished in the timed window
  double delivered_samples_per_s = 0;  // batches that reached the transfer in that window
  double pipeline_efficiency = 0;      // samples_per_s over the device part's
  TransferFigures transfer;
  std::optional<NodeStats> busiest_host_node;  // highest utilisation before the device part
  RunStats stats;
};

struct BenchReport {
  std::string pipeline;  // its name
  int64_t warmup_steps = 0;
  int64_t timed_steps = 0;
  int64_t batch_size = 0;
  bool cuda = false;        // whether the pipeline trains on CUDA
  std::string transfer_id;  // the HostToDevice node
  DevicePartFigures device_part;
  std::optional<BenchProfile> profile;        // with BenchOptions::profile
  std::optional<GraphFigures> graph;          // absent with BenchOptions::device_only
  std::optional<BenchProfile> graph_profile;  // with BenchOptions::profile_graph
  // With both profiles: the kernels by the time per step the whole graph spends in them beyond the
  // device part alone, most first (`percent`: share of that added time).
  std::vector<ProfiledKernel> beyond_device_part;
};

// Throws NoDevicePartError when the pipeline has no device part to measure, wam::ConfigError for
// an invalid pipeline, wam::Error when a run fails.
BenchReport run_bench(const BenchOptions& options);

// The lines `wam-pipeline bench` prints.
void print_bench(const BenchReport& report, std::ostream& out);

// The figures and the graph's stats, as `wam-pipeline bench --json` writes them.
nlohmann::json bench_json(const BenchReport& report);

}  // namespace wam::cli
