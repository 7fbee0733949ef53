#!/usr/bin/env bash
# Packs the header-only CLI11 (which the GPU machine's image lacks) from this Debian machine into
# .gpu-extra/, to carry beside .gpu/ (see ../shared/device/README.md). On the GPU machine:
#   source .gpu/gpu-env.sh && export CMAKE_PREFIX_PATH=$PWD/.gpu-extra/usr:$CMAKE_PREFIX_PATH
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
rm -rf .gpu-extra
mkdir -p .gpu-extra/usr/include .gpu-extra/usr/share/cmake
cp -a /usr/include/CLI .gpu-extra/usr/include/
cp -a /usr/share/cmake/CLI11 .gpu-extra/usr/share/cmake/
echo "wrote .gpu-extra (CLI11 $(sed -n 's/.*CLI11_VERSION "\(.*\)"/\1/p' /usr/include/CLI/Version.hpp))"
