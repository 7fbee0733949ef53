// The only file that includes the oneTBB flow graph.
//
// Graph shape: input_node(source) -> limiter_node(max_in_flight) -> ... Every stage node is a
// multifunction_node over Packets: the samples one source item became at that point, tagged with
// the source sequence number. Packets stay dense (a skipped or filtered item leaves an empty
// packet), so a sequencer_node can restore source order before order-sensitive stages and joins can
// match inputs by sequence number. Terminal nodes return the limiter's credit once every terminal
// has finished an item, so at most max_in_flight source items are inside the graph at any time.
// A batching node passes its absorbed items' credits to the batch it emits: an item inside a
// batch still counts until the batch leaves the graph (CreditLedger keeps that account).
// The host memory budget (wam/host_memory.h) holds back part of the limiter's credits: it starts
// at the least the graph needs and is lifted to what the budget allows once the first sample's
// size is known (it reached a batching or terminal node); the first item out prints what the
// budget allows, every stage having claimed its buffers by then.

#include "wam/runner.h"

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "credit_ledger.h"
#include "waiting_threads.h"
#include "wam/autotune.h"
#include "wam/host_memory.h"
#include "wam/limits.h"

namespace wam {
namespace {

// settings.threads, or one per core when it is 0.
int64_t worker_threads(const Settings& settings) {
  return settings.threads > 0 ? settings.threads : oneapi::tbb::info::default_concurrency();
}

namespace flow = oneapi::tbb::flow;

struct Packet {
  uint64_t seq = 0;
  size_t from = 0;  // index of the node that produced it (matches join inputs)
  std::vector<Sample> samples;
  Credits credits;
};
using PacketPtr = std::shared_ptr<Packet>;
using StageNode = flow::multifunction_node<PacketPtr, std::tuple<PacketPtr>>;

class CollectingEmitter final : public Emitter {
 public:
  explicit CollectingEmitter(std::vector<Sample>& out) : out_(out) {}
  void emit(Sample sample) override { out_.push_back(std::move(sample)); }

 private:
  std::vector<Sample>& out_;
};

size_t count_terminals(const std::vector<ValidatedNode>& nodes) {
  return static_cast<size_t>(std::count_if(
      nodes.begin(), nodes.end(), [](const ValidatedNode& n) { return n.outputs.empty(); }));
}

enum class StopReason { kNone, kSteps, kInterrupted, kFailed };

// Merges packets with equal seq from every input of a multi-input node.
class Join {
 public:
  explicit Join(std::vector<size_t> inputs) : inputs_(std::move(inputs)) {}

  // Returns the merged packet once every input delivered `packet->seq`, else null.
  PacketPtr add(const PacketPtr& packet, const std::string& node_label) {
    std::vector<PacketPtr> parts;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& slot = pending_[packet->seq];
      slot.resize(inputs_.size());
      for (size_t k = 0; k < inputs_.size(); ++k) {
        if (inputs_[k] == packet->from) slot[k] = packet;
      }
      for (const auto& part : slot) {
        if (!part) return nullptr;
      }
      parts = std::move(slot);
      pending_.erase(packet->seq);
    }
    auto merged = std::make_shared<Packet>();
    merged->seq = packet->seq;
    std::vector<const Credits*> credits;
    for (const auto& part : parts) credits.push_back(&part->credits);
    merged->credits = CreditLedger::merge(credits);
    for (const auto& part : parts) {
      if (part->samples.empty()) return merged;  // skipped on one branch: skipped here
    }
    const size_t count = parts[0]->samples.size();
    for (const auto& part : parts) {
      if (part->samples.size() != count) {
        throw Error("[" + node_label + "] inputs emitted different numbers of samples for item " +
                    std::to_string(packet->seq) + "; a join needs its inputs to emit together");
      }
    }
    for (size_t s = 0; s < count; ++s) {
      Sample sample = parts[0]->samples[s];
      for (size_t k = 1; k < parts.size(); ++k) {
        for (const auto& [name, value] : parts[k]->samples[s].fields()) {
          if (!sample.has(name)) sample.set(name, value);
        }
      }
      merged->samples.push_back(std::move(sample));
    }
    return merged;
  }

  size_t pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_.size();
  }

 private:
  std::vector<size_t> inputs_;
  mutable std::mutex mutex_;
  std::map<uint64_t, std::vector<PacketPtr>> pending_;
};

// An auto node's worker limit, moved during the run. Its TBB node may run up to the thread count
// of bodies; a body over the limit parks its packet here and returns. A body processes one item:
// its own or, when it finds a free worker, a parked one; while packets are parked it puts a wake
// (a null packet) to its node, so that a parked packet becomes a TBB task of its own. A body
// never loops over parked packets: the task its item spawns downstream runs before the wake (TBB
// runs a thread's newest task first), so a gated node does not keep both threads from the next
// stage, and a raised limit is taken up without waiting for new arrivals.
//
// The workers in use are the items the node's metrics count as being processed: a body starts its
// item with NodeMetrics::start_within(limit), under the lock that counts it anyway, so an item that
// finds a free worker costs the gate no lock or atomic write of its own (auto stays as cheap as
// unlimited). Only parking locks. No parked packet is left behind: a body that parks looks for a
// free worker after it parked, and a body that finishes an item looks for parked packets after
// its metrics counted the worker free; the metrics lock orders the two, so one sees the other.
class AutoGate {
 public:
  AutoGate(NodeMetrics& metrics, int64_t limit, Clock::time_point start)
      : metrics_(metrics), limit_(limit), since_(start) {}

  // Returns `packet` when a worker may process it now (started in the node's metrics); otherwise
  // parks it and returns a parked packet started in its place, or null.
  PacketPtr enter(PacketPtr packet) {
    // With packets parked, a newcomer queues behind them: parked packets go first.
    if (parked_count_.load() == 0 && metrics_.start_within(limit())) return packet;
    {
      std::lock_guard<std::mutex> lock(parked_mutex_);
      parked_.push_back(std::move(packet));
      parked_count_.fetch_add(1);
    }
    return take_parked();
  }
  bool has_parked() const { return parked_count_.load() > 0; }
  int64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  void set_limit(int64_t limit, Clock::time_point now) {
    std::lock_guard<std::mutex> lock(limit_mutex_);
    limit_seconds_ += double(limit_.load()) * std::chrono::duration<double>(now - since_).count();
    since_ = now;
    limit_.store(limit);
  }
  // The limit integrated over time: worker-seconds the node was allowed.
  double limit_seconds(Clock::time_point now) const {
    std::lock_guard<std::mutex> lock(limit_mutex_);
    return limit_seconds_ +
           double(limit_.load()) * std::chrono::duration<double>(now - since_).count();
  }

  // The first parked packet, started, or null when none is parked or no worker is free (a body
  // processing an item wakes another when it finishes).
  PacketPtr take_parked() {
    std::lock_guard<std::mutex> lock(parked_mutex_);
    if (parked_.empty() || !metrics_.start_within(limit())) return nullptr;
    PacketPtr next = std::move(parked_.front());
    parked_.pop_front();
    parked_count_.fetch_sub(1);
    return next;
  }

 private:
  NodeMetrics& metrics_;
  std::atomic<int64_t> limit_, parked_count_{0};
  std::mutex parked_mutex_;
  std::deque<PacketPtr> parked_;
  mutable std::mutex limit_mutex_;  // guards the integral below
  double limit_seconds_ = 0;
  Clock::time_point since_;
};

class Run {
 public:
  Run(ValidatedPipeline& pipeline, const RunOptions& options)
      : pipeline_(pipeline),
        nodes_(pipeline.nodes()),
        options_(options),
        metrics_(nodes_.size()),
        terminal_out_(nodes_.size()),
        waiting_(static_cast<size_t>(
            pipeline.settings().in_flight_limit(worker_threads(pipeline.settings())))),
        ledger_(pipeline.settings().in_flight_limit(worker_threads(pipeline.settings())),
                pipeline.file() + ":/settings/max_in_flight", count_terminals(nodes_)),
        budget_(run_budget(pipeline.settings())),
        series_(nodes_.size()) {
    log_ = options.log ? options.log : [](const std::string& line) { std::cerr << line << "\n"; };
    for (size_t i = 0; i < nodes_.size(); ++i) {
      // Without a trace, trace_span() stays a no-op; with one, the recorder exists before any
      // stage is opened (execute()).
      Context::TraceSink trace_sink;
      if (options.trace) {
        trace_sink = [this, i](const std::string& track, const std::string& name,
                               Clock::time_point begin, Clock::duration duration) {
          trace_->stage_slice(i, track, name, begin, duration);
        };
      }
      const Context::ScalarSink scalar_sink = [this](const std::string& name, double value) {
        series_.add_scalar(name, std::chrono::duration<double>(Clock::now() - start_).count(),
                           value);
      };
      const Context::WaitingRunner waiting = [this](const std::function<void()>& work) {
        waiting_.run(work);
      };
      contexts_.push_back(std::make_unique<Context>(
          nodes_[i].id, nodes_[i].type, pipeline.settings(), log_, trace_sink, scalar_sink,
          nodes_[i].on_error, &budget_, waiting));
      if (nodes_[i].inputs.size() > 1) joins_.emplace(i, std::make_unique<Join>(nodes_[i].inputs));
      for (size_t k = 0; k < terminal_out_.size(); ++k) terminal_out_[k].store(0);
    }
    find_per_sample_nodes();
  }

  RunResult execute() {
    // Validation bounds settings.threads; settings changed in code are checked here, before any
    // thread starts (an int overflow here once aborted through a joinable reporter thread).
    if (std::string error = check_thread_count(pipeline_.settings().threads); !error.empty()) {
      throw Error(pipeline_.file() + ":/settings/threads: " + error);
    }
    const int64_t threads = worker_threads(pipeline_.settings());
    oneapi::tbb::global_control parallelism(oneapi::tbb::global_control::max_allowed_parallelism,
                                            static_cast<size_t>(threads));
    threads_ = threads;
    oneapi::tbb::task_arena arena(static_cast<int>(threads));
    start_ = Clock::now();
    if (options_.on_host_memory) options_.on_host_memory(budget_);
    create_gates();
    if (options_.trace) {
      std::vector<std::string> ids, types;
      for (const auto& node : nodes_) {
        ids.push_back(node.id);
        types.push_back(node.type);
      }
      trace_ = std::make_unique<TraceRecorder>(ids, types, start_, *options_.trace);
    }
    std::thread reporter([this] { report_loop(); });
    // Stops and joins the reporter however the graph ends, an escaping exception included.
    struct ReporterStop {
      Run& run;
      std::thread& reporter;
      ~ReporterStop() {
        {
          std::lock_guard<std::mutex> lock(run.report_mutex_);
          run.finished_ = true;
        }
        run.report_cv_.notify_all();
        reporter.join();
      }
    };
    Clock::time_point end;
    {
      ReporterStop stop_reporter{*this, reporter};
      arena.execute([this] {
        if (open_all()) run_graph();
        if (stop_reason() == StopReason::kNone || stop_reason() == StopReason::kSteps) drain();
        close_source();
      });
      end = Clock::now();
    }

    RunResult result;
    const RunSnapshot last = snapshot(end);
    result.stats = collect_stats(end, threads);
    result.stats.steps = last.steps;
    result.stats.series = series_.finish(last);
    if (options_.on_tick) options_.on_tick(last);
    if (trace_) {
      trace_->counters(last);
      result.trace = trace_->to_json();
    }
    if (error_) result.error = *error_;
    if (nodes_[0].stage) result.source_state = nodes_[0].source().state();
    return result;
  }

 private:
  StopReason stop_reason() const { return stop_.load(); }
  bool stopping() const {
    return stop_.load(std::memory_order_relaxed) != StopReason::kNone ||
           (options_.interrupt && options_.interrupt->load(std::memory_order_relaxed));
  }
  void request_stop(StopReason reason) {
    StopReason expected = StopReason::kNone;
    stop_.compare_exchange_strong(expected, reason);
  }
  void fail(StageError error) {
    {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::move(error);
    }
    request_stop(StopReason::kFailed);
    if (graph_) graph_->cancel();
  }

  bool open_all() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      try {
        nodes_[i].stage->open(*contexts_[i]);
      } catch (const std::exception& e) {
        fail(StageError(nodes_[i].id, nodes_[i].type, "", "open", e.what()));
        return false;
      }
    }
    return true;
  }

  // Runs one node's stage over a packet whose item the node's metrics have started (start(), or
  // an auto node's gate); returns what it emitted (a packet, possibly empty).
  PacketPtr process_packet(size_t index, const PacketPtr& input) {
    ValidatedNode& node = nodes_[index];
    NodeMetrics& metrics = metrics_[index];
    auto output = std::make_shared<Packet>();
    output->seq = input->seq;
    output->from = index;
    output->credits = input->credits;
    const auto began = Clock::now();
    const bool sole_owner = input.use_count() == 1;
    bool dropped = false;  // a sample failed and was skipped
    if ((node.contract.is_batching() || node.outputs.empty()) && !input->samples.empty()) {
      budget_.settle();
    }
    if (!stopping()) {
      metrics.add_in(static_cast<int64_t>(input->samples.size()));
      for (auto& sample : input->samples) {
        const size_t mark = output->samples.size();
        std::string key = sample.key();
        CollectingEmitter emitter(output->samples);
        try {
          // Received samples may be shared with a fan-out sibling: move only when we own them.
          node.transform().process(sole_owner ? std::move(sample) : Sample(sample), emitter);
        } catch (const std::exception& e) {
          output->samples.resize(mark);
          dropped = true;
          if (!handle_error(index, key, "process", e.what())) break;
        }
        if (stopping()) break;
      }
    }
    if (per_sample_[index]) {
      for (const Sample& sample : output->samples)
        budget_.observe_sample(sample_host_bytes(sample));
    }
    sync_in_flight_limit();
    // A batching node keeps an absorbed item's credits until it emits a batch.
    if (node.contract.is_batching() && !input->samples.empty() && !dropped) {
      if (output->samples.empty()) {
        ledger_.absorb(index, output->seq, output->credits);
      } else {
        ledger_.hand_to_batch(index, output->credits);
      }
    }
    const auto ended = Clock::now();
    metrics.finish(ended - began);
    finish_output(index, *output);
    if (trace_ && !input->samples.empty()) {
      const bool terminal = node.outputs.empty() && !output->samples.empty();
      trace_->slice(index, began, ended, input->seq, terminal ? metrics.out() : 0);
    }
    return output;
  }

  // Applies the node's on_error policy; returns whether processing may go on.
  bool handle_error(size_t index, const std::string& key, const std::string& phase,
                    const std::string& what) {
    ValidatedNode& node = nodes_[index];
    if (node.on_error == OnError::kSkip) {
      metrics_[index].add_skip();
      int64_t shown = skips_logged_.fetch_add(1);
      if (shown < kMaxSkipLogs) {
        log_("[" + node.label() + "] skipped " + key + " (on_error: skip): " + what);
      } else if (shown == kMaxSkipLogs) {
        log_("further skipped samples are counted, not logged");
      }
      return true;
    }
    metrics_[index].add_error();
    fail(StageError(node.id, node.type, key, phase, what));
    return false;
  }

  // Counts what leaves a node; on a terminal node applies the `steps` cut and hands items out.
  void finish_output(size_t index, Packet& output) {
    if (nodes_[index].outputs.empty()) {
      const int64_t steps = pipeline_.settings().steps;
      if (steps > 0) {
        const int64_t size = static_cast<int64_t>(output.samples.size());
        const int64_t before = terminal_out_[index].fetch_add(size);
        const int64_t keep = std::max<int64_t>(0, std::min(size, steps - before));
        output.samples.resize(static_cast<size_t>(keep));
        if (before + size >= steps) request_stop(StopReason::kSteps);
      }
      if (options_.on_output) {
        std::lock_guard<std::mutex> lock(output_mutex_);
        for (const auto& sample : output.samples) options_.on_output(sample);
      }
      if (options_.on_output_counted && !output.samples.empty()) {
        std::vector<int64_t> node_outputs(nodes_.size());
        for (size_t i = 0; i < nodes_.size(); ++i) node_outputs[i] = metrics_[i].out();
        std::lock_guard<std::mutex> lock(output_mutex_);
        for (const auto& sample : output.samples) options_.on_output_counted(sample, node_outputs);
      }
    }
    metrics_[index].add_out(static_cast<int64_t>(output.samples.size()));
  }

  // A terminal finished a packet: return the credits of the items that have left the graph.
  void retire(const Packet& packet) {
    auto returned = static_cast<int64_t>(ledger_.release(packet.seq, packet.credits));
    // The first item out (not an empty packet of one a batch absorbed): every stage has claimed
    // its buffers by then, some with their first batch.
    if (returned > 0 && !budget_shown_.exchange(true)) log_(budget_.start_line());
    {
      // Credits the budget holds back are kept, not returned.
      std::lock_guard<std::mutex> lock(limit_mutex_);
      const int64_t kept = std::min(returned, withheld_);
      withheld_ -= kept;
      returned -= kept;
    }
    if (returned > 0) limiter_->decrementer().try_put(returned);
  }

  static HostMemoryBudget run_budget(const Settings& settings) {
    const int64_t threads = worker_threads(settings);
    const int64_t max = settings.in_flight_limit(threads);
    // The least that goes on: a whole batch, and a sample in hand for each worker.
    return HostMemoryBudget::for_settings(settings.host_memory_gib,
                                          settings.batch_size + 2 * threads, max, threads);
  }

  // Nodes whose outputs are single samples (no batching node on their way from the source): the
  // runner measures their samples for the budget.
  void find_per_sample_nodes() {
    per_sample_.assign(nodes_.size(), true);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < nodes_.size(); ++i) {
        bool per_sample = !nodes_[i].contract.is_batching();
        for (size_t input : nodes_[i].inputs) per_sample = per_sample && per_sample_[input];
        if (per_sample_[i] && !per_sample) {
          per_sample_[i] = false;
          changed = true;
        }
      }
    }
  }

  // Follows the budget's in-flight limit: lifting it returns held-back credits to the limiter;
  // lowering it keeps the next credits that come back (the limiter's count never goes below the
  // items inside the graph).
  void sync_in_flight_limit() {
    const int64_t target = budget_.in_flight_limit();
    if (target == applied_limit_.load()) return;
    int64_t lift = 0;
    {
      std::lock_guard<std::mutex> lock(limit_mutex_);
      const int64_t delta = target - applied_limit_.load();
      applied_limit_.store(target);
      if (delta < 0) {
        withheld_ -= delta;
      } else {
        const int64_t paid = std::min(withheld_, delta);
        withheld_ -= paid;
        lift = delta - paid;
      }
    }
    if (lift > 0 && limiter_) limiter_->decrementer().try_put(lift);
  }

  // The TBB nodes behind the pipeline's stage nodes; they must outlive wait_for_all().
  struct FlowNodes {
    explicit FlowNodes(size_t count) : stages(count), entry(count, nullptr) {}
    std::vector<std::unique_ptr<StageNode>> stages;
    std::vector<std::unique_ptr<flow::sequencer_node<PacketPtr>>> sequencers;
    std::vector<std::unique_ptr<StageNode>> joins;
    std::vector<flow::receiver<PacketPtr>*> entry;  // per node: join -> sequencer -> stage
    std::unique_ptr<flow::function_node<PacketPtr>> source_sink;
  };

  void run_graph() {
    flow::graph graph;
    graph_ = &graph;
    flow::input_node<PacketPtr> input(
        graph, [this](oneapi::tbb::flow_control& control) { return next_packet(control); });
    const int64_t max_in_flight = pipeline_.settings().in_flight_limit(threads_);
    flow::limiter_node<PacketPtr, long long> limiter(graph, static_cast<size_t>(max_in_flight));
    limiter_ = &limiter;
    // The budget starts below the settings' limit: those credits are taken before any item is.
    applied_limit_.store(budget_.in_flight_limit());
    if (max_in_flight > applied_limit_.load()) {
      limiter.decrementer().try_put(applied_limit_.load() - max_in_flight);
    }
    flow::make_edge(input, limiter);
    FlowNodes flow_nodes(nodes_.size());
    for (size_t i = 1; i < nodes_.size(); ++i) add_stage_node(graph, i, flow_nodes);
    connect(graph, limiter, flow_nodes);

    input.activate();
    try {
      graph.wait_for_all();
    } catch (const std::exception& e) {
      fail(StageError("graph", "runtime", "", "run", e.what()));
    }
    if (options_.interrupt && options_.interrupt->load()) request_stop(StopReason::kInterrupted);
    if (!stopping() && !source_exhausted_) report_stall();
    graph_ = nullptr;
    limiter_ = nullptr;
  }

  // The source node's body: the next source item as a packet, or null (and stop) at its end.
  PacketPtr next_packet(oneapi::tbb::flow_control& control) {
    ValidatedNode& source = nodes_[0];
    NodeMetrics& metrics = metrics_[0];
    if (produced_any_) metrics.add_blocked(Clock::now() - last_emit_);
    for (;;) {
      if (stopping()) {
        control.stop();
        return PacketPtr();
      }
      const auto began = Clock::now();
      std::optional<Sample> sample;
      try {
        sample = source.source().next();
      } catch (const std::exception& e) {
        metrics.add_busy(Clock::now() - began);
        if (handle_error(0, "item " + std::to_string(next_seq_), "next", e.what())) continue;
        control.stop();
        return PacketPtr();
      }
      const auto ended = Clock::now();
      metrics.add_busy(ended - began);
      if (trace_ && sample) trace_->slice(0, began, ended, next_seq_);
      if (!sample) {
        source_exhausted_ = true;
        control.stop();
        return PacketPtr();
      }
      auto packet = std::make_shared<Packet>();
      packet->seq = next_seq_++;
      packet->from = 0;
      sample->set_seq(packet->seq);
      packet->samples.push_back(std::move(*sample));
      finish_output(0, *packet);
      announce(source.outputs);
      produced_any_ = true;
      last_emit_ = Clock::now();
      return packet;
    }
  }

  // Auto nodes start with an even share of the thread budget.
  void create_gates() {
    gates_.resize(nodes_.size());
    size_t count = 0;
    for (size_t i = 1; i < nodes_.size(); ++i) count += nodes_[i].concurrency.is_auto();
    for (size_t i = 1; i < nodes_.size(); ++i) {
      if (!nodes_[i].concurrency.is_auto()) continue;
      gates_[i] =
          std::make_unique<AutoGate>(metrics_[i], initial_auto_limit(threads_, count), start_);
      auto_nodes_.push_back(i);
    }
  }

  // Node `i`'s stage, behind a sequencer when it needs source order and a join when it has several
  // inputs.
  void add_stage_node(flow::graph& graph, size_t i, FlowNodes& flow_nodes) {
    const ValidatedNode& node = nodes_[i];
    const bool parallel = node.concurrency.limit == Concurrency::kUnlimited || gates_[i];
    // An auto node's gate does the limiting: TBB spawns a task per item, as for unlimited nodes,
    // which costs less than its buffering of a limited node's items.
    const size_t concurrency =
        parallel ? size_t(flow::unlimited) : static_cast<size_t>(node.concurrency.limit);
    // A free worker takes a bounded-concurrency node's work first, later nodes (they are in
    // topological order) before earlier ones: the serial chain to the step is never starved by
    // a backlog of parallel decoding, and it holds at most one worker per node, so the parallel
    // stages keep the rest.
    const auto priority = parallel ? flow::no_priority : static_cast<flow::node_priority_t>(i);
    flow_nodes.stages[i] = std::make_unique<StageNode>(
        graph, concurrency,
        [this, i, &flow_nodes](const PacketPtr& in, StageNode::output_ports_type& ports) {
          AutoGate* gate = gates_[i].get();
          PacketPtr item = in;
          if (!in) {
            item = gate->take_parked();  // a wake
          } else if (gate && gate->limit() < threads_) {
            item = gate->enter(in);
          } else {
            metrics_[i].start();  // at the thread count the limit cannot bind
          }
          if (!item) return;
          // Packets still parked: one more body for them, which takes one if a worker is free
          // (after a raised limit) and else returns; and, once this item is done, the next,
          // put before the item goes downstream, so that the downstream task runs first.
          auto wake = [&] {
            if (gate && gate->has_parked()) flow_nodes.stages[i]->try_put(PacketPtr());
          };
          if (item != in) wake();
          PacketPtr output = process_packet(i, item);
          wake();
          forward(i, output, std::get<0>(ports));
        },
        priority);
    flow::receiver<PacketPtr>* first = flow_nodes.stages[i].get();
    if (pipeline_.settings().ordered && node.contract.is_order_sensitive()) {
      auto& sequencers = flow_nodes.sequencers;
      sequencers.push_back(std::make_unique<flow::sequencer_node<PacketPtr>>(
          graph, [](const PacketPtr& p) { return static_cast<size_t>(p->seq); }));
      flow::make_edge(*sequencers.back(), *flow_nodes.stages[i]);
      first = sequencers.back().get();
    }
    if (node.inputs.size() > 1) {
      Join* join = joins_.at(i).get();
      auto& joins = flow_nodes.joins;
      joins.push_back(std::make_unique<StageNode>(
          graph, flow::unlimited,
          [this, i, join](const PacketPtr& in, StageNode::output_ports_type& ports) {
            try {
              if (PacketPtr merged = join->add(in, nodes_[i].label())) {
                metrics_[i].arrive();
                std::get<0>(ports).try_put(merged);
              }
            } catch (const std::exception& e) {
              fail(StageError(nodes_[i].id, nodes_[i].type, "", "join", e.what()));
            }
          },
          priority));
      flow::make_edge(flow::output_port<0>(*joins.back()), *first);
      first = joins.back().get();
    }
    flow_nodes.entry[i] = first;
  }

  // Edges between stage nodes, and from the limiter to the source's outputs.
  void connect(flow::graph& graph, flow::limiter_node<PacketPtr, long long>& limiter,
               FlowNodes& flow_nodes) {
    for (size_t i = 1; i < nodes_.size(); ++i) {
      for (size_t output : nodes_[i].outputs) {
        flow::make_edge(flow::output_port<0>(*flow_nodes.stages[i]), *flow_nodes.entry[output]);
      }
    }
    if (nodes_[0].outputs.empty()) {  // `--stop-after` the source: retire
      // The source body's finish_output() already handed the samples out (once).
      flow_nodes.source_sink = std::make_unique<flow::function_node<PacketPtr>>(
          graph, flow::unlimited, [this](const PacketPtr& p) {
            retire(*p);
            return flow::continue_msg();
          });
      flow::make_edge(limiter, *flow_nodes.source_sink);
    } else {
      for (size_t output : nodes_[0].outputs) flow::make_edge(limiter, *flow_nodes.entry[output]);
    }
  }

  // Queue accounting: a join's arrival is announced once, when its inputs have merged.
  void announce(const std::vector<size_t>& outputs) {
    for (size_t output : outputs) {
      if (nodes_[output].inputs.size() == 1) metrics_[output].arrive();
    }
  }

  double slots(size_t index, int64_t threads) const {
    if (gates_[index]) return double(gates_[index]->limit());
    const int64_t limit = nodes_[index].concurrency.limit;
    return limit == Concurrency::kUnlimited ? double(threads)
                                            : double(std::min<int64_t>(limit, threads));
  }

  // Sends a node's output on, or retires it at a terminal.
  template <class Port>
  void forward(size_t index, const PacketPtr& packet, Port& port) {
    const auto& outputs = nodes_[index].outputs;
    if (outputs.empty()) {
      retire(*packet);
      return;
    }
    announce(outputs);
    port.try_put(packet);
  }

  // End of input: close() each stage in topological order and push what it flushes downstream,
  // synchronously (the graph is quiescent, so this is serial and in order).
  void drain() {
    uint64_t seq = next_seq_;
    for (size_t i = 1; i < nodes_.size(); ++i) {
      auto packet = std::make_shared<Packet>();
      packet->seq = seq++;
      packet->from = i;
      CollectingEmitter emitter(packet->samples);
      try {
        nodes_[i].transform().close(emitter);
      } catch (const std::exception& e) {
        fail(StageError(nodes_[i].id, nodes_[i].type, "", "close", e.what()));
        return;
      }
      if (packet->samples.empty()) continue;
      finish_output(i, *packet);
      if (!deliver_downstream(i, packet)) return;
    }
    for (const auto& [index, join] : joins_) {
      if (join->pending() > 0) {
        fail(StageError(nodes_[index].id, nodes_[index].type, "", "close",
                        "an input flushed samples at end of input that its other inputs did not; "
                        "a join needs its inputs to emit together"));
        return;
      }
    }
  }

  // The graph went idle with its source neither exhausted nor stopped: every credit is held by
  // items a batching node keeps for a batch it cannot complete.
  void report_stall() {
    std::vector<std::string> ids;
    for (const auto& node : nodes_) ids.push_back(node.id);
    const CreditLedger::Stall stall = ledger_.diagnose_stall(ids);
    const ValidatedNode& node = nodes_[stall.holder.value_or(0)];
    fail(StageError(node.id, node.type, "", "run", stall.message));
  }

  bool deliver_downstream(size_t index, const PacketPtr& packet) {
    for (size_t output : nodes_[index].outputs) {
      PacketPtr in = packet;
      if (nodes_[output].inputs.size() > 1) {
        try {
          in = joins_.at(output)->add(packet, nodes_[output].label());
        } catch (const std::exception& e) {
          fail(StageError(nodes_[output].id, nodes_[output].type, "", "close", e.what()));
          return false;
        }
        if (!in) continue;
      }
      metrics_[output].arrive();
      metrics_[output].start();
      PacketPtr out = process_packet(output, in);
      if (error_) return false;
      if (!deliver_downstream(output, out)) return false;
    }
    return true;
  }

  void close_source() {
    try {
      nodes_[0].source().close();
    } catch (const std::exception& e) {
      fail(StageError(nodes_[0].id, nodes_[0].type, "", "close", e.what()));
    }
  }

  // Every node's figures now.
  RunSnapshot snapshot(Clock::time_point now) const {
    RunSnapshot snap;
    snap.elapsed_s = std::chrono::duration<double>(now - start_).count();
    snap.threads = threads_;
    snap.steps_target = pipeline_.settings().steps;
    snap.loss = series_.latest_loss();
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeMetrics& m = metrics_[i];
      NodeSnapshot n;
      n.id = nodes_[i].id;
      n.type = nodes_[i].type;
      n.in = m.in();
      n.out = m.out();
      n.errors = m.errors();
      n.skips = m.skips();
      n.busy_s = m.busy_seconds();
      n.starved_s = i == 0 ? 0.0 : m.starved_seconds(now);
      n.blocked_s = m.blocked_seconds();
      n.queued = m.queued();
      n.active = m.active();
      n.concurrency = static_cast<int64_t>(slots(i, threads_));
      n.terminal = nodes_[i].outputs.empty();
      if (n.terminal) snap.steps += n.out;
      snap.nodes.push_back(std::move(n));
    }
    return snap;
  }

  // Watches for an interrupt; samples the series (and the trace's counters) at every poll; calls
  // on_tick every tick_every_s and logs a progress line every report_every_s.
  void report_loop() {
    Progress last{Clock::now(), 0, std::vector<double>(nodes_.size(), 0.0)};
    auto last_tick = Clock::now();
    std::unique_lock<std::mutex> lock(report_mutex_);
    const auto poll_interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::clamp(options_.autotune_every_s, 0.01, 0.1)));
    Window window = open_window(Clock::now());
    while (!report_cv_.wait_for(lock, poll_interval, [this] { return finished_; })) {
      if (options_.interrupt && options_.interrupt->load() && !interrupt_seen_) {
        interrupt_seen_ = true;
        request_stop(StopReason::kInterrupted);
        log_("interrupted: stopping (in-flight items are dropped)");
      }
      const auto now = Clock::now();
      const RunSnapshot snap = snapshot(now);
      series_.sample(snap);
      if (!auto_nodes_.empty()) tune(window, snap, now);
      if (trace_) trace_->counters(snap);
      if (options_.on_tick &&
          std::chrono::duration<double>(now - last_tick).count() >= options_.tick_every_s) {
        last_tick = now;
        options_.on_tick(snap);
      }
      if (options_.report_every_s <= 0) continue;
      if (std::chrono::duration<double>(now - last.at).count() < options_.report_every_s) continue;
      Progress current = progress(now);
      log_(progress_line(last, current));
      last = std::move(current);
    }
  }

  // What auto concurrency measures between two steps.
  struct Window {
    Clock::time_point began;
    std::vector<double> busy, queue_sum, active_sum;  // per auto node
    int64_t polls = 0;
  };

  Window open_window(Clock::time_point now) const {
    Window window{now,
                  {},
                  std::vector<double>(auto_nodes_.size(), 0.0),
                  std::vector<double>(auto_nodes_.size(), 0.0),
                  0};
    for (size_t i : auto_nodes_) window.busy.push_back(metrics_[i].busy_seconds());
    return window;
  }

  // Samples the auto nodes at each poll and moves their limits once a window is over.
  void tune(Window& window, const RunSnapshot& snap, Clock::time_point now) {
    for (size_t k = 0; k < auto_nodes_.size(); ++k) {
      window.queue_sum[k] += double(snap.nodes[auto_nodes_[k]].queued);
      window.active_sum[k] += double(snap.nodes[auto_nodes_[k]].active);
    }
    ++window.polls;
    const double seconds = std::chrono::duration<double>(now - window.began).count();
    if (seconds < options_.autotune_every_s) return;
    std::vector<TunedNode> measured;
    for (size_t k = 0; k < auto_nodes_.size(); ++k) {
      const size_t i = auto_nodes_[k];
      const double limit = double(gates_[i]->limit());
      // Busy time counts when an item finishes; the workers seen at work count long items too.
      const double busy = (snap.nodes[i].busy_s - window.busy[k]) / (seconds * limit);
      const double occupied = window.active_sum[k] / double(window.polls) / limit;
      measured.push_back({gates_[i]->limit(), std::max(busy, occupied),
                          window.queue_sum[k] / double(window.polls)});
    }
    const std::vector<int64_t> limits = tune_concurrency(measured, threads_);
    for (size_t k = 0; k < auto_nodes_.size(); ++k) {
      if (limits[k] != measured[k].limit) gates_[auto_nodes_[k]]->set_limit(limits[k], now);
    }
    window = open_window(now);
  }

  // What a progress line compares with the previous one.
  struct Progress {
    Clock::time_point at;
    int64_t out = 0;           // items that left the graph
    std::vector<double> busy;  // seconds, per node
  };

  Progress progress(Clock::time_point now) const {
    Progress progress{now, 0, {}};
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].outputs.empty()) progress.out += metrics_[i].out();
    }
    for (const auto& metrics : metrics_) progress.busy.push_back(metrics.busy_seconds());
    return progress;
  }

  // "[12.0 s] out 96 (8.0/s) busy%: source 3 decode 97 ...": the rates since `last`.
  std::string progress_line(const Progress& last, const Progress& now) const {
    const double interval = std::chrono::duration<double>(now.at - last.at).count();
    std::ostringstream line;
    line.setf(std::ios::fixed);
    line.precision(1);
    line << "[" << std::chrono::duration<double>(now.at - start_).count() << " s] out " << now.out
         << " (" << (now.out - last.out) / interval << "/s) busy%:";
    line.precision(0);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      // Busy time counts when an item finishes: cap an item longer than the interval at 100%,
      // as the live view does.
      line << " " << nodes_[i].id << " "
           << std::min(100.0,
                       100.0 * (now.busy[i] - last.busy[i]) / (interval * slots(i, threads_)));
    }
    return line.str();
  }

  RunStats collect_stats(Clock::time_point end, int64_t threads) {
    RunStats stats;
    stats.pipeline = pipeline_.name();
    stats.wall_s = std::chrono::duration<double>(end - start_).count();
    stats.threads = threads;
    stats.peak_rss_bytes = peak_rss_bytes();
    switch (stop_reason()) {
      case StopReason::kNone: stats.stop_reason = "exhausted"; break;
      case StopReason::kSteps: stats.stop_reason = "steps"; break;
      case StopReason::kInterrupted: stats.stop_reason = "interrupted"; break;
      case StopReason::kFailed: stats.stop_reason = "failed"; break;
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const NodeMetrics& m = metrics_[i];
      NodeStats n;
      n.id = nodes_[i].id;
      n.type = nodes_[i].type;
      n.concurrency = nodes_[i].concurrency.to_string();
      for (size_t input : nodes_[i].inputs) n.inputs.push_back(nodes_[input].id);
      n.in = m.in();
      n.out = m.out();
      n.errors = m.errors();
      n.skips = m.skips();
      n.busy_s = m.busy_seconds();
      n.utilisation = stats.wall_s > 0 ? n.busy_s / (stats.wall_s * slots(i, threads)) : 0.0;
      n.concurrency_now = static_cast<int64_t>(slots(i, threads));
      n.concurrency_mean = double(n.concurrency_now);
      if (gates_[i]) {
        const double allowed = gates_[i]->limit_seconds(end);
        n.utilisation = allowed > 0 ? n.busy_s / allowed : 0.0;
        n.concurrency_mean = stats.wall_s > 0 ? allowed / stats.wall_s : n.concurrency_mean;
      }
      n.starved_s = i == 0 ? 0.0 : m.starved_seconds(end);
      n.blocked_s = m.blocked_seconds();
      n.queue_mean = m.mean_queue_depth();
      n.queue_max = m.max_queue_depth();
      n.counters = contexts_[i]->counters();
      stats.nodes.push_back(std::move(n));
    }
    return stats;
  }

  static constexpr int64_t kMaxSkipLogs = 20;

  ValidatedPipeline& pipeline_;
  std::vector<ValidatedNode>& nodes_;
  const RunOptions& options_;
  std::function<void(const std::string&)> log_;
  std::vector<NodeMetrics> metrics_;
  std::vector<std::atomic<int64_t>> terminal_out_;
  WaitingThreads waiting_;  // before contexts_, whose run_waiting it serves
  std::vector<std::unique_ptr<Context>> contexts_;
  std::map<size_t, std::unique_ptr<Join>> joins_;
  CreditLedger ledger_;
  HostMemoryBudget budget_;
  std::vector<bool> per_sample_;  // per node, see find_per_sample_nodes()
  std::mutex limit_mutex_;        // guards withheld_ and the changes of applied_limit_
  std::atomic<int64_t> applied_limit_{0};
  int64_t withheld_ = 0;
  std::atomic<bool> budget_shown_{
      false};  // credits to keep as they come back, the budget having lowered the limit
  int64_t threads_ = 1;
  SeriesRecorder series_;
  std::unique_ptr<TraceRecorder> trace_;
  std::vector<std::unique_ptr<AutoGate>> gates_;  // per node; set for auto nodes
  std::vector<size_t> auto_nodes_;

  std::atomic<StopReason> stop_{StopReason::kNone};
  std::mutex error_mutex_;
  std::optional<StageError> error_;
  std::atomic<int64_t> skips_logged_{0};

  flow::graph* graph_ = nullptr;
  flow::limiter_node<PacketPtr, long long>* limiter_ = nullptr;
  std::mutex output_mutex_;

  uint64_t next_seq_ = 0;  // touched only by the serial source body, then by drain()
  bool produced_any_ = false;
  bool source_exhausted_ = false;  // set by the source body before the graph goes idle
  Clock::time_point last_emit_;
  Clock::time_point start_;

  std::mutex report_mutex_;
  std::condition_variable report_cv_;
  bool finished_ = false;
  bool interrupt_seen_ = false;
};

}  // namespace

RunResult run_pipeline(ValidatedPipeline& pipeline, const RunOptions& options) {
  Run run(pipeline, options);
  return run.execute();
}

}  // namespace wam
