#!/usr/bin/env bash
# Configures and builds into ${WAM_BUILD_DIR:-build}. Two compile jobs per 12 GiB of memory at
# most: a file that includes LibTorch needs about 1.6 GB to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WAM_BUILD_DIR:-build}
jobs=${WAM_BUILD_JOBS:-$(nproc)}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} "$@"
fi
cmake --build "$build" -j "$jobs"
