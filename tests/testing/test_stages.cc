#include "testing/test_stages.h"

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

namespace wam::testing {

std::atomic<int64_t> InFlightProbe::live{0};
std::atomic<int64_t> InFlightProbe::max_live{0};

namespace {

FieldType parse_type(const std::string& name) {
  for (auto t : {FieldType::kTensor, FieldType::kString, FieldType::kInt, FieldType::kDouble,
                 FieldType::kBool, FieldType::kJson}) {
    if (field_type_name(t) == name) return t;
  }
  throw Error("unknown field type " + name);
}

struct CountParams {
  int64_t count = 10;
  int64_t fail_at = -1;
  bool track_in_flight = false;
  template <class V>
  void visit(V& v) {
    v("count", count, "Samples to emit.", Min{0});
    v("fail_at", fail_at, "Throw when producing this item (-1: never).");
    v("track_in_flight", track_in_flight, "Count live items in InFlightProbe.");
  }
};

// Emits samples "item:N" with field value = N.
class CountSource final : public Source {
 public:
  static constexpr std::string_view kType = "Count";
  static constexpr std::string_view kSummary = "Test source: emits value = 0..count-1.";
  using Params = CountParams;
  explicit CountSource(Params p) : p_(p) {}
  void declare(Contract& c) const override { c.writes("value", FieldType::kInt); }
  std::optional<Sample> next() override {
    if (next_ >= p_.count) return std::nullopt;
    int64_t n = next_++;
    if (n == p_.fail_at) throw Error("cannot produce item " + std::to_string(n));
    if (p_.track_in_flight) {
      int64_t live = ++InFlightProbe::live;
      int64_t seen = InFlightProbe::max_live.load();
      while (live > seen && !InFlightProbe::max_live.compare_exchange_weak(seen, live)) {
      }
    }
    Sample s("item:" + std::to_string(n));
    s.set("value", n);
    return s;
  }
  nlohmann::json state() const override { return {{"next", next_}}; }

 private:
  Params p_;
  int64_t next_ = 0;
};

struct IncrementParams {
  std::string field = "value";
  int64_t by = 1;
  template <class V>
  void visit(V& v) {
    v("field", field, "Int field to add to.", NonEmpty{});
    v("by", by, "Amount added.");
  }
};

class IncrementStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Increment";
  static constexpr std::string_view kSummary = "Test stage: adds `by` to an Int field.";
  using Params = IncrementParams;
  explicit IncrementStage(Params p) : p_(std::move(p)) {}
  void declare(Contract& c) const override {
    c.reads(p_.field, FieldType::kInt);
    c.writes(p_.field, FieldType::kInt);
    c.concurrency(Concurrency::unlimited());
  }
  void process(Sample s, Emitter& out) override {
    s.set(p_.field, s.get_int(p_.field) + p_.by);
    out.emit(std::move(s));
  }

 private:
  Params p_;
};

struct DelayParams {
  int64_t max_us = 500;
  template <class V>
  void visit(V& v) {
    v("max_us", max_us, "Longest delay; each item sleeps a pseudo-random part of it.", Min{0});
  }
};

// Sleeps a hash-derived time per item so that parallel runs finish out of order.
class DelayStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Delay";
  static constexpr std::string_view kSummary = "Test stage: sleeps to reorder items.";
  using Params = DelayParams;
  explicit DelayStage(Params p) : p_(p) {}
  void declare(Contract& c) const override { c.concurrency(Concurrency::unlimited()); }
  void process(Sample s, Emitter& out) override {
    uint64_t h = (s.seq() + 1) * 0x9E3779B97F4A7C15ull;
    if (p_.max_us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds((h >> 33) % uint64_t(p_.max_us)));
    }
    out.emit(std::move(s));
  }

 private:
  Params p_;
};

struct WaitTogetherParams {
  int64_t together = 4;
  int64_t fail_at = -1;
  template <class V>
  void visit(V& v) {
    v("together", together,
      "Each sample's wait (Context::run_waiting) ends once this many samples are waiting at once; "
      "after 10 s without, it throws.",
      Min{1});
    v("fail_at", fail_at, "The wait of the sample whose value equals this throws (-1: none).");
  }
};

// Waits through Context::run_waiting until `together` samples wait at once: with fewer worker
// threads than `together`, only waits that leave their worker thread free can all meet.
class WaitTogetherStage final : public Stage {
 public:
  static constexpr std::string_view kType = "WaitTogether";
  static constexpr std::string_view kSummary = "Test stage: samples wait for each other.";
  using Params = WaitTogetherParams;
  explicit WaitTogetherStage(Params p) : p_(p) {}
  void declare(Contract& c) const override {
    c.reads("value", FieldType::kInt);
    c.concurrency(Concurrency::unlimited());
  }
  void open(Context& context) override { context_ = &context; }
  void process(Sample s, Emitter& out) override {
    const int64_t value = s.get_int("value");
    context_->run_waiting([&] {
      if (value == p_.fail_at) throw Error("wait failed at value " + std::to_string(value));
      std::unique_lock lock(mutex_);
      ++waiting_;
      met_.notify_all();
      const bool all_met =
          met_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ >= p_.together; });
      if (!all_met) {
        throw Error("only " + std::to_string(waiting_) + " of " + std::to_string(p_.together) +
                    " samples were waiting at once");
      }
    });
    out.emit(std::move(s));
  }

 private:
  Params p_;
  Context* context_ = nullptr;
  std::mutex mutex_;
  std::condition_variable met_;
  int64_t waiting_ = 0;  // samples that have reached the wait, never lowered
};

struct FailAtParams {
  int64_t at = 0;
  std::string message_file;
  template <class V>
  void visit(V& v) {
    v("at", at, "Throw on the sample whose value equals this.");
    v("message_file", message_file,
      "Throw this file's bytes as the message instead (error text quoting a damaged file).");
  }
};

class FailAtStage final : public Stage {
 public:
  static constexpr std::string_view kType = "FailAt";
  static constexpr std::string_view kSummary = "Test stage: throws on one value.";
  using Params = FailAtParams;
  explicit FailAtStage(Params p) : p_(p) {}
  void declare(Contract& c) const override {
    c.reads("value", FieldType::kInt);
    c.concurrency(Concurrency::unlimited());
  }
  void process(Sample s, Emitter& out) override {
    if (s.get_int("value") == p_.at && !p_.message_file.empty()) {
      std::ifstream in(p_.message_file, std::ios::binary);
      throw Error(std::string(std::istreambuf_iterator<char>(in), {}));
    }
    if (s.get_int("value") == p_.at) throw Error("corrupt input at value " + std::to_string(p_.at));
    out.emit(std::move(s));
  }

 private:
  Params p_;
};

struct ExpandParams {
  int64_t copies = 2;
  template <class V>
  void visit(V& v) {
    v("copies", copies, "Samples emitted per input (0 filters everything).", Min{0});
  }
};

class ExpandStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Expand";
  static constexpr std::string_view kSummary = "Test stage: emits N copies with field copy.";
  using Params = ExpandParams;
  explicit ExpandStage(Params p) : p_(p) {}
  void declare(Contract& c) const override {
    c.writes("copy", FieldType::kInt);
    c.concurrency(Concurrency::unlimited());
  }
  void process(Sample s, Emitter& out) override {
    for (int64_t k = 0; k < p_.copies; ++k) {
      Sample copy = s;
      copy.set("copy", k);
      out.emit(std::move(copy));
    }
  }

 private:
  Params p_;
};

struct BatchParams {
  int64_t size = 4;
  template <class V>
  void visit(V& v) {
    v("size", size, "Values per batch.", Min{1});
  }
};

// Order-sensitive: groups `value`s into a Json array in arrival order; close() flushes the rest.
class BatchStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Batch";
  static constexpr std::string_view kSummary = "Test stage: groups values in order.";
  using Params = BatchParams;
  explicit BatchStage(Params p) : p_(p) {}
  void declare(Contract& c) const override {
    c.reads("value", FieldType::kInt);
    c.removes("value");
    c.writes("values", FieldType::kJson);
    c.order_sensitive();
    c.batches();
  }
  void process(Sample s, Emitter& out) override {
    values_.push_back(s.get_int("value"));
    if (static_cast<int64_t>(values_.size()) == p_.size) flush(out);
  }
  void close(Emitter& out) override {
    if (!values_.empty()) flush(out);
  }

 private:
  void flush(Emitter& out) {
    Sample batch("batch:" + std::to_string(batches_++));
    batch.set("values", values_);
    values_ = nlohmann::json::array();
    out.emit(std::move(batch));
  }
  Params p_;
  nlohmann::json values_ = nlohmann::json::array();
  int64_t batches_ = 0;
};

struct TagParams {
  std::string field = "tag";
  std::string value = "x";
  template <class V>
  void visit(V& v) {
    v("field", field, "String field to write.", NonEmpty{});
    v("value", value, "Its value.");
  }
};

class TagStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Tag";
  static constexpr std::string_view kSummary = "Test stage: writes a String field.";
  using Params = TagParams;
  explicit TagStage(Params p) : p_(std::move(p)) {}
  void declare(Contract& c) const override {
    c.writes(p_.field, FieldType::kString);
    c.concurrency(Concurrency::unlimited());
  }
  void process(Sample s, Emitter& out) override {
    s.set(p_.field, p_.value);
    out.emit(std::move(s));
  }

 private:
  Params p_;
};

struct ProbeParams {
  nlohmann::json reads = nlohmann::json::object();
  nlohmann::json writes = nlohmann::json::object();
  double ratio = 0.5;
  std::string mode = "fast";
  std::vector<std::string> cameras;
  template <class V>
  void visit(V& v) {
    v("reads", reads, "Fields read: {name: Type}.");
    v("writes", writes, "Fields written: {name: Type}.");
    v("ratio", ratio, "A bounded number.", Min{0.0}, Max{1.0});
    v("mode", mode, "A choice.", OneOf{"fast", "slow"});
    v("cameras", cameras, "A list of choices.", OneOf{"cam_high", "cam_left_wrist"});
  }
};

// Declares whatever contract its params say; passes samples through.
class ProbeStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Probe";
  static constexpr std::string_view kSummary = "Test stage: declares a contract from params.";
  using Params = ProbeParams;
  explicit ProbeStage(Params p) : p_(std::move(p)) {}
  void declare(Contract& c) const override {
    for (auto it = p_.reads.begin(); it != p_.reads.end(); ++it) {
      c.reads(it.key(), parse_type(it.value().get<std::string>()));
    }
    for (auto it = p_.writes.begin(); it != p_.writes.end(); ++it) {
      c.writes(it.key(), parse_type(it.value().get<std::string>()));
    }
  }
  void process(Sample s, Emitter& out) override { out.emit(std::move(s)); }

 private:
  Params p_;
};

struct NoParams {
  template <class V>
  void visit(V&) {}
};

class InFlightExitStage final : public Stage {
 public:
  static constexpr std::string_view kType = "InFlightExit";
  static constexpr std::string_view kSummary = "Test stage: ends an InFlightProbe span.";
  using Params = NoParams;
  explicit InFlightExitStage(Params) {}
  void declare(Contract& c) const override { c.concurrency(Concurrency::unlimited()); }
  void process(Sample s, Emitter& out) override {
    // A batch ends the span of every item in it.
    InFlightProbe::live -= s.has("values") ? static_cast<int64_t>(s.get_json("values").size()) : 1;
    out.emit(std::move(s));
  }
};

struct LossParams {
  int64_t spin = 0;
  template <class V>
  void visit(V& v) {
    v("spin", spin, "Busy-loop iterations per item (a CPU-bound stage, no sleep).", Min{0});
  }
};

// A stand-in training step: serial, writes loss = 1 / (1 + value) (value: the Int field, or the
// first of a batch's "values") and reports it as the scalar "loss", as TrainStep does.
class LossStage final : public Stage {
 public:
  static constexpr std::string_view kType = "Loss";
  static constexpr std::string_view kSummary = "Test stage: a serial step writing a Double loss.";
  using Params = LossParams;
  explicit LossStage(Params p) : p_(p) {}
  void declare(Contract& c) const override {
    c.writes("loss", FieldType::kDouble);
    c.order_sensitive();
  }
  void open(Context& context) override { context_ = &context; }
  void process(Sample s, Emitter& out) override {
    volatile uint64_t sink = 0;
    for (int64_t k = 0; k < p_.spin; ++k) sink = sink + uint64_t(k) * 2654435761u;
    const int64_t value =
        s.has("values") ? s.get_json("values").at(0).get<int64_t>() : s.get_int("value");
    const double loss = 1.0 / double(1 + value);
    s.set("loss", loss);
    context_->report_scalar("loss", loss);
    out.emit(std::move(s));
  }

 private:
  Params p_;
  Context* context_ = nullptr;
};

struct TraceSpansParams {
  std::string track = "device";
  template <class V>
  void visit(V& v) {
    v("track", track, "Track the slices go on.", NonEmpty{});
  }
};

// Puts a slice on its own trace track per item, as TrainStep does with a step's CUDA-event time:
// the n-th item's slice is named "step n" and lasts n ms from when process() is called.
class TraceSpansStage final : public Stage {
 public:
  static constexpr std::string_view kType = "TraceSpans";
  static constexpr std::string_view kSummary =
      "Test stage: a serial step putting an n ms slice \"step n\" on its own trace track.";
  using Params = TraceSpansParams;
  explicit TraceSpansStage(Params p) : p_(std::move(p)) {}
  void declare(Contract& c) const override { c.order_sensitive(); }
  void open(Context& context) override { context_ = &context; }
  void process(Sample s, Emitter& out) override {
    const int64_t n = ++items_;
    const auto duration = std::chrono::milliseconds(n);
    context_->trace_span(p_.track, "step " + std::to_string(n), Clock::now(), duration);
    out.emit(std::move(s));
  }

 private:
  Params p_;
  const Context* context_ = nullptr;
  int64_t items_ = 0;
};

}  // namespace

void add_test_stages(StageRegistry& r) {
  r.add<CountSource>();
  r.add<IncrementStage>();
  r.add<DelayStage>();
  r.add<WaitTogetherStage>();
  r.add<FailAtStage>();
  r.add<ExpandStage>();
  r.add<BatchStage>();
  r.add<TagStage>();
  r.add<ProbeStage>();
  r.add<InFlightExitStage>();
  r.add<LossStage>();
  r.add<TraceSpansStage>();
}

const StageRegistry& test_registry() {
  static const StageRegistry registry = [] {
    StageRegistry r;
    add_test_stages(r);
    return r;
  }();
  return registry;
}

}  // namespace wam::testing
