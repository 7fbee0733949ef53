// Runner overhead: samples/s through a source and a chain of trivial stages, no real work.
#include <benchmark/benchmark.h>

#include "testing/temp_dir.h"
#include "testing/test_stages.h"
#include "wam/runner.h"

namespace {

void BM_Chain5(benchmark::State& state) {
  const int64_t samples = 100000;
  const int64_t threads = state.range(0);
  wam::testing::TempDir dir;
  std::string file = dir.write("chain.json", R"({"version": 1, "name": "chain5", "nodes": [
    {"id": "source", "type": "Count", "params": {"count": )" + std::to_string(samples) + R"(}},
    {"id": "s1", "type": "Increment", "inputs": ["source"]},
    {"id": "s2", "type": "Increment", "inputs": ["s1"]},
    {"id": "s3", "type": "Increment", "inputs": ["s2"]},
    {"id": "s4", "type": "Increment", "inputs": ["s3"]},
    {"id": "s5", "type": "Increment", "inputs": ["s4"]}]})");
  for (auto _ : state) {
    wam::ValidatedPipeline pipeline = wam::load_pipeline(
        file,
        {{"settings.threads=" + std::to_string(threads)}},
        wam::testing::test_registry());
    wam::RunOptions options;
    options.log = [](const std::string&) {};
    wam::RunResult result = wam::run_pipeline(pipeline, options);
    if (result.error || result.stats.nodes.back().out != samples) {
      state.SkipWithError("run did not pass every sample");
    }
  }
  state.SetItemsProcessed(state.iterations() * samples);
}

BENCHMARK(BM_Chain5)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
