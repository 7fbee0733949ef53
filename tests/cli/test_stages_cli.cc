// wam-pipeline-test-stages: the wam-pipeline command line with the test stages (Count, Delay,
// FailAt, ...) as its built-in stages instead of the real ones. No LibTorch, so the error contract
// (tests/cli/error_contract_test.sh: exit codes, signals, messages) builds in seconds and runs in
// the sanitizer build too.
#include "cli/app.h"
#include "testing/test_stages.h"

int main(int argc, char** argv) {
  const wam::StageRegistry& stages = wam::testing::test_registry();
  for (const auto& type : stages.types()) wam::StageRegistry::builtin().add(*stages.find(type));
  return wam::cli::run_cli(argc, argv);
}
