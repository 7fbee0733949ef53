// What runs show of themselves: stats time series, Chrome traces.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "testing/temp_dir.h"
#include "testing/test_stages.h"
#include "wam/live_view.h"
#include "wam/runner.h"
#include "wam/trace.h"

namespace wam {
namespace {

using nlohmann::json;
using testing::TempDir;

RunResult run_text(const std::string& text, const std::vector<std::string>& overrides,
                   RunOptions options = {}) {
  TempDir dir;
  ValidatedPipeline pipeline =
      load_pipeline(dir.write("p.json", text), {overrides}, testing::test_registry());
  options.log = [](const std::string&) {};
  return run_pipeline(pipeline, options);
}

const char* kTraining = R"({"version": 1, "name": "training", "nodes": [
  {"id": "source", "type": "Count", "params": {"count": 200}},
  {"id": "delay", "type": "Delay", "inputs": ["source"], "params": {"max_us": 300}},
  {"id": "plus", "type": "Increment", "inputs": ["delay"], "params": {"by": 1000}},
  {"id": "batch", "type": "Batch", "inputs": ["plus"], "params": {"size": 16}},
  {"id": "step", "type": "Loss", "inputs": ["batch"]}]})";

class RunView : public ::testing::TestWithParam<int> {
 protected:
  std::string threads() const { return "settings.threads=" + std::to_string(GetParam()); }
};

TEST_P(RunView, SeriesSumToTheTotalsAndCarryEveryStepsLoss) {
  RunResult r = run_text(kTraining, {threads()});
  ASSERT_FALSE(r.error) << r.error->what();
  const RunSeries& series = r.stats.series;
  ASSERT_EQ(series.nodes.size(), 5u);
  ASSERT_FALSE(series.t.empty());
  EXPECT_EQ(series.bucket_s, 1.0);
  EXPECT_NEAR(series.t.back(), r.stats.wall_s, 0.2);
  EXPECT_TRUE(std::is_sorted(series.t.begin(), series.t.end()));
  const std::vector<int64_t> expected_out = {200, 200, 200, 13, 13};
  for (size_t i = 0; i < series.nodes.size(); ++i) {
    const NodeSeries& node = series.nodes[i];
    ASSERT_EQ(node.items.size(), series.t.size());
    ASSERT_EQ(node.busy_s.size(), series.t.size());
    ASSERT_EQ(node.queue.size(), series.t.size());
    EXPECT_EQ(r.stats.nodes[i].out, expected_out[i]) << r.stats.nodes[i].id;
    EXPECT_EQ(std::accumulate(node.items.begin(), node.items.end(), int64_t(0)), expected_out[i])
        << r.stats.nodes[i].id;
    EXPECT_NEAR(std::accumulate(node.busy_s.begin(), node.busy_s.end(), 0.0),
                r.stats.nodes[i].busy_s, 1e-9)
        << r.stats.nodes[i].id;
    ASSERT_EQ(node.starved_s.size(), series.t.size());
    EXPECT_NEAR(std::accumulate(node.starved_s.begin(), node.starved_s.end(), 0.0),
                r.stats.nodes[i].starved_s, 1e-9)
        << r.stats.nodes[i].id;
  }
  // One loss per step, in step order: 1 / (1 + the batch's first value).
  ASSERT_EQ(series.loss.size(), 13u);
  for (size_t k = 0; k < 13; ++k) {
    EXPECT_EQ(series.loss_step[k], int64_t(k + 1));
    EXPECT_DOUBLE_EQ(series.loss[k], 1.0 / double(1 + 1000 + 16 * int64_t(k)));
  }
  EXPECT_TRUE(std::is_sorted(series.loss_t.begin(), series.loss_t.end()));

  const json stats = r.stats.to_json();
  EXPECT_EQ(stats["series"]["bucket_s"], 1.0);
  EXPECT_EQ(stats["series"]["nodes"]["plus"]["items"].get<std::vector<int64_t>>(),
            series.nodes[2].items);
  EXPECT_EQ(stats["series"]["loss"]["step"].size(), 13u);
  EXPECT_EQ(stats["series"]["loss"]["value"][0], 1.0 / 1001.0);
}

// Reports the Int field "value" as the scalar "value_seen", and writes a Double field "loss" that
// it does not report: the runner reads scalars from Context::report_scalar only.
struct NoParams {
  template <class V>
  void visit(V&) {}
};
class ReportValue final : public Stage {
 public:
  static constexpr std::string_view kType = "ReportValue";
  static constexpr std::string_view kSummary = "Test stage: reports the value as a scalar.";
  using Params = NoParams;
  explicit ReportValue(Params) {}
  void declare(Contract& c) const override {
    c.reads("value", FieldType::kInt);
    c.writes("loss", FieldType::kDouble);
    c.order_sensitive();
  }
  void open(Context& context) override { context_ = &context; }
  void process(Sample s, Emitter& out) override {
    context_->report_scalar("value_seen", double(s.get_int("value")));
    s.set("loss", 0.5);
    out.emit(std::move(s));
  }

 private:
  Context* context_ = nullptr;
};

TEST_P(RunView, StagesReportScalarsByNameAndSampleFieldsAreNotScalars) {
  StageRegistry registry = testing::test_registry();
  registry.add<ReportValue>();
  TempDir dir;
  ValidatedPipeline pipeline = load_pipeline(dir.write("p.json", R"({"version": 1, "name": "r",
    "nodes": [{"id": "source", "type": "Count", "params": {"count": 5}},
              {"id": "report", "type": "ReportValue", "inputs": ["source"]}]})"),
                                             {{threads()}}, registry);
  RunOptions options;
  options.log = [](const std::string&) {};
  const RunResult r = run_pipeline(pipeline, options);
  ASSERT_FALSE(r.error) << r.error->what();
  EXPECT_TRUE(r.stats.series.loss.empty());
  ASSERT_EQ(r.stats.series.scalars.count("value_seen"), 1u);
  const RunSeries::Scalar& seen = r.stats.series.scalars.at("value_seen");
  EXPECT_EQ(seen.step, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(seen.value, (std::vector<double>{0, 1, 2, 3, 4}));
  const json stats = r.stats.to_json();
  EXPECT_EQ(stats["series"]["scalars"]["value_seen"]["value"], json({0, 1, 2, 3, 4}));
  EXPECT_EQ(stats["series"]["loss"]["value"], json::array());
}

TEST_P(RunView, TraceHasATrackPerNodeStepSlicesAndCounters) {
  RunOptions options;
  options.trace = TraceOptions{};
  RunResult r = run_text(kTraining, {threads()}, options);
  ASSERT_FALSE(r.error) << r.error->what();
  const json& events = r.trace.at("traceEvents");
  ASSERT_TRUE(events.is_array());
  std::set<std::string> processes, counters;
  std::map<int, int> slices_per_pid;
  std::vector<std::string> step_names;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(ph == "M" || ph == "X" || ph == "C") << e.dump();
    ASSERT_TRUE(e.at("pid").is_number_integer());
    if (ph == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"]);
    if (ph == "C") {
      ASSERT_TRUE(e.at("ts").is_number());
      counters.insert(e["name"]);
    }
    if (ph == "X") {
      ASSERT_TRUE(e.at("ts").is_number_integer());
      ASSERT_GE(e.at("dur").get<int64_t>(), 1);
      ASSERT_TRUE(e.at("tid").is_number_integer());
      ++slices_per_pid[e["pid"].get<int>()];
      if (e["pid"] == 5) step_names.push_back(e["name"]);
    }
  }
  EXPECT_EQ(processes, (std::set<std::string>{"source: Count", "delay: Delay", "plus: Increment",
                                              "batch: Batch", "step: Loss"}));
  EXPECT_EQ(counters, (std::set<std::string>{"queue depth", "in flight", "items/s"}));
  EXPECT_EQ(slices_per_pid[1], 200);  // the source's next() calls
  EXPECT_EQ(slices_per_pid[2], 200);
  EXPECT_EQ(slices_per_pid[4], 200);  // the batcher ran once per item (12 + 1 emitted)
  ASSERT_EQ(step_names.size(), 13u);
  std::sort(step_names.begin(), step_names.end());
  EXPECT_EQ(step_names.front(), "step 1");
  EXPECT_EQ(std::count(step_names.begin(), step_names.end(), "step 13"), 1);
  // The dump parses back as JSON.
  EXPECT_EQ(json::parse(r.trace.dump()), r.trace);
}

TEST_P(RunView, TraceStaysWithinItsBoundOnALongRunAndStillCoversIt) {
  RunOptions options;
  options.trace = TraceOptions{64, 8};
  RunResult r = run_text(R"({"version": 1, "name": "long", "nodes": [
    {"id": "source", "type": "Count", "params": {"count": 20000}},
    {"id": "plus", "type": "Increment", "inputs": ["source"]},
    {"id": "step", "type": "Loss", "inputs": ["plus"], "params": {"spin": 200}}]})",
                         {threads()}, options);
  ASSERT_FALSE(r.error) << r.error->what();
  const std::string text = r.trace.dump();
  EXPECT_LE(text.size(), TraceRecorder::size_bound(3, *options.trace));
  std::map<int, std::vector<int64_t>> seqs;
  for (const auto& e : r.trace["traceEvents"]) {
    if (e["ph"] == "X") seqs[e["pid"].get<int>()].push_back(e["args"]["seq"].get<int64_t>());
  }
  for (int pid = 1; pid <= 3; ++pid) {
    auto& s = seqs[pid];
    EXPECT_LT(s.size(), 64u) << pid;
    EXPECT_GE(s.size(), 32u) << pid;
    std::sort(s.begin(), s.end());
    // Evenly sampled: the kept slices span the whole run.
    EXPECT_LT(s.front(), 1024) << pid;
    EXPECT_GT(s.back(), 20000 - 1024) << pid;
  }
  EXPECT_EQ(r.trace["otherData"]["slices_seen"]["step"], 20000);
  int64_t counter_events = 0;
  for (const auto& e : r.trace["traceEvents"]) counter_events += e["ph"] == "C";
  EXPECT_LE(counter_events, 8 * 3 * 3);
}

// The slices of stage track `track` under node `pid`, in the order of the trace.
std::vector<json> stage_track_slices(const json& trace, int pid, const std::string& track) {
  int64_t tid = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["pid"] == pid && e["name"] == "thread_name" &&
        e["args"]["name"] == track) {
      tid = e["tid"];
    }
  }
  std::vector<json> slices;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"] == pid && e["tid"] == tid) slices.push_back(e);
  }
  return slices;
}

TEST_P(RunView, AStagesOwnSlicesGoOnItsNamedTrackUnderItsNode) {
  const char* pipeline = R"({"version": 1, "name": "spans", "nodes": [
    {"id": "source", "type": "Count", "params": {"count": 30}},
    {"id": "delay", "type": "Delay", "inputs": ["source"], "params": {"max_us": 200}},
    {"id": "step", "type": "TraceSpans", "inputs": ["delay"]}]})";
  RunOptions options;
  options.trace = TraceOptions{};
  RunResult r = run_text(pipeline, {threads()}, options);
  ASSERT_FALSE(r.error) << r.error->what();
  const std::vector<json> slices = stage_track_slices(r.trace, 3, "device");
  ASSERT_EQ(slices.size(), 30u) << r.trace.dump();
  for (size_t k = 0; k < slices.size(); ++k) {
    EXPECT_EQ(slices[k]["name"], "step " + std::to_string(k + 1));
    EXPECT_EQ(slices[k]["dur"], 1000 * int64_t(k + 1));
    EXPECT_GE(slices[k]["ts"].get<int64_t>(), 0);
  }
  // Apart from the node's worker tracks, whose slices are the process() calls.
  int64_t worker_slices = 0;
  for (const auto& e : r.trace["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"] == 3 && e["tid"] != slices[0]["tid"]) {
      EXPECT_TRUE(e["args"].contains("seq")) << e.dump();
      ++worker_slices;
    }
  }
  EXPECT_EQ(worker_slices, 30);
  EXPECT_EQ(r.trace["otherData"]["stage_slices_seen"], json::parse(R"({"step": {"device": 30}})"));
  EXPECT_EQ(json::parse(r.trace.dump()), r.trace);

  // Without a trace the calls do nothing, and the run is the same.
  RunResult untraced = run_text(pipeline, {threads()});
  ASSERT_FALSE(untraced.error) << untraced.error->what();
  EXPECT_TRUE(untraced.trace.is_null());
  EXPECT_EQ(untraced.stats.nodes[2].out, 30);
}

TEST_P(RunView, AStagesOwnTrackIsThinnedLikeTheNodesSlices) {
  RunOptions options;
  options.trace = TraceOptions{64, 8};
  RunResult r = run_text(R"({"version": 1, "name": "long spans", "nodes": [
    {"id": "source", "type": "Count", "params": {"count": 5000}},
    {"id": "step", "type": "TraceSpans", "inputs": ["source"], "params": {"track": "gpu"}}]})",
                         {threads()}, options);
  ASSERT_FALSE(r.error) << r.error->what();
  EXPECT_LE(r.trace.dump().size(), TraceRecorder::size_bound(2, *options.trace));
  const std::vector<json> slices = stage_track_slices(r.trace, 2, "gpu");
  EXPECT_LT(slices.size(), 64u);
  EXPECT_GE(slices.size(), 32u);
  // Every 2^k-th kept, from the first: "step 1", "step 1 + 2^k"... spanning the run.
  std::vector<int64_t> steps;
  for (const auto& s : slices) {
    const std::string name = s["name"];
    ASSERT_EQ(name.rfind("step ", 0), 0u) << name;
    const int64_t n = std::stoll(name.substr(5));
    EXPECT_EQ(s["dur"], 1000 * n);
    steps.push_back(n);
  }
  ASSERT_GE(steps.size(), 2u);
  const int64_t gap = steps[1] - steps[0];
  EXPECT_EQ(steps[0], 1);
  for (size_t k = 1; k < steps.size(); ++k) EXPECT_EQ(steps[k] - steps[k - 1], gap);
  EXPECT_GT(steps.back(), 5000 - 2 * gap);
  EXPECT_EQ(r.trace["otherData"]["stage_slices_seen"]["step"]["gpu"], 5000);
}

INSTANTIATE_TEST_SUITE_P(SerialAndParallel, RunView, ::testing::Values(1, 4),
                         [](const auto& info) { return "threads" + std::to_string(info.param); });

RunSnapshot at(double t, std::vector<int64_t> out, std::vector<double> busy,
               std::vector<int64_t> queued) {
  RunSnapshot s;
  s.elapsed_s = t;
  for (size_t i = 0; i < out.size(); ++i) {
    NodeSnapshot n;
    n.out = out[i];
    n.busy_s = busy[i];
    n.queued = queued[i];
    n.concurrency = 2;
    s.nodes.push_back(n);
  }
  return s;
}

TEST(SeriesRecorder, BucketsEverySecondAndMergesPairsPastTheLimit) {
  SeriesRecorder recorder(1, 1.0, /*max_buckets=*/4);
  recorder.sample(at(0.5, {3}, {0.25}, {2}));
  recorder.sample(at(0.9, {5}, {0.5}, {4}));
  recorder.sample(at(1.1, {6}, {0.75}, {0}));  // closes [0, 1.1): 6 items, queue (2 + 4) / 2
  recorder.sample(at(2.0, {10}, {1.0}, {1}));  // closes [1.1, 2.0): 4 items, queue 0
  recorder.sample(at(2.5, {12}, {1.5}, {3}));
  RunSeries series = recorder.finish(at(2.7, {13}, {1.75}, {9}));
  EXPECT_EQ(series.t, (std::vector<double>{1.1, 2.0, 2.7}));
  EXPECT_EQ(series.nodes[0].items, (std::vector<int64_t>{6, 4, 3}));
  EXPECT_EQ(series.nodes[0].busy_s, (std::vector<double>{0.75, 0.25, 0.75}));
  EXPECT_EQ(series.nodes[0].queue, (std::vector<double>{3.0, 0.0, 2.0}));

  SeriesRecorder merging(1, 1.0, /*max_buckets=*/4);
  for (int k = 1; k <= 5; ++k) merging.sample(at(k, {10 * k}, {double(k)}, {k}));
  RunSeries merged = merging.finish(at(5.5, {51}, {5.5}, {0}));
  // Four 1 s buckets became two of 2 s at t = 4; then [4, 5.5) closes as the third.
  EXPECT_EQ(merged.bucket_s, 2.0);
  EXPECT_EQ(merged.t, (std::vector<double>{2.0, 4.0, 5.5}));
  EXPECT_EQ(merged.nodes[0].items, (std::vector<int64_t>{20, 20, 11}));
}

TEST(SeriesRecorder, KeepsEveryOtherLossPointPastTheLimit) {
  SeriesRecorder recorder(1, 1.0, 4, /*max_loss_points=*/4);
  for (int k = 1; k <= 9; ++k) recorder.add_loss(0.1 * k, 1.0 / k);
  RunSeries series = recorder.finish(at(1.0, {0}, {0.0}, {0}));
  EXPECT_EQ(series.loss_step, (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(series.loss, (std::vector<double>{1.0, 0.2, 1.0 / 9}));
  EXPECT_EQ(series.loss_count, 9);
  EXPECT_EQ(series.loss_last, 1.0 / 9);

  // The last value thinning leaves out is kept apart for the summary.
  recorder.add_loss(1.0, 0.1);
  series = recorder.finish(at(1.0, {0}, {0.0}, {0}));
  EXPECT_EQ(series.loss_step, (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(series.loss_count, 10);
  EXPECT_EQ(series.loss_last, 0.1);
}

RunSnapshot live_snapshot(double t, int64_t steps, int64_t decoded, double decode_busy,
                          double step_starved) {
  RunSnapshot s;
  s.elapsed_s = t;
  s.threads = 4;
  s.steps = steps;
  s.steps_target = 100;
  s.loss = 0.5 / (1 + steps);
  NodeSnapshot source{"sampler", "EpisodeSampler", 0, decoded + 2};
  NodeSnapshot decode{"decode", "VideoDecode", decoded + 2, decoded, 0, 1};
  decode.busy_s = decode_busy;
  decode.queued = 2;
  decode.active = 3;
  decode.concurrency = 3;
  NodeSnapshot step{"step", "TrainStep", steps, steps, 2};
  step.starved_s = step_starved;
  step.terminal = true;
  s.nodes = {source, decode, step};
  return s;
}

TEST(LiveView, FramesShowRatesSinceThePreviousFrame) {
  LiveView view("robotwin_online");
  view.frame(live_snapshot(10, 20, 40, 27, 2), int64_t(3) << 30);
  const std::vector<std::string> lines =
      view.frame(live_snapshot(12, 24, 48, 33, 3), int64_t(3) << 30);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0],
            "robotwin_online  [12s]  step 24/100 (2.00/s)  4.0 samples/s  loss 0.0200  ETA 38s  "
            "CUDA 3.00 GiB");
  EXPECT_EQ(lines[1],
            "node             type                 items/s  busy% starved%  queue in flight  conc "
            " skips errors");
  EXPECT_EQ(lines[2],
            "sampler          EpisodeSampler           4.0      0        0      0         0     1 "
            "     0      0");
  EXPECT_EQ(lines[3],
            "decode           VideoDecode              4.0    100        0      2         3     3 "
            "     1      0");
  EXPECT_EQ(lines[4],
            "step             TrainStep                2.0      0       50      0         0     1 "
            "     0      2");
}

TEST(LiveView, RedrawsInPlaceAndErases) {
  LiveView view("p");
  EXPECT_EQ(view.redraw({"a", "bb"}), "\ra\x1b[K\nbb\x1b[K\n");
  EXPECT_EQ(view.redraw({"c", "dddd"}, 3), "\r\x1b[2Ac\x1b[K\nddd\x1b[K\n");
  EXPECT_EQ(view.redraw({"e"}), "\r\x1b[2Ae\x1b[K\n\x1b[J");
  EXPECT_EQ(view.erase(), "\r\x1b[1A\x1b[J");
  EXPECT_EQ(view.erase(), "");
  EXPECT_EQ(LiveView::duration(3725), "1h02m");
  EXPECT_EQ(LiveView::duration(185), "3m05s");
}

}  // namespace
}  // namespace wam
