#!/usr/bin/env bash
# Configures and builds into ${WAM_BUILD_DIR:-build}: every target, or only those named with
# --target (and what they need), e.g. scripts/build.sh --target wam-pipeline. Other arguments go to
# the first configure. Two compile jobs per 12 GiB of memory at most: a file that includes LibTorch
# needs about 1.6 GB to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WAM_BUILD_DIR:-build}
jobs=${WAM_BUILD_JOBS:-$(nproc)}
targets=()
configure_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=("$2"); shift 2 ;;
    --target=*) targets+=("${1#--target=}"); shift ;;
    *) configure_args+=("$1"); shift ;;
  esac
done
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} \
    "${configure_args[@]}"
fi
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$build" -j "$jobs"
fi
