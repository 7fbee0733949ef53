// wam-test-cli: the wam-pipeline command line with the torch-free test stages as its built-in
// stages, so that CLI tests of the runner's views (live view, trace, graph, report) build in
// seconds.
#include "cli/app.h"
#include "testing/test_stages.h"

int main(int argc, char** argv) {
  wam::testing::add_test_stages(wam::StageRegistry::builtin());
  return wam::cli::run_cli(argc, argv);
}
