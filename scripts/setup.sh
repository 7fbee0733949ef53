#!/usr/bin/env bash
# Installs every Debian 12 package wam-pipeline needs. Idempotent and non-interactive; returns at
# once when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtbb-dev                                  # oneTBB flow graph
  libtorch-dev libopenblas0-pthread           # LibTorch (CPU); OpenBLAS or matmuls run 16x slower
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev   # FFmpeg
  libhdf5-dev                                 # latent stores, episode data
  libssl-dev                                  # SHA-256 (text embedding cache keys)
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-h5py                                # the latent store test reads a shard with h5py
  clang-format                                # scripts/check-format.sh
  clang-14 libclang-rt-14-dev                 # scripts/fuzz.sh (libFuzzer)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
