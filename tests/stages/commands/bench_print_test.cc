#include <gtest/gtest.h>

#include <sstream>

#include "commands/bench.h"

namespace wam::cli {
namespace {

// A report as run_bench makes it on CUDA with --profile and --profile-graph.
BenchReport profiled_report() {
  BenchReport report;
  report.pipeline = "libero_compile";
  report.warmup_steps = 60;
  report.timed_steps = 30;
  report.batch_size = 16;
  report.cuda = true;
  report.transfer_id = "h2d";
  report.device_part.samples_per_s = 94.0;
  report.device_part.peak_bytes = int64_t{3} << 30;
  report.profile = BenchProfile{3, true, 170.0, {{"gemm", 100.0, 58.8, 120}}, "", ""};
  GraphFigures graph;
  graph.samples_per_s = graph.step_samples_per_s = 83.0;
  graph.delivered_samples_per_s = 90.0;
  graph.pipeline_efficiency = 0.883;
  report.graph = graph;
  report.graph_profile = BenchProfile{
      6, true, 192.5, {{"gemm", 100.5, 52.2, 120}, {"nv12_to_rgb", 12.0, 6.2, 32}}, "", ""};
  report.beyond_device_part = {{"nv12_to_rgb", 12.0, 80.0, 32}, {"copy", 3.0, 20.0, 16}};
  return report;
}

TEST(BenchPrint, GraphProfileListsItsKernelsAndThoseBeyondTheDevicePart) {
  std::ostringstream out;
  print_bench(profiled_report(), out);
  const std::string text = out.str();
  EXPECT_NE(text.find("  whole-graph profile of 6 steps: 192.50 ms of kernels per step; longest:\n"
                      "      100.50 ms  52.2%    120 calls  gemm\n"
                      "       12.00 ms   6.2%     32 calls  nv12_to_rgb\n"
                      "  beyond the device part alone: 22.50 ms of kernels per step (the whole "
                      "graph's 192.50 less the profile's 170.00); most:\n"
                      "       12.00 ms  80.0%     32 calls  nv12_to_rgb\n"
                      "        3.00 ms  20.0%     16 calls  copy\n"),
            std::string::npos)
      << text;
}

TEST(BenchPrint, GraphProfileInTheJson) {
  const nlohmann::json json = bench_json(profiled_report());
  ASSERT_TRUE(json.contains("graph_profile")) << json.dump(2);
  const nlohmann::json& profile = json["graph_profile"];
  EXPECT_EQ(profile["steps"], 6);
  EXPECT_EQ(profile["ms_per_step"], 192.5);
  ASSERT_EQ(profile["longest"].size(), 2u);
  EXPECT_EQ(profile["longest"][1]["name"], "nv12_to_rgb");
  ASSERT_EQ(profile["beyond_device_part"].size(), 2u);
  EXPECT_EQ(profile["beyond_device_part"][0]["name"], "nv12_to_rgb");
  EXPECT_EQ(profile["beyond_device_part"][0]["ms_per_step"], 12.0);
  EXPECT_EQ(profile["beyond_device_part"][1]["calls_per_step"], 16);
}

TEST(BenchPrint, NoGraphProfileWithoutTheFlag) {
  BenchReport report = profiled_report();
  report.graph_profile.reset();
  report.beyond_device_part.clear();
  std::ostringstream out;
  print_bench(report, out);
  EXPECT_EQ(out.str().find("whole-graph profile"), std::string::npos);
  EXPECT_FALSE(bench_json(report).contains("graph_profile"));
}

}  // namespace
}  // namespace wam::cli
