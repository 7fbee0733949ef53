// Runner overhead: samples/s through a source and a chain of trivial stages, no real work.
#include <benchmark/benchmark.h>

#include "testing/temp_dir.h"
#include "testing/test_stages.h"
#include "wam/runner.h"

namespace {

void BM_Chain5(benchmark::State& state) {
  const int64_t samples = 100000;
  const int64_t threads = state.range(0);
  // fixed=0: the stages' default, auto concurrency; fixed=1: "unlimited", the former default.
  const bool fixed = state.range(1) != 0;
  wam::testing::TempDir dir;
  std::string file = dir.write("chain.json", R"({"version": 1, "name": "chain5", "nodes": [
    {"id": "source", "type": "Count", "params": {"count": )" +
                                                 std::to_string(samples) + R"(}},
    {"id": "s1", "type": "Increment", "inputs": ["source"]},
    {"id": "s2", "type": "Increment", "inputs": ["s1"]},
    {"id": "s3", "type": "Increment", "inputs": ["s2"]},
    {"id": "s4", "type": "Increment", "inputs": ["s3"]},
    {"id": "s5", "type": "Increment", "inputs": ["s4"]}]})");
  for (auto _ : state) {
    std::vector<std::string> overrides = {"settings.threads=" + std::to_string(threads)};
    for (int k = 1; fixed && k <= 5; ++k) {
      overrides.push_back("nodes.s" + std::to_string(k) + ".concurrency=unlimited");
    }
    wam::ValidatedPipeline pipeline =
        wam::load_pipeline(file, {overrides}, wam::testing::test_registry());
    wam::RunOptions options;
    options.log = [](const std::string&) {};
    wam::RunResult result = wam::run_pipeline(pipeline, options);
    if (result.error || result.stats.nodes.back().out != samples) {
      state.SkipWithError("run did not pass every sample");
    }
  }
  state.SetItemsProcessed(state.iterations() * samples);
}

BENCHMARK(BM_Chain5)
    ->ArgNames({"threads", "fixed"})
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
