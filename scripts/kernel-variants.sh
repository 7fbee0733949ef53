#!/usr/bin/env bash
# scripts/kernel-bytes.cu built against several versions of the fused kernels and run side by
# side, alternating, for a few rounds: a kernel change timed in seconds of device time, before the
# project is built with it (docs/KERNELS.md, version 27). Each argument is NAME=TREE, a source tree
# whose stages/kernels and scripts/kernel-bytes.cu are used (its own probe: the launchers'
# arguments change between versions), or NAME=TREE,FILE,SED: that tree with `sed -e SED` applied
# to FILE (a path inside the tree) in a copy, e.g. a block size:
#   source .gpu/gpu-env.sh
#   scripts/kernel-variants.sh now=. before=.dbg/v23 \
#     "threads128=.,stages/kernels/rms_norm_rope.cu,s/^constexpr int kThreads = 256;/constexpr int kThreads = 128;/"
# WAM_KERNEL_ROUNDS (default 3) rounds. Needs nvcc and cuBLASLt (the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
nvcc=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
[ -n "$nvcc" ] || { echo "kernel-variants: no nvcc" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
names=()
builds=()
for spec in "$@"; do
  name=${spec%%=*}
  IFS=, read -r tree file expression <<<"${spec#*=}"
  source_tree=$tree
  if [ -n "${file:-}" ]; then
    source_tree=$work/$name
    mkdir -p "$source_tree/scripts"
    cp -r "$tree/stages" "$source_tree/"
    cp "$tree/scripts/kernel-bytes.cu" "$source_tree/scripts/"
    sed -i -e "$expression" "$source_tree/$file"
    if cmp -s "$tree/$file" "$source_tree/$file"; then
      echo "kernel-variants: $name: the sed expression changed nothing in $file" >&2
      exit 1
    fi
  fi
  [ -f "$source_tree/scripts/kernel-bytes.cu" ] ||
    { echo "kernel-variants: $name: $tree has no scripts/kernel-bytes.cu" >&2; exit 1; }
  kernels=()
  for source in adaln epilogue_gemm rms_norm_rope gelu_backward adamw row_copy; do
    [ -f "$source_tree/stages/kernels/$source.cu" ] && kernels+=("$source_tree/stages/kernels/$source.cu")
  done
  "$nvcc" -O3 -std=c++17 -arch=sm_90 -I "$source_tree/stages" "$source_tree/scripts/kernel-bytes.cu" \
    "${kernels[@]}" -lcublasLt -o "$work/probe-$name" &
  builds+=($!)
  names+=("$name")
done
for build in "${builds[@]}"; do
  wait "$build" || { echo "kernel-variants: a probe did not build" >&2; exit 1; }
done
for round in $(seq "${WAM_KERNEL_ROUNDS:-3}"); do
  for name in "${names[@]}"; do
    echo "== $name, round $round"
    "$work/probe-$name"
  done
done
