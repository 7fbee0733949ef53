#!/usr/bin/env bash
# The test suite on the GPU machine: configures and builds every target (tests and benchmarks
# included) against the image's LibTorch with CUDA and the fused kernels, runs the whole ctest and
# prints one summary line (the failing tests' output is in $build/ctest.log). From the checkout:
#   source .gpu/gpu-env.sh && source .gpu-extra/env.sh && scripts/gpu-check.sh
# (.gpu from ../shared/device/make-gpu-prefix.sh, .gpu-extra from scripts/gpu-extra.sh.)
# WAM_BUILD_DIR (default /tmp/build-gpu: outside the paths a run carries) and WAM_CTEST_ARGS (e.g.
# "-R Fused") change where it builds and what it runs; WAM_CTEST_LOG (default $build/ctest.log)
# where ctest writes as it goes (a run cut off still shows which tests passed and how long each took).
# WAM_BUILD_TARGETS (e.g. "wam_stage_tests wam-pipeline") builds those alone, for a run of a few
# tests when device time is short; the whole ctest then reports the others as not built.
#   scripts/gpu-check.sh [build|test]
# runs one half: together they take longer than one device call may (10 minutes), so the build
# runs in one call and the tests in the next, on the same machine while it is still held.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WAM_BUILD_DIR:-/tmp/build-gpu}
phase=${1:-all}
case "$phase" in
  all | build | test) ;;
  *) echo "usage: scripts/gpu-check.sh [build|test]" >&2; exit 2 ;;
esac
mkdir -p "$build"
# Configured every time (seconds when nothing changed): configuring also makes the folders the
# tests expect that git does not keep (e.g. empty fuzz regression folders, tests/fuzz).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$build/configure.log" 2>&1 ||
  { tail -30 "$build/configure.log"; echo "gpu-check: configure failed"; exit 1; }
grep -E "wam-pipeline: (LibTorch|fused)" "$build/configure.log" || true
# The GPU machine has nvcc: a build there without the fused kernels measures the wrong step.
grep -q "wam-pipeline: fused CUDA kernels: ON" "$build/configure.log" ||
  { echo "gpu-check: configured without the fused CUDA kernels (see $build/configure.log)"; exit 1; }
began=$SECONDS
# shellcheck disable=SC2086  # WAM_BUILD_TARGETS names several targets
if ! cmake --build "$build" -j "$(nproc)" ${WAM_BUILD_TARGETS:+--target $WAM_BUILD_TARGETS} \
  >"$build/build.log" 2>&1; then
  grep -E "error|Error" "$build/build.log" | head -40
  echo "gpu-check: build failed after $((SECONDS - began)) s (log: $build/build.log)"
  exit 1
fi
echo "gpu-check: built ${WAM_BUILD_TARGETS:-every target} in $((SECONDS - began)) s"
# The toolchain and how wam-pipeline was linked: the order of its shared libraries decides which
# libstdc++ runs (docs/RELIABILITY.md, "Linking against LibTorch").
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
echo "gpu-check: $("$cxx" --version | head -1); $(ld --version | head -1); $(cmake --version | head -1)"
echo "gpu-check: wam-pipeline's shared libraries:" \
  "$(readelf -d "$build/wam-pipeline" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | head -8 | xargs)"
"$build/wam-pipeline" --version  # says first if std::filesystem runs from LibTorch (and restarts)
[ "$phase" = build ] && exit 0
began=$SECONDS
# Half the cores: the stage tests share one GPU and each compiles little.
log=${WAM_CTEST_LOG:-$build/ctest.log}
# shellcheck disable=SC2086  # WAM_CTEST_ARGS holds several arguments
ctest --test-dir "$build" -j "$(($(nproc) / 2))" --timeout 600 --output-on-failure \
  ${WAM_CTEST_ARGS:-} >"$log" 2>&1 && status=0 || status=$?
# ctest's last line: "100% tests passed out of N" when none failed, else "P% tests passed, F tests
# failed out of N".
total=$(sed -n 's/.*% tests passed.* out of \([0-9]*\).*/\1/p' "$log")
failed=$(sed -n 's/.*% tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log")
[ -n "$total" ] && [ -z "$failed" ] && failed=0
skipped=$(grep -c "\*\*\*Skipped\| Skipped " "$log" || true)
grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)\)" "$log" || true
# The slowest tests: what to split or move when the suite outgrows a device call.
echo "gpu-check: slowest tests:"
sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .* \([0-9.]*\) sec$/\2 \1/p' "$log" |
  sort -rn | sed -n '1,10s/^/  /p'  # sed reads to the end: head would stop sort (SIGPIPE, exit 141)
echo "gpu-check: ctest ${total:-?} tests, ${failed:-?} failed, ${skipped} skipped, in" \
  "$((SECONDS - began)) s (log: $log)"
exit "$status"
