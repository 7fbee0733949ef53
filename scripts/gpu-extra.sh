#!/usr/bin/env bash
# Packs what the GPU machine's image lacks from this Debian machine into .gpu-extra/, to carry
# beside .gpu/ (see ../shared/device/README.md): the header-only CLI11, ISA-L (the cache's row
# checksums) and snappy and zstd (the Parquet codecs), with pkg-config files pointing into
# .gpu-extra; and the real LeRobot demo of ../shared/data, which does not travel with
# the checkout, so that the tests reading it (video decoding on NVDEC among them) run there too:
# env.sh puts it back at ../shared/data beside the checkout when nothing is there.
# On the GPU machine:
#   source .gpu/gpu-env.sh && source .gpu-extra/env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
rm -rf .gpu-extra
mkdir -p .gpu-extra/usr/include .gpu-extra/usr/share/cmake
cp -a /usr/include/CLI .gpu-extra/usr/include/
cp -a /usr/share/cmake/CLI11 .gpu-extra/usr/share/cmake/
lib=.gpu-extra/usr/lib/x86_64-linux-gnu
mkdir -p "$lib/pkgconfig"
for pc in snappy libzstd libisal; do
  sed 's#^prefix=.*#prefix=${pcfiledir}/../../..#; s#^libdir=.*#libdir=${prefix}/lib/x86_64-linux-gnu#' \
    "/usr/lib/x86_64-linux-gnu/pkgconfig/$pc.pc" >"$lib/pkgconfig/$pc.pc"
done
cp -a /usr/include/snappy*.h /usr/include/zstd*.h /usr/include/zdict.h /usr/include/isa-l* \
  .gpu-extra/usr/include/
cp -a /usr/lib/x86_64-linux-gnu/libsnappy.so* /usr/lib/x86_64-linux-gnu/libzstd.so* \
  /usr/lib/x86_64-linux-gnu/libisal.so* "$lib/"
if [ -d ../shared/data/lerobot-gr00t-picknplace ]; then
  mkdir -p .gpu-extra/shared-data
  cp -a ../shared/data/lerobot-gr00t-picknplace .gpu-extra/shared-data/
fi
cat >.gpu-extra/env.sh <<'ENV'
extra=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CMAKE_PREFIX_PATH=$extra/usr:${CMAKE_PREFIX_PATH:-}
export PKG_CONFIG_PATH=$extra/usr/lib/x86_64-linux-gnu/pkgconfig:${PKG_CONFIG_PATH:-}
export LD_LIBRARY_PATH=$extra/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
if [ -d "$extra/shared-data" ] && [ ! -e "$extra/../../shared/data" ]; then
  mkdir -p "$extra/../../shared" && ln -s "$extra/shared-data" "$extra/../../shared/data" ||
    echo "gpu-extra: cannot place the real-data demo at ../shared/data; its tests will skip" >&2
fi
ENV
echo "wrote .gpu-extra (CLI11 $(sed -n 's/.*CLI11_VERSION "\(.*\)"/\1/p' /usr/include/CLI/Version.hpp))"
