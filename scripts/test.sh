#!/usr/bin/env bash
# The test suite: installs what is missing, checks the tree's layering (scripts/check-layers.sh)
# and the format of the changed C++ lines (see scripts/check-format.sh for the base they are
# compared with), runs the torch-free tests under AddressSanitizer + UBSan and the fuzzers
# (scripts/fuzz.sh), builds everything, runs every test with ctest.
#
# scripts/test.sh --sanitize: the torch-free tests only (ctest label torch_free: core, latent store,
# the CLI error contract, the fuzz regressions), built with AddressSanitizer and
# UndefinedBehaviorSanitizer (-DWAM_SANITIZE=ON) in ${WAM_SANITIZE_BUILD_DIR:-build-asan}.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sanitize" ]; then
  scripts/setup.sh
  build=${WAM_SANITIZE_BUILD_DIR:-build-asan}
  suppressions=$PWD/tests/sanitizers/ubsan.supp
  WAM_BUILD_DIR=$build scripts/build.sh --target wam_torch_free_tests -DWAM_SANITIZE=ON \
    -DWAM_BUILD_BENCHMARKS=OFF
  cd "$build"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$suppressions}
  exec ctest -L torch_free --output-on-failure -j "$(nproc)" --timeout 600
fi
# Each phase's wall time, so that a CI log shows where its limit goes.
phase() {
  local began=$SECONDS
  "$@"
  echo "test.sh: $* took $((SECONDS - began)) s (${SECONDS} s in all)"
}
phase scripts/setup.sh
phase scripts/check-layers.sh
phase scripts/check-format.sh
# Hostile input first: the torch-free tests under the sanitizers, then each fuzz target for
# WAM_FUZZ_SECONDS (default 60) from the corpus of every crash found so far.
phase scripts/test.sh --sanitize
phase scripts/fuzz.sh "${WAM_FUZZ_SECONDS:-60}"
phase scripts/build.sh
cd "${WAM_BUILD_DIR:-build}"
phase ctest --output-on-failure -j "$(nproc)" --timeout 600
