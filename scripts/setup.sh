#!/usr/bin/env bash
# Installs every Debian 12 package wam-pipeline needs, and the npm modules of the parquet tests.
# Idempotent and non-interactive; returns at once when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtbb-dev                                  # oneTBB flow graph
  libtorch-dev libopenblas0-pthread           # LibTorch (CPU); OpenBLAS or matmuls run 16x slower
  libgloo-dev                                 # c10d Gloo headers: multi-process CPU training
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev   # FFmpeg
  libhdf5-dev                                 # latent stores, episode data
  libssl-dev                                  # SHA-256 (text embedding cache keys)
  libisal-dev                                 # CRC-32C row checksums of the latent cache
  libsnappy-dev libzstd-dev zlib1g-dev        # Parquet page codecs (stages/parquet)
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-h5py                                # the latent store test reads a shard with h5py
  python3-torch                               # scripts/peer_step.py's test (PyTorch 1.13, CPU)
  clang-format                                # scripts/check-format.sh
  graphviz                                    # `graph -o F.svg|F.png`, the report's graph
  bsdutils                                    # `script`: the live view's test in a pseudo-terminal
  chromium                                    # the HTML report's test renders it headless
  clang-14 libclang-rt-14-dev                 # scripts/fuzz.sh (libFuzzer)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node runs hyparquet, the independent Parquet reader of the parquet tests; any node will do.
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# hyparquet (+ its zstd/gzip codecs) for the parquet tests, outside the repository; the tests
# look in the same place (WAM_NODE_PREFIX overrides it).
node_prefix="${WAM_NODE_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/wam-pipeline/node}"
if [ ! -d "$node_prefix/node_modules/hyparquet-compressors" ]; then
  echo "setup: installing hyparquet into $node_prefix" >&2
  mkdir -p "$node_prefix"
  npm install --silent --no-audit --no-fund --prefix "$node_prefix" hyparquet@1 \
    hyparquet-compressors@1
fi
