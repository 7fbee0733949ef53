#include "wam/report.h"

#include <gtest/gtest.h>

#include <fstream>

namespace wam {
namespace {

using nlohmann::json;

json run_stats() {
  return json::parse(R"({"pipeline": "robotwin <online>", "wall_s": 3.0, "threads": 4,
    "stop_reason": "steps", "nodes": [
    {"id": "sampler", "type": "EpisodeSampler", "concurrency": "serial", "inputs": [], "in": 0,
     "out": 60, "busy_s": 0.1, "utilisation": 0.03, "starved_s": 0, "blocked_s": 2.4,
     "queue_mean": 0, "queue_max": 0, "errors": 0, "skips": 0},
    {"id": "decode", "type": "VideoDecode", "concurrency": "4", "inputs": ["sampler"], "in": 60,
     "out": 60, "busy_s": 11.64, "utilisation": 0.97, "starved_s": 0.03, "blocked_s": 0,
     "queue_mean": 6.5, "queue_max": 12, "errors": 0, "skips": 1},
    {"id": "step", "type": "TrainStep", "concurrency": "serial", "inputs": ["decode"], "in": 15,
     "out": 15, "busy_s": 1.8, "utilisation": 0.6, "starved_s": 1.05, "blocked_s": 0,
     "queue_mean": 0.2, "queue_max": 1, "errors": 0, "skips": 0}],
    "series": {"bucket_s": 1.0, "t": [1.0, 2.0, 3.0],
      "nodes": {"sampler": {"items": [20, 20, 20], "busy_s": [0, 0, 0], "queue": [0, 0, 0]},
                "decode": {"items": [18, 22, 20], "busy_s": [3.9, 3.9, 3.84],
                           "queue": [4, 8, 7.5]},
                "step": {"items": [4, 6, 5], "busy_s": [0.5, 0.7, 0.6], "queue": [0, 0.5, 0]}},
      "loss": {"step": [1, 2, 3], "t": [0.5, 1.5, 2.5], "value": [2.0, 1.5, 1.25]}}})");
}

TEST(Report, OnePageWithVerdictGraphChartsAndTable) {
  const std::string html = html_report(run_stats(), "<?xml version=\"1.0\"?>\n<svg id=\"g\"/>");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<h1>robotwin &lt;online&gt;</h1>"), std::string::npos);
  EXPECT_NE(html.find("<p class=\"verdict\" id=\"verdict\">decode (VideoDecode) is the "
                      "bottleneck: 97% busy at concurrency 4; step waits on input 35% of the "
                      "time</p>"),
            std::string::npos);
  EXPECT_NE(html.find("<div class=\"graph\">\n<svg id=\"g\"/>"), std::string::npos);
  EXPECT_EQ(html.find("<?xml"), std::string::npos);
  EXPECT_NE(html.find("<title>Throughput per node</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>Queue depth per node</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>Loss</title>"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"bottleneck\"><td>decode</td><td>VideoDecode</td><td>4</td>"
                      "<td>60</td><td>60</td><td>20.0</td><td>97</td><td>1</td><td>0</td>"
                      "<td>6.5</td><td>12</td><td>1</td><td>0</td></tr>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<tr><td>sampler</td><td>EpisodeSampler</td><td>serial</td><td>0</td>"
                      "<td>60</td><td>20.0</td><td>3</td><td>0</td><td>80</td>"),
            std::string::npos);
  // Self-contained: no script, no fetched resource.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
}

TEST(Report, SaysThatTheVerdictLeavesOutTheWarmUpAndHowLongItWas) {
  std::ifstream in(std::string(WAM_GOLDEN_DIR) + "/long_first_step_stats.json");
  const std::string html = html_report(json::parse(in), "<svg id=\"g\"/>");
  EXPECT_NE(html.find("<p class=\"verdict\" id=\"verdict\">the step (step: TrainStep) is the "
                      "bottleneck: 90% busy; the data path has 1.7x headroom (its busiest node is "
                      "60% busy); warm-up left out: the first 12.0 s, until step's first "
                      "output</p>\n<p class=\"warmup\" id=\"warmup\">The verdict and the graph "
                      "leave out the warm-up: the first 12.0 s, until the step's first output "
                      "(its first input's way through the data path, graph capture). The "
                      "charts and the summary table cover the whole run.</p>"),
            std::string::npos)
      << html;
  // The table keeps the whole run's figures, and marks the bottleneck the verdict names.
  EXPECT_NE(html.find("<tr "
                      "class=\"bottleneck\"><td>step</td><td>TrainStep</td><td>serial</td><td>26</"
                      "td><td>17</td>"
                      "<td>0.8</td><td>51</td><td>49</td>"),
            std::string::npos)
      << html;
}

TEST(Report, WithoutGraphvizTheGraphIsShownAsDot) {
  const std::string html = html_report(run_stats(), "");
  EXPECT_NE(html.find("(Graphviz's dot was not found: install graphviz to draw the graph here.)"),
            std::string::npos);
  EXPECT_NE(html.find("<pre>digraph &quot;robotwin &lt;online&gt;&quot;"), std::string::npos);
}

TEST(Report, ChartsPlotEverySeriesInsideTheirAxes) {
  const std::string svg = svg_line_chart("Rates", "seconds", "items/s", {0, 1, 2},
                                         {{"a", {0, 5, 10}}, {"b <x>", {10, 5, 0}}});
  EXPECT_NE(svg.find("<polyline class=\"series\" data-name=\"a\" fill=\"none\" "
                     "stroke=\"#1f77b4\" stroke-width=\"1.8\" points=\"60.0,220.0 325.0,128.6 "
                     "590.0,37.1 \"/>"),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find("data-name=\"b &lt;x&gt;\""), std::string::npos);
  EXPECT_NE(svg.find(">items/s</text>"), std::string::npos);
  EXPECT_NE(svg.find(">10.5</text>"), std::string::npos);  // the top of the y axis: 5% above
}

}  // namespace
}  // namespace wam
