#!/usr/bin/env bash
# The test suite: installs what is missing, builds, runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${WAM_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 600
