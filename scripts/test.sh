#!/usr/bin/env bash
# The test suite: installs what is missing, checks the format of the changed C++ lines (see
# scripts/check-format.sh for the base they are compared with), builds everything, runs every test
# with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check-format.sh
scripts/build.sh
cd "${WAM_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 600
