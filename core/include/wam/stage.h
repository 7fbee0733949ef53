// What a stage author sees: Sample, the stage's Params, its Contract, an Emitter and a Context.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wam/clock.h"
#include "wam/config.h"
#include "wam/params.h"
#include "wam/sample.h"

namespace wam {

class HostMemoryBudget;

// Run-wide settings from the pipeline file's "settings" object.
struct Settings {
  int64_t seed = 42;
  int64_t steps = 0;  // items leaving the terminal node before the run stops; 0 = until exhausted
  int64_t epochs = 1;
  int64_t batch_size = 16;
  int64_t threads = 0;         // worker threads; 0 = one per core
  int64_t max_in_flight = 0;   // 0: auto, see in_flight_limit()
  double host_memory_gib = 0;  // 0: auto, see wam/host_memory.h
  bool ordered = true;
  std::string device = "auto";

  template <class V>
  void visit(V& v) {
    v("seed", seed, "Base seed; per-sample randomness derives from (seed, epoch, sample id).",
      Min{0});
    v("steps", steps, "Stop after the terminal node emitted this many items (0: run to the end).",
      Min{0});
    v("epochs", epochs, "Passes over the dataset.", Min{1});
    v("batch_size", batch_size, "Samples per batch (per process).", Min{1});
    v("threads", threads, "Worker threads (0: one per core).", Min{0});
    v("max_in_flight", max_in_flight,
      "Most source samples inside the graph at once, those batched included until their batch "
      "leaves it: bounds every queue (at least the batch size). 0: auto, 4 batches plus 2 samples "
      "per worker thread.",
      Min{0});
    v("host_memory_gib", host_memory_gib,
      "Host memory (GiB) that the samples in flight and the stages' buffers (frame caches, "
      "decoder sessions, staging buffers, text embeddings, cache generate's shard rows) share: "
      "lowers max_in_flight, the caches and the shards to fit. 0: "
      "auto, 1/32 of the machine's memory (its cgroup limit when lower), at least 0.5.",
      Min{0});
    v("ordered", ordered,
      "Restore source order before order-sensitive nodes: serial and parallel runs give the same "
      "result.");
    v("device", device,
      "Where the run's stages run, unless a stage's own device param says otherwise (auto: CUDA "
      "when available).",
      OneOf{"auto", "cpu", "cuda"});
  }
  // Threads beyond a small multiple of the cores only exhaust the process (pthread_create aborts).
  void check(ParamChecker& c) const;
  // max_in_flight as the runner applies it, `worker_threads` the run's thread count.
  int64_t in_flight_limit(int64_t worker_threads) const;
};

// How many calls of process() may run at once.
struct Concurrency {
  static constexpr int64_t kUnlimited = 0;
  static constexpr int64_t kAuto = -1;
  int64_t limit = 1;  // 1 = serial, 0 = unlimited, -1 = auto

  static Concurrency serial() { return {1}; }
  static Concurrency unlimited() { return {kUnlimited}; }
  static Concurrency at_most(int64_t n) { return {n}; }
  // The runner sets the limit during the run, within the thread budget (wam/autotune.h). The
  // default of stages that declare unlimited().
  static Concurrency automatic() { return {kAuto}; }
  bool is_auto() const { return limit == kAuto; }
  std::string to_string() const;
};

struct FieldSpec {
  std::string name;
  FieldType type;
};

// A stage's declared interface, checked by validation before anything is opened.
class Contract {
 public:
  void reads(std::string name, FieldType type) { reads_.push_back({std::move(name), type}); }
  void writes(std::string name, FieldType type) { writes_.push_back({std::move(name), type}); }
  // Fields this stage drops: downstream stages cannot read them.
  void removes(std::string name) { removes_.push_back(std::move(name)); }
  void concurrency(Concurrency c) { concurrency_ = c; }
  // Under `ordered: true` the runner delivers samples to this stage in source order.
  void order_sensitive() { order_sensitive_ = true; }
  // Emits batches of its inputs: downstream, Tensor fields gain a batch dimension, Int/Double/Bool
  // fields become Tensors and String/Json fields become Json arrays.
  void batches() { batches_ = true; }

  const std::vector<FieldSpec>& read_fields() const { return reads_; }
  const std::vector<FieldSpec>& written_fields() const { return writes_; }
  const std::vector<std::string>& removed_fields() const { return removes_; }
  Concurrency default_concurrency() const { return concurrency_; }
  bool is_order_sensitive() const { return order_sensitive_; }
  bool is_batching() const { return batches_; }

 private:
  std::vector<FieldSpec> reads_, writes_;
  std::vector<std::string> removes_;
  Concurrency concurrency_ = Concurrency::serial();
  bool order_sensitive_ = false;
  bool batches_ = false;
};

class Emitter {
 public:
  virtual ~Emitter() = default;
  virtual void emit(Sample sample) = 0;
};

// A named count a stage reports (cache hits, retries...); shown in the run summary and stats.
class Counter {
 public:
  void add(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Per-node services handed to open().
class Context {
 public:
  // Receives trace_span()'s slices: set by the runtime when the run records a trace.
  using TraceSink = std::function<void(const std::string& track, const std::string& name,
                                       Clock::time_point begin, Clock::duration duration)>;

  // Receives report_scalar()'s values: set by the runtime.
  using ScalarSink = std::function<void(const std::string& name, double value)>;

  // Runs run_waiting()'s work on a thread of the runtime's own: set by the runtime.
  using WaitingRunner = std::function<void(const std::function<void()>& work)>;

  Context(std::string node_id, std::string type, const Settings& settings,
          std::function<void(const std::string&)> log, TraceSink trace = nullptr,
          ScalarSink scalars = nullptr, OnError on_error = OnError::kFail,
          HostMemoryBudget* host_memory = nullptr, WaitingRunner waiting = nullptr);

  const std::string& node_id() const { return node_id_; }
  const std::string& type() const { return type_; }
  const Settings& settings() const { return settings_; }
  // The node's `on_error`. The runtime applies it to what process() and next() throw; a stage
  // that checks its input in open() asks it to fail there at once, or to leave the damaged items
  // to be skipped and counted as they come (EpisodeSampler's non-finite rows).
  OnError on_error() const { return on_error_; }
  // The same name returns the same counter; the reference stays valid for the whole run.
  Counter& counter(const std::string& name);
  std::vector<std::pair<std::string, int64_t>> counters() const;
  void log(const std::string& message) const;
  // Puts a slice of the stage's own, named `name`, on the track `track` under its node in the
  // run's Chrome trace (`run --trace-out`): e.g. a training step's CUDA-event time, track
  // "device", name "step 12". A no-op when the run records no trace. Thread-safe. Thinned as the
  // node's own slices; at most TraceRecorder::kMaxStageTracks track names per node.
  void trace_span(const std::string& track, const std::string& name, Clock::time_point begin,
                  Clock::duration duration) const;
  // Adds `value` to the run's series of the scalar `name`, e.g. a training step's "loss" once per
  // step: the series lie in the run's stats (`series.<name>`: step, t, value), and the "loss" is
  // also shown by the progress line and the report. A no-op when the runtime records no scalars
  // (e.g. a test harness). Thread-safe.
  void report_scalar(const std::string& name, double value) const;
  // The run's host memory budget (wam/host_memory.h), where a stage claims its own buffers
  // (caches, pools) before sizing them; null when the runtime keeps none (e.g. a test harness):
  // the stage then sizes them from its params alone.
  HostMemoryBudget* host_memory() const { return host_memory_; }
  // Runs `work`, called from process() or next(), which spends most of its time waiting on
  // something other than this CPU (a hardware decoder, a device), on a thread the runtime keeps for
  // such waits; the worker thread that called it goes on with other samples meanwhile, and the
  // call returns (possibly on another worker thread) once `work` has, rethrowing what it threw.
  // `work` must not rely on the caller's thread: no thread-local state, no lock held across the
  // call. Where the runtime keeps no such threads (e.g. a test harness) it runs `work` here.
  void run_waiting(const std::function<void()>& work) const;

 private:
  std::string node_id_, type_;
  const Settings& settings_;
  std::function<void(const std::string&)> log_;
  TraceSink trace_;
  ScalarSink scalars_;
  OnError on_error_;
  HostMemoryBudget* host_memory_;
  WaitingRunner waiting_;
  mutable std::mutex counters_mutex_;
  std::deque<std::pair<std::string, Counter>> counters_;  // deque: stable addresses
};

class StageBase {
 public:
  virtual ~StageBase() = default;
  virtual void declare(Contract& contract) const = 0;
  // Opens files, models, devices. Errors thrown here name the node.
  virtual void open(Context& context) { (void)context; }
};

// Produces the samples; called serially until it returns nothing.
class Source : public StageBase {
 public:
  virtual std::optional<Sample> next() = 0;
  // Position for exact resume (e.g. epoch and index); null when the source keeps none.
  virtual nlohmann::json state() const { return nullptr; }
  virtual void restore(const nlohmann::json& state) { (void)state; }
  virtual void close() {}
};

// Transforms samples: each process() call emits 0..N samples.
class Stage : public StageBase {
 public:
  virtual void process(Sample sample, Emitter& out) = 0;
  // End of input: emit whatever is still held (e.g. a last partial batch).
  virtual void close(Emitter& out) { (void)out; }
};

}  // namespace wam
