#include "wam/graph_view.h"

#include <gtest/gtest.h>

#include <fstream>

#include "testing/temp_dir.h"
#include "testing/test_stages.h"

namespace wam {
namespace {

using nlohmann::json;

// A run's stats as `run --stats-out` writes them (only the fields the analysis reads).
json stats_with(double decode_util, double step_util, double step_starved_s) {
  return json::parse(R"({"pipeline": "robotwin", "wall_s": 10.0, "threads": 4, "nodes": [
    {"id": "sampler", "type": "EpisodeSampler", "concurrency": "serial", "inputs": [],
     "out": 400, "utilisation": 0.02, "starved_s": 0, "queue_mean": 0, "errors": 0, "skips": 0},
    {"id": "decode", "type": "VideoDecode", "concurrency": "4", "inputs": ["sampler"],
     "out": 400, "utilisation": )" +
                     std::to_string(decode_util) + R"(, "starved_s": 0.1, "queue_mean": 7.5,
     "errors": 0, "skips": 2},
    {"id": "step", "type": "TrainStep", "concurrency": "serial", "inputs": ["decode"],
     "out": 25, "utilisation": )" +
                     std::to_string(step_util) + R"(, "starved_s": )" +
                     std::to_string(step_starved_s) + R"(, "queue_mean": 0.5, "errors": 0,
     "skips": 0}]})");
}

TEST(GraphView, ADataNodeBottleneckIsNamedWithHowLongTheStepWaits) {
  GraphAnalysis g = analyse_stats(stats_with(0.97, 0.6, 3.5));
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_TRUE(g.nodes[0].source);
  EXPECT_TRUE(g.nodes[2].terminal);
  ASSERT_EQ(g.bottleneck, 1u);
  EXPECT_EQ(g.verdict,
            "decode (VideoDecode) is the bottleneck: 97% busy at concurrency 4; step waits on "
            "input 35% of the time");
  const std::string dot = annotated_dot(g);
  EXPECT_NE(
      dot.find("  \"decode\" [label=\"BOTTLENECK\\ndecode\\nVideoDecode\\nconcurrency 4, busy "
               "97%\\n40.0 items/s\\n2 skipped, 0 errors\", fillcolor=\"0.010 0.45 1.000\", "
               "color=\"red\", penwidth=3, fontname=\"Helvetica-Bold\"];\n"),
      std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  \"step\" [label=\"step\\nTrainStep\\nserial, busy 60%\\n2.5 items/s\", "
                     "fillcolor=\"0.133 0.45 1.000\"];\n"),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  \"sampler\" -> \"decode\" [label=\"40.0/s, queue 7.5\"];\n"),
            std::string::npos)
      << dot;
  EXPECT_NE(dot.find("  \"decode\" -> \"step\" [label=\"40.0/s, queue 0.5\"];\n"),
            std::string::npos)
      << dot;
  EXPECT_EQ(dot.find("penwidth", dot.find("\"step\" [label")), std::string::npos);
}

TEST(GraphView, AStepBottleneckGivesTheDataPathsHeadroom) {
  GraphAnalysis g = analyse_stats(stats_with(0.32, 0.98, 0.1));
  ASSERT_EQ(g.bottleneck, 2u);
  EXPECT_EQ(g.verdict,
            "the step (step: TrainStep) is the bottleneck: 98% busy; the data path has 3.1x "
            "headroom (its busiest node is 32% busy)");
}

// A compiled step's run: open() and the first batch take 9 s, the first step (graph capture) 3 s;
// the step emits its first item in the 12th second, then is 90% busy.
json long_first_step_stats() {
  std::ifstream in(std::string(WAM_GOLDEN_DIR) + "/long_first_step_stats.json");
  return json::parse(in);
}

TEST(GraphView, TheVerdictLeavesOutTheWarmUpBeforeTheStepsFirstOutput) {
  GraphAnalysis g = analyse_stats(long_first_step_stats());
  EXPECT_DOUBLE_EQ(g.warmup_s, 12.0);
  ASSERT_EQ(g.bottleneck, 2u);
  EXPECT_EQ(g.verdict,
            "the step (step: TrainStep) is the bottleneck: 90% busy; the data path has 1.7x "
            "headroom (its busiest node is 60% busy); warm-up left out: the first 12.0 s, until "
            "step's first output");
  // The 8 s after the warm-up: busy over the workers each bucket allowed, starved, items/s.
  EXPECT_NEAR(g.nodes[1].utilisation, 9.6 / 16.0, 1e-12);
  EXPECT_NEAR(g.nodes[2].utilisation, 7.2 / 8.0, 1e-12);
  EXPECT_NEAR(g.nodes[2].starved, 0.8 / 8.0, 1e-12);
  EXPECT_NEAR(g.nodes[2].items_per_s, 16.0 / 8.0, 1e-12);
  EXPECT_NEAR(g.nodes[1].queue_mean, 0.5, 1e-12);

  // Over the whole run the wait for the first batch and the capture would name decode instead.
  json totals_only = long_first_step_stats();
  totals_only.erase("series");
  GraphAnalysis whole = analyse_stats(totals_only);
  EXPECT_EQ(whole.warmup_s, 0.0);
  EXPECT_EQ(whole.verdict,
            "decode (VideoDecode) is the bottleneck: 54% busy at concurrency auto, 2 at the end; "
            "step waits on input 49% of the time");
}

TEST(GraphView, StatsLayOverThePipelinesShapeAndRejectOtherJson) {
  testing::TempDir dir;
  ValidatedPipeline pipeline = load_pipeline(dir.write("p.json", R"({"version": 1,
    "name": "robotwin", "nodes": [
    {"id": "sampler", "type": "Count"},
    {"id": "decode", "type": "Delay", "inputs": ["sampler"], "concurrency": 4},
    {"id": "step", "type": "Loss", "inputs": ["decode"]}]})"),
                                             {}, testing::test_registry());
  GraphAnalysis shape = graph_of(pipeline);
  EXPECT_FALSE(shape.bottleneck);
  EXPECT_NE(annotated_dot(shape).find("  \"decode\" [label=\"decode\\nDelay\\nconcurrency 4\"];"),
            std::string::npos);
  GraphAnalysis g = analyse_stats(stats_with(0.97, 0.6, 3.5), shape);
  EXPECT_EQ(g.nodes[1].type, "Delay");
  EXPECT_EQ(g.bottleneck, 1u);
  try {
    analyse_stats(json{{"nodes", 3}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "not the statistics of a run (expected the JSON of `run --stats-out`)");
  }
}

}  // namespace
}  // namespace wam
