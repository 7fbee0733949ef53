#!/usr/bin/env bash
# The Parquet reader's tests under AddressSanitizer and UBSan: configures build-asan with
# WAM_SANITIZE=ON, builds only the torch-free parquet_test target and runs it. Any report of
# either sanitizer fails the run. WAM_ASAN_BUILD_DIR overrides the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${WAM_ASAN_BUILD_DIR:-build-asan}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWAM_SANITIZE=ON \
  -DWAM_BUILD_BENCHMARKS=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" --target parquet_test -j "${WAM_BUILD_JOBS:-$(nproc)}"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  "$build/tests/parquet_test"
